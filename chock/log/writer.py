"""Owning a session log: the exclusive lock held for the owner's whole life, and appends under it.

Ownership *is* the lock (SPEC §4): a handover is the lock changing hands, so there is no transfer
protocol. Each event is one `write()` of the whole line; a torn tail left by a crash is cut by the next
owner before it appends.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Any

from chock.errors import ChockError
from chock.log.events import Event, decode, encode, timestamp
from chock.paths import FILE_MODE

# A reader's probe (LOCK_SH|LOCK_NB, released at once) holds the lock for microseconds; retrying for this
# long means a probe can never make an owner fail to take its lock.
LOCK_RETRY_SECONDS = 2.0


class LogLocked(ChockError):
    """Another live process owns the session."""


class SessionLog:
    """An owned, open log. Create with `create` (new session) or `take` (continue / adopt)."""

    def __init__(self, path: Path, fd: int, last_id: int) -> None:
        self.path = path
        self._fd = fd
        self.last_id = last_id

    @classmethod
    def create(cls, path: Path) -> SessionLog:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
        _lock(fd, path)
        return cls(path, fd, 0)

    @classmethod
    def take(cls, path: Path) -> SessionLog:
        """Take an existing log: lock it, cut a torn tail, and learn the last id."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ChockError(f"there is no session log at {path}") from None
        try:
            _lock(fd, path)
            return cls(path, fd, _cut_torn_tail(fd))
        except BaseException:
            os.close(fd)
            raise

    def append(self, type: str, **fields: Any) -> Event:
        """Write one event; returns it with its id and time."""
        event: Event = {"id": self.last_id + 1, "at": timestamp(), "type": type, **fields}
        line = encode(event)
        written = os.write(self._fd, line)
        if written != len(line):  # a short write leaves a torn tail; the next owner cuts it
            raise ChockError(f"could not write the whole event to {self.path} (disk full?)")
        self.last_id += 1
        return decode(line) or event

    def release(self) -> None:
        """Let go of the lock (and the file); after this the session is nobody's until the next owner."""
        if self._fd >= 0:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = -1

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock(fd: int, path: Path) -> None:
    deadline = time.monotonic() + LOCK_RETRY_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            if time.monotonic() >= deadline:
                raise LogLocked(f"another process owns this session (its log {path} is locked)") from None
            time.sleep(0.01)


def _cut_torn_tail(fd: int) -> int:
    """Truncate an incomplete last line; return the id of the last complete one (0 for an empty log)."""
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
    if not tail:
        return 0
    last_line = tail[tail.rfind(b"\n", 0, len(tail) - 1) + 1 :]
    event_id = (decode(last_line) or {}).get("id", 0)
    return event_id if isinstance(event_id, int) else 0
