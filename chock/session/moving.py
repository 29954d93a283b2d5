"""Moving a session to another host: the source's two steps, done by a `chock` child holding the session's lock
(docs/remote.md#moving-a-session).

Step 1 (`chock run --move-out ID --to HOST`) takes the session — a running one hands over at its next turn
boundary, as `chock detach` asks it — commits its worktree to `chock/<id>`, makes the parts that travel in
`<state dir>/moves/<id>/out/`, and only then logs the span that ends the log sent: `session.adopt {via: move}`,
`session.end {reason: handover, to: HOST}`. Step 3 (`chock run --moved ID --to HOST`), once the target adopted
it, appends `session.adopt {via: move}` and `session.end {reason: moved, to: HOST}` and removes the worktree:
from then on the session is history here (`status: moved`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.control import parts
from chock.errors import ChockError, Refused
from chock.log import catalog
from chock.log.events import MAX_EVENT_BYTES
from chock.log.row import RowState
from chock.log.writer import LogLocked, SessionLog
from chock.paths import Layout, check_session_id, ensure_dir, private_file
from chock.platform import host
from chock.session import keep, kept_log, move_bundle, workspace

# The parts that travel, and their bounds, are the wire's (chock/control/parts.py): a part staged here is one a
# target takes.
PARTS = parts.PARTS
# Every event of a moving log fits in what a log's event may be; a longer line refuses the move.
EVENT_LIMIT = MAX_EVENT_BYTES
# The log (joined onto what the target keeps, for a session coming back), the branch's bundle and the scratchpad
# are refused past these.
LOG_LIMIT = parts.PART_BOUNDS["log"]
SCRATCHPAD_LIMIT = parts.PART_BOUNDS["scratchpad"]
# A host name as `--to` and `--from` name one (and `session.end`'s `to` records it): a DNS name or a
# connection's name, no spaces or control characters.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
# A commit id as git spells one (SHA-1 or SHA-256).
COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
COPY_CHUNK = 1024 * 1024


def check_host(name: str, option: str) -> str:
    if not HOST_NAME.fullmatch(name):
        raise Refused(
            f"{option} {name!r} is not a host name: give the host's own name (letters, digits, '.', '-', '_', "
            "at most 253 of them)"
        )
    return name


def moves_dir(layout: Layout, session_id: str, side: str) -> Path:
    """Where a move's parts wait: `<state dir>/moves/<id>/out` on the source, `…/in` on the target."""
    return layout.move_dir(session_id) / side


def moved_refusal(state: RowState, doing: str) -> Refused | None:
    """What refuses `doing` to a session that moved away from here (its latest end is `moved`), naming the
    host it went to; None for any other session."""
    if not (state.ended and state.end_reason == "moved"):
        return None
    where = state.end_to or "another host"
    return Refused(
        f"session {state.id} moved to {where}: here it is history, and {doing} it is refused. Work with it on "
        f"{where} (`chock sessions --on {where}`), or remove this copy with `chock sessions remove {state.id}`"
    )


# Step 1 ----------------------------------------------------------------------------------------------------


def move_out(
    layout: Layout, session_id: str, to: str, *, wait: float, say: Callable[[str], None], address: str = "",
    have: str = "", kept: str = "", staged: Callable[[dict[str, Any]], None] = lambda _: None,
) -> dict[str, Any]:  # fmt: skip
    """Step 1; returns the line that describes the parts (`{"parts": […], "base", "instance", "session",
    "was_running"}`), having given `staged` the log's part (`{"part": "log", "length", "sha256"}`) as soon as it was
    staged and each piece of the bundle as soon as git had written it, while the rest was still being made. A
    refusal before the handover end is logged leaves the session as it was (a running one handed over to nobody:
    `chock run --continue` takes it back). `address` is where the client reached `to`; the handover end records it,
    and `chock run --continue` asks there whether `to` adopted the session. `have` is the commit `to`'s `chock/<id>`
    names (as its `move-check` said): the bundle leaves out what it reaches. `kept` is what `to` keeps of the log
    (`<length>:<sha256>`, chock.session.kept_log): when the log here begins with exactly it, only what follows it is
    sent."""
    check_session_id(session_id)
    check_host(to, "--to")
    where = {"address": _checked_address(address)} if address else {}
    # One catalog for both looks: the second, under the lock, folds only what the log gained since the first.
    rows = catalog.Catalog(layout)
    entry = rows.entry(session_id)
    if entry is None:
        raise Refused(f"there is no session {session_id} on this machine")
    state, alive = entry.state, rows.alive(entry)
    _check_movable(state, state.status(alive), to)
    was_running = state.status(alive) in ("running", "waiting")
    if was_running:
        from chock.control.handing_over import HandoverFailed, hand_over

        try:
            hand_over(layout, session_id, wait=wait, say=say)
        except HandoverFailed as failed:
            raise Refused(f"{failed}; it was not moved") from None
    path = layout.log_path(session_id)
    with _taken(layout, session_id, "is running in another process;") as log:
        state = _row_held(rows, session_id, log)  # again under the lock: it may have changed since
        status = (
            state.status(False)
            if state.ended or state.moving_to
            else ("abandoned" if state.interrupted() else "running")
        )
        _check_movable(state, status, to)
        out = _fresh(moves_dir(layout, session_id, "out"))
        if state.workspace_kept:  # its edits, committed or not, travel on the branch
            keep.close(log, keep.worktree_of(state), f"chock: work moved from session {session_id}", removed=False)
        # What the log holds now is final (this process holds it): staged and digested while git makes the bundle.
        with _LogCopy(path, out, kept_log.Kept.parse(kept), staged) as copy:
            bundle = _bundle(state, out / parts.BUNDLE, have, staged)
            scratchpad = _copy_bounded(layout.scratchpad_path(session_id), out / "scratchpad", SCRATCHPAD_LIMIT)
            sent = copy.staged()
            if sent["length"] > LOG_LIMIT - parts.PART_BOUNDS["log-end"]:
                raise Refused(
                    f"session {session_id}'s log is {sent['length']:,} bytes, more than a move carries "
                    f"({LOG_LIMIT - parts.PART_BOUNDS['log-end']:,} with room for its end); it was not moved"
                )
            # The span that ends the log sent: nothing can refuse after it.
            # Its own record of itself, as every span here: a --yes session stays so should it be taken back.
            log.append("session.adopt", session=session_id, via="move", approve_all=state.approve_all, **host.owner())
            log.append("session.end", reason="handover", to=to, **where)
            log.sync()
            end = copy.end()
    return {
        "parts": [sent, end, scratchpad, *bundle],
        "base": state.workspace_base,
        "instance": state.instance,
        "session": session_id,
        "was_running": was_running,
    }


def _checked_address(address: str) -> str:
    from chock.control.address import BadAddress, parse_address

    try:
        return str(parse_address(address))
    except BadAddress as error:
        raise Refused(f"--address: {error}; nothing was moved") from None


def _check_movable(state: RowState, status: str, to: str) -> None:
    refusal = moved_refusal(state, "moving")
    if refusal is not None:
        raise refusal
    if status == "abandoned":
        raise Refused(
            f"session {state.id} ended abnormally and nothing proves its owner gone; look at it with "
            f"`chock workspace show {state.id}` and take it back with `chock run --continue {state.id}` first"
        )
    if state.moving_to and state.moving_to != to:
        raise Refused(
            f"session {state.id} was moved out to {state.moving_to}, which may hold it now; "
            f"`chock run --continue {state.id}` asks it and takes the session back, then move it again"
        )
    if not state.workspace_base:
        raise Refused(f"session {state.id} has no workspace base in its log, so its branch cannot travel")


def _fresh(directory: Path) -> Path:
    """An empty directory for a move's parts (what an earlier attempt left there goes)."""
    shutil.rmtree(directory, ignore_errors=True)
    return ensure_dir(directory)


def _row_held(rows: catalog.Catalog, session_id: str, log: SessionLog) -> RowState:
    """The row of a log this process holds: the catalog's row (from its cache, or its look before), folded on from
    where that ends (the row fold skips every line a row cannot need), never the whole conversation again
    (docs/log.md#rows-and-the-catalog). The log keeps it up, so its release gives the cache the row with nothing
    read again."""
    entry = rows.entry(session_id)
    if entry is None:
        raise Refused(f"there is no session {session_id} on this machine")
    log.knows_row(entry.state)
    return entry.state


def _bundle(state: RowState, target: Path, have: str, staged: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """`git bundle` of exactly `refs/heads/chock/<id>` past the session's base (empty: no branch, or one at the
    base) and past `have` when it is an ancestor of the branch (the target holds every object it reaches: only the
    rest travels), written to `target` as git writes it and described piece by piece (chock.session.move_bundle,
    each given to `staged` once it is whole); refused past its bound."""
    repo = workspace.open_project(Path(state.project)).repo
    ref = f"refs/heads/chock/{state.id}"
    tip = repo.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], check=False)
    commit = tip.stdout.decode().strip()
    held = (
        bool(COMMIT_ID.fullmatch(have))
        and repo.run(["merge-base", "--is-ancestor", have, commit], check=False).returncode == 0
    )
    with move_bundle.Pieces(target, staged, state.id) as pieces:
        if tip.returncode != 0 or commit == state.workspace_base:
            pass  # no work on the branch: one empty piece
        elif held and have == commit:
            pieces.write(move_bundle.held(repo, ref, commit))
        else:
            move_bundle.stream(repo, ref, [state.workspace_base, *([have] if held else [])], pieces)
    return pieces.described


def _copy_bounded(source: Path, target: Path, limit: int) -> dict[str, Any]:
    """Copy a regular file (never through a symlink) that holds at most `limit` bytes; none: an empty part."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        fd = -1
    except OSError as error:
        raise Refused(f"the scratchpad {source} cannot be read ({error.strerror}); it was not moved") from None
    with open(target, "wb", opener=private_file) as out:
        if fd >= 0:
            with os.fdopen(fd, "rb") as found:
                info = os.fstat(found.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
                    raise Refused(f"the scratchpad {source} is not a file of at most {limit} bytes; it was not moved")
                out.write(found.read(limit + 1)[:limit])
    return _described("scratchpad", target)


class _LogCopy:
    """The log's parts, each copied and digested in one pass. A thread copies, from the start, what the log holds when
    this begins — the `log` part, the log as the move took it — while the caller makes the other parts, and gives its
    description to `staged` as soon as it is whole (so it travels while they are made); `end` stages what the caller
    appended since (the span that ends the log sent) as the `log-end` part. The `log` part is the whole log, or, when
    it begins with exactly what the target keeps (`kept`), what follows that. The source's own log was synced; a staged
    part a crash tore is made again by the next move-out, so it is not synced."""

    def __init__(
        self, source: Path, out: Path, kept: kept_log.Kept | None, staged: Callable[[dict[str, Any]], None]
    ) -> None:
        import threading

        self._found = open(source, "rb")  # noqa: SIM115 - closed by __exit__
        self._out = out
        self._staged = staged
        self._log: dict[str, Any] | None = None
        self._failed: BaseException | None = None
        self._dropped = False  # the caller failed: the part is said to nobody
        size = os.fstat(self._found.fileno()).st_size
        self._thread = threading.Thread(target=self._copy_guarded, args=(size, kept), name="log-copy", daemon=True)
        self._thread.start()

    def _copy_guarded(self, size: int, kept: kept_log.Kept | None) -> None:
        try:
            held = kept is not None and kept.length <= size and kept_log.begins_with(self._found, kept)
            skipped = kept.length if held and kept is not None else 0
            self._found.seek(skipped)
            self._log = self._stage("log", size - skipped)
            if not self._dropped:
                self._staged(self._log)
        except BaseException as error:  # raised by `staged`, in the caller's thread
            self._failed = error

    def _stage(self, part: str, most: int | None) -> dict[str, Any]:
        """The part `part`: up to `most` bytes more of the log (None: to its end), copied and described."""
        digest = hashlib.sha256()
        with open(self._out / part, "wb", opener=private_file) as out:
            while most is None or most > 0:
                chunk = self._found.read(COPY_CHUNK if most is None else min(COPY_CHUNK, most))
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                most = None if most is None else most - len(chunk)
            return {"part": part, "length": out.tell(), "sha256": digest.hexdigest()}

    def staged(self) -> dict[str, Any]:
        """The `log` part, described once it is staged (and said); what failed in staging it, raised."""
        self._thread.join()
        if self._failed is not None:
            raise self._failed
        assert self._log is not None
        return self._log

    def end(self) -> dict[str, Any]:
        """The `log-end` part, staged now (what the caller appended since the log was), described."""
        return self._stage("log-end", None)

    def __enter__(self) -> _LogCopy:
        return self

    def __exit__(self, failed: type[BaseException] | None, *exc: object) -> None:
        self._dropped = failed is not None
        self._thread.join()
        self._found.close()


def _described(part: str, path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as found:
        while chunk := found.read(COPY_CHUNK):
            digest.update(chunk)
    return {"part": part, "length": path.stat().st_size, "sha256": digest.hexdigest()}


# Step 3 ----------------------------------------------------------------------------------------------------


def moved(layout: Layout, session_id: str, to: str) -> int:
    """Step 3, once the target adopted the session: the span that says it went (adopt, `end {reason: moved}`),
    then the worktree goes; the id of that end."""
    check_session_id(session_id)
    check_host(to, "--to")
    try:
        log = _taken(layout, session_id, "is running here:")
    except Refused:
        raise
    except ChockError:
        raise Refused(f"there is no session {session_id} on this machine") from None
    with log:
        state = _row_held(catalog.Catalog(layout), session_id, log)
        # Its latest end a handover to `to`, or the span a step here opened after it (one killed before its end).
        if state.moving_to != to:
            raise Refused(
                f"session {session_id} was not moved out to {to} (its last span ended: {state.end_reason or 'no end'}"
                f"{' to ' + state.end_to if state.end_to else ''}); nothing was changed"
            )
        if state.ended:  # else a step here was killed after its adopt: its span is the one this ends
            log.append("session.adopt", session=session_id, via="move", approve_all=state.approve_all, **host.owner())
        end = log.append("session.end", reason="moved", to=to)
        log.sync()  # the log says the session went before its worktree goes
        if state.workspace and os.path.lexists(state.workspace):
            with contextlib.suppress(ChockError):  # a leftover `chock sessions remove` still removes
                workspace.remove(keep.worktree_of(state), layout.workspace_dir(session_id))
    clear(moves_dir(layout, session_id, "out"))
    return int(end["id"])


def _taken(layout: Layout, session_id: str, busy: str) -> SessionLog:
    """The session's log, held by this process (its row remembered as it lets go); Refused, saying the session
    `busy` and was not moved, while another process holds it."""
    try:
        return SessionLog.take(
            layout.log_path(session_id),
            remember=lambda fd, row, end: catalog.remember(layout, session_id, fd, row, end),
        )
    except LogLocked:
        raise Refused(f"session {session_id} {busy} it was not moved") from None


def clear(parts: Path) -> None:
    """Remove a move's parts once they served, and the session's `moves/<id>` when nothing else is in it."""
    shutil.rmtree(parts, ignore_errors=True)
    with contextlib.suppress(OSError):
        parts.parent.rmdir()


def json_line(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(", ", ": "))


# Taking a moved-out session back -------------------------------------------------------------------------


def check_taking_back(state: RowState, *, force: bool, say: Callable[[str], None]) -> None:
    """A session whose latest end is a handover to another host (step 1 done, step 2's answer unknown) is taken
    back here only once that host says it does not hold it (its daemon's `find`); while it does, or cannot be
    asked, it is refused — `force` takes it anyway, saying two copies may then diverge."""
    there = state.moving_to
    if not there:
        return
    if force:
        say(
            f"session {state.id} was moved out to {there}; taken back without asking it (--force): if {there} "
            "adopted it, the two copies now diverge"
        )
        return
    why = _held_there(there, state.end_address, state.id)
    if why:
        raise Refused(
            f"session {state.id} was moved out to {there}, and {why}: continuing it here could make two copies "
            f"that diverge. Continue it on {there}, or take it back anyway with `chock run --continue {state.id} "
            "--force`"
        )


def _held_there(there: str, address: str, session_id: str) -> str:
    """Why `there` may hold the session ("" when its daemon says it does not): asked at the address the move
    reached it at (the handover end's `address`), else at the connection config.zon names `there`. A log there
    that ends with this very handover to `there`, held by nobody, is what its move-in killed before its adopt left:
    no session it holds."""
    from chock.control import daemon_protocol as dp
    from chock.control.address import BadAddress, host_address, parse_address
    from chock.control.client import ControlClient
    from chock.control.framing import ErrorCode, ProtocolError

    try:
        reached = parse_address(address) if address else host_address(there)[1]
        row = ControlClient(reached, timeout=10.0).call(dp.FindRequest(session_id))
    except BadAddress:
        return (
            f"the move recorded no address of {there}'s, and {there} is no connection in config.zon, so it cannot "
            "be asked whether it holds it"
        )
    except ProtocolError as error:
        if error.code == ErrorCode.NOT_FOUND:
            return ""
        return f"{there} cannot be asked whether it holds it ({error})"
    found = row.row if isinstance(row, dp.ListRow) else {}
    if found.get("status") == "handed-over" and found.get("end_to") == there:
        return ""
    return f"{there} holds it"
