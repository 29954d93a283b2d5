"""The Streamable HTTP pump against a loopback MCP server written here (aiohttp): JSON and event-stream answers,
the session id, a dropped stream resumed, DELETE on close, and the bounds and refusals a person relies on: no
redirect followed (the token never reaches its target), plain http only to loopback, a 10 MB answer and a silent
server each one call's error, and the token in no error or repr.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web

from chock.errors import ChockError
from chock.mcp.event_stream import EventStream
from chock.mcp.http_pump import TRANSPORT_ERROR, HttpPump
from chock.mcp.server_link import PumpClosed

TOKEN = "mcp-secret-token-4711"
SESSION = "session-abc"
Handler = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]


class FakeServer:
    """An MCP endpoint at /mcp on 127.0.0.1: `on_post` answers each POST (its parsed body given), `on_get` each
    GET; every request is recorded as (method, headers, body)."""

    def __init__(self, on_post: Handler | None = None, on_get: Handler | None = None) -> None:
        self.on_post = on_post or answer_json
        self.on_get = on_get
        self.requests: list[tuple[str, Mapping[str, str], dict[str, Any]]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.stopping = asyncio.Event()  # what a handler that never answers waits for

    async def __aenter__(self) -> FakeServer:
        app = web.Application()
        app.router.add_route("*", "/mcp", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        self.stopping.set()
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        self.requests.append((request.method, request.headers.copy(), body))  # names case-insensitive
        if request.method == "POST":
            return await self.on_post(request, body)
        if request.method == "GET" and self.on_get is not None:
            return await self.on_get(request, body)
        if request.method == "DELETE":
            return web.Response(status=200)
        return web.Response(status=405)

    def headers_of(self, method: str) -> list[Mapping[str, str]]:
        return [headers for name, headers, body in self.requests if body.get("method") == method]


def result(body: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": body["id"], "result": value}


async def answer_json(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    """Initialize answers with a session id; a notification gets 202; any other request echoes its method."""
    if "id" not in body:
        return web.Response(status=202)
    headers = {"mcp-session-id": SESSION} if body["method"] == "initialize" else {}
    return web.json_response(result(body, {"echo": body["method"]}), headers=headers)


async def sse(request: web.Request, events: list[str], *, close: bool = True) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for event in events:
        await response.write(event.encode())
    if close:
        await response.write_eof()
    return response


def message(value: dict[str, Any], event_id: str = "") -> str:
    return (f"id: {event_id}\n" if event_id else "") + f"data: {json.dumps(value)}\n\n"


def request(request_id: int, method: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}}).encode()


def notification(method: str, params: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params or {}}).encode()


async def receive(pump: HttpPump) -> dict[str, Any]:
    # A guard against a hang, not a timed assertion: every exchange here ends in milliseconds or is a bug.
    return json.loads(await asyncio.wait_for(pump.receive(), 60))


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_json_answers_carry_the_session_id_and_version_on_every_later_request() -> None:
    async def main() -> None:
        async with FakeServer() as server:
            pump = HttpPump(server.url, bearer=TOKEN, timeout=30)
            await pump.send(request(1, "initialize"))
            assert await receive(pump) == result({"id": 1}, {"echo": "initialize"})
            pump.protocol_version = "2025-11-25"
            await pump.send(notification("notifications/initialized"))
            await pump.send(request(2, "tools/list"))
            assert (await receive(pump))["result"] == {"echo": "tools/list"}
            await pump.close()
        first = server.headers_of("initialize")[0]
        assert "mcp-session-id" not in {k.lower() for k in first}
        assert first["Accept"] == "application/json, text/event-stream"
        assert first["Authorization"] == f"Bearer {TOKEN}"
        for method in ("notifications/initialized", "tools/list"):
            (headers,) = server.headers_of(method)
            assert headers["Mcp-Session-Id"] == SESSION
            assert headers["MCP-Protocol-Version"] == "2025-11-25"
        deletes = [headers for name, headers, _ in server.requests if name == "DELETE"]
        assert [headers["Mcp-Session-Id"] for headers in deletes] == [SESSION]

    run(main)


def test_an_event_stream_answer_brings_the_servers_messages_then_the_response() -> None:
    async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if body.get("method") != "tools/call":
            return await answer_json(request, body)
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        return await sse(request, [": comment\n\n", message(progress), message(result(body, {"done": True}))])

    async def main() -> None:
        async with FakeServer(on_post) as server:
            pump = HttpPump(server.url, bearer=None, timeout=30)
            await pump.send(request(7, "tools/call"))
            assert (await receive(pump))["method"] == "notifications/progress"
            assert (await receive(pump))["result"] == {"done": True}
            await pump.close()
        assert "Authorization" not in server.requests[0][1]

    run(main)


def test_a_dropped_stream_is_resumed_with_its_last_event_id() -> None:
    async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if body.get("method") != "tools/call":
            return await answer_json(request, body)
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        # A priming event (an id, no data), then one message, then the stream drops before the response.
        return await sse(request, ["id: p-0\nretry: 10\ndata:\n\n", message(progress, "p-1")])

    async def on_get(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if request.headers.get("Last-Event-ID") != "p-1":
            return web.Response(status=405)
        return await sse(request, [message({"jsonrpc": "2.0", "id": 3, "result": {"resumed": True}}, "p-2")])

    async def main() -> None:
        async with FakeServer(on_post, on_get) as server:
            pump = HttpPump(server.url, bearer=TOKEN, timeout=30)
            await pump.send(request(3, "tools/call"))
            assert (await receive(pump))["method"] == "notifications/progress"
            assert (await receive(pump))["result"] == {"resumed": True}
            await pump.close()
        gets = [headers for name, headers, _ in server.requests if name == "GET"]
        assert [headers.get("Last-Event-ID") for headers in gets] == ["p-1"]
        assert gets[0]["Accept"] == "text/event-stream"

    run(main)


def test_the_servers_own_messages_arrive_on_a_listening_get_stream() -> None:
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}

    async def on_get(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return await sse(request, [message(changed, "g-1")], close=False)

    async def main() -> None:
        async with FakeServer(on_get=on_get) as server:
            pump = HttpPump(server.url, bearer=None, timeout=30)
            await pump.send(request(1, "initialize"))
            await receive(pump)
            await pump.send(notification("notifications/initialized"))
            assert await receive(pump) == changed
            await pump.close()
        gets = [headers for name, headers, _ in server.requests if name == "GET"]
        assert gets[0]["Mcp-Session-Id"] == SESSION

    run(main)


def test_a_server_without_a_get_stream_is_used_all_the_same() -> None:
    async def on_get(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=404)  # no GET route at all: not even the 405 the transport asks for

    async def main() -> None:
        async with FakeServer(on_get=on_get) as server:
            pump = HttpPump(server.url, bearer=None, timeout=30)
            await pump.send(request(1, "initialize"))
            await receive(pump)
            await pump.send(notification("notifications/initialized"))
            while not any(name == "GET" for name, _, _ in server.requests):
                await asyncio.sleep(0.01)
            await pump.send(request(2, "tools/list"))
            assert (await receive(pump))["result"] == {"echo": "tools/list"}
            await pump.close()

    run(main)


def test_a_redirect_is_not_followed_and_the_token_never_reaches_its_target() -> None:
    async def main() -> None:
        async with FakeServer() as elsewhere:

            async def redirect(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
                return web.Response(status=307, headers={"Location": elsewhere.url})

            async with FakeServer(redirect) as server:
                pump = HttpPump(server.url, bearer=TOKEN, timeout=30)
                await pump.send(request(1, "initialize"))
                with pytest.raises(PumpClosed, match="307") as closed:
                    await receive(pump)
                assert TOKEN not in str(closed.value)
                with pytest.raises(PumpClosed):
                    await pump.send(request(2, "tools/list"))
                assert "307" in pump.describe_failure()
                await pump.close()
            assert len(server.requests) == 1
        assert elsewhere.requests == []

    run(main)


def test_a_404_for_the_session_closes_the_pump_saying_the_session_ended() -> None:
    async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if body.get("method") == "initialize":
            return await answer_json(request, body)
        return web.Response(status=404)

    async def main() -> None:
        async with FakeServer(on_post) as server:
            pump = HttpPump(server.url, bearer=TOKEN, timeout=30)
            await pump.send(request(1, "initialize"))
            await receive(pump)
            await pump.send(request(2, "tools/list"))
            with pytest.raises(PumpClosed, match=f"404 for session {SESSION}"):
                await receive(pump)
            await pump.close()

    run(main)


@pytest.mark.parametrize("shape", ["json", "json-unsized", "event-stream"])
def test_a_10_mb_answer_is_that_calls_error_and_is_not_read_whole(shape: str) -> None:
    huge = "x" * (10 * 1024 * 1024)

    async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        value = result(body, {"text": huge})
        if shape == "json":
            return web.json_response(value)  # its Content-Length says how big, before a byte of it is read
        if shape == "json-unsized":
            response = web.StreamResponse(headers={"content-type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            encoded = json.dumps(value).encode()
            for start in range(0, len(encoded), 1 << 20):
                await response.write(encoded[start : start + (1 << 20)])
            await response.write_eof()
            return response
        return await sse(request, [message(value)])

    async def main() -> None:
        async with FakeServer(on_post) as server:
            pump = HttpPump(server.url, bearer=TOKEN, timeout=30)
            await pump.send(request(5, "tools/call"))
            answer = await receive(pump)
            await pump.close()
        assert answer["id"] == 5
        assert answer["error"]["code"] == TRANSPORT_ERROR
        assert "4194304" in answer["error"]["message"]

    run(main)


@pytest.mark.parametrize("manner", ["silent", "dribbling"])
def test_a_server_that_never_answers_is_bounded_by_the_timeout(manner: str) -> None:
    async def main() -> None:
        async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            if manner == "silent":
                await server.stopping.wait()
                return web.Response(status=500)
            # A comment now and then: the connection is never quiet long enough for a read timeout.
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            while not server.stopping.is_set():
                await response.write(b": still thinking\n\n")
                await asyncio.sleep(0.05)
            return response

        async with FakeServer(on_post) as server:
            pump = HttpPump(server.url, bearer=TOKEN, timeout=0.5)
            await pump.send(request(9, "tools/call"))
            answer = await receive(pump)
            await pump.close()
        assert answer["id"] == 9
        assert "within 0.5 s" in answer["error"]["message"]
        assert TOKEN not in json.dumps(answer)

    run(main)


def test_http_errors_answer_the_call_without_the_token() -> None:
    async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=401, text="bad token")

    async def main() -> None:
        async with FakeServer(on_post) as server:
            pump = HttpPump(server.url, bearer=TOKEN, timeout=30)
            await pump.send(request(1, "initialize"))
            refused = await receive(pump)
            await pump.close()
            assert "401" in refused["error"]["message"] and "chock login" in refused["error"]["message"]
            gone = HttpPump(server.url, bearer=TOKEN, timeout=30)
        await gone.send(request(2, "initialize"))  # the server has stopped: nothing listens on its port
        unreachable = await receive(gone)
        await gone.close()
        assert "could not reach" in unreachable["error"]["message"]
        for words in (json.dumps(refused), json.dumps(unreachable), repr(pump), gone.describe_failure()):
            assert TOKEN not in words
        assert repr(pump).endswith("bearer=set)")

    run(main)


@pytest.mark.parametrize("escape_slash", [False, True, "u"])
def test_a_server_that_echoes_the_token_delivers_it_to_no_one(escape_slash: bool | str) -> None:
    """An error body that quotes the header it refused, and a result that quotes it JSON-escaped (`/` too, as
    some encoders write it): each reaches the client with the token cut."""
    token = "mcp/secret\\token+4711"

    async def on_post(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        said = request.headers["authorization"]
        if body["method"] == "initialize":
            return web.json_response({"error": f"token expired: {said}"}, status=401)
        text = json.dumps(result(body, {"content": [{"type": "text", "text": said}]}))
        slash = "\\u002f" if escape_slash == "u" else "\\/" if escape_slash else "/"
        return web.Response(text=text.replace("/", slash), content_type="application/json")

    async def main() -> None:
        async with FakeServer(on_post) as server:
            pump = HttpPump(server.url, bearer=token, timeout=30)
            await pump.send(request(1, "initialize"))
            refused = await receive(pump)
            await pump.send(request(2, "tools/call"))
            answered = await receive(pump)
            await pump.close()
        assert "token expired: Bearer [redacted]" in refused["error"]["message"]
        assert answered["result"]["content"][0]["text"] == "Bearer [redacted]"
        assert "secret" not in json.dumps(refused) + json.dumps(answered)

    run(main)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://example.com/mcp", "only to this machine"),
        ("http://10.0.0.1:8080/mcp", "only to this machine"),
        ("ftp://127.0.0.1/mcp", "https://"),
        ("https://user:pw@example.com/mcp", "chock login"),
    ],
)
def test_an_address_a_token_could_leak_to_is_refused(url: str, why: str) -> None:
    with pytest.raises(ChockError, match=why) as refused:
        HttpPump(url, bearer=TOKEN, timeout=30)
    assert TOKEN not in str(refused.value) and "pw" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["https://example.com/mcp", "http://127.0.0.1:1/mcp", "http://[::1]:1/mcp", "http://localhost/"]
)
def test_https_and_loopback_http_are_accepted(url: str) -> None:
    HttpPump(url, bearer=TOKEN, timeout=30)


def test_event_stream_parsing_follows_the_html_rules_whatever_the_chunking() -> None:
    raw = (
        b'\xef\xbb\xbf: comment\r\nid: 1\r\nretry: 500\r\ndata: {"a":1}\r\ndata:x\r\n\r\n'
        b"event: other\rdata: y\r\rid: 2\ndata:  z\n\nretry: soon\nid: a\0b\ndata: partial"
    )
    whole = EventStream()
    events = whole.feed(raw)
    assert [(e.data, e.event, e.id) for e in events] == [
        ('{"a":1}\nx', "message", "1"),
        ("y", "other", "1"),
        (" z", "message", "2"),
    ]
    assert (whole.last_event_id, whole.retry_ms) == ("2", 500)
    bytewise = EventStream()
    assert [event for i in range(len(raw)) for event in bytewise.feed(raw[i : i + 1])] == events
