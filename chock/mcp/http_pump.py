"""The Streamable HTTP pump (MCP 2025-11-25, basic/transports): JSON-RPC messages to and from one server URL.

Every message is a POST to the URL (`Accept: application/json, text/event-stream`). A request's answer is a
JSON body or an event stream that carries the response, and the server's own requests and notifications before
it; a notification or a response is answered 202. The `Mcp-Session-Id` the initialize answer names goes with
every later request, and `MCP-Protocol-Version` once ServerLink has set `protocol_version`. A stream that ends
before its response is resumed with a GET carrying `Last-Event-ID`, after the `retry` the server asked for; a GET
stream listens for the server's own messages (405: it has none); a DELETE ends the session on close.

What a person relies on: the bearer token goes only to the URL's own origin (redirects are never followed: a 3xx
closes the pump naming the status), plain http only to a loopback host, and the token is in no error, repr or
log line. Bounds: a message of at most 4 MiB; a request's whole exchange within `timeout` seconds. A request
that fails at the HTTP level answers its own id with a JSON-RPC error (`TRANSPORT_ERROR`) so that one bad call
is that call's error; a redirect, or a 404 once the server gave a session id (the session expired), closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from chock.errors import ChockError
from chock.mcp.declarations import check_url
from chock.mcp.event_stream import MAX_BYTES, EventStream, TooLarge
from chock.mcp.server_link import PumpClosed
from chock.providers.failures import redact_json, shown_address
from chock.providers.lean_http import httpx
from chock.providers.transport import header_safe

# The JSON-RPC error code of a request the transport failed (the implementation-defined server-error range).
TRANSPORT_ERROR = -32000
CONNECT_SECONDS = 10.0
# A DELETE on close is a courtesy to the server: it never holds a session's end up for longer than this.
CLOSE_SECONDS = 2.0
# A stream that drops is resumed after the server's `retry`, or this, and given up after this many resumptions
# that brought nothing new.
RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
MAX_RESUMPTIONS = 5
# What of an error answer is quoted: its start says what went wrong.
QUOTE_BYTES = 512
# Messages read but not yet received: past this, reading waits (TCP's flow control reaches the server).
INBOX_MESSAGES = 64
SESSION_HEADER = "mcp-session-id"


class HttpPump:
    """One server's Streamable HTTP transport: a server_link.McpPump."""

    def __init__(self, url: str, *, bearer: str | None, timeout: float) -> None:
        self.url = check_url(url, f"MCP server URL {shown_address(url)!r}")
        if not header_safe(bearer):
            raise ChockError(
                f"the credential for MCP server {shown_address(url)!r} cannot be sent: it holds a space, a line "
                "break or a non-ASCII character; store it again with `chock login`"
            )
        self._bearer = bearer
        self.timeout = timeout
        self.protocol_version: str | None = None  # set by ServerLink once initialize negotiated one
        self.session_id: str | None = None
        self._client: httpx.AsyncClient | None = None
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue(INBOX_MESSAGES)  # None: closed
        self._closed: PumpClosed | None = None
        self._requests: dict[Any, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure = ""

    def __repr__(self) -> str:
        return f"HttpPump(url={shown_address(self.url)!r}, bearer={'set' if self._bearer else 'none'})"

    # --- Pump ----------------------------------------------------------------------------------------------

    async def send(self, message: bytes) -> None:
        """A request is posted in a task of its own (its answer may take the call's whole time); a notification
        or a response is posted here, in order, and answered 202."""
        if self._closed is not None:
            raise self._closed
        parsed = json.loads(message)
        if isinstance(parsed, dict) and "method" in parsed and "id" in parsed:
            request_id = parsed["id"]
            task = self._spawn(self._exchange(message, request_id, parsed["method"] == "initialize"))
            self._requests[request_id] = task
            task.add_done_callback(lambda _: self._requests.pop(request_id, None))
            return
        method = parsed.get("method") if isinstance(parsed, dict) else None
        if method == "notifications/cancelled":
            # The call is given up: its stream is not worth the connection.
            cancelled = self._requests.pop((parsed.get("params") or {}).get("requestId"), None)
            if cancelled is not None:
                cancelled.cancel()
        await self._notify(message)
        if method == "notifications/initialized":
            self._spawn(self._listen())

    async def receive(self) -> bytes:
        if self._closed is not None and self._inbox.empty():
            raise self._closed
        message = await self._inbox.get()
        if message is None:
            self._inbox.put_nowait(None)  # every later receive raises too
            assert self._closed is not None
            raise self._closed
        return message

    async def close(self) -> None:
        """Stop every exchange, DELETE the session (bounded: the server may be gone), close the connections."""
        self._shut(PumpClosed("the connection to the MCP server was closed"))
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if self.session_id is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await client.delete(self.url, headers=self._headers(), timeout=CLOSE_SECONDS)
        finally:
            await client.aclose()

    def describe_failure(self) -> str:
        return self._failure

    # --- exchanges -----------------------------------------------------------------------------------------

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _exchange(self, message: bytes, request_id: Any, initialize: bool) -> None:
        """One request's POST and its answer, bounded by `timeout`; every failure answers `request_id`."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._post_request(message, request_id, initialize)
        except TimeoutError:
            await self._answer_error(request_id, f"no answer from {self._where()} within {self.timeout:g} s")
        except httpx.HTTPError as exc:
            await self._answer_error(request_id, self._transport_words(exc))
        except TooLarge as exc:
            await self._answer_error(request_id, f"{self._where()}: {exc}")
        except PumpClosed as exc:
            self._shut(exc)
        except Exception as exc:  # a bug of ours: the call learns of it rather than waiting out its timeout
            await self._answer_error(request_id, f"Chock's HTTP pump failed: {exc.__class__.__name__}")

    async def _post_request(self, message: bytes, request_id: Any, initialize: bool) -> None:
        headers = {**self._headers(), "accept": "application/json, text/event-stream"}
        headers["content-type"] = "application/json"
        async with self._http().stream("POST", self.url, content=message, headers=headers) as response:
            self._check_fatal(response)
            if initialize and response.is_success:
                self._take_session(response)
            if not response.is_success:
                await self._answer_error(request_id, await self._status_words(response))
                return
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind == "application/json":
                await self._deliver(await _bounded_body(response, self._where()))
                return
            if kind != "text/event-stream":
                if response.status_code != 202:
                    await self._answer_error(
                        request_id, f"{self._where()} answered {kind or 'no content type'}, not JSON or events"
                    )
                return
            stream = EventStream()
            if await self._read_events(response, stream, request_id):
                return
        await self._resume(stream, request_id)

    async def _resume(self, stream: EventStream, request_id: Any) -> None:
        """A stream that ended before its response: GET it again from its last event id, after `retry`."""
        fruitless = 0
        while stream.last_event_id and fruitless < MAX_RESUMPTIONS:
            await asyncio.sleep(_retry_seconds(stream))
            seen = stream.last_event_id
            headers = {**self._headers(), "accept": "text/event-stream", "last-event-id": seen}
            async with self._http().stream("GET", self.url, headers=headers) as response:
                self._check_fatal(response)
                if not response.is_success:
                    await self._answer_error(request_id, await self._status_words(response))
                    return
                if await self._read_events(response, stream, request_id):
                    return
            fruitless = 0 if stream.last_event_id != seen else fruitless + 1
        await self._answer_error(
            request_id, f"{self._where()} ended the event stream before answering, and it could not be resumed"
        )

    async def _listen(self) -> None:
        """The GET stream of the server's own messages, kept open (405: the server has none to send)."""
        stream = EventStream()
        fruitless = 0
        while fruitless < MAX_RESUMPTIONS:
            seen = stream.last_event_id
            headers = {**self._headers(), "accept": "text/event-stream"}
            if seen:
                headers["last-event-id"] = seen
            try:
                quiet = httpx.Timeout(None, connect=CONNECT_SECONDS)  # a listening stream may be quiet for hours
                async with self._http().stream("GET", self.url, headers=headers, timeout=quiet) as response:
                    if not response.is_success:
                        # 405 says so; a server without the route may say 404, or redirect: none is fatal here
                        return
                    await self._read_events(response, stream, None)
            except (httpx.HTTPError, TooLarge):
                pass
            fruitless = 0 if stream.last_event_id != seen else fruitless + 1
            await asyncio.sleep(_retry_seconds(stream))

    async def _read_events(self, response: httpx.Response, stream: EventStream, request_id: Any) -> bool:
        """Deliver the stream's messages until it ends; whether the response to `request_id` was among them."""
        async for chunk in _chunks(response):
            for event in stream.feed(chunk):
                if event.event != "message" or not event.data.strip():
                    continue  # a priming event (an id and no data), or a type MCP does not send
                data = event.data.encode()
                await self._deliver(data)
                if request_id is not None and _answers(data, request_id):
                    return True
        return False

    async def _notify(self, message: bytes) -> None:
        """POST a notification or a response; a failure that is not fatal is the server's to live with."""
        headers = {**self._headers(), "accept": "application/json, text/event-stream"}
        headers["content-type"] = "application/json"
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._http().post(self.url, content=message, headers=headers)
        except (TimeoutError, httpx.HTTPError) as exc:
            self._failure = f"{self._where()}: {exc.__class__.__name__}"
            return
        try:
            self._check_fatal(response)
        except PumpClosed as exc:
            self._shut(exc)
            raise

    # --- pieces --------------------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self._bearer:
            headers["authorization"] = f"Bearer {self._bearer}"
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            plain = self.url.lower().startswith("http://")
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                timeout=httpx.Timeout(self.timeout, connect=min(CONNECT_SECONDS, self.timeout)),
                # Plain http is loopback only: no proxy of the environment ever carries the token in the clear.
                trust_env=not plain,
            )
        return self._client

    def _take_session(self, response: httpx.Response) -> None:
        session = response.headers.get(SESSION_HEADER)
        if session is None:
            return
        if not session or not all("!" <= c <= "~" for c in session):
            raise PumpClosed(f"{self._where()} named a session id that is not visible ASCII: refused")
        self.session_id = session

    def _check_fatal(self, response: httpx.Response) -> None:
        """A redirect, or a 404 for a session: nothing sent to this server can succeed any more."""
        status = response.status_code
        if 300 <= status < 400:
            self._failure = f"HTTP {status} from {self._where()}"
            raise PumpClosed(
                f"{self._where()} answered {status} (a redirect); redirects are not followed, so that a "
                "credential never reaches another address: configure the address it redirects to"
            )
        if status == 404 and self.session_id is not None:
            self._failure = f"HTTP 404 from {self._where()}"
            raise PumpClosed(
                f"{self._where()} answered 404 for session {self.session_id}: the server ended the session "
                "(it restarted, or expired it); Chock connects afresh once, as it restarts any server that failed"
            )

    async def _status_words(self, response: httpx.Response) -> str:
        quote = b""
        with contextlib.suppress(httpx.HTTPError):
            async for chunk in _chunks(response):
                quote += chunk
                if len(quote) >= QUOTE_BYTES + 2 * len(self._bearer or ""):
                    break
        # The body is quoted inside the error's own JSON, escaped once more: the token is cut from it as it came,
        # before the quote is cut (no token's start is left at its end).
        words = redact_json(quote, self._bearer)[:QUOTE_BYTES].decode("utf-8", errors="replace").strip()
        self._failure = f"HTTP {response.status_code} from {self._where()}"
        hint = ""
        if response.status_code in (401, 403):
            hint = " (the server refused the credential: store it again with `chock login --provider mcp=URL`)"
        return f"{self._failure}{': ' + words if words else ''}{hint}"

    def _transport_words(self, exc: httpx.HTTPError) -> str:
        self._failure = f"{self._where()}: {exc.__class__.__name__}"
        if isinstance(exc, httpx.TimeoutException):
            return f"{self._where()} did not answer within {self.timeout:g} s ({exc.__class__.__name__})"
        # httpx's words name the address and the failure; should a header's value ever appear, `_deliver` cuts it
        return f"could not reach {self._where()}: {exc.__class__.__name__}: {exc}"

    def _where(self) -> str:
        return f"MCP server {shown_address(self.url)}"

    async def _answer_error(self, request_id: Any, words: str) -> None:
        """`request_id` answered with the transport's failure, as a JSON-RPC error the client reads like any."""
        error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": TRANSPORT_ERROR, "message": words}}
        await self._deliver(json.dumps(error).encode())

    async def _deliver(self, message: bytes) -> None:
        """`message` for the client to receive, without the bearer token: whatever a server echoes of it (an
        error's quote, a tool's result) would reach the model, the log and the terminal."""
        if self._closed is None:
            await self._inbox.put(redact_json(message, self._bearer))

    def _shut(self, reason: PumpClosed) -> None:
        """Closed for good: `receive` raises `reason` once what was read before has been received."""
        if self._closed is not None:
            return
        self._closed = reason
        if self._inbox.full():
            # Waking the reader matters more than the messages it has not read: the server is gone.
            while not self._inbox.empty():
                self._inbox.get_nowait()
        self._inbox.put_nowait(None)


def _answers(message: bytes, request_id: Any) -> bool:
    try:
        parsed = json.loads(message)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("id") == request_id and "method" not in parsed


def _retry_seconds(stream: EventStream) -> float:
    if stream.retry_ms is None:
        return RETRY_SECONDS
    return min(stream.retry_ms / 1000, MAX_RETRY_SECONDS)


async def _bounded_body(response: httpx.Response, where: str) -> bytes:
    """A JSON answer of at most MAX_BYTES; past it, the rest is never read."""
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BYTES:
        raise TooLarge(f"an answer of {length} bytes, past the {MAX_BYTES}-byte bound: refused")
    body = bytearray()
    async for chunk in _chunks(response):
        body += chunk
        if len(body) > MAX_BYTES:
            raise TooLarge(f"an answer past the {MAX_BYTES}-byte bound: refused")
    return bytes(body)


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_bytes():
        yield chunk
