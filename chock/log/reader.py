"""Reading a session log without owning it: replay after an id, follow a growing log, probe the owner.

Readers never hold a lock (SPEC §4). A line without its `\\n` at the tail is a torn write and is never
returned; the next owner truncates it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from chock.log.events import Event, decode

_CHUNK = 64 * 1024


def _line_at(handle, offset: int) -> tuple[int, int | None]:
    """The start and id of the first complete line starting at or after `offset` (id None: there is none)."""
    if offset > 0:
        handle.seek(offset - 1)
        handle.readline()  # finish the line that holds byte offset-1
    else:
        handle.seek(0)
    start = handle.tell()
    line = handle.readline()
    if not line.endswith(b"\n"):
        return start, None
    event_id = (decode(line) or {}).get("id")
    return start, event_id if isinstance(event_id, int) else -1


def offset_after(handle, after: int) -> int:
    """Byte offset of the first line whose id is greater than `after`.

    Replay from an id must not read the log from the start (SPEC §4): a binary search over byte offsets
    for the smallest offset whose next line is past `after` touches O(log n) lines of the file.
    """
    if after <= 0:
        return 0

    def past(offset: int) -> bool:
        event_id = _line_at(handle, offset)[1]
        return event_id is None or event_id > after

    low, high = 0, os.fstat(handle.fileno()).st_size
    while low < high:
        middle = (low + high) // 2
        if past(middle):
            high = middle
        else:
            low = middle + 1
    return _line_at(handle, low)[0]


def iter_lines(path: Path, after: int = 0) -> Iterator[bytes]:
    """The log's own lines (with `\\n`) for events after `after`, skipping a torn tail."""
    with open(path, "rb") as handle:
        handle.seek(offset_after(handle, after))
        for line in handle:
            if not line.endswith(b"\n"):
                return
            yield line


def read_events(path: Path, after: int = 0) -> Iterator[Event]:
    """Parsed events after `after`; a line that is not an event is skipped."""
    for line in iter_lines(path, after):
        event = decode(line)
        if event is not None:
            yield event


class Tail:
    """Follow a log as it grows: each `read()` returns the complete lines appended since the last one."""

    def __init__(self, path: Path, after: int = 0) -> None:
        self._handle = open(path, "rb")  # noqa: SIM115 - held for the follower's life
        self._handle.seek(offset_after(self._handle, after))
        self._partial = b""

    def fileno(self) -> int:
        return self._handle.fileno()

    def read(self) -> list[bytes]:
        data = self._partial + self._handle.read()
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [line + b"\n" for line in lines]

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def owner_alive(path: str | os.PathLike[str]) -> bool:
    """Whether some process holds the log's exclusive lock: probe with LOCK_SH|LOCK_NB and let go at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
