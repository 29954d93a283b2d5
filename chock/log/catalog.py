"""Every session in the state dir, folded: what `chock sessions`, `chock usage`, `chock workspace` and the
daemon's `list` show. Status is the fold plus a lock probe (SPEC §4)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chock.log.fold import SessionState, fold
from chock.log.reader import owner_alive, read_events
from chock.paths import SESSION_ID_RE, Layout


def session_ids(layout: Layout) -> list[str]:
    """Ids of every session directory, oldest first (ids sort by their UTC start time)."""
    try:
        names = os.listdir(layout.sessions_dir)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if SESSION_ID_RE.fullmatch(name))


def load(layout: Layout, session_id: str) -> tuple[SessionState, bool]:
    """The fold of one session's log and whether its owner is alive (probed after reading)."""
    path = layout.log_path(session_id)
    state = fold(read_events(path))
    state.id = state.id or session_id
    return state, owner_alive(path)


def states(layout: Layout, project: Path | str | None = None) -> Iterator[tuple[SessionState, bool]]:
    """Sessions of `project` (compared by resolved real path), oldest first; all of them when None."""
    wanted = os.path.realpath(project) if project is not None else None
    for session_id in session_ids(layout):
        try:
            state, alive = load(layout, session_id)
        except FileNotFoundError:
            continue  # a directory being created right now has no log yet
        if wanted is None or os.path.realpath(state.project or "/nonexistent") == wanted:
            yield state, alive


def rows(layout: Layout, project: Path | str) -> list[dict[str, Any]]:
    return [state.row(alive) for state, alive in states(layout, project)]


def newest(layout: Layout, project: Path | str, *, running: bool = False) -> str | None:
    """The newest session of `project` (only a running or waiting one, with running=True)."""
    found = [
        state.id
        for state, alive in states(layout, project)
        if not running or state.status(alive) in ("running", "waiting")
    ]
    return found[-1] if found else None
