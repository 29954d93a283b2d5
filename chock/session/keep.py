"""Kept workspaces (`chock workspace`): the worktrees of sessions that did not complete.

A session that ends any way but `completed` keeps its worktree so no work is lost. Removing
one is logged (`workspace.close {removed: true}`) under the session's lock, so the log stays the truth and a
later `--continue` builds a fresh worktree from the session's branch.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from chock.errors import ChockError, Refused
from chock.log import catalog
from chock.log.events import listed
from chock.log.fold import fold
from chock.log.reader import read_events
from chock.log.row import RowState
from chock.log.writer import LogLocked, SessionLog
from chock.paths import Layout, check_session_id
from chock.session import workspace
from chock.terminal import safe


def kept(layout: Layout) -> list[tuple[RowState, str]]:
    return [
        (state, state.status(alive))
        for state, alive in catalog.states(layout)
        if state.workspace_kept and state.status(alive) not in ("running", "waiting")
    ]


def _kept_one(layout: Layout, session_id: str) -> RowState:
    loaded = catalog.load(layout, check_session_id(session_id))
    if loaded is None:
        raise Refused(f"there is no session {session_id}")
    state, alive = loaded
    if not state.workspace_kept:
        raise Refused(f"session {session_id} keeps no workspace")
    if alive:
        raise Refused(f"session {session_id} is running: its workspace is in use")
    return state


def describe(layout: Layout, session_id: str) -> str:
    state = _kept_one(layout, session_id)
    lines = [
        f"session    {state.id} ({state.status(False)}, {state.end_reason or 'no end logged'})",
        f"directory  {state.workspace}",
        f"started at {state.workspace_commit}",
        f"base       {state.workspace_base}",
        f"branch     chock/{state.id}" + ("" if _has_branch(state) else " (made when the work is committed)"),
    ]
    if not Path(state.workspace).is_dir():
        return "\n".join([*lines, "changes    (the directory is gone)"])
    # What finishing would commit, computed as finishing does: git never runs in the workspace.
    found = workspace.changes(worktree_of(state))
    # A file's name is the agent's: one line each, whatever it holds (the caller styles the rest for its terminal).
    names = [safe(line, styled=False, one_line=True) for line in found.lines]
    lines.append("changes    " + ("\n           ".join(names) or "(none)"))
    lines += [f"left out   {safe(left_out, styled=False, one_line=True)}" for left_out in found.skipped]
    return "\n".join(lines)


def _has_branch(state: RowState) -> bool:
    return workspace.branch_exists(worktree_of(state))


def close(log: SessionLog, worktree: workspace.Worktree, message: str, *, removed: bool) -> str | None:
    """Commit a kept worktree's work (uncommitted edits included) to its branch and log `workspace.close` saying
    where it went, synced before the worktree may go (docs/log.md#durability); the branch, or None when the work
    equals the base. The caller holds the session's lock."""
    branch: str | None = None
    commit, skipped, whole = None, [], {}
    if worktree.directory.is_dir():
        finished = workspace.commit(worktree, message)
        workspace.advance(worktree, finished)
        branch, skipped, whole = finished.branch, finished.skipped, finished.whole
        commit = finished.commit if branch else None
    elif workspace.branch_exists(worktree):
        branch = worktree.branch  # the directory is gone: whatever it committed before stays there
    log.append("workspace.close", branch=branch, commit=commit, removed=removed, **listed("skipped", skipped), **whole)
    log.sync()
    return branch


def worktree_of(state: RowState) -> workspace.Worktree:
    """The worktree the session's log records (this machine's: chock.log.row)."""
    return workspace.recorded(
        Path(state.project), state.id, Path(state.workspace), state.workspace_admin, state.workspace_base
    )


def remove_leftover(layout: Layout, project: Path, session_id: str, base: str, row: RowState | None) -> None:
    """The worktrees a log ending with a handover left here (a move cut before its adopt, here or there), so the
    session's own is made again; `row` is that log's catalog row. No path the log names is deleted on its word: it
    may be wholly a move's source's (a move-in cut before its adopt), which names whatever it likes. What goes is
    this host's own directory for the session (`Layout.workspace_dir`), as a worktree of `project`, and — when the
    log's last span is this machine's (a move away from here whose answer was lost) — the worktree that move kept,
    in the project this host's log put it in (a session coming back to another clone leaves nothing git lists in
    the first), only where Chock makes the session's worktree or git records one of the session's
    (`workspace.check_own`)."""
    from chock.platform import host

    own = layout.workspace_dir(session_id)
    if row is not None and row.workspace and row.owner_machine == host.machine_id() and os.path.lexists(row.workspace):
        with contextlib.suppress(ChockError):  # its project gone, no repository, or no worktree of the session's
            workspace.remove(worktree_of(row), own)
    if os.path.lexists(own):
        workspace.remove(workspace.recorded(project, session_id, own, "", base), own)


def remove(layout: Layout, session_id: str) -> str:
    _kept_one(layout, session_id)  # refused at once, before any wait for the lock
    try:
        log = SessionLog.take(layout.log_path(session_id))
    except LogLocked:
        raise Refused(f"session {session_id} is running: its workspace is in use") from None
    with log:
        # Read again under the lock: a `--continue` may have taken the workspace and ended since.
        state = fold(read_events(layout.log_path(session_id)))
        if not state.workspace_kept:
            raise Refused(f"session {session_id} keeps no workspace")
        # The agent's uncommitted edits are committed to the session's branch first, so removing the
        # checkout loses nothing and a later --continue starts from them; a directory that is not the session's
        # own worktree is refused before anything of it is read.
        worktree, own = worktree_of(state), layout.workspace_dir(session_id)
        workspace.check_own(worktree, own)
        branch = close(log, worktree, f"chock: work kept from session {session_id}", removed=True)
        workspace.remove(worktree, own)
    if branch is None:
        return f"removed {state.workspace}; it held no changes, so no branch was made"
    return f"removed {state.workspace}; its work is on the branch {branch} in {state.project}"
