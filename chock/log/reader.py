"""Reading a session log without owning it: replay after an id, and the probe of its owner.

Readers never hold a lock (docs/log.md#ownership-the-lock). A line without its `\\n` at the tail is a torn
write and is never returned; the next owner truncates it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator

from chock.log.events import Event, decode

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import BinaryIO

_CHUNK = 64 * 1024


def _line_at(handle: BinaryIO, offset: int) -> tuple[int, int | None]:
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


# Interpolated guesses before plain bisection takes over: with lines of even length one or two land on the
# line wanted; a log of wildly uneven lines falls back to bisection's O(log n) probes.
GUESSES = 6


def offset_after(handle: BinaryIO, after: int) -> int:
    """Byte offset of the first line whose id is greater than `after`.

    Replay from an id never reads the log from the start (docs/log.md#lines). Ids are dense — event N is the
    Nth line — so line N starts near N times the mean length of the lines before a line already seen: the
    search guesses there, aiming at the middle of line `after` so that the next line read is the one wanted,
    and bisects the remaining range when guesses stop landing. Each probe reads one line or two.
    """
    if after <= 0:
        return 0
    low, high = 0, os.fstat(handle.fileno()).st_size  # the answer is the first offset in [low, high] that is past
    seen: tuple[int, int] | None = None  # (start, id) of a line read: the density the next guess uses
    for probe in range(64 + GUESSES):
        if low >= high:
            break
        middle = (low + high) // 2
        if seen is not None and probe < GUESSES and seen[1] > 1:
            mean = seen[0] / (seen[1] - 1)  # lines 1 .. id-1 fill the bytes before line id
            middle = min(max(int(seen[0] + (after - seen[1] + 0.5) * mean), low), high - 1)
        start, event_id = _line_at(handle, middle)
        if event_id == after + 1:
            return start  # the line wanted, found directly
        if event_id is not None and event_id > 0:
            seen = (start, event_id)
        if event_id is None or event_id > after:
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


def lines_backwards(handle: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """The complete lines of an open log, last first, each with the offset it starts at (a torn tail skipped): the
    tail of a log of any size read with one chunk held at a time, and at most a line besides."""
    end = os.fstat(handle.fileno()).st_size
    held, at = b"", end  # `held` is the log's bytes from `at` to its end, less the lines already given
    while True:
        newline = held.rfind(b"\n", 0, len(held) - 1)
        if newline >= 0 or at == 0:
            start = newline + 1
            line = held[start:]
            if line.endswith(b"\n"):
                yield at + start, line
            held = held[:start]
            if at == 0 and start == 0:
                return
            continue
        step = min(_CHUNK, at)
        at -= step
        handle.seek(at)
        held = handle.read(step) + held


def read_events(path: Path, after: int = 0) -> Iterator[Event]:
    """Parsed events after `after`; a line that is not an event is skipped."""
    for line in iter_lines(path, after):
        event = decode(line)
        if event is not None:
            yield event


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
