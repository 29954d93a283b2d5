"""Moving a session in: the target's step, done by the daemon's `chock run --move-in` child
(docs/remote.md#moving-a-session).

Nothing from the source is trusted. The parts the daemon received (`<state dir>/moves/<id>/in/`) are checked
before anything is written: the log is whole JSON lines with ids 1..N, of this session, each within 1 MiB,
its last span ended by the source's handover to another host; the project holds the session's base; the
instance resolves here. Then, each write undone should a later one fail: the branch `chock/<id>` from the bundle
(that ref alone, fsck'd, only ever fast-forwarded, its checkout measured against the project's), the log, the
scratchpad, for a running session a fresh worktree; then `session.adopt {via: move, from, project}` (and
`workspace.open`), synced — the commit point.
The adopt makes every path the source logged meaningless here (chock.log.row): the project is the adopt's,
and only this machine's `workspace.open` is taken over or removed. A log a move-in cut before its adopt left has
no adopt: the next move removes only what is this host's own (chock.session.keep.remove_leftover).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from chock.errors import EXIT_INTERRUPTED, ChockError, Refused, UsageError
from chock.log import catalog
from chock.log.events import Event, decode
from chock.log.fold import FOLDED_TYPES, SessionState
from chock.log.index import MOVED_PROJECT
from chock.log.reader import lines_backwards
from chock.log.row import RowState
from chock.log.writer import LogLocked, SessionLog, SyncAhead
from chock.paths import Layout, check_session_id, ensure_dir, replace_file
from chock.platform import host
from chock.session import keep, kept_log, move_branch, move_bundle, moving, sandbox, start, workspace
from chock.session.hostgit import Repo
from chock.session.run_request import RunRequest

Undo = Callable[[], None]


@dataclass
class Checked:
    """An incoming log that passed every check: its fold, its last id, and how it ended before the source's
    move-out span (what an ended session ends with again here)."""

    state: SessionState
    last_id: int
    before: Event | None


def check_log(found: BinaryIO, session_id: str, own: BinaryIO | None = None, kept: int = 0) -> Checked:
    """The incoming log, checked line by line (see the module) in one streaming read; Refused naming the first
    line that fails. Its first `kept` bytes (whole lines) must be those of `own`, the log this host holds
    (_Diverged when they are not): compared and folded in the same read, not checked again."""
    state, ends, last = SessionState(), _Ends(), None
    found.seek(0)
    for chunk in _own_lines(found, own, kept, session_id):
        for event in state.feed_folded(chunk):
            ends.saw(event)
            last = event
    if last is not None and last.get("id") != state.last_event_id:
        last = None  # the prefix's last line is none the fold reads: no end
    expected = state.last_event_id + 1
    folded, readline, apply = FOLDED_TYPES, found.readline, state.apply
    while line := readline(moving.EVENT_LIMIT + 2):
        if len(line) > moving.EVENT_LIMIT + 1:
            raise _bad(
                f"{_where(expected, session_id)} is longer than {moving.EVENT_LIMIT} bytes, the most an event may be"
            )
        if line[-1:] != b"\n":
            raise _bad(f"{_where(expected, session_id)} is not a whole line")
        event = _parsed(line, expected, session_id)
        found_id = event.get("id")
        if type(found_id) is not int or found_id != expected:
            raise _bad(f"{_where(expected, session_id)} has the id {found_id!r}: a log's ids go 1, 2, 3, … in order")
        kind = event.get("type")
        if (expected == 1) != (kind == "session.start"):
            raise _bad(f"{_where(expected, session_id)} is a {kind!r}: a log begins with its one session.start")
        if kind in _CHECKED:
            _check_event(event, kind, expected, session_id)
            ends.saw(event)
        if kind in folded:  # no other event changes the fold but for its id, set below
            apply(event)
        last, expected = event, expected + 1
    state.last_event_id = expected - 1
    if last is None or last.get("type") != "session.end" or last.get("reason") != "handover" or not last.get("to"):
        raise _bad(f"the log sent for session {session_id} does not end with its source's handover to this host")
    if not moving.COMMIT_ID.fullmatch(state.workspace_base):
        raise _bad(f"the log sent for session {session_id} names no commit as its base")
    return Checked(state, expected - 1, ends.before)


@dataclass
class _Ends:
    """The ends a log's check keeps: the latest, and the one before the source's move-out span."""

    before: Event | None = None
    latest: Event | None = None

    def saw(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "session.adopt" and not _moved_out(self.latest):
            self.before = self.latest  # a move-out that did not happen (its move was cut) is no end of the session's
        elif kind == "session.end":
            self.latest = event


class _Diverged(Refused):
    """The log sent does not begin with the one this host holds."""


def _own_lines(found: BinaryIO, own: BinaryIO | None, length: int, session_id: str) -> Iterator[bytes]:
    """The first `length` bytes of `found` (whole lines), a chunk of whole lines at a time, each the same bytes as
    `own` holds there (_Diverged otherwise): both files are read once, each chunk compared while it is in the cache
    the fold then reads it from."""
    if not length:
        return
    assert own is not None, "a prefix is taken only compared with the log here"
    own.seek(0)
    while length:
        step = min(PREFIX_CHUNK, length)
        data = found.read(step)
        if len(data) != step or own.read(step) != data:
            raise _Diverged(
                f"session {session_id} is on this host already, and the log sent does not continue it (its log "
                "here is no prefix of the one sent): the two copies diverged; nothing was written"
            )
        cut = data.rfind(b"\n") + 1 if step < length else step
        if not cut:
            raise _bad(f"a line of the log sent is longer than {moving.EVENT_LIMIT} bytes, the most an event may be")
        if cut < step:  # the line cut in two is read again with the next chunk, from both files
            found.seek(cut - step, os.SEEK_CUR)
            own.seek(cut - step, os.SEEK_CUR)
            data = data[:cut]
        length -= cut
        yield data


# A prefix the target holds already is compared and folded this much at a time: more than a line may hold, and
# small enough that a chunk is still in the CPU's cache when the fold reads it after its comparison.
PREFIX_CHUNK = 2 * 1024 * 1024


def _handed_to(found: BinaryIO) -> str:
    """The host the incoming log's last line hands the session over to, or "" (the check refuses it then)."""
    last = next(lines_backwards(found), None)
    end = (decode(last[1]) or {}) if last is not None else {}
    to = end.get("to") if end.get("type") == "session.end" and end.get("reason") == "handover" else None
    return to if isinstance(to, str) else ""


def _calls_well_formed(calls: object) -> bool:
    """Whether an assistant message's tool calls are as Chock writes them, so the conversation goes on here."""
    return isinstance(calls, list) and all(
        isinstance(call, dict)
        and isinstance(call.get("call_id"), str)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("args", {}), dict)
        for call in calls
    )


# The events a check looks into beyond their id.
_CHECKED = frozenset({"session.start", "session.adopt", "session.end", "assistant.message"})


def _check_event(event: Event, kind: str, expected: int, session_id: str) -> None:
    """What a start, an adopt or a model's message must be to go on here."""
    # A session.start always names its session (an adopt of an older Chock may not).
    named = event.get("session", session_id if kind == "session.adopt" else None)
    if kind in ("session.start", "session.adopt") and named != session_id:
        raise _bad(f"{_where(expected, session_id)} names the session {event.get('session')!r}, not {session_id}")
    if kind == "assistant.message" and not _calls_well_formed(event.get("tool_calls", [])):
        raise _bad(
            f"{_where(expected, session_id)} has tool_calls that are not a list of {{call_id, name, args: {{…}}}}"
        )


def _where(number: int, session_id: str) -> str:
    return f"line {number} of the log sent for session {session_id}"


def _refuse_constant(constant: str) -> None:
    raise ValueError(constant)


# One decoder for every line (json.loads with an argument builds a new one per call: most of a big log's check).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _parsed(line: bytes, number: int, session_id: str) -> Event:
    """One line (ending in its newline) as a JSON object: UTF-8, no NaN or Infinity; Refused otherwise."""
    try:
        text = line.decode()
        if text[:1] == "{":  # as a writer writes it: decode's whitespace checks are needed only after it
            event, end = _DECODER.raw_decode(text)
            if text[end:] != "\n" and text[end:].strip(" \t\n\r"):
                raise ValueError("extra data")
        else:
            event = _DECODER.decode(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise _bad(f"{_where(number, session_id)} is not JSON") from None
    if type(event) is not dict:
        raise _bad(f"{_where(number, session_id)} is not a JSON object")
    return event


_bad = move_branch.bad


def run(layout: Layout, request: RunRequest, render: Callable[[Event], None]) -> int:
    """`chock run --move-in`: step 2, then a session that was running carries on here to its end; the exit code
    (0 for an ended one, ended here again)."""
    signal.signal(signal.SIGTERM, start._interrupt)  # as `chock run` does until its loop answers it
    opening = move_in(layout, request)
    return 0 if opening is None else start.carry_on(opening, request, render)


def move_in(layout: Layout, request: RunRequest) -> start._Opening | None:
    """Step 2: check, write, adopt (see the module). The opening to carry a running session on from (the adopt
    and workspace.open logged), or None once an ended one has ended here again."""
    move = request.move_in
    assert move is not None
    session_id = check_session_id(move.session_id)
    moving.check_host(move.source, "--from")
    if request.project is None:
        raise UsageError("--move-in needs --project: the directory on this host the session works in")
    incoming = moving.moves_dir(layout, session_id, "in")
    missing = [part for part in moving.PARTS if not (incoming / part).is_file() or (incoming / part).is_symlink()]
    if missing:
        raise Refused(
            f"the moved session {session_id} has no {', no '.join(missing)} in {incoming}: the daemon puts each part "
            "there once it is received and checked; move it again. Nothing was written"
        )
    for part, limit in (("bundle", move_bundle.LIMIT), ("scratchpad", moving.SCRATCHPAD_LIMIT)):
        if (incoming / part).stat().st_size > limit:
            raise _bad(f"its {part} is larger than {limit} bytes")
    with open(incoming / "log-end", "rb") as end, open(incoming / "log", "ab") as sent:
        shutil.copyfileobj(end, sent)  # the span the source ended the log with, staged after the rest: the log sent
        if sent.tell() > moving.LOG_LIMIT:
            raise _bad(f"its log is longer than {moving.LOG_LIMIT} bytes, the most a move carries")
    if (kept_log.first_id(incoming / "log") or 1) > 1:  # a session coming back: only what it gained elsewhere came
        kept_log.join(layout.log_path(session_id), incoming / "log", moving.LOG_LIMIT)
    undo: list[Undo] = []
    # The received log, opened once: checked through this descriptor, then it becomes the session's log.
    fd, fd_taken = os.open(incoming / "log", os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC), False
    ahead: SyncAhead | None = None
    try:
        ahead = SyncAhead(fd)  # its bytes go to the disk while it is checked
        # git checks the bundle's objects in a process of its own while this one checks the log.
        with (
            move_branch.Unpacking(
                _project_repo(request.project), incoming / "bundle", move_branch.branch_of(session_id)
            ) as unpacking,
            open(os.dup(fd), "rb") as received,
        ):
            old = _existing_log(layout, session_id, received)
            if old is not None:
                undo.append(old.log.release)
            checked = _checked(received, session_id, old)
            state = checked.state
            prepared = start._prepare(layout, request, request.project, request.instance or state.instance)
            base, repo = state.workspace_base, prepared.repo
            if repo.run(["cat-file", "-e", f"{base}^{{commit}}"], check=False).returncode != 0:
                raise Refused(
                    f"{prepared.project} does not hold commit {base}, the base of session {session_id}; fetch it "
                    "there (`git fetch` from where the project came) and move the session again. Nothing was written"
                )
            undo.append(move_branch.import_branch(repo, unpacking, session_id, base, move.source))
            move_branch.check_checkout(repo, session_id, base, unpacking.bundle.stat().st_size)
        ahead.join()
        log = _write_log(layout, session_id, incoming / "log", fd, checked.last_id, old, str(prepared.project), undo)
        fd_taken = True
        log.knows_row(state)  # the check folded every line: the cache gets its row with nothing read again
        undo.append(_write_scratchpad(layout.scratchpad_path(session_id), incoming / "scratchpad"))
        if old is not None and old.cut:
            keep.remove_leftover(layout, prepared.project, session_id, base, old.row)
        place = _fresh_place(layout, prepared, session_id, base) if move.running else None
        if place is not None:
            undo.append(lambda: workspace.remove(place.worktree, place.directory))
        opening = start._Opening(log, state, prepared, start._socket_paths(layout, session_id))
        adopted = opening.emit(
            "session.adopt",
            session=session_id,
            via="move",
            approve_all=False,  # approvals follow this host's policy: nothing the source logged answers them
            **host.owner(),
            **start._spending(prepared),
            **{"from": move.source, "project": str(prepared.project)},
        )
        if place is not None:
            start._open_workspace(layout, opening, session_id, request, place)
        log.sync()  # the commit point
    except BaseException:
        if not fd_taken:
            if ahead is not None:
                with contextlib.suppress(OSError):
                    ahead.join()
            os.close(fd)
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()
        raise
    moving.clear(incoming)
    os.write(1, (moving.json_line({"adopted": adopted["id"]}) + "\n").encode())
    if place is None:  # it ended there, so it ends here again, as it did (`say` carries it on)
        opening.emit("session.end", **_ended_as(checked.before))
        log.release()
        return None
    with opening.ended_on_failure():
        start._close_what_the_last_owner_left(opening)
    opening.call_model = not state.answered
    return opening


def _moved_out(end: Event | None) -> bool:
    """Whether `end` ended a move-out span: a handover to another host."""
    return end is not None and end.get("reason") == "handover" and bool(end.get("to"))


def _ended_as(before: Event | None) -> dict[str, Any]:
    """The end an ended session ends with again after its move: the one before the source's move-out span (an
    abandoned one that had none: interrupted)."""
    if before is None:
        return {"reason": "interrupted", "exit_code": EXIT_INTERRUPTED, "via": "move"}
    fields: dict[str, Any] = {"reason": str(before.get("reason") or "completed")}
    code = before.get("exit_code")
    if type(code) is int:
        fields["exit_code"] = code
    for name in ("error", "via", "to"):
        if isinstance(before.get(name), str) and before[name]:
            fields[name] = before[name]
    return fields


@dataclass
class _Old:
    """The log this host already held for the session (a session coming back), under its lock."""

    log: SessionLog
    path: Path
    kept: int  # the length of it the incoming log begins with, byte for byte
    cut: bool = (
        False  # it ended with a handover (a move cut before its adopt, here or there): its worktree is a leftover
    )
    # Its row, when cut: the worktree a move away from here kept is where this host's own log put it (the project
    # the session had here, which the one it comes back to may not be).
    row: RowState | None = None


def _existing_log(layout: Layout, session_id: str, incoming: BinaryIO) -> _Old | None:
    """The log already here, when there is one: taken only when it moved away from here (the incoming one must then
    begin with it without its move-out lines: its last span, adopt and `end {reason: moved}`) or when it ends with a
    handover (what a move-in to here cut before its adopt left, or a move away from here whose answer was lost: the
    incoming one must begin with all of it). `_checked` compares them. A refusal is the incoming log's own, when it
    has one."""
    path = layout.log_path(session_id)
    if not path.exists():
        return None
    try:
        return _take_existing(layout, path, session_id, incoming)
    except Refused:
        check_log(incoming, session_id)  # a log that fails its checks is refused for that, first
        raise


def _checked(found: BinaryIO, session_id: str, old: _Old | None) -> Checked:
    """The incoming log checked past the prefix the log here must be; one that is not is refused for its own
    fault first, when it has one."""
    if old is None:
        return check_log(found, session_id)
    with open(old.path, "rb") as here:
        try:
            return check_log(found, session_id, here, old.kept)
        except _Diverged:
            check_log(found, session_id)
            raise


def _take_existing(layout: Layout, path: Path, session_id: str, incoming: BinaryIO) -> _Old:
    try:
        log = SessionLog.take(path)
    except LogLocked:
        raise Refused(f"session {session_id} is running on this host; nothing was written") from None
    try:
        with open(path, "rb") as here:
            kept, cut = kept_log.kept_length(here, bool(_handed_to(incoming)))
            if kept is None:
                raise Refused(
                    f"session {session_id} is on this host already and did not move away from it; nothing was written"
                )
    except BaseException:
        log.release()
        raise
    found = catalog.Catalog(layout).entry(session_id) if cut else None
    return _Old(log, path, kept, cut, found.state if found is not None else None)


def _write_log(
    layout: Layout,
    session_id: str,
    incoming: Path,
    fd: int,
    last_id: int,
    old: _Old | None,
    project: str,
    undo: list[Undo],
) -> SessionLog:
    """The incoming log (checked through `fd`, which the log owns once this returns) renamed to be the session's
    log, owned; one already here is kept as `log.jsonl.moved-N`. The project here is written beside it for the
    index."""
    path = layout.log_path(session_id)
    if old is None:
        ensure_dir(layout.sessions_dir)
        layout.session_dir(session_id).mkdir(mode=0o700)
        undo.append(lambda: shutil.rmtree(layout.session_dir(session_id), ignore_errors=True))
    else:
        number = 1
        while os.path.lexists(f"{path}.moved-{number}"):
            number += 1
        kept = Path(f"{path}.moved-{number}")
        os.link(path, kept)
        undo.append(lambda: os.replace(kept, path))
        undo.append(old.log.release)
    # Before the log is there, so the index reads it with the log's first line (chock.log.index).
    replace_file(str(layout.session_dir(session_id) / MOVED_PROJECT), os.fsencode(project) + b"\n")
    log = SessionLog.take_received(path, incoming, fd, last_id, remember=start._remembered(layout, session_id))
    undo.append(log.release)
    if old is not None:
        old.log.release()
    return log


def _write_scratchpad(path: Path, incoming: Path) -> Undo:
    """The scratchpad sent (one blob; none: no scratchpad here), and how to put back what was here."""
    before = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    data = incoming.read_bytes()
    if data:
        ensure_dir(path.parent)
        replace_file(str(path), data)
    else:
        path.unlink(missing_ok=True)

    def put_back() -> None:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            replace_file(str(path), before)

    return put_back


def _project_repo(project: Path) -> Repo | None:
    """The repository of the project the session moves into, as every command finds it; None when there is none
    (`start._prepare` refuses it then, in its own words)."""
    try:
        return workspace.open_project(project).repo
    except ChockError:
        return None


def _fresh_place(layout: Layout, prepared: start._Prepared, session_id: str, base: str) -> start._Place:
    """A new worktree on `chock/<id>` (at the base when no branch travelled), and its sandbox."""
    directory = layout.workspace_dir(session_id)
    ensure_dir(layout.workspaces_dir)
    if os.path.lexists(directory):
        raise Refused(
            f"{directory} is in the way of the moved session's worktree; nothing of this session owns it here: "
            "remove it and move the session again"
        )
    try:
        worktree, commit = workspace.create(prepared.repo, directory, f"chock/{session_id}", start=base)
    except ChockError as error:
        raise Refused(str(error)) from None
    box = sandbox.for_workspace(layout, worktree, network=prepared.config.sandbox_network)
    return start._Place(directory, commit, worktree, box)
