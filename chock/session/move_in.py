"""Moving a session in: the target's step, done by the daemon's `chock run --move-in` child
(docs/remote.md#moving-a-session).

Nothing from the source is trusted. The parts the daemon received (`<state dir>/moves/<id>/in/`) are checked
before anything is written: the log is whole JSON lines with ids 1..N, of this session, each within 1 MiB,
its last span ended by the source's handover to another host; the project holds the session's base; the
instance resolves here. Then, each write undone should a later one fail: the branch `chock/<id>` from the bundle
(that ref alone, fsck'd, only ever fast-forwarded), the log, the scratchpad, for a running session a fresh
worktree; then `session.adopt {via: move, from, project}` (and `workspace.open`), synced — the commit point.
The adopt makes every path the source logged meaningless here (chock.log.row): the project is the adopt's,
and only this machine's `workspace.open` is taken over or removed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from chock.errors import EXIT_INTERRUPTED, ChockError, Refused, UsageError
from chock.log.events import Event, decode
from chock.log.fold import SessionState
from chock.log.index import MOVED_PROJECT
from chock.log.reader import lines_backwards
from chock.log.writer import LogLocked, SessionLog
from chock.paths import Layout, check_session_id, ensure_dir, replace_file
from chock.platform import host
from chock.session import moving, sandbox, start, workspace
from chock.session.hostgit import Repo

Undo = Callable[[], None]


@dataclass
class Checked:
    """An incoming log that passed every check: its fold, its last id, and how it ended before the source's
    move-out span (what an ended session ends with again here)."""

    state: SessionState
    last_id: int
    before: Event | None


def check_log(path: Path, session_id: str) -> Checked:
    """The incoming log, checked line by line (see the module); Refused naming the first line that fails."""
    state, before, latest_end, last = SessionState(), None, None, None
    expected = 1
    with open(path, "rb") as found:
        while line := found.readline(moving.EVENT_LIMIT + 2):
            where = f"line {expected} of the log sent for session {session_id}"
            if len(line) > moving.EVENT_LIMIT + 1:
                raise _bad(f"{where} is longer than {moving.EVENT_LIMIT} bytes, the most an event may be")
            if not line.endswith(b"\n"):
                raise _bad(f"{where} is not a whole line")
            event = _parsed(line, where)
            found_id = event.get("id")
            if type(found_id) is not int or found_id != expected:
                raise _bad(f"{where} has the id {found_id!r}: a log's ids go 1, 2, 3, … in order")
            kind = event.get("type")
            if (expected == 1) != (kind == "session.start"):
                raise _bad(f"{where} is a {kind!r}: a log begins with its one session.start")
            # A session.start always names its session (an adopt of an older Chock may not).
            named = event.get("session", session_id if kind == "session.adopt" else None)
            if kind in ("session.start", "session.adopt") and named != session_id:
                raise _bad(f"{where} names the session {event.get('session')!r}, not {session_id}")
            if kind == "assistant.message" and not _calls_well_formed(event.get("tool_calls", [])):
                raise _bad(f"{where} has tool_calls that are not a list of {{call_id, name, args: {{…}}}}")
            if kind == "session.adopt" and not _moved_out(latest_end):
                before = latest_end  # a move-out that did not happen (its move was cut) is no end of the session's
            elif kind == "session.end":
                latest_end = event
            state.apply(event)
            last, expected = event, expected + 1
    if last is None or last.get("type") != "session.end" or last.get("reason") != "handover" or not last.get("to"):
        raise _bad(f"the log sent for session {session_id} does not end with its source's handover to this host")
    if not moving.COMMIT_ID.fullmatch(state.workspace_base):
        raise _bad(f"the log sent for session {session_id} names no commit as its base")
    return Checked(state, expected - 1, before)


def _calls_well_formed(calls: object) -> bool:
    """Whether an assistant message's tool calls are as Chock writes them, so the conversation goes on here."""
    return isinstance(calls, list) and all(
        isinstance(call, dict)
        and isinstance(call.get("call_id"), str)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("args", {}), dict)
        for call in calls
    )


def _refuse_constant(constant: str) -> None:
    raise ValueError(constant)


# One decoder for every line (json.loads with an argument builds a new one per call: most of a big log's check).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _parsed(line: bytes, where: str) -> Event:
    """One line as a JSON object: UTF-8, no NaN or Infinity; Refused otherwise."""
    try:
        event = _DECODER.decode(line.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise _bad(f"{where} is not JSON") from None
    if type(event) is not dict:
        raise _bad(f"{where} is not a JSON object")
    return event


def _bad(why: str) -> Refused:
    return Refused(f"refused the moved session: {why}; nothing was written")


def run(layout: Layout, request: start.RunRequest, render: Callable[[Event], None]) -> int:
    """`chock run --move-in`: step 2, then a session that was running carries on here to its end; the exit code
    (0 for an ended one, ended here again)."""
    signal.signal(signal.SIGTERM, start._interrupt)  # as `chock run` does until its loop answers it
    opening = move_in(layout, request)
    return 0 if opening is None else start.carry_on(opening, request, render)


def move_in(layout: Layout, request: start.RunRequest) -> start._Opening | None:
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
    checked = check_log(incoming / "log", session_id)
    state = checked.state
    prepared = start._prepare(layout, request, request.project, request.instance or state.instance)
    base, repo = state.workspace_base, prepared.repo
    if repo.run(["cat-file", "-e", f"{base}^{{commit}}"], check=False).returncode != 0:
        raise Refused(
            f"{prepared.project} does not hold commit {base}, the base of session {session_id}; fetch it there "
            "(`git fetch` from where the project came) and move the session again. Nothing was written"
        )
    for part, limit in (("bundle", moving.BUNDLE_LIMIT), ("scratchpad", moving.SCRATCHPAD_LIMIT)):
        if (incoming / part).stat().st_size > limit:
            raise _bad(f"its {part} is larger than {limit} bytes")
    undo: list[Undo] = []
    try:
        old = _existing_log(layout, session_id, incoming / "log", state.end_to)
        if old is not None:
            undo.append(old.log.release)
        undo.append(_import_branch(repo, incoming / "bundle", session_id, base, move.source))
        log = _write_log(layout, session_id, incoming / "log", checked.last_id, old, str(prepared.project), undo)
        log.knows_row(state)  # the check folded every line: the cache gets its row with nothing read again
        undo.append(_write_scratchpad(layout.scratchpad_path(session_id), incoming / "scratchpad"))
        if old is not None and old.cut:
            _remove_cut_worktree(layout, prepared, session_id, base)
        place = _fresh_place(layout, prepared, session_id, base) if move.running else None
        if place is not None:
            undo.append(lambda: workspace.remove(place.worktree))
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
    last = state.conversation[-1] if state.conversation else None
    opening.call_model = not (last and last["role"] == "assistant" and not last.get("tool_calls"))
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
    cut: bool = False  # a move-in to here that ended before its adopt: what it wrote is a leftover


def _existing_log(layout: Layout, session_id: str, incoming: Path, to: str) -> _Old | None:
    """The log already here, when there is one: taken only when it moved away from here and, without its move-out
    lines (its last span: adopt, `end {reason: moved}`), is a prefix of the incoming one — or when it is what a
    move-in to here cut before its adopt left (it ends with the source's handover to `to`, this host, as the
    incoming one does), and is a prefix of the incoming one."""
    path = layout.log_path(session_id)
    if not path.exists():
        return None
    try:
        log = SessionLog.take(path)
    except LogLocked:
        raise Refused(f"session {session_id} is running on this host; nothing was written") from None
    try:
        with open(path, "rb") as here:
            kept, cut = _kept_length(here, to)
            if kept is None:
                raise Refused(
                    f"session {session_id} is on this host already and did not move away from it; nothing was written"
                )
            if not _same_prefix(here, incoming, kept):
                raise Refused(
                    f"session {session_id} is on this host already, and the log sent does not continue it (its log "
                    "here is no prefix of the one sent): the two copies diverged; nothing was written"
                )
    except BaseException:
        log.release()
        raise
    return _Old(log, path, cut)


def _kept_length(here: BinaryIO, to: str) -> tuple[int | None, bool]:
    """How much of the log here the incoming one must begin with, read from its tail: all of it when a move-in to
    here was cut before its adopt (it ends with the source's handover to `to`), else all before its last
    `session.adopt` when it ends with `end {reason: moved}`; None for any other log. And whether it was cut."""
    lines = lines_backwards(here)
    last = next(lines, None)
    end = (decode(last[1]) or {}) if last is not None else {}
    if end.get("type") != "session.end":
        return None, False
    if end.get("reason") == "handover" and to and end.get("to") == to:
        return os.fstat(here.fileno()).st_size, True
    if end.get("reason") != "moved":
        return None, False
    assert last is not None
    for offset, line in itertools.chain([last], lines):
        # Only a line naming the type (or escaping a character, as JSON may) can be an adopt: the rest are skipped.
        if (b"session.adopt" in line or b"\\u" in line) and (decode(line) or {}).get("type") == "session.adopt":
            return offset, False
    return None, False


def _same_prefix(here: BinaryIO, incoming: Path, length: int) -> bool:
    """Whether the incoming log begins with the first `length` bytes of `here`, compared a chunk at a time."""
    here.seek(0)
    with open(incoming, "rb") as sent:
        while length:
            step = min(moving.COPY_CHUNK, length)
            mine = here.read(step)
            if len(mine) != step or sent.read(step) != mine:
                return False
            length -= step
    return True


def _write_log(
    layout: Layout, session_id: str, incoming: Path, last_id: int, old: _Old | None, project: str, undo: list[Undo]
) -> SessionLog:
    """The incoming log as the session's log, owned; one already here is kept as `log.jsonl.moved-N`. The
    project here is written beside it for the index."""
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
    with open(incoming, "rb") as sent:
        log = SessionLog.create_holding(path, sent.fileno(), last_id, remember=start._remembered(layout, session_id))
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


def _import_branch(repo: Repo, bundle: Path, session_id: str, base: str, source: str) -> Undo:
    """`refs/heads/chock/<id>` from the bundle, and nothing else of it: its objects checked (`_take_objects`), its
    tip checked to descend from the base and from the branch already here, then the branch is moved to it. An
    empty bundle carries no branch (the work is the base). Returns how to put the branch back."""
    branch = f"refs/heads/chock/{session_id}"
    found = repo.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{branch}^{{commit}}"], check=False)
    here = found.stdout.decode().strip() if found.returncode == 0 else ""
    if bundle.stat().st_size == 0:
        if here and not _ancestor(repo, here, base):
            raise _diverged(session_id, repo)
        return lambda: None
    listed = repo.run(["bundle", "list-heads", str(bundle), branch], check=False)
    tips = [line.split(" ", 1)[0] for line in listed.stdout.decode(errors="replace").splitlines()
            if line.endswith(f" {branch}")]  # fmt: skip
    if listed.returncode != 0 or len(tips) != 1 or not moving.COMMIT_ID.fullmatch(tips[0]):
        raise _bad(f"its bundle holds no {branch}")
    tip = tips[0]
    _take_objects(repo, bundle)
    fetched = repo.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{tip}^{{commit}}"], check=False)
    if fetched.stdout.decode().strip() != tip or not _ancestor(repo, base, tip):
        raise _bad(f"its bundle's {branch} does not descend from the session's base {base}")
    if here and not _ancestor(repo, here, tip):
        raise _diverged(session_id, repo)
    repo.run(["update-ref", "-m", f"chock: moved in from {source}", branch, tip, here])

    def undo() -> None:
        if here:
            repo.run(["update-ref", "-m", "chock: move undone", branch, here, tip])
        else:
            repo.run(["update-ref", "-d", branch, tip])

    return undo


# A bundle's header (its refs and prerequisites) is read up to this; ours names one ref and the base's boundary.
BUNDLE_HEADER_LIMIT = 1024 * 1024


def _take_objects(repo: Repo, bundle: Path) -> None:
    """The bundle's pack into the repository, every object checked first: `git index-pack --strict` into a
    quarantine beside the repository's objects (as `git receive-pack` takes a push), moved in only once all of it
    passed. `git fetch` from a bundle checks no object before git 2.48, whatever `transfer.fsckObjects` says."""
    with open(bundle, "rb") as handle:
        line = handle.readline(64)
        if line not in (b"# v2 git bundle\n", b"# v3 git bundle\n"):
            raise _bad("its bundle is not a git bundle (v2 or v3)")
        while line not in (b"\n", b""):
            line = handle.readline(BUNDLE_HEADER_LIMIT)
            if handle.tell() > BUNDLE_HEADER_LIMIT:
                raise _bad(f"its bundle's header is longer than {BUNDLE_HEADER_LIMIT} bytes")
        if not line:
            raise _bad("its bundle holds no pack")
        os.lseek(handle.fileno(), handle.tell(), os.SEEK_SET)  # git reads the pack from here on
        store = repo.common_dir / "objects"
        quarantine = store / f"incoming-chock-{os.getpid()}"
        shutil.rmtree(quarantine, ignore_errors=True)
        try:
            (quarantine / "pack").mkdir(parents=True)
            checked = repo.run(
                ["index-pack", "--strict", "--fix-thin", "--stdin"], stdin=handle.fileno(), objects=quarantine,
                check=False,
            )  # fmt: skip
            if checked.returncode != 0:
                said = checked.stderr.decode(errors="replace").strip().splitlines()
                raise _bad(f"its bundle fails git's object checks ({'; '.join(said[-2:]) or 'index-pack failed'})")
            # The index last: git reads a pack only once its index is there.
            for made in sorted((quarantine / "pack").iterdir(), key=lambda path: path.suffix == ".idx"):
                os.replace(made, store / "pack" / made.name)
        finally:
            shutil.rmtree(quarantine, ignore_errors=True)


def _ancestor(repo: Repo, older: str, newer: str) -> bool:
    return repo.run(["merge-base", "--is-ancestor", older, newer], check=False).returncode == 0


def _diverged(session_id: str, repo: Repo) -> Refused:
    return Refused(
        f"the branch chock/{session_id} in {repo.common_dir} is not an ancestor of the one sent: it holds work the "
        f"moved session does not; rename it (`git branch -m chock/{session_id} …`) and move the session again. "
        "Nothing was written"
    )


def _remove_cut_worktree(layout: Layout, prepared: start._Prepared, session_id: str, base: str) -> None:
    """The worktree a move-in cut before its adopt made for the session (none is logged), so this one makes its
    own."""
    directory = layout.workspace_dir(session_id)
    if os.path.lexists(directory):
        workspace.remove(workspace.recorded(prepared.project, session_id, directory, "", base))


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
