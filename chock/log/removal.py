"""Removing an ended session: its directory (the log and run.log) and its scratchpad; never its branch.

Used by the daemon's `remove` verb and by `chock sessions remove` and `prune`. The log's lock is taken without
waiting, so a session someone owns — or is about to own — is never removed from under it; under the lock the
status is read from the log, and only a session that ended (not one handed over and waiting for its adopter,
not an abandoned one nobody has looked at) is removed. The session's directory is moved away first, in one
rename, so a process waiting for the lock finds no log to append to (chock.log.writer checks), then deleted.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from chock.errors import ChockError, Refused, UsageError
from chock.log.fold import SessionState, fold
from chock.log.reader import read_events
from chock.log.row import moved_out_next
from chock.paths import Layout, check_session_id


class SessionBusy(ChockError):
    """Another process holds the session's log: it runs, or is being taken over."""


def remove_session(
    layout: Layout, session_id: str, remove_workspace: Callable[[Layout, str], object] | None = None
) -> None:
    """Remove one ended session; Refused (or SessionBusy) says why not, and nothing is touched then.

    `remove_workspace` (chock.session.keep.remove, for --with-workspace) removes a kept workspace first."""
    check_session_id(session_id)
    if remove_workspace is not None and layout.log_path(session_id).exists():
        state = fold(read_events(layout.log_path(session_id)))
        if state.ended and state.end_reason != "handover" and state.workspace_kept:
            remove_workspace(layout, session_id)
    path = layout.log_path(session_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(f"there is no session {session_id}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise SessionBusy(
                f"session {session_id} is running (another process holds its log); stop it first"
            ) from None
        state = fold(read_events(path))
        if state.moving_to:
            there, then = state.moving_to, moved_out_next(session_id, state.moving_to)
            raise Refused(f"session {session_id} was moved out to {there}, which may hold it now: {then}")
        if not state.ended:
            raise Refused(
                f"session {session_id} ended abnormally and nothing says how; look at it with "
                f"`chock workspace show {session_id}` before removing anything"
            )
        if state.end_reason == "handover":
            raise Refused(f"session {session_id} was handed over and waits for the daemon to take it")
        if state.workspace_kept:
            raise Refused(
                f"session {session_id} keeps its workspace; `chock workspace remove {session_id}` commits its work to "
                "its branch and removes it (or remove the session with --with-workspace)"
            )
        if state.end_reason == "moved":
            _left_worktree(layout, session_id, state)
        moved = layout.sessions_dir / f".removed-{session_id}-{secrets.token_hex(4)}"
        os.rename(layout.session_dir(session_id), moved)
    finally:
        os.close(fd)
    shutil.rmtree(moved, ignore_errors=True)
    layout.scratchpad_path(session_id).unlink(missing_ok=True)


def _left_worktree(layout: Layout, session_id: str, state: SessionState) -> None:
    """The worktree a session that moved away from here still has (the move's last step died before removing it):
    its work went on the branch, so it goes with the session. Only this machine's worktree is ever named
    (chock.log.row)."""
    if not state.workspace or not os.path.lexists(state.workspace):
        return
    from chock.session import keep, tree, workspace

    try:
        workspace.remove(keep.worktree_of(state), layout.workspace_dir(session_id))
    except ChockError:  # its project gone or no repository: no git knows the worktree, and its work is on the branch
        if state.workspace == str(layout.workspace_dir(session_id)):  # only where Chock makes this one's worktree
            tree.delete(Path(state.workspace))


def ended_before(text: str) -> str:
    """A `--ended-before` DATE as the UTC timestamp prefix events carry: 2026-11-30 or 2026-11-30T12:00, with an
    optional offset (Z, +02:00); a date whose UTC time falls outside years 1 to 9999 is not one."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text.strip().removesuffix("Z"))
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):  # OverflowError: an offset that moves it past year 1 or 9999
        raise UsageError(
            f"--ended-before {text!r} is not a date: write it as 2026-11-30 or 2026-11-30T12:00 (UTC, or with an "
            "offset such as +02:00), between 0001-01-01 and 9999-12-31 in UTC"
        ) from None
    # isoformat, not strftime: %Y writes year 999 as "999", which sorts after "2026" as text.
    return moment.isoformat(timespec="seconds") + ".000Z"


def prune(
    layout: Layout, project: Path, before: str, remove_workspace: Callable[[Layout, str], object] | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """Remove every session of `project` that ended before `before`; (removed ids, (kept id, why) pairs)."""
    from chock.log import catalog

    removed, kept = [], []
    for state, _alive in catalog.states(layout, project):
        if not state.ended or not state.ended_at or state.ended_at >= before:
            continue
        try:
            remove_session(layout, state.id, remove_workspace)
        except ChockError as refusal:
            kept.append((state.id, str(refusal)))
        else:
            removed.append(state.id)
    return removed, kept
