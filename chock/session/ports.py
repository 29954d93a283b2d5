"""What the agent loop is given rather than builds (docs/architecture.md#chock-run).

`Session` takes six ports: its model `Provider`, a `ToolRunner` (where a shell command's process is started:
bubblewrap in `chock run`), a `Clock` (every wait of the loop reads it), the server of its sockets (`Serve`,
built around the session's own state machines), `HostGit` (the commit of the worktree to its branch, then
its removal) and its MCP servers (`McpFactory`, docs/mcp.md; none unless given). `chock run` wires the real
ones (chock.session.start); tests/test_loop.py builds the loop in-process with the replay provider, a runner
without bwrap, a clock the test moves, and the real rest.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chock.control.message import ReplyLine
from chock.providers import Provider
from chock.session import offload, workspace
from chock.session.approvals import Approvals
from chock.session.handover import Handover
from chock.session.sandbox import Sandbox
from chock.session.steering import Steering
from chock.value import Value

if TYPE_CHECKING:
    from chock.log.events import Event
    from chock.mcp.server_link import Elicit, ProgressCallback


class Clock(Protocol):
    """Monotonic seconds, and a sleep measured on them."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's monotonic clock (the one asyncio's own timers read)."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def wait_set(event: asyncio.Event, seconds: float, clock: Clock) -> bool:
    """Wait until `event` is set or `seconds` pass on `clock`; True when the event was set."""
    waiting = asyncio.ensure_future(event.wait())
    sleeping = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait((waiting, sleeping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        sleeping.cancel()
    return event.is_set()


class Launch(Value):
    """How one shell command's process is started: its argv, its whole environment, and its directory."""

    __slots__ = ("argv", "cwd", "env", "status")

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path | None = None,
        status: tuple[int, int] | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        # bwrap's status (`--json-status-fd`): the pipe's write end goes to the process, the read end stays here
        self.status = status


class ToolRunner(Protocol):
    """The sandbox boundary: the process a shell command runs as (chock.session.tools.shell spawns it, in a
    process group of its own, and kills that group whole)."""

    def shell(self, command: str) -> Launch: ...


class Sandboxed(Value):
    """`/bin/sh -c command` under bubblewrap, in the session's sandbox: the one `chock run` uses."""

    __slots__ = ("bwrap", "sandbox")

    def __init__(self, sandbox: Sandbox, bwrap: str) -> None:
        self.sandbox = sandbox
        self.bwrap = bwrap

    def shell(self, command: str) -> Launch:
        read, write = os.pipe()
        argv = self.sandbox.argv(["/bin/sh", "-c", command], bwrap=self.bwrap, status_fd=write)
        return Launch(argv, self.sandbox.host_environment(), status=(read, write))


class SocketServer(Protocol):
    """What the loop asks of the server of its sockets (chock.session.sockets.SessionSockets)."""

    async def start(self) -> None: ...

    async def tell_asker(self, reply: ReplyLine) -> bool: ...

    def answer_logged(self, request_id: str) -> None: ...

    def dismiss_asker(self, asker: object) -> None: ...

    async def close(self, *, ended: str) -> None: ...

    def idle(self) -> bool: ...

    def listening(self) -> dict[str, int]: ...


# Builds the server around the session's approvals, handover and steering; the callable is told the handover
# (or the work) changed, so the loop looks again.
Serve = Callable[[Approvals, Handover, Steering, Callable[[], None]], SocketServer]


class HostGit(Protocol):
    """Finishing a worktree on the host: its work committed to its branch, then the worktree removed."""

    async def commit(self, worktree: workspace.Worktree, message: str) -> workspace.Committed: ...

    async def remove(self, worktree: workspace.Worktree) -> None: ...


class OffloadedGit:
    """The host git of chock.session.workspace, each call in a forked child (chock.session.offload), so the loop
    keeps answering while a large worktree is walked, and a stop kills the walk."""

    async def commit(self, worktree: workspace.Worktree, message: str) -> workspace.Committed:
        """Build the commit in a child a stop may kill, then move the branch here, where nothing kills it."""
        committed = await offload.in_child(workspace.commit, worktree, message)
        workspace.advance(worktree, committed)
        return committed

    async def remove(self, worktree: workspace.Worktree) -> None:
        # The worktree the session worked in: one it made, or took over once it was found the session's own
        # (chock.session.start._place).
        await offload.in_child(workspace.remove, worktree, worktree.directory)


class McpPort(Protocol):
    """A session's MCP servers (chock.mcp.supervisor.McpServers): started with the session, their tools told to the
    model after the built-in ones, each call carried out, a changed list taken at a turn boundary, all stopped.
    Its tools are `chock.mcp.supervisor.McpTool`s and a call gives a `chock.session.tools.tool.Result`, typed Any
    here: the tools import this module."""

    async def start(self) -> None: ...

    def tools(self) -> list[Any]: ...

    def take_changes(self) -> list[tuple[str, list[str]]]: ...

    async def call(
        self, tool: Any, arguments: dict[str, Any], *, on_progress: ProgressCallback | None = None
    ) -> Any: ...

    async def stop(self) -> None: ...


# Builds the session's MCP servers around its `emit` and its way of asking a person, a server's elicitation
# (chock.mcp.server_link.Elicit); the session calls it once.
McpFactory = Callable[[Callable[..., "Event"], "Elicit"], McpPort]


class NoMcpServers:
    """A session with no MCP server (what tests/test_loop.py's sessions have)."""

    async def start(self) -> None:
        return None

    def tools(self) -> list[Any]:
        return []

    def take_changes(self) -> list[tuple[str, list[str]]]:
        return []

    async def call(self, tool: Any, arguments: dict[str, Any], *, on_progress: Any = None) -> Any:
        raise AssertionError("a session with no MCP server was asked to call one")

    async def stop(self) -> None:
        return None


def no_mcp_servers(emit: Callable[..., Event], elicit: Elicit) -> McpPort:
    return NoMcpServers()


class Ports(Value):
    __slots__ = ("clock", "git", "mcp", "parks", "provider", "serve", "tools")

    def __init__(
        self,
        provider: Provider,
        tools: ToolRunner,
        serve: Serve,
        clock: Clock | None = None,
        git: HostGit | None = None,
        mcp: McpFactory = no_mcp_servers,
        parks: bool = False,
    ) -> None:
        self.provider = provider
        self.tools = tools
        self.serve = serve
        self.clock = SystemClock() if clock is None else clock
        self.git = OffloadedGit() if git is None else git
        self.mcp = mcp
        # A session waiting on a person may exec its waiter (chock.session.parking): a real process's ports.
        self.parks = parks
