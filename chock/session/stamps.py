"""A worktree's stamps: each file's identity and blob id as Chock last wrote or hashed it, so that finishing
hashes only what changed, the way git's own index does (docs/architecture.md, "Finishing by what changed").

The record is `<workspace>.stamps`, beside the worktree in the data dir: outside every directory the sandbox
may write, on the same file system as the files it describes (so its own time stamp and theirs come from one
clock), and removed with the worktree. It is written whole to `<workspace>.stamps.new` (0600) and renamed into
place. It is kept by directory, each directory's files sorted by name (the walk's order), so a directory whose
files are all as recorded is known by comparing two byte strings, and its part is copied into the next record
as it is:

    chock-stamps 3 <blob id length> <directories> <entries> <tree id, or ->\n
    for each directory: its path (`a/b/`, "" for the top) \0 its entries \0 the bytes of its names \0
    for each directory, in that order:
        each entry's size, mtime_ns, ctime_ns, inode, dev, st_mode (8 bytes each, little-endian)
        each entry's tree key (`100644<blob id>`: the mode its st_mode gives)
        each entry's name, each followed by \0
    end <crc32 of everything before this line>\n

A file is trusted when its identity now is the recorded one. The racy rule is applied as the record is written:
a file hashed or written whose mtime or ctime is not strictly older than the record's time (a write in that same
tick of the file system's clock could keep its stat data) is recorded with a size of -1, which no file has, so
the next finish reads it again. The record's time is the file system's own, read back from the record file: when
a finish began reading, or, for a worktree Chock just filled, a moment the clock has passed every write Chock
made (nothing else writes there before the record is in place). Every write after that moment is stamped no
earlier than it, so a file recorded as strictly older stays trusted while its identity holds: any later write
changes its ctime, which an agent cannot set back, so a file rewritten and given its old mtime is read.
The tree id in the first line says the entries are exactly that tree (its every path; it holds no submodule):
when it is the tree a finish builds on, the record stands for that tree and git need not list it. A record of
no tree (`-`) vouches for its files only. A record missing, damaged, cut short, of another version, or larger
than twice the tree being finished could need trusts nothing: everything is hashed, as without it.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import stat
import struct
import sys
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from chock.paths import plain_file

# (size, mtime_ns, ctime_ns, inode, dev, st_mode): what lstat says of a file, compared whole.
Identity = tuple[int, int, int, int, int, int]

MAGIC = b"chock-stamps 3"
# How long `close(stamp_now=True)` waits at most for the file system's clock to pass the newest write Chock made
# (a coarse clock's tick is 1 to 10 ms), and how often it looks; past that the newest files are simply racy.
TICK_WAIT_NS = 20_000_000
_TICK_LOOK_SECONDS = 0.001
_IOV_MOST = 512  # parts to one writev (Linux takes 1024)
RACY = -1  # the size a racy entry is recorded with: no file's identity matches it
_IDENTITY = struct.Struct("<qqqQQQ")
_KINDS = {0o100000: "100644", 0o100100: "100755", 0o120000: "120000", 0o120100: "120000"}  # by type and owner x
_OID_LENGTHS = (40, 64)  # sha1 and sha256 repositories
ENCODING = sys.getfilesystemencoding()
ERRORS = sys.getfilesystemencodeerrors()
_FIRST = operator.itemgetter(0)

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


def packed(identities: list[Identity]) -> bytes:
    """The identities of a directory's files as the record holds them: one C call."""
    return struct.pack("<" + "qqqQQQ" * len(identities), *itertools.chain.from_iterable(identities))


def named(names: list[str]) -> bytes:
    """The names of a directory's files as the record holds them, each followed by \\0."""
    return ("\0".join(names) + "\0").encode(ENCODING, ERRORS) if names else b""


class Stored(NamedTuple):
    """One directory's part of a record, as bytes: its files' identities, tree keys and names, by name."""

    files: int
    identities: bytes
    keys: bytes
    names: bytes

    def holds(self, names: list[str], identities: list[Identity]) -> bool:
        """Whether the directory's files are exactly these, each as recorded (a racy one never is)."""
        return self.files == len(names) and self.names == named(names) and self.identities == packed(identities)

    def keys_of(self) -> list[str]:
        """Its files' tree keys, in its order."""
        text = self.keys.decode("ascii")
        width = len(text) // self.files if self.files else 0
        return [text[at : at + width] for at in range(0, len(text), width)] if width else []

    def entries(self) -> dict[str, tuple[Identity, str]]:
        """name -> (identity, tree key) of each of its files."""
        names = self.names.decode(ENCODING, ERRORS).split("\0")
        names.pop()  # after the last \0
        entries = dict(
            zip(names, zip(_IDENTITY.iter_unpack(self.identities), self.keys_of(), strict=True), strict=True)
        )
        if len(entries) != self.files:
            raise Damaged("a name twice in one directory")
        return entries


class Recording:
    """A record being written: `add` the files (or `keep` a directory's part of the last record), then `close`
    writes it and renames it into place; leaving a `with` block without `close` (an error) deletes the
    unfinished file.

    `since_ns` is the file system's time when the recording was opened, read back from the new file itself;
    `close(stamp_now=True)` takes it again at the end instead (for files Chock itself wrote, with nobody else
    writing before the record is in place), once the clock has moved past the newest of those writes.
    """

    def __init__(self, workspace: Path) -> None:
        self.final = path_of(workspace)
        self.temporary = _temporary(self.final)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temporary)  # left by a finish that was killed
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd: int | None = os.open(self.temporary, flags, 0o600)
        self.since_ns = os.fstat(self.fd).st_mtime_ns
        self.entries: list[tuple[str, Identity, str, bool]] = []  # (path, identity, tree key, read or written now)
        self.kept: dict[str, Stored] = {}  # directory -> its part of the last record, unchanged
        self.tree = ""  # the tree the entries are exactly, when the writer knows it

    def add(self, path: str, found: Identity, oid: str) -> None:
        """Record `path` as `found`, holding the blob `oid`, as written or read now."""
        self.entries.append((path, found, key_of(found, oid), True))

    def add_all(self, keys: Mapping[str, str], found: Mapping[str, Identity], fresh: Collection[str]) -> None:
        """Record each path of `keys` (path -> tree key) as `found` says it is; those of `fresh` were read now,
        the rest were trusted from the last record (their racy bound is passed)."""
        self.entries.extend((path, found[path], key, path in fresh) for path, key in keys.items())

    def keep(self, directories: Mapping[str, Stored]) -> None:
        """Record these directories (`a/b/`, "" for the top) as the last record had them: their files are."""
        self.kept.update(directories)

    def close(self, *, stamp_now: bool = False) -> None:
        """Write the record and put it in place of the last one."""
        assert self.fd is not None
        if stamp_now:
            newest = max((max(found[1], found[2]) for _, found, _, fresh in self.entries if fresh), default=0)
            self.since_ns = _stamped_past(self.fd, newest)
        bound = self.since_ns
        grouped: dict[str, list[tuple[str, Identity, str]]] = {}
        for path, found, key, fresh in self.entries:
            if fresh and (found[1] >= bound or found[2] >= bound):
                found = (RACY, *found[1:])
            directory, slash, name = path.rpartition("/")
            grouped.setdefault(directory + slash, []).append((name, found, key))
        directories = dict(self.kept)
        for directory, entries in grouped.items():
            if directory in directories:
                raise ValueError(f"the stamps of {directory!r} were both kept and written")
            entries.sort(key=_FIRST)
            names, identities, keys = zip(*entries, strict=True)
            directories[directory] = Stored(
                len(entries), packed(list(identities)), "".join(keys).encode("ascii"), named(list(names))
            )
        files = sum(stored.files for stored in directories.values())
        oid_length = next((len(stored.keys) // stored.files - 6 for stored in directories.values()), 40)
        table = b"".join(
            b"%s\0%d\0%d\0" % (directory.encode(ENCODING, ERRORS), stored.files, len(stored.names))
            for directory, stored in directories.items()
        )
        head = b"%s %d %d %d %s\n" % (MAGIC, oid_length, len(directories), files, (self.tree or "-").encode())
        parts = [head, table]
        for stored in directories.values():
            parts += stored[1:]
        check = 0
        for part in parts:
            check = zlib.crc32(part, check)
        parts.append(b"end %d\n" % check)
        _write_all(self.fd, parts)
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


def _stamped_past(fd: int, newest_ns: int) -> int:
    """Stamp `fd` with the file system's time now and return it, once that time is past `newest_ns` (the newest
    write the record holds), waiting up to TICK_WAIT_NS for the clock's tick to end: a file written in the
    record's own tick is racy, one written in an earlier tick never is."""
    deadline = time.monotonic_ns() + TICK_WAIT_NS
    while True:
        os.utime(fd)  # after every write before it
        now = os.fstat(fd).st_mtime_ns
        if now > newest_ns or newest_ns - now > TICK_WAIT_NS or time.monotonic_ns() >= deadline:
            return now
        time.sleep(_TICK_LOOK_SECONDS)


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write `parts` in order, a few hundred to a system call, with no copy of them joined."""
    views = [memoryview(part) for part in parts if part]
    at = 0
    while at < len(views):
        written = os.writev(fd, views[at : at + _IOV_MOST])
        while written:  # past what was written: whole parts, then the start of the next
            if written >= len(views[at]):
                written -= len(views[at])
                at += 1
            else:
                views[at], written = views[at][written:], 0


class Damaged(Exception):
    """The record does not hold together: nothing of it is trusted."""


class Record(NamedTuple):
    """What a record holds: each directory's part, and the tree its entries are exactly ("" when none)."""

    directories: dict[str, Stored]
    tree: str


NOTHING = Record({}, "")


def tree_of(workspace: Path) -> str:
    """The tree the record says its entries are exactly, from its first line ("" for none): a finish on that
    tree need not ask git for it, nor look for submodules. The whole record is checked when it is read."""
    try:
        with open(path_of(workspace), "rb", opener=plain_file) as reading:
            words = reading.readline(256).split(b" ")
    except OSError:
        return ""
    if len(words) != 6 or b" ".join(words[:2]) != MAGIC or len(words[5]) - 1 not in _OID_LENGTHS:
        return ""
    return words[5][:-1].decode("ascii", "replace")


def read(workspace: Path, room: int) -> Record:
    """The record of `workspace`; NOTHING when there is no usable record, or it is larger than `room` bytes (what
    is held is never more than the tree being finished could need: `room_for`)."""
    try:
        fd = plain_file(str(path_of(workspace)), os.O_RDONLY)
    except OSError:
        return NOTHING
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_size > room:
            return NOTHING
        chunks: list[bytes] = []
        got = 0
        while chunk := os.read(fd, status.st_size + 1 - got):  # one byte past its size says it grew meanwhile
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        return _parse(data) if len(data) == status.st_size else NOTHING
    except (Damaged, ValueError, OSError, struct.error, UnicodeDecodeError):
        return NOTHING
    finally:
        os.close(fd)


def room_for(files: int, name_bytes: int, directories: int) -> int:
    """Twice the bytes a record of `files` files in `directories` directories, their paths `name_bytes` long
    in all, could take."""
    return 2 * (files * (_IDENTITY.size + 72) + 4 * name_bytes + directories * 32) + 4096


def _parse(data: bytes) -> Record:
    head_end = data.index(b"\n")
    words = data[:head_end].split(b" ")
    if len(words) != 6 or b" ".join(words[:2]) != MAGIC or int(words[2]) not in _OID_LENGTHS:
        raise Damaged
    oid_length, count, files = int(words[2]), int(words[3]), int(words[4])
    tree = words[5].decode("ascii")
    if tree != "-" and len(tree) != oid_length:
        raise Damaged
    body_end = data.rfind(b"end ")
    if body_end < 0 or not data.endswith(b"\n") or zlib.crc32(memoryview(data)[:body_end]) != int(data[body_end + 4 :]):
        raise Damaged
    at = head_end + 1
    table = []
    for _ in range(count):
        directory_end = data.index(b"\0", at)
        count_end = data.index(b"\0", directory_end + 1)
        names_end = data.index(b"\0", count_end + 1)
        table.append(
            (data[at:directory_end], int(data[directory_end + 1 : count_end]), int(data[count_end + 1 : names_end]))
        )
        at = names_end + 1
    directories: dict[str, Stored] = {}
    width = 6 + oid_length
    for raw, entries, names_length in table:
        directory = raw.decode(ENCODING, ERRORS)
        if entries <= 0 or directory in directories or (directory and not directory.endswith("/")):
            raise Damaged
        keys_at = at + entries * _IDENTITY.size
        names_at = keys_at + entries * width
        end = names_at + names_length
        names = data[names_at:end]
        if end > body_end or names.count(b"\0") != entries or not names.endswith(b"\0"):
            raise Damaged
        directories[directory] = Stored(entries, data[at:keys_at], data[keys_at:names_at], names)
        at = end
    if at != body_end or sum(stored.files for stored in directories.values()) != files:
        raise Damaged
    return Record(directories, "" if tree == "-" else tree)
