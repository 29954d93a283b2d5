"""A worktree's stamps: each file's identity and blob id as Chock last wrote or hashed it, so that finishing
hashes only what changed, the way git's own index does (docs/architecture.md, "Finishing by what changed").

The record is `<workspace>.stamps`, beside the worktree in the data dir: outside every directory the sandbox
may write, on the same file system as the files it describes (so its own time stamp and theirs come from one
clock), and removed with the worktree. It is written whole to `<workspace>.stamps.new` (0600) and renamed into
place:

    chock-stamps 1 <blob id length> <entries>\\n
    each entry's size, mtime_ns, ctime_ns, inode, dev, st_mode, bound_ns (8 bytes each, little-endian), blob id
    each entry's path, in the same order, followed by \\0
    end <since_ns> <margin_ns> <crc32 of everything before this line>\\n

A file is trusted only when its identity now is the recorded one and both its mtime and ctime are older than
its bound: `since_ns - margin_ns` for an entry whose bound is OWN (the racy rule: a file written again in the
tick it was recorded in keeps its stat data, so such a file is hashed again). A file once trusted keeps the
bound it passed when the record is written again, since any write after that bound would have changed its
ctime. ctime is what an agent cannot set back, so a file rewritten and given its old mtime is hashed. A record
missing, damaged, cut short, of another version, or larger than twice the tree being finished could need
trusts nothing: everything is hashed, as without it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import sys
import zlib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

# (size, mtime_ns, ctime_ns, inode, dev, st_mode): what lstat says of a file, compared whole.
Identity = tuple[int, int, int, int, int, int]

MAGIC = b"chock-stamps 1"
# Recorded as Chock fills a new worktree: nothing else can write there until the record is in place, so a
# later write is stamped no earlier than the record; this covers one tick of any kernel's coarse clock.
WRITTEN_MARGIN_NS = 10_000_000
# Recorded as finishing reads a worktree the agent had: conservative, as git's racy rule is against its index.
READ_MARGIN_NS = 1_000_000_000
OWN = -(1 << 63)  # an entry's bound is the record's own
_IDENTITY = "<qqqQQQ"
_FIELDS = _IDENTITY + "q"
_BOUND_AT = struct.calcsize(_IDENTITY)
_BOUND = struct.Struct("<q")
_FILE, _EXECUTABLE, _SYMLINK = "100644", "100755", "120000"  # as chock.session.tree gives them
# A tree entry's mode by the file type and owner's execute bit of st_mode.
_KINDS = {0o100000: _FILE, 0o100100: _EXECUTABLE, 0o120000: _SYMLINK, 0o120100: _SYMLINK}
_OID_LENGTHS = (40, 64)  # sha1 and sha256 repositories
_ENCODING = sys.getfilesystemencoding()
_ERRORS = sys.getfilesystemencodeerrors()


def identity(status: os.stat_result) -> Identity:
    return (
        status.st_size,
        status.st_mtime_ns,
        status.st_ctime_ns,
        status.st_ino,
        status.st_dev,
        status.st_mode,
    )


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
    """A record being written: `add` each file, then `close` writes it and renames it into place; leaving a
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
        self.fields: list[bytes] = []
        self.oid_length = 0

    def add(self, path: str, found: Identity, oid: str, bound: int | None = None) -> None:
        """Record `path` as `found` holding the blob `oid`; `bound`: the racy bound it already passed, if any."""
        if not self.oid_length:
            self.oid_length = len(oid)
        self.paths.append(path)
        self.fields.append(struct.pack(_FIELDS, *found, OWN if bound is None else bound) + oid.encode())

    def carry(self, entries: Mapping[str, bytes]) -> None:
        """Record again, as they are, the entries `Trusted.carried` holds."""
        self.paths.extend(entries)
        self.fields.extend(entries.values())
        first = next(iter(entries.values()), None)
        if first is not None and not self.oid_length:
            self.oid_length = len(first) - struct.calcsize(_FIELDS)

    def close(self, *, stamp_now: bool = False) -> None:
        """Write the record and put it in place of the last one."""
        assert self.fd is not None
        paths = "\0".join(self.paths).encode(_ENCODING, _ERRORS) + (b"\0" if self.paths else b"")
        body = b"%s %d %d\n" % (MAGIC, self.oid_length or 40, len(self.paths)) + b"".join(self.fields) + paths
        _write_all(self.fd, body)
        if stamp_now:
            os.utime(self.fd)  # the file system's time now, after every write before it
            self.since_ns = os.fstat(self.fd).st_mtime_ns
        _write_all(self.fd, b"end %d %d %d\n" % (self.since_ns, self.margin_ns, zlib.crc32(body)))
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


class Trusted(NamedTuple):
    """What the record says of the files it vouches for."""

    keys: dict[str, str]  # path -> its tree entry, mode and blob id (`100644<oid>`)
    carried: dict[str, bytes]  # path -> its entry for the next record, with the bound it passed


def trusted(workspace: Path, found: Mapping[str, Identity]) -> Trusted:
    """The files of `found` (path -> its identity now) that the record says are unchanged and that are older
    than their racy bound; none when there is no usable record.

    A record larger than twice what one of `found` would take is not read: what is held is never more than the
    tree being finished could need.
    """
    try:
        fd = os.open(path_of(workspace), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return Trusted({}, {})
    try:
        status = os.fstat(fd)
        room = 2 * (len(found) * (struct.calcsize(_FIELDS) + 65) + 4 * sum(map(len, found))) + 4096
        if not stat.S_ISREG(status.st_mode) or status.st_size > room:
            return Trusted({}, {})
        chunks: list[bytes] = []
        got = 0
        while chunk := os.read(fd, status.st_size + 1 - got):  # one byte past its size says it grew meanwhile
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        return _parse(data, found) if len(data) == status.st_size else Trusted({}, {})
    except (_Damaged, ValueError, OSError, struct.error):
        return Trusted({}, {})
    finally:
        os.close(fd)


def _parse(data: bytes, found: Mapping[str, Identity]) -> Trusted:
    head, _, rest = data.partition(b"\n")
    words = head.split(b" ")
    if len(words) != 4 or b" ".join(words[:2]) != MAGIC or int(words[2]) not in _OID_LENGTHS:
        raise _Damaged
    oid_length, count = int(words[2]), int(words[3])
    layout = struct.Struct(_FIELDS + f"{oid_length}s")
    fields, rest = rest[: count * layout.size], rest[count * layout.size :]
    end = rest.rfind(b"\0") + 1
    trailer = rest[end:].split(b" ")
    if len(trailer) != 4 or trailer[0] != b"end" or not trailer[3].endswith(b"\n"):
        raise _Damaged
    since_ns, margin_ns, crc = (int(word) for word in trailer[1:])
    if zlib.crc32(memoryview(data)[: len(data) - len(rest) + end]) != crc or margin_ns < 0:
        raise _Damaged
    names = rest[: max(end - 1, 0)].decode(_ENCODING, _ERRORS).split("\0") if count else []
    if len(names) != count or len(fields) != count * layout.size:
        raise _Damaged
    # Unpacked in bulk (in C), then read in the record's own order, one lookup each (hash order costs more in misses).
    identities = struct.iter_unpack(f"{_IDENTITY}{8 + oid_length}x", fields)
    tails = struct.iter_unpack(f"<{_BOUND_AT}xq{oid_length}s", fields)
    own = since_ns - margin_ns
    keys, carried = {}, {}
    size, own_bound = layout.size, _BOUND.pack(own)
    get = found.get
    for index, (name, entry, (bound, oid)) in enumerate(zip(names, identities, tails, strict=True)):
        if get(name) != entry:
            continue
        passed = own if bound == OWN else bound
        if entry[1] < passed and entry[2] < passed and passed <= since_ns:  # an older record's bound, carried over
            keys[name] = _KINDS[entry[5] & 0o170100] + oid.decode("ascii")
            start = index * size
            if bound == OWN:  # it keeps the bound it passed: the next record's own may be later than its mtime
                carried[name] = (
                    fields[start : start + _BOUND_AT] + own_bound + fields[start + _BOUND_AT + 8 : start + size]
                )
            else:
                carried[name] = fields[start : start + size]
    return Trusted(keys, carried)
