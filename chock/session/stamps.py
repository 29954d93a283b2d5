"""A worktree's stamps: each file's identity and blob id as Chock last wrote or hashed it, so that finishing
hashes only what changed, the way git's own index does (docs/architecture.md, "Finishing by what changed").

The record is `<workspace>.stamps`, beside the worktree in the data dir: outside every directory the sandbox
may write, on the same file system as the files it describes (so its own time stamp and theirs come from one
clock), and removed with the worktree. It is written whole to `<workspace>.stamps.new` (0600) and renamed into
place:

    chock-stamps 2 <blob id length> <entries> <tree id, or ->\n
    each entry's size, mtime_ns, ctime_ns, inode, dev, st_mode (8 bytes each, little-endian)
    each entry's tree key (`100644<blob id>`: the mode its st_mode gives), each followed by \0
    each entry's path, in the same order, each followed by \0
    end <crc32 of everything before this line>\n

A file is trusted when its identity now is the recorded one. The racy rule is applied as the record is written:
a file hashed or written whose mtime or ctime is not older than the record's time less a margin (a write in
that same tick could keep its stat data) is recorded with a size of -1, which no file has, so the next finish
reads it again. A file once trusted stays trusted while its identity holds, since any write after the record
changes its ctime; ctime is what an agent cannot set back, so a file rewritten and given its old mtime is read.
The tree id in the first line says the entries are exactly that tree (its every path; it holds no submodule):
when it is the tree a finish builds on, the record stands for that tree and git need not list it. A record of
no tree (`-`) vouches for its files only. Comparing is done in bulk, as set operations on identity tuples (in
C), never entry by entry in Python. A record missing, damaged, cut short, of another version, or larger than
twice the tree being finished could need trusts nothing: everything is hashed, as without it.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

# (size, mtime_ns, ctime_ns, inode, dev, st_mode): what lstat says of a file, compared whole.
Identity = tuple[int, int, int, int, int, int]

MAGIC = b"chock-stamps 2"
# Recorded as Chock fills a new worktree: nothing else can write there until the record is in place, so a
# later write is stamped no earlier than the record; this covers one tick of any kernel's coarse clock.
WRITTEN_MARGIN_NS = 10_000_000
# Recorded as finishing reads a worktree the agent had: conservative, as git's racy rule is against its index.
READ_MARGIN_NS = 1_000_000_000
RACY = -1  # the size a racy entry is recorded with: no file's identity matches it
_IDENTITY = struct.Struct("<qqqQQQ")
_KINDS = {0o100000: "100644", 0o100100: "100755", 0o120000: "120000", 0o120100: "120000"}  # by type and owner x
_OID_LENGTHS = (40, 64)  # sha1 and sha256 repositories
_ENCODING = sys.getfilesystemencoding()
_ERRORS = sys.getfilesystemencodeerrors()

# What lstat says of a file, compared whole: one C call for the tuple.
identity: Callable[[os.stat_result], Identity] = operator.attrgetter(
    "st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev", "st_mode"
)


def key_of(found: Identity, oid: str) -> str:
    """The tree key (`mode + oid`) of a file of identity `found` holding the blob `oid`."""
    return _KINDS[found[5] & 0o170100] + oid


def path_of(workspace: Path) -> Path:
    """The record of the worktree `workspace`: beside it, where the sandbox cannot write."""
    return workspace.with_name(f"{workspace.name}.stamps")


def remove(workspace: Path) -> None:
    """Delete the record and any unfinished one (before the worktree goes: a worktree without a record only
    costs a full hash)."""
    final = path_of(workspace)
    for path in (final, _temporary(final)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _temporary(final: Path) -> Path:
    return final.with_name(f"{final.name}.new")


class Recording:
    """A record being written: `add` the files, then `close` writes it and renames it into place; leaving a
    `with` block without `close` (an error) deletes the unfinished file.

    `since_ns` is the file system's time when the recording was opened, read back from the new file itself;
    `close(stamp_now=True)` takes it again at the end instead (for files Chock itself wrote, with nobody else
    writing before the record is in place).
    """

    def __init__(self, workspace: Path, margin_ns: int) -> None:
        self.final = path_of(workspace)
        self.temporary = _temporary(self.final)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temporary)  # left by a finish that was killed
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd: int | None = os.open(self.temporary, flags, 0o600)
        self.since_ns = os.fstat(self.fd).st_mtime_ns
        self.margin_ns = margin_ns
        self.paths: list[str] = []
        self.identities: list[Identity] = []
        self.keys: list[str] = []
        self.fresh: list[int] = []  # indexes of the entries the racy rule is applied to at `close`
        self.tree = ""  # the tree the entries are exactly, when the writer knows it

    def add(self, path: str, found: Identity, oid: str) -> None:
        """Record `path` as `found`, holding the blob `oid`, as written or read now."""
        self.fresh.append(len(self.paths))
        self.paths.append(path)
        self.identities.append(found)
        self.keys.append(key_of(found, oid))

    def add_all(self, keys: Mapping[str, str], found: Mapping[str, Identity], fresh: Collection[str]) -> None:
        """Record each path of `keys` (path -> tree key) as `found` says it is; those of `fresh` were read now,
        the rest were trusted from the last record (their racy bound is passed)."""
        start = len(self.paths)
        self.paths.extend(keys)
        self.keys.extend(keys.values())
        self.identities.extend(map(found.__getitem__, keys))
        self.fresh.extend(index for index, path in enumerate(keys, start) if path in fresh)

    def close(self, *, stamp_now: bool = False) -> None:
        """Write the record and put it in place of the last one."""
        assert self.fd is not None
        if stamp_now:
            os.utime(self.fd)  # the file system's time now, after every write before it
            self.since_ns = os.fstat(self.fd).st_mtime_ns
        bound = self.since_ns - self.margin_ns
        identities = self.identities
        for index in self.fresh:
            _, mtime, ctime, inode, device, mode = identities[index]
            if mtime >= bound or ctime >= bound:
                identities[index] = (RACY, mtime, ctime, inode, device, mode)
        count = len(self.paths)
        oid_length = len(self.keys[0]) - 6 if self.keys else 40
        body = b"".join(
            (
                b"%s %d %d %s\n" % (MAGIC, oid_length, count, (self.tree or "-").encode()),
                struct.pack("<" + "qqqQQQ" * count, *itertools.chain.from_iterable(identities)),
                "".join(f"{key}\0" for key in self.keys).encode("ascii"),
                "".join(f"{path}\0" for path in self.paths).encode(_ENCODING, _ERRORS),
            )
        )
        _write_all(self.fd, body + b"end %d\n" % zlib.crc32(body))
        os.close(self.fd)
        self.fd = None
        os.replace(self.temporary, self.final)

    def abandon(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temporary)

    def __enter__(self) -> Recording:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.abandon()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Damaged(Exception):
    pass


class Record(NamedTuple):
    """What the record says of a walk's files."""

    trusted: dict[str, str]  # path -> tree key (`mode + oid`) of each file found as recorded
    others: dict[str, str]  # path -> tree key of every other entry: changed, gone, or racy
    tree: str  # the tree the entries are exactly ("" when it says none)


NOTHING = Record({}, {}, "")


def tree_of(workspace: Path) -> str:
    """The tree the record says its entries are exactly, from its first line ("" for none): a finish on that
    tree need not ask git for it, nor look for submodules. The whole record is checked when it is read."""
    try:
        with open(path_of(workspace), "rb", opener=_open_record) as reading:
            words = reading.readline(256).split(b" ")
    except OSError:
        return ""
    if len(words) != 5 or b" ".join(words[:2]) != MAGIC or len(words[4]) - 1 not in _OID_LENGTHS:
        return ""
    return words[4][:-1].decode("ascii", "replace")


def _open_record(path: str, flags: int) -> int:
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def read(workspace: Path, found: Mapping[str, Identity]) -> Record:
    """What the record says of the files of `found` (path -> its identity now); NOTHING when there is no usable
    record.

    A record larger than twice what one of `found` would take is not read: what is held is never more than the
    tree being finished could need.
    """
    try:
        fd = _open_record(str(path_of(workspace)), 0)
    except OSError:
        return NOTHING
    try:
        status = os.fstat(fd)
        room = 2 * (len(found) * (_IDENTITY.size + 72) + 4 * sum(map(len, found))) + 4096
        if not stat.S_ISREG(status.st_mode) or status.st_size > room:
            return NOTHING
        chunks: list[bytes] = []
        got = 0
        while chunk := os.read(fd, status.st_size + 1 - got):  # one byte past its size says it grew meanwhile
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        return _parse(data, found) if len(data) == status.st_size else NOTHING
    except (_Damaged, ValueError, OSError, struct.error, UnicodeDecodeError):
        return NOTHING
    finally:
        os.close(fd)


def _parse(data: bytes, found: Mapping[str, Identity]) -> Record:
    head = data[: data.index(b"\n")]
    words = head.split(b" ")
    if len(words) != 5 or b" ".join(words[:2]) != MAGIC or int(words[2]) not in _OID_LENGTHS:
        raise _Damaged
    oid_length, count = int(words[2]), int(words[3])
    tree = words[4].decode("ascii")
    if tree != "-" and len(tree) != oid_length:
        raise _Damaged
    body_end = data.rfind(b"end ")
    if body_end < 0 or not data.endswith(b"\n") or zlib.crc32(memoryview(data)[:body_end]) != int(data[body_end + 4 :]):
        raise _Damaged
    identities_end = len(head) + 1 + count * _IDENTITY.size
    keys_end = identities_end + count * (7 + oid_length)
    keys = data[identities_end:keys_end].decode("ascii").split("\0")
    names = data[keys_end:body_end].decode(_ENCODING, _ERRORS).split("\0")
    if keys.pop() or names.pop() or len(keys) != count or len(names) != count:  # each ends with \0
        raise _Damaged
    # In C: the pairs (path, identity) the record holds that the walk did not find as they are.
    recorded = zip(names, _IDENTITY.iter_unpack(data[len(head) + 1 : identities_end]), strict=True)
    unchanged = dict(zip(names, keys, strict=True))
    others = {}
    for name, _ in set(recorded).difference(found.items()):
        if name in unchanged:
            others[name] = unchanged.pop(name)
    if len(unchanged) + len(others) != count:  # a path twice
        raise _Damaged
    return Record(unchanged, others, "" if tree == "-" else tree)
