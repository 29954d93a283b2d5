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
from typing import Any

from chock.control.daemon_protocol import ListRow
from chock.log.catalog import session_ids
from chock.log.fold import SessionState, fold
from chock.log.reader import owner_alive, read_events
from chock.paths import Layout, check_session_id


class Entry:
    """What one fold of a session's log says, as far as the daemon's verbs need it."""

    __slots__ = (
        "end_reason", "ended", "key", "last_event_id", "line_alive", "line_dead", "project", "project_real",
        "row_alive", "row_dead", "session_id", "started_at",
    )  # fmt: skip

    def __init__(self, session_id: str, key: tuple[int, int, int, int], state: SessionState) -> None:
        self.session_id = session_id
        self.key = key  # (device, inode, size, mtime): the log unchanged since this fold
        self.project = state.project  # as the log says
        self.project_real = real(state.project)  # resolved, for comparison (SPEC §3)
        self.started_at = state.started_at
        self.ended = state.ended
        self.end_reason = state.end_reason
        self.last_event_id = state.last_event_id
        self.row_alive: dict[str, Any] = state.row(True)
        self.row_dead: dict[str, Any] = state.row(False)
        # The `list` reply line for each, encoded once per fold.
        self.line_alive = ListRow(state.started_at, self.row_alive).encode()
        self.line_dead = ListRow(state.started_at, self.row_dead).encode()

    def row(self, alive: bool) -> dict[str, Any]:
        return self.row_alive if alive else self.row_dead

    def line(self, alive: bool) -> bytes:
        return self.line_alive if alive else self.line_dead


def real(path: str) -> str:
    return os.path.realpath(path) if path else ""


class Rows:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        # Paths as strings: `list` builds one per session per request, and pathlib is its largest cost.
        self._sessions = os.fspath(layout.sessions_dir)
        self._lock = threading.Lock()
        self._cache: dict[str, Entry] = {}

    def entry(self, session_id: str) -> Entry | None:
        """The folded facts of one session, or None when it has no log (yet)."""
        path = self.log_path(session_id)
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
        entry = Entry(session_id, key, state)
        with self._lock:
            self._cache[session_id] = entry
        return entry

    def log_path(self, session_id: str) -> str:
        return f"{self._sessions}/{check_session_id(session_id)}/log.jsonl"

    def alive(self, entry: Entry) -> bool:
        """The lock probe, skipped when the log already says how the session ended."""
        return False if entry.ended else owner_alive(self.log_path(entry.session_id))

    def row(self, entry: Entry) -> dict[str, Any]:
        return entry.row(self.alive(entry))

    def line(self, entry: Entry) -> bytes:
        """The entry's `list` reply line, with the status the lock says now."""
        return entry.line(self.alive(entry))

    def of_project(self, project: str) -> Iterator[Entry]:
        """Sessions of `project` (compared by resolved real path), oldest first."""
        wanted = real(project)
        present = session_ids(self.layout)
        self._forget_missing(present)
        for session_id in present:
            entry = self.entry(session_id)
            if entry is not None and entry.project_real == wanted:
                yield entry

    def _forget_missing(self, present: list[str]) -> None:
        """Drop cached sessions whose directory is gone (removed by hand), so the cache tracks the state dir."""
        with self._lock:
            if len(self._cache) <= len(present):
                return
            kept = set(present)
            for session_id in [s for s in self._cache if s not in kept]:
                del self._cache[session_id]
