"""`chock run`: check everything, then begin a new session or carry one on (docs/architecture.md#chock-run).

Before a log exists every check is made — the project is a git repository, the instance resolves (a replay
file opens), the credential is there when it must be, bwrap exists — so a failure exits 3 and leaves no
log and no workspace. Continuing (`--continue`, `--adopt`) takes the log's lock first, then follows the
continuing rules: the workspace is taken over only when the log proves nobody is in it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from chock import instances
from chock.config import Budget, Config, load_config, session_budget
from chock.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_REFUSED, ChockError, Refused, UsageError
from chock.log.events import Event
from chock.log.fold import SessionState, fold
from chock.log.reader import read_events
from chock.log.writer import LogLocked, LogWriteFailed, Remember, SessionLog
from chock.mcp.declarations import PROJECT_FILE
from chock.paths import Layout, check_session_id, ensure_dir, new_session_id
from chock.platform import host
from chock.project import find_root
from chock.providers import Provider, warm
from chock.session import asking, instructions, mcp_wiring, parking, reaper, sandbox, workspace
from chock.session.event_loop import single_threaded_loop
from chock.session.hostgit import Repo
from chock.session.ports import McpFactory, Ports, Sandboxed, SystemClock, ToolRunner, no_mcp_servers
from chock.session.rule_sources import config_rules
from chock.session.run_request import RunRequest
from chock.session.runner import Session, Settings
from chock.session.sockets import SessionSockets
from chock.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from chock.log.row import RowState


class _Prepared(Value):
    __slots__ = ("budget", "bwrap", "config", "credential", "head", "instance", "project", "replay_entries", "repo")

    def __init__(
        self, config: Config, project: Path, instance: instances.Instance, credential: str | None, bwrap: str,
        replay_entries: list[dict[str, Any]] | None, repo: Repo, head: str, budget: Budget | None
    ) -> None:  # fmt: skip
        self.config = config
        self.project = project
        self.instance = instance
        self.credential = credential
        self.bwrap = bwrap
        self.replay_entries = replay_entries
        self.repo = repo  # the project's, looked up once (workspace.open_project)
        self.head = head  # the commit the project's HEAD named then: where a new session starts
        self.budget = budget  # refused before anything is written when the instance has no price in its currency


def run(layout: Layout, request: RunRequest, render: Callable[[Event], None]) -> int:
    """Run (or continue) a session to its end and return its exit code (docs/architecture.md#chock-run)."""
    signal.signal(signal.SIGTERM, _interrupt)  # until the loop answers it: a SIGTERM interrupts as Ctrl-C does
    opening = (
        _continue(layout, request)
        if request.adopt_id is not None or request.continue_id is not None
        else _begin(layout, request)
    )
    return carry_on(opening, request, render)


def carry_on(opening: _Opening, request: RunRequest, render: Callable[[Event], None]) -> int:
    """Run a session whose log is owned and whose first events are written (by `run`, or a move's
    chock.session.move_in) to its end; its exit code."""
    assert opening.settings is not None and opening.runner is not None  # both set with workspace.open
    clock = SystemClock()
    provider = _provider(opening.prepared, request.model or opening.state.model or None, opening.state, clock)
    if opening.prepared.replay_entries is not None:  # a replay scripts its compactions' summaries apart
        opening.settings.summarizer = _replay(opening.prepared, opening.state, "compaction")
    for event in opening.backlog:
        render(event)
    # The loop's ports, the real ones (chock.session.ports): host git is the default, each call in a child.
    unparked = opening.unparked
    serve = functools.partial(SessionSockets, opening.sockets)
    if unparked is not None:
        serve = functools.partial(serve, inherited=unparked.listening, carried=unparked.clients)
    ports = Ports(provider, opening.runner, serve, clock, mcp=opening.mcp, parks=True)
    session = Session(opening.log, opening.state, opening.settings, ports, render)
    return _drive(session, opening.call_model, provider, unparked)


class _Opening(Value):
    """A session whose log is owned and whose first events are written, before its loop starts."""

    __slots__ = (
        "backlog", "call_model", "log", "mcp", "prepared", "runner", "settings", "sockets", "state", "unparked"
    )  # fmt: skip

    def __init__(
        self, log: SessionLog, state: SessionState, prepared: _Prepared, sockets: dict[str, Path],
        settings: Settings | None = None, runner: ToolRunner | None = None, mcp: McpFactory = no_mcp_servers,
        call_model: bool = True, backlog: list[Event] | None = None, unparked: parking.Unparked | None = None
    ) -> None:  # fmt: skip
        self.log = log
        self.state = state
        self.prepared = prepared
        self.sockets = sockets
        self.settings = settings
        self.runner = runner  # where the session's shell commands run: its sandbox
        self.mcp = mcp  # the session's MCP servers, started by its loop
        self.call_model = call_model
        self.backlog = [] if backlog is None else backlog  # shown once the renderer runs
        self.unparked = unparked  # a parked session rebuilt: what its waiter hands on

    def emit(self, type: str, **fields: Any) -> Event:
        event = self.log.append(type, **fields)
        self.state.apply(event)
        self.backlog.append(event)
        return event

    @contextlib.contextmanager
    def ended_on_failure(self) -> Iterator[None]:
        """What fails inside ends what this opening began (`session.end {reason: error}`, the lock let go), so
        no session is left begun with nobody in it: a refusal exits 3; a failed log write keeps its own
        sentence and exits 1 (the end still fits in the log's reserve); an interrupt is `interrupted`, 130."""
        try:
            yield
        except LogWriteFailed as failed:
            with contextlib.suppress(LogWriteFailed):
                self.emit("session.end", reason="error", exit_code=EXIT_FAILED, error=str(failed))
            self.log.release()
            raise
        except ChockError as error:
            self.emit("session.end", reason="error", exit_code=EXIT_REFUSED, error=str(error))
            self.log.release()
            raise Refused(str(error)) from None
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the session was being set up
            self.emit("session.end", reason="interrupted", exit_code=EXIT_INTERRUPTED, via="signal")
            self.log.release()
            session = self.state.id
            raise ChockError(
                f"interrupted before session {session} began its work; `chock run --continue {session}` takes it up",
                exit_code=EXIT_INTERRUPTED,
            ) from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _prepare(layout: Layout, request: RunRequest, project: Path | None, instance_name: str | None) -> _Prepared:
    config = load_config(layout.config)
    instance = instances.resolve(layout, config, instance_name)
    if instance.kind != "replay":
        warm.begin()  # the HTTP client is imported while git and bwrap run, below and in _place
    bwrap = sandbox.find_bwrap()
    with sandbox.BwrapCheck(bwrap) as checking:  # bwrap builds its test sandbox while git finds the project
        found = workspace.open_project(project or request.project or Path.cwd())
        budget = session_budget(config, instance.name, instance.tuning)
        replay_entries = None
        if instance.kind == "replay":
            from chock.providers.replay import load_entries

            replay_entries = load_entries(Path(instance.address or ""))
        try:
            credential = instances.credential(layout, config, instance)
        except ChockError as error:  # a store that cannot answer refuses the run before anything exists
            raise Refused(str(error)) from None
        checking.result()
    return _Prepared(config, found.root, instance, credential, bwrap, replay_entries, found.repo, found.head, budget)


def _begin(layout: Layout, request: RunRequest) -> _Opening:
    prepared = _prepare(layout, request, None, request.instance)
    message = (request.message or "").strip()
    if not message:
        raise UsageError("chock run needs a task: give it as an argument or on standard input")
    session_id = check_session_id(request.session_id) if request.session_id else new_session_id()
    # The session starts from the commit HEAD names now; the project's instructions are read from that commit.
    commit = prepared.head
    # The root's files a start reads (the instructions now, the MCP declaration with the workspace), in one listing.
    prepared.repo.tree_entries(commit, (instructions.NAME, PROJECT_FILE))
    found = instructions.read(prepared.repo, commit)
    said = {"instructions": found.text} if found.text else {}
    if found.note:
        said["instructions_note"] = found.note
    sockets = _socket_paths(layout, session_id)
    ensure_dir(layout.sessions_dir)
    try:
        layout.session_dir(session_id).mkdir(mode=0o700)
    except FileExistsError:
        raise Refused(f"session {session_id} exists already") from None
    log = SessionLog.create(layout.log_path(session_id), remember=_remembered(layout, session_id))
    opening = _Opening(log, SessionState(), prepared, sockets)
    try:
        opening.emit(
            "session.start",
            session=session_id,
            project=str(prepared.project),
            message=message,
            instance=prepared.instance.name,
            model=request.model or prepared.instance.model or "",
            owner="daemon" if request.session_id else "terminal",
            approve_all=request.yes,
            **host.owner(),
            **_spending(prepared),
            **said,
        )
        opening.log.sync()  # the first line, and the new log's name, before the worktree is made
    except LogWriteFailed as failed:  # not even the first line: nothing was begun, and nothing is left
        opening.log.release()
        layout.log_path(session_id).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            layout.session_dir(session_id).rmdir()
        raise Refused(str(failed)) from None
    with opening.ended_on_failure():
        place = _place(layout, prepared, session_id, opening.state, request, fresh=True, start=commit)
        _open_workspace(layout, opening, session_id, request, place)
        opening.emit("user.message", text=message)
    return opening


def unpark(layout: Layout, record: int, render: Callable[[Event], None]) -> int:
    """Rebuild a parked session from its log, in the process its waiter exec'd (docs/architecture.md#parking):
    the lock and the sockets are inherited, nothing is logged on the way, and the turn it parked in carries on
    from the call that waited. What cannot be had again (its instance, its workspace) ends it as an error."""
    signal.signal(signal.SIGTERM, _interrupt)
    unparked = parking.Unparked.read(record)
    session_id = unparked.session_id
    path = layout.log_path(session_id)
    log = SessionLog.inherit(path, unparked.log_fd, remember=_remembered(layout, session_id))
    state = fold(read_events(path))
    request = RunRequest(project=Path(state.project))
    try:
        prepared = _prepare(layout, request, Path(state.project), state.instance)
        place = _place(layout, prepared, session_id, state, request, fresh=False)
    except (ChockError, KeyboardInterrupt) as error:
        interrupted = isinstance(error, KeyboardInterrupt)
        reason, code = ("interrupted", EXIT_INTERRUPTED) if interrupted else ("error", EXIT_FAILED)
        said = {"via": "signal"} if interrupted else {"error": f"the parked session could not be rebuilt: {error}"}
        log.append("session.end", reason=reason, exit_code=code, **said)
        log.sync()
        log.release()
        parking.tell_ended(unparked.clients, reason)
        return code
    opening = _Opening(log, state, prepared, _socket_paths(layout, session_id), unparked=unparked)
    _settle(layout, opening, session_id, request, place)  # no MCP server: a session parks only without one
    opening.call_model = False
    return carry_on(opening, request, render)


def _continue(layout: Layout, request: RunRequest) -> _Opening:
    adopting = request.adopt_id is not None
    session_id = request.adopt_id or request.continue_id
    from chock.log import catalog  # a continued session's: a new one's start needs it only as its log is let go

    if not session_id:
        root = find_root(request.project or Path.cwd())
        session_id = catalog.newest(layout, root)
        if session_id is None:
            raise Refused(f"there is no session of {root} to continue")
    path = layout.log_path(check_session_id(session_id))
    if not path.exists():
        raise Refused(f"there is no session {session_id}")
    sockets = _socket_paths(layout, session_id)
    try:
        log = SessionLog.take(path, remember=_remembered(layout, session_id))
    except LogLocked:
        found = catalog.load(layout, session_id)
        running = found[0] if found is not None else SessionState()
        raise Refused(
            f"session {session_id} is running in another process (owned by the {running.owner}, pid "
            f"{running.owner_pid or '?'}, which holds the session's lock); it can be continued once it ends"
        ) from None
    try:
        # Everything that can refuse is settled before the first write: a refusal leaves the log as it was.
        state = fold(read_events(path))
        prepared = _prepare(layout, request, Path(state.project), request.instance or state.instance)
        _check_currency(session_id, state, prepared.budget)
        moved, interrupted = _check_takeover(state, request, adopting)
        place = _place(layout, prepared, session_id, state, request, fresh=not moved)
    except ChockError as error:
        log.release()
        raise Refused(str(error)) from None
    except BaseException:
        log.release()
        raise
    opening = _Opening(log, state, prepared, sockets)
    # The fold keeps approve_all from here on: a --yes session stays so through handovers, but one the daemon
    # carries on for a `say` follows the daemon's own policy (a remote message must not run commands unasked).
    opening.emit(
        "session.adopt",
        session=session_id,
        via="daemon" if adopting or request.for_daemon else "terminal",
        approve_all=not request.for_daemon and (state.approve_all or request.yes),
        **host.owner(),
        **({"after": interrupted} if interrupted else {}),
        **_spending(prepared),
    )
    with opening.ended_on_failure():
        _open_workspace(layout, opening, session_id, request, place)
        _close_what_the_last_owner_left(opening)
        if request.message and request.message.strip():
            opening.emit("user.message", text=request.message.strip())
    opening.call_model = not state.answered
    return opening


def _check_currency(session_id: str, state: SessionState, budget: Budget | None) -> None:
    """A budget counts the session's whole spend, so what it spent so far must be in the budget's currency (the
    latest span's: docs/log.md): dollars are never counted as euros. Refused before anything is written."""
    if budget is None or not state.cost or state.currency == budget.currency:
        return
    spent = f"{state.cost:.4f} {state.currency}" if state.currency else f"{state.cost:.4f} in a currency unknown"
    raise Refused(
        f"session {session_id} has spent {spent}, and its budget of {budget} (.budget in config.zon) cannot count "
        f"it: a session's spend is counted in one currency. Price the instance in {state.currency or 'it'} again "
        "(.price's .currency) with a .budget in it, or continue it with no .budget, or start a new session"
    )


def _spending(prepared: _Prepared) -> dict[str, Any]:
    """What this span counts the session's spend in (docs/log.md): its price's currency and its budget."""
    price, budget = prepared.instance.tuning.price, prepared.budget
    return {"currency": price.currency if price else "", "budget": budget.amount if budget else None}


def _remembered(layout: Layout, session_id: str) -> Remember:
    """What the session's log does as this process lets go of it: the session's row goes to the cache, so no
    listing folds the log again (docs/log.md#rows-and-the-catalog)."""

    def remember(fd: int, row: RowState | None, end: int) -> None:
        from chock.log import catalog

        catalog.remember(layout, session_id, fd, row, end)

    return remember


def _socket_paths(layout: Layout, session_id: str) -> dict[str, Path]:
    return {kind: layout.session_socket(session_id, kind) for kind in ("approval", "handover")}


def _check_takeover(state: SessionState, request: RunRequest, adopting: bool) -> tuple[bool, str]:
    """Apply the continuing rules (docs/architecture.md#chock-run); whether the kept workspace moves to this
    process, and what interrupted the last owner when its span has no end (`reboot` or `crash`, when provable)."""
    from chock.session import moving  # a continued session's: a new one's start does without it

    interrupted = state.interrupted()
    refusal = moving.moved_refusal(state, "continuing")
    if refusal is not None:
        raise refusal
    moving.check_taking_back(state, force=request.force, say=lambda text: print(text, file=sys.stderr))
    if not state.ended and state.owner_machine and state.owner_machine != host.machine_id():
        raise Refused(
            f"session {state.id} was owned by a process on another machine ({state.owner_host or 'no name'}, "
            f"machine id {state.owner_machine}), and nothing here can prove that process gone; continue it on "
            f"{state.owner_host or 'that machine'}"
        )
    if request.after_reboot and interrupted != "reboot":
        raise Refused(f"session {state.id} was not interrupted by a reboot: the daemon carries on no other")
    if not state.ended and state.workspace_kept and not interrupted:
        raise Refused(
            f"session {state.id} ended abnormally and its workspace {state.workspace} is kept with no proof "
            f"that nobody is in it; look at it with `chock workspace show {state.id}`, remove it with "
            f"`chock workspace remove {state.id}`, then continue"
        )
    moved = state.workspace_kept and (state.workspace_free or bool(interrupted))
    if moved and request.allow_dirty:
        raise Refused(
            f"--allow-dirty would copy your uncommitted files over the agent's own edits in {state.workspace}, "
            "a workspace that moved with the session; continue without it"
        )
    if adopting and request.message:
        raise UsageError("--adopt adds no message: it carries on from the conversation the log holds")
    if adopting and not (state.ended and state.end_reason == "handover"):
        ending = state.end_reason or "no ending"
        raise Refused(
            f"session {state.id} was not handed over (its last span ended: {ending}); only a handed-over session "
            f"is adopted. `chock run --continue {state.id}` takes it back into a terminal"
        )
    return moved, interrupted


def _close_what_the_last_owner_left(opening: _Opening) -> None:
    """A dead owner's unfinished calls and background work get an ending, so the conversation is whole."""
    lost = "the session that ran it ended before it finished"
    for call in opening.state.open_tool_calls:
        opening.emit(
            "tool.result",
            call_id=call["call_id"],
            name=call["name"],
            is_error=True,
            output=f"this call was cut off: {lost}",
        )
    for handle, work in list(opening.state.background.items()):
        opening.emit(
            "background.end",
            handle=handle,
            kind="shell",
            command=work["command"],
            exit_code=None,
            output=f"lost: {lost}",
        )
    for handle in list(opening.state.subagents):
        opening.emit("subagent.end", handle=handle, result=f"lost: {lost}")


class _Place(Value):
    """Where a session works: settled — and, for a new worktree, made — before it is logged."""

    __slots__ = ("commit", "directory", "sandbox", "worktree")

    def __init__(self, directory: Path, commit: str, worktree: workspace.Worktree, sandbox: sandbox.Sandbox) -> None:
        self.directory = directory
        self.commit = commit
        self.worktree = worktree
        self.sandbox = sandbox


def _place(
    layout: Layout,
    prepared: _Prepared,
    session_id: str,
    state: SessionState,
    request: RunRequest,
    *,
    fresh: bool,
    start: str = "",
) -> _Place:
    """A new worktree (from the session's branch when it has one, else from `start`: the project's HEAD for a
    new session, the session's base for a continued one), or the kept one the log records, with the sandbox
    that works in it; a ChockError when it cannot be had."""
    start = start or state.workspace_base or "HEAD"
    if fresh:
        directory = layout.workspace_dir(session_id)
        ensure_dir(layout.workspaces_dir)
        if state.workspace_closed and os.path.lexists(state.workspace):
            # Its owner logged where the work went and died before removing it (docs/log.md#durability): the
            # branch holds that work, so the leftover goes before a new worktree takes its place (one Chock did
            # not make where it makes this session's is in no one's way: it stays).
            with contextlib.suppress(workspace.NotOwn):
                workspace.remove(_recorded(prepared, session_id, state, Path(state.workspace)), directory)
        worktree, commit = workspace.create(prepared.repo, directory, f"chock/{session_id}", start=start)
        if request.allow_dirty:
            workspace.copy_dirty(prepared.project, directory)
    else:  # a linked worktree records nothing about the process that made it: taking it costs no git command
        directory, commit = Path(state.workspace), state.workspace_commit
        if directory.is_symlink() or not directory.is_dir():
            raise ChockError(
                f"the workspace {directory} of session {session_id} is gone; `chock workspace remove {session_id}` "
                f"records that (the work it committed stays on the branch chock/{session_id}), then "
                f"`chock run --continue {session_id}` starts again from that branch"
            )
        worktree = _recorded(prepared, session_id, state, directory)
        workspace.check_own(worktree, layout.workspace_dir(session_id))  # a log names whatever it holds
    box = sandbox.for_workspace(layout, worktree, network=prepared.config.sandbox_network)
    return _Place(directory, commit, worktree, box)


def _recorded(prepared: _Prepared, session_id: str, state: SessionState, directory: Path) -> workspace.Worktree:
    return workspace.recorded(prepared.project, session_id, directory, state.workspace_admin, state.workspace_base)


def _open_workspace(layout: Layout, opening: _Opening, session_id: str, request: RunRequest, place: _Place) -> None:
    """Log `workspace.open` for the place the session works in, and settle the session's settings."""
    prepared = opening.prepared
    worktree, directory = place.worktree, place.directory
    # The admin dir is recorded now, before any tool runs: later uses never read it from the worktree.
    opening.emit(
        "workspace.open",
        directory=str(directory),
        commit=place.commit,
        admin=str(worktree.admin),
        base=worktree.base,
        machine_id=host.machine_id(),  # only this machine takes it over or removes it (docs/remote.md)
    )
    _settle(layout, opening, session_id, request, place)
    opening.mcp = mcp_wiring.factory(
        layout, prepared.config, prepared.repo, worktree, prepared.project, request.interactive, opening.emit
    )


def _settle(layout: Layout, opening: _Opening, session_id: str, request: RunRequest, place: _Place) -> None:
    """The session's runner and settings, for the place its log says it works in."""
    prepared, worktree, directory = opening.prepared, place.worktree, place.directory
    opening.runner = Sandboxed(place.sandbox, prepared.bwrap)
    instance = prepared.instance
    opening.settings = Settings(
        session_id=session_id,
        project=prepared.project,
        workspace=directory,
        worktree=worktree,
        branch=worktree.branch,
        shell_policy=prepared.config.approvals_shell,
        interactive=request.interactive,
        scratchpad=layout.scratchpad_path(session_id),
        subagent_spec={
            "kind": instance.kind,
            "address": instance.address,
            "model": instance.model,
            "credential": prepared.credential,
            "instance": instance.name,
            "retries": instance.tuning.retries,
        },
        subagent_blocks=_subagent_blocks(prepared),
        price=instance.tuning.price,
        context_window=_context_window(instance, request.model or opening.state.model or None),
        rules=asking.Rules(tuple(config_rules(prepared.config.approvals_rules)), layout, str(prepared.project)),
        approval_timeout=prepared.config.approvals_timeout,
        budget=prepared.budget,
        instance=instance.name,
    )


def _context_window(instance: instances.Instance, model: str | None) -> int | None:
    """The instance's own window when config.zon gives one, else its model family's (none for a replay)."""
    if instance.tuning.context_window is not None:
        return instance.tuning.context_window
    from chock.providers.kinds import DEFAULT_MODELS
    from chock.providers.models import context_window

    model = model or instance.model or DEFAULT_MODELS.get(instance.kind)
    return context_window(model) if model else None


def _subagent_blocks(prepared: _Prepared) -> list[list[dict[str, Any]]]:
    if prepared.replay_entries is None:
        return []
    from chock.providers.replay import subagent_blocks

    return subagent_blocks(prepared.replay_entries)


def _provider(prepared: _Prepared, model: str | None, state: SessionState, clock: SystemClock) -> Provider:
    instance = prepared.instance
    if prepared.replay_entries is not None:
        return _replay(prepared, state, None)
    warm.finish()  # the main thread imports nothing of the HTTP client while the warming thread does
    from chock.providers.registry import make_provider

    return make_provider(
        instance.kind,
        instance.address,
        model,
        prepared.credential,
        instance=instance.name,
        retries=instance.tuning.retries,
        sleep=clock.sleep,
    )


def _replay(prepared: _Prepared, state: SessionState, purpose: str | None) -> Provider:
    """The replay's entries for the session's turns (`purpose` None) or its compactions, from where the log
    says the session is."""
    from chock.providers.replay import ReplayProvider, entries_for

    start = state.compactions if purpose else state.assistant_messages
    return ReplayProvider(
        entries_for(prepared.replay_entries or [], purpose),
        start=start,
        source=f"the replay file {prepared.instance.address}" + (f" ({purpose} entries)" if purpose else ""),
    )


def _drive(session: Session, call_model: bool, provider: Provider, unparked: parking.Unparked | None = None) -> int:
    """Run the session on one loop; SIGINT and SIGTERM interrupt it (logged as `interrupted`). The process adopts
    whatever its sandboxes leave behind, so the session can kill it (chock.session.reaper)."""
    reaper.adopt_orphans()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):  # handled at the loop's next wait, once run() has begun
            loop.add_signal_handler(signum, session.steering.stop, "signal")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, parking.parked.STOPPING)  # blocked across a parking exec
        try:
            return await session.run(call_model_first=call_model, unparked=unparked)
        finally:
            await provider.aclose()

    loop = single_threaded_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        # Whatever async generators are still open are finished here, on the loop, before it closes: left
        # to the garbage collector they would print "Task was destroyed but it is pending!" on stderr.
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()


def exit_now(code: object) -> NoReturn:
    """End the process as `sys.exit(code)` would, without the interpreter's teardown (60–65 ms of freeing
    modules after a session's end): the atexit handlers run first (the journal's flush), then stdout and
    stderr are flushed. Only for a process whose files are closed or written with os.write (a session's log)."""
    if code is not None and not isinstance(code, int):
        raise SystemExit(code)  # a message to print: the ordinary exit prints it
    status = code or 0
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # what the interpreter exits with when its last flush fails
    os._exit(status)
