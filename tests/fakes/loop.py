"""The agent loop built in-process, for tests/test_loop.py (docs/architecture.md#chock-run).

Every port is real but one: the session's log, a real git project and worktree finished by the real host git
(each call in a forked child), the real socket server on unix sockets in a short tmp dir, the replay provider
(or the HTTP provider against a loopback fake). The one fake stands where bubblewrap would run a shell command:
`Unsandboxed` runs `/bin/sh -c` in the workspace without bwrap, so the loop's process handling (its process
group, its kill) is the real one. Time is a `ManualClock` the test moves, so nothing waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chock.log.events import Event
from chock.log.fold import SessionState
from chock.log.writer import SessionLog
from chock.platform import host
from chock.providers import Provider
from chock.providers.replay import ReplayProvider, entries_for
from chock.session import workspace
from chock.session.ports import Launch, Ports
from chock.session.runner import Session, Settings
from chock.session.sandbox import TOOL_PATH
from chock.session.sockets import SessionSockets
from tests.fakes.daemon import short_dir
from tests.fakes.projects import make_project

SESSION_ID = "loop-test"
MESSAGE = "do the task"
# A bound on a wait for something the loop is about to do: reached only when the loop is broken.
WAIT_SECONDS = 30.0


class ManualClock:
    """A monotonic clock that moves only when the test says (`advance`); `sleeping` waits until something
    sleeps on it (a replay's delay, a retry's backoff, the wait for a handover's confirm)."""

    def __init__(self) -> None:
        self._now = 1000.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._slept = asyncio.Event()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        entry = (self._now + seconds, asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        self._slept.set()
        try:
            await entry[1]
        finally:
            self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        self._now += seconds
        for deadline, future in self._sleepers:
            if deadline <= self._now and not future.done():
                future.set_result(None)

    async def sleeping(self) -> None:
        async with asyncio.timeout(WAIT_SECONDS):
            while not self._sleepers:
                self._slept.clear()
                await self._slept.wait()


@dataclass(frozen=True)
class Unsandboxed:
    """The one fake: a shell command run as `/bin/sh -c` in the workspace, where bwrap would start it."""

    workspace: Path

    def shell(self, command: str) -> Launch:
        env = {"PATH": TOOL_PATH, "HOME": str(self.workspace), "LANG": "C.UTF-8"}
        return Launch(["/bin/sh", "-c", command], env, self.workspace)


class Client:
    """One connection to a session socket, greeted, speaking its lines."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, path: Path) -> Client:
        reader, writer = await asyncio.open_unix_connection(str(path))
        client = cls(reader, writer)
        client.send("hello chock-session 1")
        assert await client.line() == "ok chock-session 1"
        return client

    def send(self, line: str) -> None:
        """Queue one request line (written by the loop as soon as it runs)."""
        self.writer.write(line.encode() + b"\n")

    async def line(self) -> str:
        """The next line; '' once the session closed the connection."""
        async with asyncio.timeout(WAIT_SECONDS):
            return (await self.reader.readline()).decode().rstrip("\n")

    async def ask(self, line: str) -> str:
        self.send(line)
        return await self.line()

    def close(self) -> None:
        self.writer.close()


@dataclass
class Loop:
    session: Session
    clock: ManualClock
    project: Path
    worktree: workspace.Worktree
    log_path: Path
    sockets: dict[str, Path]
    events: list[Event] = field(default_factory=list)
    hooks: dict[str, Callable[[Event], None]] = field(default_factory=dict)  # run as an event of a type is shown
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def shown(self, event: Event) -> None:
        self.events.append(event)
        self.changed.set()
        hook = self.hooks.pop(str(event["type"]), None)
        if hook is not None:
            hook(event)

    def types(self) -> list[str]:
        return [str(event["type"]) for event in self.events]

    def of(self, type: str) -> list[Event]:
        return [event for event in self.events if event["type"] == type]

    async def wait_for(self, type: str, where: Callable[[Event], bool] = lambda event: True) -> Event:
        """The first event of `type` (matching `where`) the loop logs, once it has."""
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                for event in self.events:
                    if event["type"] == type and where(event):
                        return event
                self.changed.clear()
                await self.changed.wait()

    async def client(self, kind: str = "handover") -> Client:
        return await Client.connect(self.sockets[kind])

    def start(self, *, call_model_first: bool = True) -> asyncio.Task[int]:
        return asyncio.ensure_future(self.session.run(call_model_first=call_model_first))


def build(
    tmp: Path,
    entries: list[dict[str, Any]],
    *,
    shell: str = "ask",
    files: dict[str, str] | None = None,
    context_window: int | None = None,
    provider: Callable[[ManualClock], Provider] | None = None,
) -> Loop:
    """A session begun as `chock run` begins one, its loop built with the ports above; call inside a running
    event loop. `entries` are the replay's (`"for": "compaction"` ones answer its compactions)."""
    project = make_project(tmp / "project", files)
    worktree, commit = workspace.create(project, tmp / "workspaces" / SESSION_ID, f"chock/{SESSION_ID}")
    (tmp / "sessions" / SESSION_ID).mkdir(parents=True)
    log_path = tmp / "sessions" / SESSION_ID / "log.jsonl"
    log = SessionLog.create(log_path)
    state = SessionState()
    clock = ManualClock()
    directory = short_dir()
    sockets = {kind: directory / f"{kind}.sock" for kind in ("approval", "handover")}
    loop = Loop(None, clock, project, worktree, log_path, sockets)  # type: ignore[arg-type]

    def emit(type: str, **fields: Any) -> None:
        event = log.append(type, **fields)
        state.apply(event)
        loop.shown(event)

    emit("session.start", session=SESSION_ID, project=str(project), message=MESSAGE, instance="demo", model="",
         owner="terminal", approve_all=False, **host.owner())  # fmt: skip
    emit("workspace.open", directory=str(worktree.directory), commit=commit, admin=str(worktree.admin))
    emit("user.message", text=MESSAGE)
    settings = Settings(
        session_id=SESSION_ID,
        project=project,
        workspace=worktree.directory,
        worktree=worktree,
        branch=worktree.branch,
        shell_policy=shell,
        interactive=False,
        scratchpad=tmp / "scratchpad.md",
        subagent_spec={"kind": "replay"},
        subagent_blocks=[],
        context_window=context_window,
        summarizer=ReplayProvider(entries_for(entries, "compaction"), sleep=clock.sleep),
        instance="demo",
    )
    ports = Ports(
        provider=provider(clock) if provider else ReplayProvider(entries_for(entries, None), sleep=clock.sleep),
        tools=Unsandboxed(worktree.directory),
        serve=lambda *machines: SessionSockets(sockets, *machines),
        clock=clock,
    )
    loop.session = Session(log, state, settings, ports, loop.shown)
    return loop
