"""Loopback fake model providers that speak the real wires: the fake is the hosted API at the network boundary,
so the real HTTP client, retries and stream parsing run (README.md: the tests build the real components).

A `FakeProvider` is a threaded HTTP/1.1 server on 127.0.0.1 (port chosen by the system) that answers like the
Anthropic Messages API (`kind="anthropic"`) or an OpenAI chat-completions server (`kind="openai"`; `aiand`
and `openai-compat` are the same wire): streamed SSE replies in small chunks, JSON error bodies in each
wire's own shape, `GET /v1/models` behind the configured key, and a check of each request against the rules
the real API enforces (role alternation, tool results answering tool calls, …) so a wrong conversion fails
as it would against the real thing. Every request it receives is recorded.

    with FakeProvider(kind="anthropic", key="sk-test") as fake:
        fake.script(text="let me look", tool_calls=[{"id": "c1", "name": "shell", "args": {"command": "ls"}}])
        fake.script(text="done", input_tokens=30, output_tokens=2)
        fake.fail(status=429, message="slow down")       # a third call gets this
        ...  # point an instance at fake.address ("http://127.0.0.1:PORT/v1"), key "sk-test"
        assert fake.calls[1]["messages"][-1]["content"][0]["type"] == "tool_result"

The queue is served in order, one entry per model call (`POST /v1/messages` or `/v1/chat/completions`);
a call with nothing left in the queue gets a 500 whose message says so. It works across processes (a
`chock run` subprocess pointed at `fake.address`), since it is only an HTTP server.

A fake may also answer from the request itself (`answer_with`, asked before the queue), and play a model
with a small context window (`context_window=N`): it counts a request's tokens as its body's bytes / 4,
reports that count as the call's input tokens, and refuses a request that does not fit with a server's own
documented refusal (400, or the status its shape is answered with), in the shape `refuse_as` names (`REFUSALS`; by
default the wire's provider's own).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.refusals import REFUSALS, STATUSES

ANTHROPIC = "anthropic"
OPENAI = "openai"
KIND_ALIASES = {"anthropic": ANTHROPIC, "openai": OPENAI, "aiand": OPENAI, "openai-compat": OPENAI}
CALL_PATHS = {ANTHROPIC: "/v1/messages", OPENAI: "/v1/chat/completions"}
MODELS_PATH = "/v1/models"

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Request:
    """One request as the fake received it. Header names are lower case; `body` is the parsed JSON or None."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)  # when it arrived (time.monotonic)


@dataclass
class Turn:
    """One scripted model reply."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 10
    output_tokens: int = 5
    deltas: list[str] | None = None  # the exact text pieces to send; by default `text` in `chunk_size` pieces
    cut_after: int | None = None  # send this many SSE events, then stop (see `clean_cut`)
    clean_cut: bool = False  # True: end the HTTP body properly, False: drop the connection mid-body
    stream_error: str | None = None  # send an in-stream error event (after `cut_after` events, default 2)
    stream_error_type: str = "overloaded_error"  # its type (for chat completions overloaded_error is server_error)
    pause: float = 0.0  # seconds between events, to keep a call in flight for a while
    cache_read_tokens: int = 0  # reported as read from the prompt cache (both wires)
    cache_write_tokens: int = 0  # reported as written to it (the Messages API only)
    # Why the model stopped, in the wire's own word (`stop_reason`, `finish_reason`): by default the one a finished
    # answer has (`end_turn` / `stop`, `tool_use` / `tool_calls` with tool calls).
    stop_reason: str | None = None
    # Events sent as they are just before the answer's end: a JSON value, or the text of a `data:` line.
    extra_events: list[Any] = field(default_factory=list)


@dataclass
class Failure:
    """One scripted HTTP error answer."""

    status: int
    message: str
    error_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None  # chat completions' error `code` (OpenAI's `insufficient_quota`, …)
    body: bytes | None = None  # the body as it is sent, instead of the wire's JSON (a proxy's, a broken server's)


class FakeProvider:
    def __init__(
        self,
        kind: str = ANTHROPIC,
        key: str | None = "sk-test",
        *,
        models: tuple[str, ...] = ("fake-model",),
        strict: bool = True,
        chunk_size: int = 4,
        context_window: int | None = None,
        refuse_as: str | None = None,
    ) -> None:
        """`key=None` accepts any request, with or without a credential (like a local llama.cpp server).
        `strict=False` skips the checks of the conversation's shape. `context_window` and `refuse_as` (a key of
        `REFUSALS`): see the module's doc."""
        if kind not in KIND_ALIASES:
            raise ValueError(f"kind must be one of {sorted(KIND_ALIASES)}, not {kind!r}")
        self.kind = KIND_ALIASES[kind]
        self.refuse = REFUSALS[refuse_as or self.kind]
        self.refuse_status = STATUSES.get(refuse_as or self.kind, 400)
        self.key = key
        self.models = models
        self.strict = strict
        self.chunk_size = chunk_size
        self.context_window = context_window
        self.requests: list[Request] = []
        self.raw_bodies: list[bytes] = []  # the model calls' bodies as they came on the wire
        self.too_long: list[int] = []  # the token counts of the requests refused as above the window
        self.refused: list[bool] = []  # per model call that reached the window's check: whether it was refused
        self._answer: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
        self.rejections: list[str] = []  # why strict checks answered 400, for assertions and debugging
        self._queue: deque[Turn | Failure] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._address: str | None = None

    # --- scripting ----------------------------------------------------------------------------------------

    def script(
        self,
        text: str = "",
        tool_calls: list[dict[str, Any]] | None = None,
        input_tokens: int = 10,
        output_tokens: int = 5,
        **options: Any,
    ) -> FakeProvider:
        """Queue one reply. A tool call is `{"id": "c1", "name": "shell", "args": {...}}` (or "call_id").
        Options are the other `Turn` fields: deltas, cut_after, clean_cut, stream_error, pause, stop_reason,
        extra_events."""
        turn = _turn(text, tool_calls, input_tokens, output_tokens, **options)
        with self._lock:
            self._queue.append(turn)
        return self

    def fail(
        self,
        status: int,
        message: str = "scripted failure",
        *,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
        code: str | None = None,
        body: bytes | None = None,
    ) -> FakeProvider:
        """Queue one HTTP error answer with a JSON body in the wire's own shape (`code`: chat completions' only), or
        with `body` as it is."""
        with self._lock:
            self._queue.append(Failure(status, message, error_type, dict(headers or {}), code, body))
        return self

    def answer_with(self, answer: Callable[[dict[str, Any]], dict[str, Any] | None]) -> FakeProvider:
        """Answer each call from its parsed body before the queue is asked: `answer(body)` returns `script`'s
        arguments for this call, or None to take the queue's next entry."""
        self._answer = answer
        return self

    def cut_after(self, n_chunks: int, text: str = "this reply is cut short", **script: Any) -> FakeProvider:
        """Queue a reply whose connection drops after `n_chunks` SSE events (`clean_cut=True`: the HTTP body
        ends properly instead, but the stream still lacks its end)."""
        return self.script(text=text, cut_after=n_chunks, **script)

    # --- what happened ------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """`http://127.0.0.1:PORT/v1`; it stays known after `close`, when it refuses connections."""
        if self._address is None:
            raise RuntimeError("the fake has not started; use it as a context manager or call start()")
        return self._address

    @property
    def calls(self) -> list[Any]:
        """The JSON bodies of the model calls received, in order."""
        path = CALL_PATHS[self.kind]
        with self._lock:
            return [r.body for r in self.requests if r.method == "POST" and r.path == path]

    @property
    def pending(self) -> int:
        """Scripted entries not served yet."""
        with self._lock:
            return len(self._queue)

    # --- life ---------------------------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._address = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-provider", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- used by the handler ------------------------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _next(self, body: dict[str, Any]) -> Turn | Failure | None:
        answered = self._answer(body) if self._answer is not None else None
        if answered is not None:
            return _turn(**answered)
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _reject(self, reason: str) -> str:
        with self._lock:
            self.rejections.append(reason)
        return reason


def _turn(
    text: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
    **options: Any,
) -> Turn:
    calls = [
        {"id": call.get("id") or call["call_id"], "name": call["name"], "args": call.get("args", {})}
        for call in tool_calls or []
    ]
    return Turn(text, calls, input_tokens, output_tokens, **options)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (at the end of a stream it has read enough of, or a test that stops early)
        # is normal here; anything else is a bug in the fake and is printed.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as the real APIs answer
    fake: FakeProvider

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- routes -------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(None)
        if self.path.split("?")[0] != MODELS_PATH:
            self._error(404, f"fake: no route for GET {self.path}")
            return
        if not self._authorised():
            return
        if self.fake.kind == ANTHROPIC:
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in self.fake.models
            ]
            body = {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        else:
            body = {
                "object": "list",
                "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.fake.models],
            }
        self._json(200, body)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self._record(body)
        if self.path != CALL_PATHS[self.fake.kind]:
            self._error(404, f"fake: no route for POST {self.path}")
            return
        with self.fake._lock:
            self.fake.raw_bodies.append(raw)
        if not self._authorised():
            return
        if not isinstance(body, dict):
            self._error(400, "fake: the body is not a JSON object")
            return
        if self.fake.strict:
            check = _check_anthropic if self.fake.kind == ANTHROPIC else _check_openai
            problem = check(body)
            if problem:
                self._error(400, self.fake._reject(problem))
                return
        tokens = len(raw) // 4
        window = self.fake.context_window
        refusal = self.fake.refuse(tokens, window, body) if window is not None else None
        if window is not None:
            with self.fake._lock:
                self.fake.refused.append(refusal is not None)
        if refusal is not None:
            with self.fake._lock:
                self.fake.too_long.append(tokens)
            self._json(self.fake.refuse_status, refusal)
            return
        entry = self.fake._next(body)
        if entry is None:
            self._error(500, "fake: no scripted turn left for this call")
        elif isinstance(entry, Failure) and entry.body is not None:
            self._raw(entry.status, entry.body, entry.headers)
        elif isinstance(entry, Failure):
            self._error(entry.status, entry.message, entry.error_type, entry.headers, entry.code)
        else:
            if window is not None:  # the model counts what it was sent
                entry = replace(entry, input_tokens=tokens)
            self._stream(entry, body)

    # --- answers ------------------------------------------------------------------------------------------

    def _record(self, body: Any) -> None:
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.fake._record(Request(self.command, self.path, headers, body))

    def _authorised(self) -> bool:
        fake = self.fake
        if fake.kind == ANTHROPIC and not self.headers.get("anthropic-version"):
            self._error(400, "anthropic-version: header is required")
            return False
        if fake.key is None:
            return True
        if fake.kind == ANTHROPIC:
            if self.headers.get("x-api-key") == fake.key:
                return True
            self._error(401, "invalid x-api-key")
            return False
        given = self.headers.get("authorization") or ""
        if given == f"Bearer {fake.key}":
            return True
        # A lax server may echo the whole key it refused; the client must redact it (OpenAI itself masks it).
        presented = given.removeprefix("Bearer ").strip()
        message = f"Incorrect API key provided: {presented}." if presented else "You didn't provide an API key."
        self._error(401, message, "invalid_request_error")
        return False

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(body).encode(), headers)

    def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(
        self,
        status: int,
        message: str,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        if self.fake.kind == ANTHROPIC:
            kind = error_type or ANTHROPIC_ERROR_TYPES.get(status, "api_error")
            body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
        else:
            kind = error_type or ("server_error" if status >= 500 else "invalid_request_error")
            body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        self._json(status, body, headers)

    def _stream(self, turn: Turn, body: dict[str, Any]) -> None:
        pieces = turn.deltas if turn.deltas is not None else _pieces(turn.text, self.fake.chunk_size)
        model = body.get("model", "fake-model")
        if self.fake.kind == ANTHROPIC:
            events = _anthropic_events(turn, pieces, model)
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _openai_events(turn, pieces, model, include_usage)
        clean_end = True
        if turn.stream_error is not None:
            events = events[: turn.cut_after if turn.cut_after is not None else 2]
            events.append(_error_event(self.fake.kind, turn.stream_error, turn.stream_error_type))
        elif turn.cut_after is not None:
            events = events[: turn.cut_after]
            clean_end = turn.clean_cut
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in events:
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if turn.pause:
                time.sleep(turn.pause)
        if clean_end:
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.close_connection = True  # the socket closes with the body half sent


# --- the wires' events ------------------------------------------------------------------------------------


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _thirds(text: str) -> list[str]:
    step = max(1, -(-len(text) // 3))
    return _pieces(text, step)


def _sse(event: str | None, data: Any) -> str:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def _anthropic_events(turn: Turn, pieces: list[str], model: str) -> list[str]:
    events = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": turn.input_tokens,
                        "cache_creation_input_tokens": turn.cache_write_tokens,
                        "cache_read_input_tokens": turn.cache_read_tokens,
                        "output_tokens": 1,
                    },
                },
            },
        ),
        _sse("ping", {"type": "ping"}),
    ]
    index = 0
    if pieces:
        events.append(
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for piece in pieces:
            events.append(
                _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call in turn.tool_calls:
        events.append(
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": {},
                    },
                },
            )
        )
        for fragment in ["", *_thirds(json.dumps(call["args"]))]:
            events.append(
                _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": fragment},
                    },
                )
            )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    events += [_sse(None, extra) for extra in turn.extra_events]
    events.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn"),
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": turn.output_tokens},
            },
        )
    )
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return events


def _openai_events(turn: Turn, pieces: list[str], model: str, include_usage: bool) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return _sse(
            None,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            },
        )

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces]
    for i, call in enumerate(turn.tool_calls):
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        for fragment in _thirds(json.dumps(call["args"])):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}))
    events += [_sse(None, extra) for extra in turn.extra_events]
    events.append(chunk({}, turn.stop_reason or ("tool_calls" if turn.tool_calls else "stop")))
    if include_usage:
        prompt = turn.input_tokens + turn.cache_read_tokens + turn.cache_write_tokens  # cached parts included
        events.append(
            _sse(
                None,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": turn.output_tokens,
                        "total_tokens": prompt + turn.output_tokens,
                        "prompt_tokens_details": {"cached_tokens": turn.cache_read_tokens},
                    },
                },
            )
        )
    events.append(_sse(None, "[DONE]"))
    return events


def _error_event(kind: str, message: str, error_type: str) -> str:
    if kind == ANTHROPIC:
        return _sse("error", {"type": "error", "error": {"type": error_type, "message": message}})
    kind = "server_error" if error_type == "overloaded_error" else error_type  # the Messages API's own type: ours
    return _sse(None, {"error": {"message": message, "type": kind, "param": None, "code": None}})


# --- what the real APIs refuse -----------------------------------------------------------------------------


def _check_anthropic(body: dict[str, Any]) -> str | None:
    """The Messages API's own 400s, for the rules a conversion can break."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        return "max_tokens: Field required"
    if "system" in body and not isinstance(body["system"], str | list):
        return "system: Input should be a valid string or list"
    if isinstance(body.get("system"), list) and not all(
        isinstance(block, dict) and block.get("type") == "text" and block.get("text") for block in body["system"]
    ):
        return "system: each block is a non-empty text block"
    marked = _cache_breakpoints(body)
    if marked > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {marked}."
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}: a tool needs a name and an input_schema"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    previous_uses: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        expected = "user" if i % 2 == 0 else "assistant"
        if role != expected:
            return f'messages.{i}: roles must alternate between "user" and "assistant", starting with user'
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            return f"messages.{i}: all messages must have non-empty content"
        uses: set[str] = set()
        answered: set[str] = set()
        seen_other = False
        for j, block in enumerate(content):
            kind = block.get("type")
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"]:
                    return f"messages.{i}.content.{j}: text content blocks must be non-empty"
                seen_other = True
            elif kind == "tool_use":
                if role != "assistant":
                    return f"messages.{i}.content.{j}: tool_use blocks belong to assistant messages"
                if not isinstance(block.get("input"), dict):
                    return f"messages.{i}.content.{j}.input: Input should be a valid dictionary"
                uses.add(block.get("id"))
            elif kind == "tool_result":
                if role != "user":
                    return f"messages.{i}.content.{j}: tool_result blocks belong to user messages"
                if seen_other:
                    return f"messages.{i}: tool_result blocks must come first in the content, before any text"
                if block.get("tool_use_id") not in previous_uses:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
                answered.add(block["tool_use_id"])
            else:
                seen_other = True
        if role == "user" and previous_uses - answered:
            missing = ", ".join(sorted(previous_uses - answered))
            return (
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {missing}. Each `tool_use` block must have a corresponding `tool_result` block "
                "in the next message."
            )
        previous_uses = uses if role == "assistant" else set()
    return None


def _cache_breakpoints(body: dict[str, Any]) -> int:
    """How many blocks carry `cache_control`: tools, system blocks and message content blocks may."""
    system = body.get("system") if isinstance(body.get("system"), list) else []
    contents = [
        block
        for message in body.get("messages") or []
        if isinstance(message.get("content"), list)
        for block in message["content"]
    ]
    return sum(1 for block in [*(body.get("tools") or []), *system, *contents] if "cache_control" in block)


def _check_openai(body: dict[str, Any]) -> str | None:
    """Chat completions' own 400s, for the rules a conversion can break."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if body.get("stream_options") is not None and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    for i, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") or {}
        if tool.get("type") != "function" or not isinstance(function.get("name"), str):
            return f"tools[{i}]: a tool is {{type: function, function: {{name, description, parameters}}}}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    waiting: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}].role: invalid value {role!r}"
        if role != "tool" and waiting:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages responding to "
                f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(sorted(waiting))}"
            )
        if role == "tool":
            if message.get("tool_call_id") not in waiting:
                return (
                    f"messages[{i}]: messages with role 'tool' must be a response to a preceding message "
                    "with 'tool_calls'."
                )
            if not isinstance(message.get("content"), str):
                return f"messages[{i}].content: a tool message's content is a string"
            waiting.discard(message["tool_call_id"])
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls and not message.get("content"):
                return f"messages[{i}]: an assistant message needs content or tool_calls"
            for j, call in enumerate(calls):
                function = call.get("function") or {}
                if call.get("type") != "function" or not call.get("id") or not function.get("name"):
                    return f"messages[{i}].tool_calls[{j}]: needs id, type function and function.name"
                if not isinstance(function.get("arguments"), str):
                    return f"messages[{i}].tool_calls[{j}].function.arguments: expected a string"
                try:
                    json.loads(function["arguments"])
                except ValueError:
                    return f"messages[{i}].tool_calls[{j}].function.arguments: not valid JSON"
                waiting.add(call["id"])
        elif not isinstance(message.get("content"), str) or not message["content"]:
            return f"messages[{i}].content: a {role} message needs text"
    return None
