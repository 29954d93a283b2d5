"""`daemon.lock`: the flock a daemon holds for its whole life, so one state dir has one daemon.

The lock file holds the holder's pid, so a second daemon can name the first. The pid is only ever read to
be shown; ownership is the lock, never the number (a stale pid in the file means nothing once the lock is
free).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from chock.errors import ChockError
from chock.paths import FILE_MODE


class AlreadyRunning(ChockError):
    """Another daemon holds this state dir's lock."""


class DaemonLock:
    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, path: str) -> DaemonLock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_pid(fd)
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ChockError(f"cannot lock {path}: {error.strerror}") from None
            who = f"pid {holder}" if holder else "a process that has not written its pid yet"
            raise AlreadyRunning(
                f"another chock daemon ({who}) already runs on the state dir {os.path.dirname(path)} "
                f"(it holds {path}); "
                f"talk to that one, or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = -1


def holder(path: str) -> int | None:
    """The pid of the daemon holding the lock at `path` (0 when it has not written it yet), or None when no
    daemon holds it. Looks without taking it: a shared lock, let go at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: no daemon ever ran on this state dir
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _read_pid(fd) or 0
    else:
        return None
    finally:
        os.close(fd)  # closing lets go of a lock it took


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
