"""inotify(7) through libc, with no dependency: what changed among the files watched, without looking at each.

Linux only. Elsewhere, or when the kernel gives no instance (the per-user limit), `open_inotify()` is None; a watch the
kernel refuses (the per-user watch limit, a path that is not there) is -1 from `add`. Either way the caller
looks at the files itself, as it would without inotify.
"""

from __future__ import annotations

import os
import struct
import sys

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

# The events (linux/inotify.h).
IN_MODIFY = 0x00000002  # written to, or truncated
IN_ATTRIB = 0x00000004  # metadata, including the link count: an unlink, or a rename over the file
IN_CLOSE_WRITE = 0x00000008  # a writer let go (closed it, or died)
IN_MOVED_FROM = 0x00000040  # an entry of the directory moved away (the event names it)
IN_MOVE_SELF = 0x00000800  # the watched file itself moved (the watch follows it)
IN_Q_OVERFLOW = 0x00004000  # the kernel's queue overflowed: events were lost (wd is -1)
IN_IGNORED = 0x00008000  # the watch is gone (removed, or its file deleted): no event for it follows
IN_ONLYDIR = 0x01000000

# struct inotify_event { int wd; uint32_t mask; uint32_t cookie; uint32_t len; char name[len]; }
_EVENT = struct.Struct("iIII")

# One read takes this much of the queue (at least one event of the longest name); the rest is read next.
READ_SIZE = 64 * 1024


class Inotify:
    """One inotify instance: watches added by path, events read without blocking."""

    def __init__(self, fd: int, libc: Any) -> None:
        self._fd = fd
        self._add = libc.inotify_add_watch
        self._rm = libc.inotify_rm_watch

    def fileno(self) -> int:
        return self._fd

    def add(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watch what `path` names now (the file, not the name: a file moved or replaced there is not this
        one); its watch descriptor (the same one again for a file already watched), or -1 when refused."""
        return self._add(self._fd, os.fsencode(path), mask)

    def remove(self, wd: int) -> None:
        """Stop watching (nothing happens for a watch the kernel already dropped); IN_IGNORED follows."""
        self._rm(self._fd, wd)

    def read(self) -> list[tuple[int, int, str]]:
        """Every event queued now, as (watch descriptor, mask, name: "" for the watched file itself); [] when
        there is none. Never blocks."""
        events: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                return events
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + length].rstrip(b"\0") if length else b""
                offset += length
                events.append((wd, mask, os.fsdecode(name)))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_inotify() -> Inotify | None:
    """A new inotify instance (non-blocking, closed on exec), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # lazily: nothing on a start-up path needs it

        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    return Inotify(fd, libc) if fd >= 0 else None
