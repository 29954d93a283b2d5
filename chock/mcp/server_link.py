"""One connected MCP server: the sans-I/O client (chock/mcp/jsonrpc_client.py) driven over a pump.

An `McpPump` carries whole messages (stdio: chock/mcp/stdio_pump.py; Streamable HTTP: chock/mcp/http_pump.py). One
reader task takes every message the server sends and hands each answer to the call waiting for it; a server's
own requests (ping, elicitation) never wait behind a call, and an elicitation is asked in a task of its own.
Whatever the server does — dies, hangs, writes what is not MCP — a call ends in a `ToolResult` or an `McpError`
whose message says what happened, with the server's words escaped (chock.terminal.safe) and cut.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from chock.errors import ChockError
from chock.mcp import jsonrpc_client as rpc
from chock.mcp.jsonrpc_client import McpClient, ToolResult
from chock.terminal import safe

# A server's tools/list may run to this many pages, tools and bytes before it is refused, so that a server cannot
# page forever nor grow what Chock holds: far past what a model is offered (chock/mcp/supervisor.py keeps 128
# tools of a server, chosen by name, so the whole list is read).
MAX_PAGES = 256
MAX_LISTED_TOOLS = 16_384
MAX_LISTED_BYTES = 16 * 1024 * 1024

ProgressCallback = Callable[[float, float | None, str], None]
ElicitCallback = Callable[[str, dict[str, Any]], Awaitable[tuple[str, dict[str, Any] | None]]]
# The session's side of it, (server, message, requested schema) -> (action, content): it is told which server asks.
Elicit = Callable[[str, str, dict[str, Any]], Awaitable[tuple[str, dict[str, Any] | None]]]


class McpError(ChockError):
    """An MCP server failed a request: its answer, its silence or its end, in words."""


class McpRefused(McpError):
    """The server answered a request with an error (or a result of the wrong shape): it is up, and said no."""


class PumpClosed(ChockError):
    """The transport to a server ended; the message says how."""


class McpPump(Protocol):
    """Whole JSON-RPC messages to and from one server."""

    async def send(self, message: bytes) -> None: ...

    async def receive(self) -> bytes: ...

    async def close(self) -> None: ...

    def describe_failure(self) -> str: ...


def quoted(text: str, limit: int = 600) -> str:
    """A server's words, safe to show: the last `limit` characters, every control character escaped."""
    text = text if len(text) <= limit else "…" + text[-limit:]
    return safe(text, styled=False, one_line=True)


class ServerLink:
    """One connected server: the sans-I/O client plus a pump, driven by one reader task."""

    def __init__(
        self,
        name: str,
        pump: McpPump,
        *,
        on_progress: ProgressCallback | None = None,
        on_tools_changed: Callable[[], None] | None = None,
        on_elicit: ElicitCallback | None = None,
    ) -> None:
        self.name = name
        self.client = McpClient()
        self._pump = pump
        self._on_progress = on_progress
        self._on_tools_changed = on_tools_changed
        self._on_elicit = on_elicit
        self._waiters: dict[int, asyncio.Future[rpc.Event]] = {}
        self._progress: dict[int, ProgressCallback] = {}
        self._elicitations: dict[str | int, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._ended: str | None = None  # why the link is down, once it is
        self._garbage = 0
        self._received = 0  # bytes of every message read
        self._last_garbage = ""
        self._progress_tokens = 0

    @property
    def closed(self) -> bool:
        return self._ended is not None

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    # Sending

    def _flush_later(self) -> None:
        """Have the writer send what is queued. One task writes, in order, and no caller waits on a write: the
        reader goes on reading while a server reads slowly (or not at all), a call's timeout holds whatever the
        pipe does, and a cancelled call never leaves a message half-sent."""
        if self._ended is None and (self._writer is None or self._writer.done()):
            self._writer = self._spawn(self._write())

    async def _write(self) -> None:
        try:
            while messages := self.client.data_to_send():
                for message in messages:
                    await self._pump.send(message)
        except (PumpClosed, OSError) as error:
            self._end(f"{error}{self._stderr()}")

    def _spawn(self, coroutine: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # Reading

    def _ensure_reader(self) -> None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name=f"mcp {self.name} reader")

    async def _read(self) -> None:
        try:
            while True:
                message = await self._pump.receive()
                self._received += len(message)
                for event in self.client.receive(message, self._now()):
                    self._dispatch(event)
                self._flush_later()  # answers to the server's pings and refusals
        except PumpClosed as closed:
            self._end(f"{closed}{self._stderr()}")
        except OSError as error:
            self._end(f"its connection failed: {error.strerror or error}{self._stderr()}")
        except Exception as error:  # a bug of ours: every call in flight learns of it rather than waiting
            self._end(f"Chock's reader failed: {error!r}")

    def _stderr(self) -> str:
        tail = self._pump.describe_failure()
        return f"; {quoted(tail)}" if tail else ""

    def _end(self, reason: str) -> None:
        if self._ended is None:
            self._ended = reason
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(McpError(f"MCP server {self.name} ended: {self._ended}"))
        self._waiters.clear()
        for task in self._elicitations.values():
            task.cancel()

    def _dispatch(self, event: rpc.Event) -> None:
        if isinstance(event, rpc.Progress):
            callback = self._progress.get(event.request_id) or self._on_progress
            if callback is not None:
                callback(event.progress, event.total, event.message)
        elif isinstance(event, rpc.ToolsChanged):
            if self._on_tools_changed is not None:
                self._on_tools_changed()
        elif isinstance(event, rpc.ElicitationAsked):
            self._elicitations[event.request_id] = self._spawn(self._elicit(event))
        elif isinstance(event, rpc.ElicitationWithdrawn):
            task = self._elicitations.pop(event.request_id, None)
            if task is not None:
                task.cancel()
        elif isinstance(event, rpc.Garbage):
            self._garbage += 1
            self._last_garbage = event.reason
            if event.reason == rpc.OVERSIZED:
                self._fail_all(f"it sent {event.reason}")
        else:
            future = self._waiters.pop(event.request_id, None)
            if future is not None and not future.done():
                future.set_result(event)

    def _fail_all(self, reason: str) -> None:
        """Fail every request in flight: a message too big to read may have been any one's answer."""
        for request_id, future in list(self._waiters.items()):
            self.client.cancel(request_id, "unreadable answer")
            if not future.done():
                future.set_exception(McpError(f"MCP server {self.name} failed: {reason}"))
        self._waiters.clear()

    async def _elicit(self, event: rpc.ElicitationAsked) -> None:
        action: str = "decline"
        content: dict[str, Any] | None = None
        try:
            if self._on_elicit is not None:
                action, content = await self._on_elicit(event.message, event.schema)
        except asyncio.CancelledError:
            self._elicitations.pop(event.request_id, None)
            raise
        except Exception:
            action, content = "cancel", None
        self._elicitations.pop(event.request_id, None)
        if action not in rpc.ELICITATION_ACTIONS:
            action, content = "cancel", None
        self.client.answer_elicitation(event.request_id, action, content)
        self._flush_later()

    # Requests

    async def _ask(self, request_id: int, method: str, timeout: float, budget: float | None = None) -> rpc.Event:
        """Send what `request_id` queued and wait `timeout` for its answer (part of `budget`, the seconds a person
        set, named in the error); a cancellation cancels it on the wire."""
        if self._ended is not None:
            self.client.cancel(request_id, "link closed")
            self._progress.pop(request_id, None)
            raise McpError(f"MCP server {self.name} ended: {self._ended}")
        future: asyncio.Future[rpc.Event] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = future
        self._ensure_reader()
        self._flush_later()
        try:
            async with asyncio.timeout(timeout):
                event = await future
        except TimeoutError:
            self._cancel(request_id, "timed out")
            raise McpError(self._silence(method, timeout if budget is None else budget)) from None
        except asyncio.CancelledError:
            self._cancel(request_id, "cancelled by Chock")
            raise
        finally:
            self._waiters.pop(request_id, None)
            self._progress.pop(request_id, None)
            if self._ended is not None:  # forgotten: nothing more is sent on a link that ended
                self.client.cancel(request_id, "link ended")
        if isinstance(event, rpc.Failed):
            raise McpRefused(f"MCP server {self.name} failed {method}: {quoted(event.message)} (code {event.code})")
        return event

    def _cancel(self, request_id: int, reason: str) -> None:
        if self.client.in_flight(request_id):
            self.client.cancel(request_id, reason)
            self._flush_later()

    def _silence(self, method: str, timeout: float) -> str:
        text = f"MCP server {self.name} did not answer {method} within {timeout:g} s"
        if self._garbage:
            count = "a message" if self._garbage == 1 else f"{self._garbage} messages"
            text += f"; it sent {count} that Chock could not read, the last {quoted(self._last_garbage)}"
        return text + self._stderr()

    async def start(self, deadline_seconds: float) -> list[dict[str, Any]]:
        """initialize (and initialized), then every page of tools/list, all within `deadline_seconds`."""
        deadline = self._now() + deadline_seconds
        request_id = self.client.initialize(self._now(), deadline)
        await self._ask(request_id, "initialize", deadline - self._now(), deadline_seconds)
        if hasattr(self._pump, "protocol_version"):
            self._pump.protocol_version = self.client.negotiated_version
        # notifications/initialized is queued: it goes out ahead of the first tools/list
        return await self._list(deadline, deadline_seconds)

    async def list_tools(self, deadline_seconds: float) -> list[dict[str, Any]]:
        return await self._list(self._now() + deadline_seconds, deadline_seconds)

    async def _list(self, deadline: float, budget: float) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        received = self._received
        for _ in range(MAX_PAGES):
            request_id = self.client.list_tools(cursor, self._now(), deadline)
            page = await self._ask(request_id, "tools/list", deadline - self._now(), budget)
            assert isinstance(page, rpc.ToolsListed)
            tools.extend(page.tools)
            if len(tools) > MAX_LISTED_TOOLS:
                raise McpError(f"MCP server {self.name} lists more than {MAX_LISTED_TOOLS:,} tools: refused")
            if self._received - received > MAX_LISTED_BYTES:
                raise McpError(
                    f"MCP server {self.name}'s tools/list runs past {MAX_LISTED_BYTES // (1024 * 1024)} MiB: refused"
                )
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise McpError(f"MCP server {self.name}'s tools/list runs past {MAX_PAGES} pages: refused")

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float,
        on_progress: ProgressCallback | None = None,
    ) -> ToolResult:
        """tools/call. A cancellation sends notifications/cancelled, then is raised; a server that ends, stays
        silent past `timeout` or refuses raises `McpError`. A result with isError is returned, not raised."""
        self._progress_tokens += 1
        token = self._progress_tokens if (on_progress or self._on_progress) else None
        now = self._now()
        request_id = self.client.call_tool(name, arguments, now, now + timeout, token)
        if on_progress is not None:
            self._progress[request_id] = on_progress
        event = await self._ask(request_id, "tools/call", timeout)
        assert isinstance(event, ToolResult)
        return event

    async def ping(self, timeout: float) -> None:
        now = self._now()
        await self._ask(self.client.ping(now, now + timeout), "ping", timeout)

    async def close(self) -> None:
        """Cancel what is in flight, stop reading and close the pump (stdio: the process ends)."""
        for request_id in list(self._waiters):
            self.client.cancel(request_id, "Chock is closing the connection")
        self._flush_later()
        if self._writer is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):  # the cancellations, unless the server stopped reading
                    await asyncio.shield(self._writer)
        self._end("Chock closed the connection")
        tasks = [t for t in (self._reader, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._pump.close()
