"""Owning a session log: the exclusive lock held for the owner's whole life, and appends under it.

Ownership *is* the lock (docs/log.md#ownership-the-lock): a handover is the lock changing hands, so there is no
transfer protocol. Each event is one `write()` of the whole line; a torn tail left by a crash is cut by the next
owner before it appends.

A write that fails (a full disk, a file size limit) must not leave the session without its end: an owner keeps
RESERVE bytes allocated past the end of the file (fallocate with FALLOC_FL_KEEP_SIZE, where the file system has
it), so when a write fails for lack of space, what it wrote of its line is cut and the `session.end` that says
so still fits. After a failed write nothing else is appended but that end, so the log stays whole lines.

Written ahead (docs/log.md#durability): `sync` makes every line written so far durable (fdatasync) before
anything those lines record or authorise happens outside the process. It costs nothing when nothing was written
since the last sync, so consecutive sync points cost one system call. A new log's first sync also syncs the
directories that name it. A sync that fails is a failed write: only the end may follow.

An owner that is given `remember` calls it as it lets go (`chock.log.catalog.remember`: the session's row to
the cache, so no reader folds the log again). An owner that made the log folds every line it writes into the
session's row as it goes (`row`), so remembering it reads nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.errors import ChockError, Refused
from chock.log.events import Event, check, decode, encode, timestamp
from chock.log.reader import lines_backwards
from chock.log.row import RowState
from chock.paths import FILE_MODE, sync_directory
from chock.platform.flock import lock_within

# A reader's probe (LOCK_SH|LOCK_NB, released at once) holds the lock for microseconds; retrying for this
# long means a probe can never make an owner fail to take its lock.
LOCK_RETRY_SECONDS = 2.0
LOCK_POLL_SECONDS = 0.01


# A moved-in log is copied in pieces of this size.
COPY_CHUNK = 1024 * 1024

# Bytes kept allocated past the log's end, for the end a failed write still owes the log; renewed when half used.
RESERVE = 256 * 1024
# Besides the end, a `workspace.close` may be written into the reserve — removing a workspace is how a person makes
# room — as long as this much of it is left for the end (docs/log.md#durability).
END_ROOM = RESERVE // 4
MAKES_ROOM = frozenset({"workspace.close"})


# What an owner calls as it lets go: with the log's descriptor (still locked), the row of its every line when it
# wrote them all, and where the lines it wrote end (what that row covers: a line another writer added past them
# is not in it).
Remember = Callable[[int, RowState | None, int], None]


class LogLocked(ChockError):
    """Another live process owns the session."""


class LogWriteFailed(ChockError):
    """A write to the log failed; the message is one sentence: what failed, where, what to do."""


class SessionLog:
    """An owned, open log. Create with `create` (new session) or `take` (continue / adopt)."""

    def __init__(self, path: Path, fd: int, last_id: int, remember: Remember | None = None) -> None:
        self.path = path
        self._fd = fd
        self.last_id = last_id
        self._remember = remember
        self._size = os.fstat(fd).st_size
        # The row fold of every line of the log, when this owner writes them all and someone wants it.
        self.row = RowState() if remember is not None and self._size == 0 else None
        self._reserved = self._size  # allocated up to here
        self._reserve_errno: int | None = None  # why there is no reserve, when there is none
        self.failed: LogWriteFailed | None = None
        self._dirty = True  # written (or a torn tail cut) since the last sync
        self._new_directories: tuple[Path, ...] = ()  # to sync with the first line of a new log
        self._reserve()

    @classmethod
    def create(cls, path: Path, *, remember: Remember | None = None) -> SessionLog:
        """A new log, in a directory made for it just now: its first sync syncs that directory and the one
        holding it too, so the log's name survives a power cut along with its first line."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
        _lock(fd, path)
        log = cls(path, fd, 0, remember)
        log._new_directories = (path.parent, path.parent.parent)
        return log

    @classmethod
    def create_holding(cls, path: Path, source: int, last_id: int, *, remember: Remember | None = None) -> SessionLog:
        """An owned log that begins with the lines read from `source` (a moved session's, whole lines its caller
        checked, the last with id `last_id`): written to a new file beside `path` under its lock, made durable,
        then renamed to `path` (replacing what is there), so nobody finds it there before it is whole and owned."""
        incoming = path.with_name(path.name + ".incoming")
        fd = os.open(incoming, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
        try:
            _lock(fd, incoming)
            while chunk := os.read(source, COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            _fdatasync(fd)
            os.replace(incoming, path)
            sync_directory(path.parent)
        except BaseException:
            os.close(fd)
            incoming.unlink(missing_ok=True)
            raise
        log = cls(path, fd, last_id, remember)
        log._dirty = False
        return log

    @classmethod
    def take_received(
        cls, path: Path, received: Path, fd: int, last_id: int, *, remember: Remember | None = None
    ) -> SessionLog:
        """An owned log that is the file `received` (a moved session's, whole lines its caller checked through
        `fd`, open on it read-write and appending, the last line with id `last_id`): locked, made durable, then
        renamed to `path` (replacing what is there), so nobody finds it there before it is whole and owned. Its
        bytes are not copied, but on another file system (`create_holding`). Owns `fd` once it returns."""
        _lock(fd, received)
        os.fchmod(fd, FILE_MODE)
        opened = os.fstat(fd)
        if not os.path.samestat(os.lstat(received), opened) or opened.st_nlink != 1:
            raise ChockError(f"{received} was replaced or linked while it was checked; nothing was written")
        _fdatasync(fd)
        try:
            os.replace(received, path)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            os.lseek(fd, 0, os.SEEK_SET)
            log = cls.create_holding(path, fd, last_id, remember=remember)
            os.close(fd)
            return log
        sync_directory(path.parent)
        log = cls(path, fd, last_id, remember)
        log._dirty = False
        return log

    @classmethod
    def take(cls, path: Path, *, remember: Remember | None = None) -> SessionLog:
        """Take an existing log: lock it, cut a torn tail, and learn the last id."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ChockError(f"there is no session log at {path}") from None
        try:
            _lock(fd, path)
            _still_there(fd, path)
            return cls(path, fd, _cut_torn_tail(fd), remember)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def inherit(cls, path: Path, fd: int, *, remember: Remember | None = None) -> SessionLog:
        """The log this process already owns on `fd`, inherited across an exec (a parked session rebuilt): the
        same open file description, so the same lock (docs/architecture.md#parking)."""
        os.set_inheritable(fd, False)
        _still_there(fd, path)
        return cls(path, fd, _cut_torn_tail(fd), remember)

    def fileno(self) -> int:
        """The descriptor that holds the log's lock."""
        return self._fd

    def append(self, type: str, **fields: Any) -> Event:
        """Write one event; returns it with its id and time. Raises LogWriteFailed, after which only a
        `session.end` may still be appended (there is room for it in the reserve). Raises UndeclaredEvent, and
        writes nothing, for a type or a field `chock.log.events.EVENTS` does not declare."""
        check(type, fields)
        if self.failed is not None and type != "session.end":
            raise self.failed
        event: Event = {"id": self.last_id + 1, "at": timestamp(), "type": type, **fields}
        line = encode(event)
        try:
            if type != "session.end" and not self._room_for(len(line)) and not self._fits_beside_end(type, line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # stopped while the end still fits
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a short write: the disk filled up
        except OSError as error:
            self._cut_to(self._size)  # what was written of this line goes: the log stays whole lines
            self.failed = LogWriteFailed(
                f"could not write to the session log {self.path}: {error.strerror or error}; the session stopped "
                f"there. Make room (or lift the limit), then `chock run --continue {self.path.parent.name}` "
                "takes it back"
            )
            raise self.failed from None
        self._size += written
        self._dirty = True
        self.last_id += 1
        event = decode(line) or event
        if self.row is not None:
            self.row.apply(event)  # what the row fold of this line gives (docs/log.md#rows-and-the-catalog)
        return event

    def knows_row(self, row: RowState) -> None:
        """`row` is the row fold of every line the log holds now (its owner just folded them): it is kept up as
        lines are appended, and is what the cache is given at release, so nothing is read then."""
        if self._remember is not None:
            self.row = row.copy()

    def sync(self) -> None:
        """Make every line written so far durable before what they record or authorise happens outside this
        process (docs/log.md#durability); nothing to do when nothing was written since the last sync. Raises
        LogWriteFailed when the disk says the lines may be lost: after that only a `session.end` is appended."""
        if not self._dirty or self._fd < 0:
            return
        try:
            _fdatasync(self._fd)
            for directory in self._new_directories:
                sync_directory(directory)
        except OSError as error:
            self.failed = LogWriteFailed(
                f"could not make the session log {self.path} durable: {error.strerror or error}; the session "
                f"stopped there. Check the disk (dmesg), then `chock run --continue {self.path.parent.name}` "
                "takes it back"
            )
            raise self.failed from None
        self._new_directories = ()
        self._dirty = False

    def _room_for(self, size: int) -> bool:
        """Whether `size` more bytes leave half the reserve for the end, renewing it when they would not; False
        only when the file system has no room left to renew it."""
        unsupported = self._reserve_errno not in (None, errno.ENOSPC)
        if unsupported or self._reserved - self._size - size >= RESERVE // 2:
            return True
        self._reserve(size)
        return self._reserve_errno != errno.ENOSPC

    def _fits_beside_end(self, type: str, line: bytes) -> bool:
        """Whether `line`, of a type that makes room, may be written all the same: it fits in the reserve with
        END_ROOM of it left for the end, or this owner has no reserve (the disk was full when it took the log),
        and then the write is tried as an end's is."""
        held = self._reserved - self._size
        return type in MAKES_ROOM and (held <= 0 or held - len(line) >= END_ROOM)

    def _reserve(self, size: int = 0) -> None:
        """Keep RESERVE bytes allocated past what is written (and about to be). Best effort: where the file
        system has no fallocate, `_reserve_errno` says so and the log is written without a reserve."""
        error = _fallocate(self._fd, FALLOC_FL_KEEP_SIZE, self._size, size + RESERVE)
        if error == 0:
            self._reserved = self._size + size + RESERVE
        self._reserve_errno = error or None

    def _give_back_reserve(self) -> None:
        """Free the blocks kept past the file's end, from its end as it is now rather than where this owner's lines
        end: bytes another writer appended past them, against the lock (docs/log.md#ownership-the-lock), are
        never punched out to zeros."""
        end = os.fstat(self._fd).st_size
        if self._reserved > end:
            _fallocate(self._fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, end, self._reserved - end)
        os.ftruncate(self._fd, os.fstat(self._fd).st_size)  # ext4 frees blocks kept past the end only on a truncate

    def _cut_to(self, size: int) -> None:
        with contextlib.suppress(OSError):  # else the next owner cuts the torn tail
            os.ftruncate(self._fd, size)  # never needs space

    def release(self) -> None:
        """Let go of the lock (and the file), its lines synced first; after this the session is nobody's until
        the next owner."""
        if self._fd >= 0:
            with contextlib.suppress(LogWriteFailed):  # a failed sync was said where it failed, or is the end's
                self.sync()
            if self._reserved > self._size:
                with contextlib.suppress(OSError):
                    self._give_back_reserve()
            try:
                if self._remember is not None and self._size:
                    with contextlib.suppress(Exception):  # the cache is a shortcut: without it a reader folds the log
                        self._remember(self._fd, self.row, self._size)
            finally:
                os.close(self._fd)  # closing the last descriptor drops the flock
                self._fd = -1

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
_libc = None


def _fallocate(fd: int, mode: int, offset: int, length: int) -> int:
    """fallocate(2) with `mode`: 0, or the errno (EOPNOTSUPP where the platform or file system has none)."""
    global _libc
    if not sys.platform.startswith("linux"):
        return errno.EOPNOTSUPP
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return 0 if _libc.fallocate(fd, mode, offset, length) == 0 else ctypes.get_errno()


# macOS has no fdatasync; there fsync is the one that flushes the data to the disk's cache.
_fdatasync = getattr(os, "fdatasync", os.fsync)


class SyncAhead:
    """The data of a file begun to be synced by a thread (it waits on the disk, not on the CPU) while its caller
    reads it, so the sync that later makes it durable finds little left to write. `join` raises a failure: the
    descriptor would not report it to that later sync again."""

    def __init__(self, fd: int) -> None:
        import threading

        self._failed: OSError | None = None
        self._thread = threading.Thread(target=self._sync, args=(fd,), name="log-sync-ahead", daemon=True)
        self._thread.start()

    def _sync(self, fd: int) -> None:
        try:
            _fdatasync(fd)
        except OSError as error:
            self._failed = error

    def join(self) -> None:
        self._thread.join()
        if self._failed is not None:
            raise self._failed


def _lock(fd: int, path: Path) -> None:
    if not lock_within(fd, LOCK_RETRY_SECONDS, LOCK_POLL_SECONDS):
        raise LogLocked(f"another process owns this session (its log {path} is locked)")


class LogRemoved(Refused):
    """The session was removed while this process waited for its lock."""


def _still_there(fd: int, path: Path) -> None:
    """The log opened is still the session's log: a `remove` that held the lock first moves the session's
    directory away before deleting it, and nothing may be appended to a deleted log."""
    opened = os.fstat(fd)
    try:
        named = os.stat(path)
    except FileNotFoundError:
        named = None
    if named is None or (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino) or opened.st_nlink == 0:
        raise LogRemoved(f"session {path.parent.name} was removed while this process waited for it")


def _cut_torn_tail(fd: int) -> int:
    """Truncate an incomplete last line; return the id of the last event (0 for a log with none). A whole line
    that is not an event (damaged by hand or by the disk) is left as it is, and skipped as every reader skips it:
    the next id follows the last event's, so no id is ever given twice."""
    size = os.fstat(fd).st_size
    start = size
    tail = b""
    # Read backwards until the tail holds the last complete line whole (events are at most 1 MiB).
    while start > 0 and tail.count(b"\n") < 2:
        step = min(64 * 1024, start)
        start -= step
        tail = os.pread(fd, step, start) + tail
    if not tail.endswith(b"\n"):
        kept = tail.rfind(b"\n") + 1
        os.ftruncate(fd, start + kept)
        tail = tail[:kept]
        if tail.count(b"\n") < 2 and start > 0:
            return _cut_torn_tail(fd)
    with open(fd, "rb", closefd=False) as handle:
        for _, line in lines_backwards(handle):
            event_id = (decode(line) or {}).get("id")
            if type(event_id) is int and event_id > 0:
                return event_id
    return 0
