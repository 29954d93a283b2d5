"""The MCP client as a state machine, sans-I/O (like h11): bytes in, events out, bytes to send.

It speaks MCP revision 2025-11-25 over JSON-RPC 2.0 (docs/mcp.md): `initialize` and version negotiation, then
`notifications/initialized` (sent by the machine itself on a good answer), `tools/list` pages, `tools/call` with
progress, `ping` both ways, `notifications/cancelled`, `notifications/tools/list_changed` and form elicitation.
It never reads a clock (`now` is passed in), never touches a socket and never raises on what a server sent: a
message that is not JSON-RPC, or past `MAX_MESSAGE_BYTES`, is a `Garbage` event. Sampling, roots and every other
method a server asks for are answered `-32601`. Notifications and requests from a server past
`NOTIFICATIONS_PER_SECOND` are dropped and counted (`dropped`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
# What a server may answer `initialize` with: this revision and the two before it, whose tools and
# notifications are the same messages.
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
NOTIFICATIONS_PER_SECOND = 100
# The `Garbage` reason of a message past MAX_MESSAGE_BYTES: an answer may have been lost in it.
OVERSIZED = f"a message of more than {MAX_MESSAGE_BYTES // (1024 * 1024)} MiB (the bound)"
# Messages in one batch (revisions before 2025-06-18 allowed them): past this the batch is garbage, so that four
# mebibytes of `[1,1,…]` are not two million events.
MAX_BATCH = 256
# Answers to a server's own requests (pings, refusals) waiting to be sent: past this, one that does not read what
# it is sent gets no more, so that its requests cannot grow what Chock holds.
MAX_QUEUED_ANSWERS = 1024
# Elicitations a server may hold open at once; one more is declined at once (a person answers one at a time).
MAX_OPEN_ELICITATIONS = 4
# What a person is shown of one: its message and its requested schema, each at most this long (as JSON).
MAX_ELICITATION_CHARS = 16 * 1024

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
ELICITATION_ACTIONS = ("accept", "decline", "cancel")

try:
    from importlib.metadata import version as _version

    CLIENT_VERSION = _version("chock")
except Exception:  # not installed (a checkout on PYTHONPATH)
    CLIENT_VERSION = "0"


@dataclass(frozen=True)
class Initialized:
    request_id: int
    version: str
    server_info: dict[str, Any]
    capabilities: dict[str, Any]


@dataclass(frozen=True)
class ToolsListed:
    request_id: int
    tools: list[dict[str, Any]]
    next_cursor: str | None


@dataclass(frozen=True)
class ToolResult:
    request_id: int
    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    is_error: bool


@dataclass(frozen=True)
class Pong:
    request_id: int


@dataclass(frozen=True)
class Failed:
    """A JSON-RPC error from the server, or a result of the wrong shape."""

    request_id: int
    code: int
    message: str


@dataclass(frozen=True)
class TimedOut:
    request_id: int


@dataclass(frozen=True)
class Progress:
    request_id: int
    progress: float
    total: float | None
    message: str


@dataclass(frozen=True)
class ToolsChanged:
    pass


@dataclass(frozen=True)
class ElicitationAsked:
    request_id: str | int
    message: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class ElicitationWithdrawn:
    """The server cancelled an elicitation it asked (`notifications/cancelled`): its answer is not wanted."""

    request_id: str | int


@dataclass(frozen=True)
class Garbage:
    reason: str


Event = (
    Initialized
    | ToolsListed
    | ToolResult
    | Pong
    | Failed
    | TimedOut
    | Progress
    | ToolsChanged
    | ElicitationAsked
    | ElicitationWithdrawn
    | Garbage
)


@dataclass
class _Pending:
    method: str
    deadline: float
    progress_token: str | int | None = None


@dataclass
class _Budget:
    """At most `per_second` messages in each one-second window that starts at the first message past the last."""

    per_second: int
    start: float = float("-inf")
    used: int = 0
    dropped: int = field(default=0)

    def take(self, now: float) -> bool:
        if now - self.start >= 1.0 or now < self.start:
            self.start, self.used = now, 0
        if self.used >= self.per_second:
            self.dropped += 1
            return False
        self.used += 1
        return True


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(value: object) -> float | None:
    """A JSON number as a finite float, or None (not a number, or past what a float holds)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


def _id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class McpClient:
    """One connection's protocol state: the requests in flight, their deadlines and the negotiated revision."""

    def __init__(
        self,
        *,
        client_name: str = "chock",
        client_version: str = CLIENT_VERSION,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self._client_info = {"name": client_name, "version": client_version}
        self._capabilities = {"elicitation": {}} if capabilities is None else capabilities
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._progress: dict[str | int, int] = {}
        self._elicitations: set[str | int] = set()
        self._outgoing: list[bytes] = []
        self._budget = _Budget(NOTIFICATIONS_PER_SECOND)
        self.negotiated_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.server_capabilities: dict[str, Any] = {}
        self.instructions = ""

    @property
    def dropped(self) -> int:
        """Notifications and requests from the server dropped past `NOTIFICATIONS_PER_SECOND`."""
        return self._budget.dropped

    def in_flight(self, request_id: int) -> bool:
        return request_id in self._pending

    # Outgoing

    def _send(self, message: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", **message}
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate a server sent (`"\ud800"` as an id), echoed: only JSON's
            data = json.dumps(message, separators=(",", ":")).encode()  # escape can say it, so it is sent so
        self._outgoing.append(data)

    def _request(
        self,
        method: str,
        params: dict[str, Any] | None,
        deadline: float,
        progress_token: str | int | None = None,
    ) -> int:
        request_id = self._next_id
        self._next_id += 1
        self._pending[request_id] = _Pending(method, deadline, progress_token)
        message: dict[str, Any] = {"id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        return request_id

    def initialize(self, now: float, deadline: float) -> int:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": self._capabilities,
            "clientInfo": self._client_info,
        }
        return self._request("initialize", params, deadline)

    def list_tools(self, cursor: str | None, now: float, deadline: float) -> int:
        return self._request("tools/list", {} if cursor is None else {"cursor": cursor}, deadline)

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        now: float,
        deadline: float,
        progress_token: str | int | None = None,
    ) -> int:
        """`tools/call`; with a `progress_token` (unique among the calls in flight) the server may report progress."""
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if progress_token is not None:
            if progress_token in self._progress:
                raise ValueError(f"progress token {progress_token!r} is already in use")
            params["_meta"] = {"progressToken": progress_token}
        request_id = self._request("tools/call", params, deadline, progress_token)
        if progress_token is not None:
            self._progress[progress_token] = request_id
        return request_id

    def ping(self, now: float, deadline: float) -> int:
        return self._request("ping", None, deadline)

    def _forget(self, request_id: int) -> _Pending | None:
        pending = self._pending.pop(request_id, None)
        if pending is not None and pending.progress_token is not None:
            self._progress.pop(pending.progress_token, None)
        return pending

    def cancel(self, request_id: int, reason: str) -> None:
        """Send `notifications/cancelled` for a request in flight and forget it (its late answer is ignored).
        `initialize` is never cancelled on the wire (the revision forbids it), only forgotten."""
        pending = self._forget(request_id)
        if pending is not None and pending.method != "initialize":
            params = {"requestId": request_id, "reason": reason}
            self._send({"method": "notifications/cancelled", "params": params})

    def answer_elicitation(self, request_id: str | int, action: str, content: dict[str, Any] | None = None) -> None:
        """Answer an `elicitation/create` the server asked: accept (with `content`), decline or cancel. An
        elicitation the server withdrew meanwhile is not answered."""
        if action not in ELICITATION_ACTIONS:
            raise ValueError(f"an elicitation is answered {', '.join(ELICITATION_ACTIONS)}, not {action!r}")
        if request_id not in self._elicitations:
            return
        self._elicitations.discard(request_id)
        result: dict[str, Any] = {"action": action}
        if action == "accept":
            result["content"] = content or {}
        self._send({"id": request_id, "result": result})

    def data_to_send(self) -> list[bytes]:
        """The whole JSON-RPC messages queued since the last call (no framing; none holds a newline)."""
        out, self._outgoing = self._outgoing, []
        return out

    # Deadlines

    def next_deadline(self) -> float | None:
        return min((p.deadline for p in self._pending.values()), default=None)

    def expire(self, now: float) -> list[Event]:
        """Each request past its deadline: a `TimedOut`, cancelled on the wire (`initialize` only forgotten)."""
        late = [rid for rid, p in self._pending.items() if p.deadline <= now]
        for request_id in late:
            self.cancel(request_id, "timed out")
        return [TimedOut(rid) for rid in late]

    # Incoming

    def receive(self, message: bytes, now: float) -> list[Event]:
        """Take one whole message from the server (an object, or a batch of them): what it meant, as events."""
        if len(message) > MAX_MESSAGE_BYTES:
            return [Garbage(OVERSIZED)]
        try:
            value = json.loads(message, parse_constant=_reject_constant)
        except RecursionError:
            return [Garbage("not JSON: nested too deeply")]
        except (ValueError, UnicodeDecodeError) as error:
            return [Garbage(f"not JSON: {_cut(str(error), 120)}")]
        if isinstance(value, list):
            if not value:
                return [Garbage("an empty batch")]
            if len(value) > MAX_BATCH:
                return [Garbage(f"a batch of {len(value):,} messages (past {MAX_BATCH})")]
            events: list[Event] = []
            for item in value:
                events.extend(self._one(item, now))
            return events
        return self._one(value, now)

    def _one(self, message: object, now: float) -> list[Event]:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return [Garbage("not a JSON-RPC 2.0 message")]
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                return self._server_request(message["id"], method, message.get("params"), now)
            return self._notification(method, message.get("params"), now)
        if "method" in message:
            return [Garbage("a method that is not a string")]
        if "id" in message and ("result" in message or "error" in message):
            return self._response(message)
        return [Garbage("neither a request, a notification nor a response")]

    def _response(self, message: dict[str, Any]) -> list[Event]:
        request_id = message["id"]
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            return []  # none of ours: every id we send is an int
        pending = self._forget(request_id)
        if pending is None:
            return []  # unknown, cancelled or timed out: ignored
        if "error" in message:
            error = message["error"]
            if not isinstance(error, dict):
                return [Failed(request_id, -32603, "an error that is not an object")]
            code = error.get("code")
            text = error.get("message")
            return [
                Failed(
                    request_id,
                    code if isinstance(code, int) and not isinstance(code, bool) else -32603,
                    _cut(text) if isinstance(text, str) else "an error without a message",
                )
            ]
        result = message["result"]
        if not isinstance(result, dict):
            return [Failed(request_id, -32603, f"a {pending.method} result that is not an object")]
        return [self._result(request_id, pending.method, result)]

    def _result(self, request_id: int, method: str, result: dict[str, Any]) -> Event:
        def wrong(what: str) -> Failed:
            return Failed(request_id, -32603, f"a {method} result whose {what}")

        if method == "initialize":
            version = result.get("protocolVersion")
            if version not in SUPPORTED_VERSIONS:
                shown = _cut(version, 40) if isinstance(version, str) else repr(type(version).__name__)
                return Failed(
                    request_id,
                    INVALID_PARAMS,
                    f"the server speaks MCP revision {shown!r}; Chock asked for {PROTOCOL_VERSION} and "
                    f"accepts {', '.join(SUPPORTED_VERSIONS)}",
                )
            info, capabilities = result.get("serverInfo", {}), result.get("capabilities", {})
            if not isinstance(info, dict) or not isinstance(capabilities, dict):
                return wrong("serverInfo or capabilities is not an object")
            instructions = result.get("instructions")
            assert isinstance(version, str)
            self.negotiated_version, self.server_info, self.server_capabilities = version, info, capabilities
            self.instructions = instructions if isinstance(instructions, str) else ""
            self._send({"method": "notifications/initialized"})
            return Initialized(request_id, version, info, capabilities)
        if method == "tools/list":
            tools, cursor = result.get("tools"), result.get("nextCursor")
            if not isinstance(tools, list):
                return wrong("tools is not a list")
            for index, tool in enumerate(tools):
                if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                    return wrong(f"tools[{index}] has no name")
                if not isinstance(tool.get("inputSchema", {}), dict):
                    return wrong(f"tools[{index}]'s inputSchema is not an object")
            if cursor is not None and not isinstance(cursor, str):
                return wrong("nextCursor is not a string")
            return ToolsListed(request_id, tools, cursor)
        if method == "tools/call":
            content, structured = result.get("content", []), result.get("structuredContent")
            is_error = result.get("isError", False)
            if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
                return wrong("content is not a list of objects")
            if structured is not None and not isinstance(structured, dict):
                return wrong("structuredContent is not an object")
            if not isinstance(is_error, bool):
                return wrong("isError is not true or false")
            return ToolResult(request_id, content, structured, is_error)
        return Pong(request_id)

    def _notification(self, method: str, params: object, now: float) -> list[Event]:
        if not self._budget.take(now):
            return []
        if not isinstance(params, dict):
            params = {}
        if method == "notifications/progress":
            token, progress, total = params.get("progressToken"), params.get("progress"), params.get("total")
            request_id = self._progress.get(token) if _id(token) else None  # type: ignore[arg-type]
            number, most = _finite(progress), _finite(total)
            if request_id is None or number is None or (total is not None and most is None):
                return []
            text = params.get("message")
            return [Progress(request_id, number, most, _cut(text) if isinstance(text, str) else "")]
        if method == "notifications/tools/list_changed":
            return [ToolsChanged()]
        if method == "notifications/cancelled":
            request_id = params.get("requestId")
            if _id(request_id) and request_id in self._elicitations:
                self._elicitations.discard(request_id)
                return [ElicitationWithdrawn(request_id)]
        return []  # logging, resources and the rest: nothing a tools client acts on

    def _server_request(self, request_id: object, method: str, params: object, now: float) -> list[Event]:
        if not _id(request_id):
            return [Garbage("a request whose id is neither a string nor an integer")]
        assert isinstance(request_id, (str, int))
        if not self._budget.take(now):
            return []
        if len(self._outgoing) >= MAX_QUEUED_ANSWERS:
            self._budget.dropped += 1
            return []
        if method == "ping":
            self._send({"id": request_id, "result": {}})
            return []
        if method == "elicitation/create" and "elicitation" in self._capabilities:
            return self._elicitation(request_id, params if isinstance(params, dict) else {})
        self._error(request_id, METHOD_NOT_FOUND, f"Method not found: {_cut(method, 80)}")
        return []

    def _error(self, request_id: str | int, code: int, message: str) -> None:
        self._send({"id": request_id, "error": {"code": code, "message": message}})

    def _elicitation(self, request_id: str | int, params: dict[str, Any]) -> list[Event]:
        mode, message, schema = params.get("mode", "form"), params.get("message"), params.get("requestedSchema")
        if mode != "form":
            self._error(request_id, INVALID_PARAMS, "only form elicitation is supported")
            return []
        if not isinstance(message, str) or not isinstance(schema, dict):
            self._error(request_id, INVALID_PARAMS, "an elicitation needs a message and a requestedSchema")
            return []
        if len(message) > MAX_ELICITATION_CHARS or len(json.dumps(schema)) > MAX_ELICITATION_CHARS:
            self._error(
                request_id,
                INVALID_PARAMS,
                f"an elicitation's message and schema are at most {MAX_ELICITATION_CHARS:,} characters each",
            )
            return []
        if request_id in self._elicitations:
            self._error(request_id, INVALID_PARAMS, "an elicitation with this id is already open")
            return []
        if len(self._elicitations) >= MAX_OPEN_ELICITATIONS:
            self._send({"id": request_id, "result": {"action": "decline"}})
            return []
        self._elicitations.add(request_id)
        return [ElicitationAsked(request_id, message, schema)]
