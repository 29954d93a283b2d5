"""A session's MCP servers: started in parallel, bounded, restarted once, stopped with it (docs/mcp.md).

Each server must answer `initialize` and `tools/list` within START_SECONDS, else it is left out of the
session (`mcp.server {state: failed}`). Of its tools, one whose input schema is past MAX_SCHEMA_BYTES is
dropped, a server keeps its first MAX_TOOLS_PER_SERVER (by name) and the session its first MAX_TOOLS (by server,
then name); what was dropped is said in the `mcp.server` event's reason. A call that fails because the server
died, hung past the server's `.timeout` or wrote garbage is the tool's error, and the server is started again,
once: after a second failure its tools answer that it failed. A server's `list_changed` is applied when the
session takes the changes, at a turn boundary. `stop` cancels calls in flight (`notifications/cancelled`), closes
every server and kills every sandbox: no process of a server outlives it; the `stopped` event's reason says how many
of a server's notifications were dropped past the client's rate bound, if any were.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chock.errors import ChockError
from chock.mcp import confinement, tool_names
from chock.mcp.declarations import ServerSpec
from chock.mcp.jsonrpc_client import NOTIFICATIONS_PER_SECOND
from chock.mcp.result_text import MAX_RESULT_BYTES, bounded, result_text
from chock.mcp.server_link import Elicit, McpError, McpRefused, ProgressCallback, ServerLink
from chock.mcp.stdio_pump import StdioPump
from chock.paths import Layout
from chock.session import reaper, sandbox
from chock.session.tools.shell import Spawned
from chock.session.tools.tool import Result

if TYPE_CHECKING:
    from chock.log.events import Event

START_SECONDS = 20.0
MAX_TOOLS_PER_SERVER = 128
MAX_TOOLS = 256
MAX_SCHEMA_BYTES = 64 * 1024
MAX_DESCRIPTION_BYTES = 4 * 1024
# How many times a server's sandbox is built again when bwrap could not build it (a masked /etc file vanished).
SANDBOX_REBUILDS = 3
EXITING_SECONDS = 0.5
__all__ = ["MAX_RESULT_BYTES", "McpServers", "McpTool"]


@dataclass(frozen=True)
class McpTool:
    """One tool as the model sees it."""

    model_name: str  # mcp__docs__search
    server: str
    tool: str  # the server's own name
    description: str
    input_schema: dict[str, Any]


@dataclass
class _Server:
    """One server's state in the session: its link and sandbox while it runs, its tools as last listed."""

    spec: ServerSpec
    state: str = "starting"  # starting, started, failed, stopped
    link: ServerLink | None = None
    process: asyncio.subprocess.Process | None = None
    status: Spawned | None = None  # its sandbox's process and bwrap's status pipe, until read
    listed: list[dict[str, Any]] = field(default_factory=list)  # as the model was last told
    fresh: list[dict[str, Any]] | None = None  # listed since, applied at the next turn boundary
    restarted: bool = False
    changed: bool = False
    reason: str = ""
    calls: set[asyncio.Task[Any]] = field(default_factory=set)
    generation: int = 0
    capped: int = 0  # of its listed tools, how many were past the session's MAX_TOOLS
    relisting: bool = False  # a listing after `list_changed` is in flight
    relist_again: bool = False  # and the server said `list_changed` again meanwhile
    dropped: int = 0  # notifications and requests it sent past the client's NOTIFICATIONS_PER_SECOND, all its runs

    def said(self) -> str:
        """What was dropped of its tools, in words."""
        capped = f"{self.capped:,} tools dropped past the {MAX_TOOLS} a session may have" if self.capped else ""
        return "; ".join(filter(None, [self.reason, capped]))


class McpServers:
    """The MCP servers of one session (or one `chock mcp list`)."""

    def __init__(
        self,
        specs: list[ServerSpec],
        *,
        layout: Layout,
        workspace: Path,
        project: Path,
        emit: Callable[..., Event],
        credentials: Callable[[ServerSpec], str | None],
        on_elicit: Elicit | None = None,
        start_seconds: float = START_SECONDS,
        homes: Path | None = None,
    ) -> None:
        """`homes`: a directory holding each stdio server's HOME (`<homes>/<server>`) in place of its project's
        own (`chock mcp list` gives a temporary one, to leave nothing behind)."""
        self._servers = {spec.name: _Server(spec) for spec in sorted(specs, key=lambda spec: spec.name)}
        self._layout, self._workspace, self._project = layout, workspace, project
        self._emit, self._credentials, self._on_elicit = emit, credentials, on_elicit
        self._start_seconds, self._homes = start_seconds, homes
        self._tools: dict[str, McpTool] = {}
        self._restarting: dict[str, asyncio.Lock] = {name: asyncio.Lock() for name in self._servers}
        self._relisting: set[asyncio.Task[None]] = set()
        self._stopped = False

    # Starting --------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every server at once; each is started (logged with its tools) or failed (logged with why)."""
        await asyncio.gather(*(self._start(server) for server in self._servers.values()))
        for server in self._servers.values():
            server.listed, server.fresh, server.changed = server.fresh or [], None, False
        self._tools = self._model_tools()
        for server in self._servers.values():
            if server.state == "started":
                self._emit(
                    "mcp.server",
                    server=server.spec.name,
                    state="started",
                    origin=server.spec.origin,
                    reason=server.said(),
                    tools=sum(1 for tool in self._tools.values() if tool.server == server.spec.name),
                )

    async def _start(self, server: _Server) -> bool:
        """Open `server` and list its tools; on failure log why and leave it failed."""
        name = server.spec.name
        try:
            await self._open(server)
            if not self._stopped:
                return True
            await self._close(server)  # the session stopped while it started: nothing of it may outlive the stop
            return False
        except asyncio.CancelledError:
            await self._close(server)
            raise
        except ChockError as error:
            why = str(error)
        except OSError as error:
            why = f"MCP server {name} could not start: {error.strerror or error}"
        except Exception as error:  # a bug of ours, or of a pump: the server is left out, never the session's end
            why = f"MCP server {name} could not start: {error!r}"
        await self._close(server)
        server.state, server.reason = "failed", why
        if not self._stopped:
            self._emit("mcp.server", server=name, state="failed", origin=server.spec.origin, reason=why)
        return False

    async def _open(self, server: _Server, *, rebuilds: int = SANDBOX_REBUILDS) -> None:
        spec = server.spec
        server.generation += 1
        server.link, server.state = None, "starting"
        pump = await self._pump(server)
        generation = server.generation
        server.link = ServerLink(
            spec.name,
            pump,
            on_tools_changed=lambda: self._tools_changed(server, generation),
            on_elicit=functools.partial(self._on_elicit, spec.name) if self._on_elicit is not None else None,
        )
        try:
            listed = await asyncio.wait_for(server.link.start(self._start_seconds), self._start_seconds)
        except TimeoutError:
            raise McpError(
                f"MCP server {spec.name} did not answer initialize and tools/list within "
                f"{self._start_seconds:g} s{_said(pump)}"
            ) from None
        except McpError:
            if not rebuilds or not await self._sandbox_not_built(server):
                raise
            # A masked /etc file vanished since the command line was built (`useradd`'s lock): bwrap could not
            # build the sandbox and the server never ran. Walk /etc again and start it once more (`useradd` and
            # `userdel` take and drop several locks in a row: a few times, never more).
            sandbox.forget_masks()
            await self._close(server)
            await self._open(server, rebuilds=rebuilds - 1)
            return
        server.fresh, server.reason = self._kept(spec.name, listed)
        server.state = "started"

    async def _pump(self, server: _Server) -> Any:
        spec = server.spec
        if spec.url:
            from chock.mcp.http_pump import HttpPump  # only sessions with a remote server load httpx

            return HttpPump(spec.url, bearer=self._credentials(spec), timeout=spec.timeout)
        home = self._homes / spec.name if self._homes is not None else None
        read, write = os.pipe()
        try:
            argv = confinement.server_argv(
                spec, layout=self._layout, workspace=self._workspace, project=self._project, home=home, status_fd=write
            )
            server.process = await _spawn(argv, status_fd=write)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)  # the sandbox holds its own copy
        server.status = Spawned(server.process, read)
        return StdioPump(server.process)

    async def _sandbox_not_built(self, server: _Server) -> bool:
        """Whether the server's start failed because bwrap could not build its sandbox (it exited 1 having
        reported no exit code), so the server never ran. A bwrap that failed is exiting: it is given
        EXITING_SECONDS to be reaped (its closed stdin may have been seen first)."""
        status, process = server.status, server.process
        if status is None or process is None:
            return False
        if process.returncode is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXITING_SECONDS):
                    await process.wait()
        if process.returncode is None:
            return False
        server.status = None
        return status.setup_failed(process.returncode)

    def _tools_changed(self, server: _Server, generation: int) -> None:
        """A server said its tools changed: list them again now, to be applied at the next turn boundary. One
        listing per server at a time: what it says meanwhile is one more listing once that one is done, so a
        storm of `list_changed` never holds many listings (each up to 16 MiB) at once."""
        if server.generation != generation or self._stopped:
            return
        if server.relisting:
            server.relist_again = True
            return
        server.relisting = True
        task = asyncio.ensure_future(self._relist(server, generation))
        self._relisting.add(task)
        task.add_done_callback(self._relisting.discard)

    async def _relist(self, server: _Server, generation: int) -> None:
        try:
            while server.link is not None and server.generation == generation and not self._stopped:
                server.relist_again = False
                try:
                    listed = await server.link.list_tools(self._start_seconds)
                except McpError as error:
                    await self._failed(server, generation, str(error))
                    return
                if server.generation == generation:
                    server.fresh, server.reason = self._kept(server.spec.name, listed)
                    server.changed = True
                if not server.relist_again:
                    return
        finally:
            if server.generation == generation:
                server.relisting = False

    def _kept(self, name: str, listed: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
        """The tools of one server kept within the bounds, and what was dropped, in words."""
        kept: dict[str, dict[str, Any]] = {}
        too_large: list[str] = []
        malformed = 0
        for tool in listed:
            tool_name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(tool_name, str) or not tool_name or tool_name in kept:
                malformed += 1
                continue
            schema = tool.get("inputSchema")
            schema = schema if isinstance(schema, dict) else {"type": "object"}
            if len(json.dumps(schema, separators=(",", ":")).encode("utf-8", "replace")) > MAX_SCHEMA_BYTES:
                too_large.append(tool_name)
                continue
            kept[tool_name] = {**tool, "inputSchema": schema}
        ordered = [kept[tool_name] for tool_name in sorted(kept)]
        said = []
        if too_large:
            shown = ", ".join(too_large[:5]) + (", …" if len(too_large) > 5 else "")
            said.append(
                f"{len(too_large):,} tools dropped, their input schema past {MAX_SCHEMA_BYTES // 1024} KiB ({shown})"
            )
        if len(ordered) > MAX_TOOLS_PER_SERVER:
            said.append(
                f"{len(ordered) - MAX_TOOLS_PER_SERVER:,} tools dropped past the {MAX_TOOLS_PER_SERVER} "
                "a server may have"
            )
            ordered = ordered[:MAX_TOOLS_PER_SERVER]
        if malformed:
            said.append(f"{malformed:,} tools without a name of their own dropped")
        return ordered, "; ".join(said)

    def _model_tools(self) -> dict[str, McpTool]:
        """Every started server's kept tools by model name, in order (server, then tool), at most MAX_TOOLS."""
        pairs = [
            (server.spec.name, tool["name"])
            for server in self._servers.values()
            if server.state == "started"
            for tool in server.listed
        ]
        names = tool_names.model_names(pairs)
        tools: dict[str, McpTool] = {}
        for server in self._servers.values():
            if server.state != "started":
                continue
            server.capped = max(0, len(server.listed) - (MAX_TOOLS - len(tools)))
            for tool in server.listed[: len(server.listed) - server.capped]:
                description = tool.get("description")
                model_name = names[server.spec.name, tool["name"]]
                tools[model_name] = McpTool(
                    model_name=model_name,
                    server=server.spec.name,
                    tool=tool["name"],
                    description=bounded(description if isinstance(description, str) else "", MAX_DESCRIPTION_BYTES),
                    input_schema=tool["inputSchema"],
                )
        return tools

    # What the session asks -------------------------------------------------------------------------------

    def tools(self) -> list[McpTool]:
        """The tools the model is told, in a stable order: server, then tool name."""
        return list(self._tools.values())

    def take_changes(self) -> list[tuple[str, list[str]]]:
        """Apply the servers' `list_changed` (they were re-listed): (server, its model names) for each one whose
        tools changed since the last turn boundary, for `mcp.tools` events."""
        changed = [server for server in self._servers.values() if server.changed and server.state != "starting"]
        for server in changed:
            server.changed = False
            if server.fresh is not None:
                server.listed, server.fresh = server.fresh, None
            if server.state != "started":
                server.listed = []
        if not changed:
            return []
        before = self._tools
        self._tools = self._model_tools()
        taken = []
        for server in changed:
            old = [tool.model_name for tool in before.values() if tool.server == server.spec.name]
            new = [tool.model_name for tool in self._tools.values() if tool.server == server.spec.name]
            if old != new:
                taken.append((server.spec.name, new))
        return taken

    async def call(
        self, tool: McpTool, arguments: dict[str, Any], *, on_progress: ProgressCallback | None = None
    ) -> Result:
        """One call of `tool`: the model's text of its result, or the tool's error (never an exception)."""
        server = self._servers.get(tool.server)
        if server is not None and self._restarting[tool.server].locked():
            async with self._restarting[tool.server]:  # a call's failure is restarting it: wait for the new one
                pass
        if server is None or self._stopped:
            return Result(f"MCP server {tool.server} is not running in this session", is_error=True)
        if server.state != "started" or server.link is None:
            return Result(
                f"MCP server {tool.server} failed earlier in this session ({server.reason}); its tools cannot be "
                "used until the next session: do without them, or ask the person to fix the server",
                is_error=True,
            )
        generation = server.generation
        calling = asyncio.ensure_future(
            server.link.call_tool(tool.tool, arguments, timeout=server.spec.timeout, on_progress=on_progress)
        )
        server.calls.add(calling)
        try:
            answer = await asyncio.shield(calling)
        except asyncio.CancelledError:
            if not calling.cancelled():  # our caller was cancelled (the session stopped the call): pass it on
                calling.cancel()
                with contextlib.suppress(asyncio.CancelledError, ChockError, OSError):
                    await calling
                raise
            return Result(f"MCP server {tool.server} was stopped with the session during this call", is_error=True)
        except McpRefused as error:  # the server is up and said no (arguments it rejects, an unknown tool)
            return Result(str(error), is_error=True)
        except (ChockError, OSError) as error:  # it died, hung past its timeout or wrote garbage
            return Result(await self._failed(server, generation, str(error)), is_error=True)
        finally:
            server.calls.discard(calling)
        return Result(result_text(answer.content, answer.structured), is_error=answer.is_error)

    async def _failed(self, server: _Server, generation: int, why: str) -> str:
        """Restart a server whose call failed, once in the session; what the call's error says."""
        name = server.spec.name
        async with self._restarting[name]:
            if self._stopped:
                return f"{why} (the session is stopping)"
            if server.generation != generation:  # another call's failure restarted it already
                return f"{why}; MCP server {name} was restarted, call it again"
            if server.restarted:
                await self._close(server)
                server.state, server.reason, server.changed = "failed", why, True
                self._emit("mcp.server", server=name, state="failed", origin=server.spec.origin, reason=why)
                return f"{why}; MCP server {name} failed twice and is stopped for the rest of this session"
            server.restarted = True
            await self._close(server)
            started = await self._start(server)
            server.changed = True  # its tools are listed anew (or gone); the session applies that at the turn boundary
            if not started and self._stopped:
                return f"{why}; the session stopped while MCP server {name} was being started again"
            if not started:
                return f"{why}; restarting MCP server {name} failed too ({server.reason}), so its tools are gone"
            tools = len(server.fresh or [])
            self._emit("mcp.server", server=name, state="restarted", origin=server.spec.origin, reason=why, tools=tools)
            return f"{why}; MCP server {name} was restarted, call it again if the call is safe to repeat"

    # Stopping --------------------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Cancel every call in flight (the server is told), close every server, kill every sandbox."""
        self._stopped = True
        for task in list(self._relisting):
            task.cancel()
        calls = [call for server in self._servers.values() for call in server.calls]
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls, timeout=reaper.KILLED_SECONDS)
        await asyncio.gather(*(self._close(server) for server in self._servers.values()))
        for server in self._servers.values():
            if server.state == "started":
                server.state = "stopped"
                dropped = (
                    f"{server.dropped:,} of its notifications and requests dropped, past the "
                    f"{NOTIFICATIONS_PER_SECOND} a second it may send"
                    if server.dropped
                    else ""
                )
                self._emit(
                    "mcp.server", server=server.spec.name, state="stopped", origin=server.spec.origin, reason=dropped
                )

    async def _close(self, server: _Server) -> None:
        link, process, status = server.link, server.process, server.status
        server.link, server.process, server.status = None, None, None
        if status is not None:
            status.close()
        server.generation += 1
        server.relisting = server.relist_again = False  # a listing of the old generation ends without a say
        if link is not None:
            server.dropped += link.client.dropped
            with contextlib.suppress(ChockError, OSError):
                await link.close()
        if process is not None:
            if process.returncode is None:
                reaper.kill_sandbox(process.pid)
            await reaper.wait_killed(process)


def _said(pump: Any) -> str:
    """What the transport said of its end (a server's last stderr), as the tail of an error message."""
    with contextlib.suppress(Exception):
        described = pump.describe_failure()
        if described:
            return f"; it said: {described}"
    return ""


async def _spawn(argv: list[str], *, status_fd: int) -> asyncio.subprocess.Process:
    """A server's sandbox, in a process group of its own; a cancel during its creation kills what was made."""
    creating = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=sandbox.host_environment(),
            start_new_session=True,
            pass_fds=(status_fd,),
        )
    )
    try:
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            process = await creating
            reaper.kill_sandbox(process.pid)
            await reaper.wait_killed(process)
        raise
    except OSError as error:
        raise ChockError(f"the sandbox of an MCP server could not start: {error.strerror or error}") from None
