"""Folding a log file into its row: from its start, or on from a row that covers part of it (a cached row, or one
a reader already holds). A catalog folds logs so (chock.log.catalog), and so does the helper that folds half of a
cold listing beside it (chock.log.cold_fold): a row is the same whoever folded it.

A torn tail is never folded (it is read again once it is whole), and a line longer than any event is stepped over.
"""

from __future__ import annotations

import os

from chock.log.events import MAX_EVENT_BYTES
from chock.log.row import RowState
from chock.log.rowcache import Cached

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

# A log is read in pieces of this size: every complete event fits in one (events are at most 1 MiB).
CHUNK = 4 * MAX_EVENT_BYTES


def fold_log(
    session_id: str, fd: int, base: Cached | None, resolve: Callable[[str], str] = os.path.realpath
) -> tuple[Cached, bool]:
    """The row of the log `fd` holds, folded on from `base` — or from the start when `base` is not of this log or
    does not end just after a newline in it — and whether `base` was used. `resolve` gives a project path's real
    path."""
    info = os.fstat(fd)
    identity, size = (info.st_dev, info.st_ino), info.st_size
    if base is not None and (base.identity != identity or base.offset > size):
        base = None
    if base is not None and base.offset and os.pread(fd, 1, base.offset - 1) != b"\n":
        base = None
    state = base.state.copy() if base is not None else RowState()
    offset = _feed(fd, state, base.offset if base is not None else 0, size)
    real = base.project_real if base is not None and base.state.project == state.project else ""
    return folded(session_id, info, offset, state, real, resolve), base is not None


def folded(
    session_id: str,
    info: os.stat_result,
    offset: int,
    state: RowState,
    real: str = "",
    resolve: Callable[[str], str] = os.path.realpath,
) -> Cached:
    """`state`, the row fold of the log `info` describes up to `offset`, with what says which log it covers; `real`
    is its project's resolved path when already known, else `resolve` gives it."""
    state.id = state.id or session_id
    if state.project and not real:
        real = resolve(state.project)
    return Cached((info.st_dev, info.st_ino), info.st_mtime_ns, offset, state, real)


def covers(cached: Cached, info: os.stat_result) -> bool:
    """Whether `cached` is the row of the whole log `info` describes (the same file, size and mtime)."""
    return (
        cached.identity == (info.st_dev, info.st_ino)
        and cached.offset == info.st_size
        and cached.mtime == info.st_mtime_ns
    )


def _feed(fd: int, state: RowState, offset: int, size: int) -> int:
    """Fold the complete lines of `fd` from `offset` to `size` into `state`; the offset after the last one."""
    while offset < size:
        data = os.pread(fd, min(CHUNK, size - offset), offset)
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < CHUNK:
                break  # a torn tail, or a line still being written: read again once it is whole
            # A line longer than any event is not an event: step over it.
            found = _next_line(fd, offset + len(data), size)
            if found is None:
                break
            offset = found
            continue
        state.feed(data[:end])
        offset += end
    return offset


def _next_line(fd: int, offset: int, size: int) -> int | None:
    """The offset just after the next newline at or after `offset`, or None when there is none before `size`."""
    while offset < size:
        data = os.pread(fd, min(CHUNK, size - offset), offset)
        if not data:
            return None
        newline = data.find(b"\n")
        if newline >= 0:
            return offset + newline + 1
        offset += len(data)
    return None
