"""The session rows the daemon serves, from the one fold of the log plus the lock probe (SPEC §4, §6).

`list` folds every session of a project; a log that has not changed since the last fold (same inode,
size and modification time) is not read again. Only what a row needs is kept per session — two rows (the
owner alive or not) and the facts to filter by — never the conversation, so the cache stays small however
long the logs are. The status of a session with no end after its latest start depends on the lock, so
that probe is made on every request; an ended session needs none.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chock.log.catalog import session_ids
from chock.log.fold import fold
from chock.log.reader import owner_alive, read_events
from chock.paths import Layout


@dataclass(frozen=True)
class Entry:
    session_id: str
    key: tuple[int, int, int, int]
    project: str  # as the log says
    project_real: str  # resolved, for comparison (SPEC §3)
    started_at: str
    ended: bool
    end_reason: str
    last_event_id: int
    row_alive: dict[str, Any]
    row_dead: dict[str, Any]

    def row(self, alive: bool) -> dict[str, Any]:
        return self.row_alive if alive else self.row_dead


def real(path: str) -> str:
    return os.path.realpath(path) if path else ""


class Rows:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._cache: dict[str, Entry] = {}

    def entry(self, session_id: str) -> Entry | None:
        """The folded facts of one session, or None when it has no log (yet)."""
        path = self.layout.log_path(session_id)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return None
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with self._lock:
            cached = self._cache.get(session_id)
        if cached is not None and cached.key == key:
            return cached
        state = fold(read_events(path))
        state.id = state.id or session_id
        entry = Entry(
            session_id=session_id,
            key=key,
            project=state.project,
            project_real=real(state.project),
            started_at=state.started_at,
            ended=state.ended,
            end_reason=state.end_reason,
            last_event_id=state.last_event_id,
            row_alive=state.row(True),
            row_dead=state.row(False),
        )
        with self._lock:
            self._cache[session_id] = entry
        return entry

    def alive(self, entry: Entry) -> bool:
        """The lock probe, skipped when the log already says how the session ended."""
        return False if entry.ended else owner_alive(self.layout.log_path(entry.session_id))

    def row(self, entry: Entry) -> dict[str, Any]:
        return entry.row(self.alive(entry))

    def of_project(self, project: str) -> Iterator[Entry]:
        """Sessions of `project` (compared by resolved real path), oldest first."""
        wanted = real(project)
        for session_id in session_ids(self.layout):
            entry = self.entry(session_id)
            if entry is not None and entry.project_real == wanted:
                yield entry

    def forget_missing(self) -> None:
        """Drop cached sessions whose directory is gone (removed by hand, or by a failed start)."""
        present = set(session_ids(self.layout))
        with self._lock:
            for session_id in [s for s in self._cache if s not in present]:
                del self._cache[session_id]
