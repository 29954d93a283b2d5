"""A worktree's stamps: each file's identity and blob id as Chock last wrote or hashed it, so that finishing
hashes only what changed, the way git's own index does (docs/architecture.md, "Finishing by what changed").

The record is `<workspace>.stamps`, beside the worktree in the data dir: outside every directory the sandbox
may write, on the same file system as the files it describes (so its own time stamp and theirs come from one
clock), and removed with the worktree. It is written whole to `<workspace>.stamps.new` (0600) and renamed into
place. Each entry is

    <st_mode octal> <size> <mtime_ns> <ctime_ns> <inode> <dev> <bound_ns or -> <blob id>\\t<path>\\0

after a `chock-stamps 1` line, and a last line `end <entries> <since_ns> <margin_ns> <sha256 of the rest>`
closes it. A file is trusted only when its identity now is the recorded one and both its mtime and ctime are
older than its bound: `since_ns - margin_ns` for `-` (the racy rule: a file written again in the tick it was
recorded in keeps its stat data, so such a file is hashed again). A file once trusted keeps the bound it
passed when the record is written again, since any write after that bound would have changed its ctime.
ctime is what an agent cannot set back, so a file rewritten and given its old mtime is hashed. A record
missing, damaged, cut short or of another version trusts nothing: everything is hashed, as without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

# (size, mtime_ns, ctime_ns, inode, dev, st_mode): what lstat says of a file, compared whole.
Identity = tuple[int, int, int, int, int, int]

MAGIC = b"chock-stamps 1\n"
# Recorded as Chock fills a new worktree: nothing else can write there until the record is in place, so a
# later write is stamped no earlier than the record; this covers one tick of any kernel's coarse clock.
WRITTEN_MARGIN_NS = 10_000_000
# Recorded as finishing reads a worktree the agent had: conservative, as git's racy rule is against its index.
READ_MARGIN_NS = 1_000_000_000
# The longest entry a walk can give: MAX_DEPTH (chock.session.tree) names of 255 bytes, and the fields.
MAX_ENTRY = 200 * 256 + 256
CHUNK = 1 << 20

_OID_LENGTHS = (40, 64)  # sha1 and sha256 repositories


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
    """A record being written: `add` each file, then `close` renames it into place; leaving a `with` block
    without `close` (an error) deletes what was written.

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
        self.file: IO[bytes] = open(os.open(self.temporary, flags, 0o600), "wb", buffering=CHUNK)  # noqa: SIM115
        self.since_ns = os.fstat(self.file.fileno()).st_mtime_ns
        self.margin_ns = margin_ns
        self.count = 0
        self.digest = hashlib.sha256()
        self._write(MAGIC)
        self.closed = False

    def _write(self, data: bytes) -> None:
        self.digest.update(data)
        self.file.write(data)

    def add(self, path: str, found: Identity, oid: str, bound: int | None = None) -> None:
        """Record `path` as `found` holding the blob `oid`; `bound`: the racy bound it already passed, if any."""
        size, mtime, ctime, inode, dev, mode = found
        held = b"-" if bound is None else b"%d" % bound
        self._write(
            b"%o %d %d %d %d %d %s %s\t%s\0"
            % (mode, size, mtime, ctime, inode, dev, held, oid.encode(), os.fsencode(path))
        )
        self.count += 1

    def close(self, *, stamp_now: bool = False) -> None:
        """Finish the record and put it in place of the last one."""
        self.file.flush()
        if stamp_now:
            os.utime(self.file.fileno())  # the file system's time now, after every write before it
            self.since_ns = os.fstat(self.file.fileno()).st_mtime_ns
        trailer = b"end %d %d %d %s\n" % (self.count, self.since_ns, self.margin_ns, self.digest.hexdigest().encode())
        self.file.write(trailer)
        self.file.close()
        os.replace(self.temporary, self.final)
        self.closed = True

    def abandon(self) -> None:
        if not self.closed:
            self.file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temporary)
            self.closed = True

    def __enter__(self) -> Recording:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.abandon()


class _Damaged(Exception):
    pass


def trusted(workspace: Path, found: Mapping[str, Identity]) -> dict[str, tuple[str, int]]:
    """path -> (blob id, the bound it passed) for each of `found` (path -> its identity now) that the record
    says is unchanged and that is older than its racy bound; empty when there is no usable record.

    The record is read in chunks and only entries of `found` are kept, so however large it is, what is held
    is no more than the tree being finished.
    """
    try:
        fd = os.open(path_of(workspace), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    with open(fd, "rb", buffering=0) as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        try:
            return _read(file, found)
        except (_Damaged, ValueError, OSError):
            return {}


def _read(file: IO[bytes], found: Mapping[str, Identity]) -> dict[str, tuple[str, int]]:
    digest = hashlib.sha256()
    head = file.read(len(MAGIC))
    if head != MAGIC:
        raise _Damaged
    digest.update(head)
    same: dict[str, tuple[Identity, str, bytes]] = {}
    count = 0
    rest = b""
    while chunk := file.read(CHUNK):
        entries = (rest + chunk).split(b"\0")
        rest = entries.pop()
        if len(rest) > MAX_ENTRY:
            raise _Damaged
        for entry in entries:
            digest.update(entry + b"\0")
            fields, tab, raw = entry.partition(b"\t")
            path = os.fsdecode(raw)
            *numbers, bound, oid = fields.split(b" ")
            if not tab or len(numbers) != 6 or len(oid) not in _OID_LENGTHS:
                raise _Damaged
            count += 1
            now = found.get(path)
            if now is None:
                continue
            mode, size, mtime, ctime, inode, dev = int(numbers[0], 8), *map(int, numbers[1:])
            if now == (size, mtime, ctime, inode, dev, mode):
                same[path] = (now, oid.decode("ascii"), bound)
    words = rest.split(b" ")
    if len(words) != 5 or words[0] != b"end" or not rest.endswith(b"\n"):
        raise _Damaged
    entries_said, since_ns, margin_ns = (int(word) for word in words[1:4])
    if entries_said != count or words[4].strip() != digest.hexdigest().encode() or margin_ns < 0:
        raise _Damaged
    own = since_ns - margin_ns
    kept = {}
    for path, ((_, mtime, ctime, *_), oid, held) in same.items():
        bound = own if held == b"-" else int(held)
        if mtime < bound and ctime < bound and bound <= since_ns:  # an older record's bound, carried over
            kept[path] = (oid, bound)
    return kept
