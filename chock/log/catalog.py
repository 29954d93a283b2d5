"""Every session in the state dir as a row: what `chock sessions`, `chock usage`, `chock workspace`,
`chock detach`, `chock run --continue` (to find the newest session) and the daemon's `list` read.

One catalog serves them all. Per session it keeps the log's identity (device, inode), the offset of the end
of the last complete line it has folded, and the row fold up to there (`chock.log.row.RowState`); a later
look folds only the bytes appended since. A torn tail is never folded (it is read again once it is whole);
a log that shrank or was replaced is folded again from its start. Rows are written to the cache dir
(`chock.log.rowcache`) when a session has ended and at most every CACHE_EVERY seconds while it runs, so a
new process starts where the last one left off; a project's sessions are found through the index by
project (`chock.log.index`), so listing one project never reads another's logs.

A row's status needs the log's lock as well as the fold (a session with no end after its latest start or
adopt is running while its owner holds the lock, abandoned once nobody does): that probe is made on
every look, and not at all for a session whose log says how it ended.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.log import rowcache
from chock.log.events import MAX_EVENT_BYTES
from chock.log.index import ProjectIndex
from chock.log.reader import owner_alive
from chock.log.row import RowState
from chock.paths import SESSION_ID_RE, Layout, check_session_id

# A running session's cached row is rewritten at most this often: a restarted reader then folds at most
# this many seconds of its log, and a busy session costs one small file write per interval.
CACHE_EVERY = 5.0

# A log is read in pieces of this size: every complete event fits in one (events are at most 1 MiB).
CHUNK = 4 * MAX_EVENT_BYTES


class Entry:
    """One session as the catalog last saw it. Never changed once made (a later look makes a new one), so
    a thread reading it needs no lock; `lines` memoises what a reader derives from the row."""

    __slots__ = ("cached_at", "cached_offset", "identity", "lines", "offset", "project_real", "session_id", "state")

    def __init__(
        self,
        session_id: str,
        identity: tuple[int, int],
        offset: int,
        state: RowState,
        project_real: str,
        cached_offset: int,
        cached_at: float | None,
    ) -> None:
        self.session_id = session_id
        self.identity = identity  # (device, inode) of the log folded
        self.offset = offset  # the end of the last complete line folded
        self.state = state
        self.project_real = project_real  # the project the log names, resolved (projects compare so)
        self.cached_offset = cached_offset  # what the cache dir's entry covers (-1: nothing)
        self.cached_at = cached_at
        self.lines: dict[bool, bytes] = {}

    def row(self, alive: bool) -> dict[str, Any]:
        return self.state.row(alive)

    def line(self, alive: bool, encode: Callable[[str, dict[str, Any]], bytes]) -> bytes:
        """`encode(started_at, row)` for this entry, made once per status (the daemon's `list` line)."""
        line = self.lines.get(alive)
        if line is None:
            line = self.lines[alive] = encode(self.state.started_at, self.state.row(alive))
        return line


class Catalog:
    """The sessions of one state dir. Safe to share between threads."""

    def __init__(self, layout: Layout, *, cache: bool = True) -> None:
        # Paths as strings: a listing builds one per session, and pathlib would be its largest cost.
        self._sessions = os.fspath(layout.sessions_dir)
        self._cache = os.fspath(layout.rows_dir) if cache else None
        self._entries: dict[str, Entry] = {}
        self.index = ProjectIndex(self._sessions, self._cache)

    def log_path(self, session_id: str) -> str:
        return f"{self._sessions}/{check_session_id(session_id)}/log.jsonl"

    def alive(self, entry: Entry) -> bool:
        """The lock probe, skipped when the log already says how the session ended."""
        return False if entry.state.ended else owner_alive(self.log_path(entry.session_id))

    def entry(self, session_id: str) -> Entry | None:
        """The session as its log says now, or None when it has no log (yet, or any more)."""
        path = self.log_path(session_id)
        old = self._entries.get(session_id)
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._entries.pop(session_id, None)
            return None
        if old is not None and old.identity == (info.st_dev, info.st_ino) and old.offset == info.st_size:
            return old
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            entry = self._fold(session_id, fd, old)
        finally:
            os.close(fd)
        self._entries[session_id] = entry
        return entry

    def of_project(self, project: str | os.PathLike[str]) -> list[Entry]:
        """The sessions of `project` (compared by resolved real path), oldest first."""
        real = os.path.realpath(project)
        found = (self.entry(session_id) for session_id in self.index.sessions_of(real))
        return [entry for entry in found if entry is not None and entry.project_real == real]

    def every(self) -> list[Entry]:
        """Every session of the state dir, oldest first."""
        try:
            names = sorted(name for name in os.listdir(self._sessions) if SESSION_ID_RE.fullmatch(name))
        except FileNotFoundError:
            return []
        found = (self.entry(session_id) for session_id in names)
        return [entry for entry in found if entry is not None]

    def newest(self, project: str | os.PathLike[str], *, running: bool = False) -> str | None:
        """The newest session of `project` (only a running or waiting one, with running=True)."""
        for entry in reversed(self.of_project(project)):
            if not running or self.alive(entry):
                return entry.session_id
        return None

    # Folding --------------------------------------------------------------------------------------------

    def _fold(self, session_id: str, fd: int, old: Entry | None) -> Entry:
        """Fold what `fd` holds past what `old` or the cache covers (from the start when neither agrees)."""
        info = os.fstat(fd)
        identity, size = (info.st_dev, info.st_ino), info.st_size
        state, offset, real, cached_offset, cached_at = None, 0, "", -1, None
        if old is not None and old.identity == identity and old.offset <= size:
            state, offset, real = old.state.copy(), old.offset, old.project_real
            cached_offset, cached_at = old.cached_offset, old.cached_at
        elif self._cache is not None:
            cached = rowcache.read(self._cache, session_id)
            if cached is not None and cached.identity == identity and cached.offset <= size:
                state, offset, real = cached.state, cached.offset, cached.project_real
                cached_offset, cached_at = cached.offset, cached.written
        if state is None or (offset and os.pread(fd, 1, offset - 1) != b"\n"):
            state, offset, real, cached_offset, cached_at = RowState(), 0, "", -1, None
        project = state.project
        offset = _feed(fd, state, offset, size)
        state.id = state.id or session_id
        if state.project != project or (state.project and not real):
            real = os.path.realpath(state.project) if state.project else ""
        if self._cache is not None and offset not in (0, cached_offset):
            now = time.time()
            if (state.ended or cached_at is None or now - cached_at >= CACHE_EVERY) and rowcache.write(
                self._cache, session_id, identity, offset, state, real
            ):
                cached_offset, cached_at = offset, now
        return Entry(session_id, identity, offset, state, real, cached_offset, cached_at)


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


# For the commands: one look at the state dir each -------------------------------------------------------


def rows(layout: Layout, project: Path | str) -> list[dict[str, Any]]:
    """The rows of `project`'s sessions, oldest first."""
    catalog = Catalog(layout)
    return [entry.row(catalog.alive(entry)) for entry in catalog.of_project(project)]


def states(layout: Layout) -> list[tuple[RowState, bool]]:
    """Every session's row fold and whether its owner is alive, oldest first."""
    catalog = Catalog(layout)
    return [(entry.state, catalog.alive(entry)) for entry in catalog.every()]


def load(layout: Layout, session_id: str) -> tuple[RowState, bool] | None:
    """One session's row fold and whether its owner is alive; None when it has no log."""
    catalog = Catalog(layout)
    entry = catalog.entry(session_id)
    return None if entry is None else (entry.state, catalog.alive(entry))


def newest(layout: Layout, project: Path | str, *, running: bool = False) -> str | None:
    """The newest session of `project` (only a running or waiting one, with running=True)."""
    return Catalog(layout).newest(project, running=running)
