"""`chock serve` in-process against a loopback daemon that speaks the control protocol's wire.

The fake implements the wire (the codec's `ServerConnection` and encoders), not serve's interface, so these
tests reach the edges a real daemon will not show on demand: another protocol number, every error code, a
log far longer than serve's buffer, a browser that cannot keep up. `tests/test_serve.py` runs the real
daemon and the real serve process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp.test_utils import TestServer

from chock.control import daemon_protocol as dp
from chock.control.address import Address
from chock.control.async_client import AsyncControlClient
from chock.control.connection import NEED_DATA, ServerConnection
from chock.control.framing import ProtocolError
from chock.control.greeting import Greeted
from chock.serve import api, feeds
from chock.serve.app import make_app
from chock.serve.guard import HostRule, _origin_matches, split_host
from tests.fakes.wait import wait_until_async

SID = "20261201-073450-a1b2c3"
PROJECT = "/srv/project"


class FakeDaemon:
    """A daemon on a unix socket: the greeting, then one verb per connection, over the real codec."""

    def __init__(self, number: int = dp.PROTOCOL) -> None:
        self.number = number
        self.logs: dict[str, list[str]] = {}
        self.ended: set[str] = set()
        self.watchers: dict[str, list[asyncio.Queue[str | None]]] = {}
        self.verbs: list[str] = []
        self.errors: dict[str, tuple[str, str]] = {}  # verb -> (code, text) to refuse it with
        self.answers: list[tuple[str, str, bool]] = []
        self.path = Path(tempfile.mkdtemp(dir="/tmp")) / "d.sock"
        self.server: asyncio.AbstractServer | None = None

    @property
    def address(self) -> Address:
        return Address(path=str(self.path))

    async def __aenter__(self) -> FakeDaemon:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        for queues in self.watchers.values():
            for queue in queues:
                queue.put_nowait(None)
        self.server.close()

    def append(self, session_id: str, **fields: Any) -> int:
        log = self.logs.setdefault(session_id, [])
        event = {"id": len(log) + 1, "at": "2026-12-01T07:34:50.123Z", **fields}
        line = json.dumps(event)
        log.append(line)
        if fields.get("type") == "session.end":
            self.ended.add(session_id)
        for queue in self.watchers.get(session_id, []):
            queue.put_nowait(line)
            if session_id in self.ended:
                queue.put_nowait(None)
        return event["id"]

    def row(self, session_id: str) -> dict[str, Any]:
        status = "ended" if session_id in self.ended else "running"
        return {"id": session_id, "project": PROJECT, "status": status, "last_event_id": len(self.logs[session_id])}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = ServerConnection(dp.CONTROL, number=self.number)
        try:
            while True:
                try:
                    item = connection.next_event()
                except ProtocolError as error:
                    writer.write(error.encode())
                    return
                if item is NEED_DATA:
                    data = await reader.read(65536)
                    if not data:
                        return
                    connection.receive_data(data)
                    continue
                if isinstance(item, Greeted):
                    writer.write(connection.greeting_reply())
                    continue
                self.verbs.append(item.verb)
                if item.verb in self.errors:
                    writer.write(ProtocolError(*self.errors[item.verb]).encode())
                    return
                await getattr(self, "_" + item.verb)(item, writer)
                return
        finally:
            await writer.drain()
            writer.close()

    def _known(self, session_id: str, writer: asyncio.StreamWriter) -> bool:
        if session_id in self.logs:
            return True
        writer.write(ProtocolError("not-found", f"no session {session_id}").encode())
        return False

    async def _list(self, request: dp.ListRequest, writer: asyncio.StreamWriter) -> None:
        for session_id in self.logs:
            writer.write(dp.ListRow("2026-12-01T07:34:50.123Z", self.row(session_id)).encode())

    async def _start(self, request: dp.StartRequest, writer: asyncio.StreamWriter) -> None:
        self.append(SID, type="session.start", message=request.message)
        writer.write(dp.Started(SID, f"/state/sessions/{SID}/log.jsonl").encode())

    async def _read(self, request: dp.ReadRequest, writer: asyncio.StreamWriter) -> None:
        if self._known(request.session_id, writer):
            for line in self.logs[request.session_id][request.after :]:
                writer.write(dp.EventLine.raw(line.encode()))

    async def _answer(self, request: dp.AnswerRequest, writer: asyncio.StreamWriter) -> None:
        self.answers.append((request.session_id, request.request_id, request.yes))
        writer.write(dp.Answered().encode())

    async def _watch(self, request: dp.WatchRequest, writer: asyncio.StreamWriter) -> None:
        if not self._known(request.session_id, writer):
            return
        if os.path.realpath(request.project) != PROJECT:  # as the daemon compares projects
            refusal = f"{request.session_id} is not a session of {request.project}"
            writer.write(ProtocolError("not-found", refusal).encode())
            return
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.watchers.setdefault(request.session_id, []).append(queue)
        writer.write(dp.WatchHeader(self.row(request.session_id)).encode())
        for line in self.logs[request.session_id][request.after :]:
            writer.write(dp.EventLine.raw(line.encode()))
        if request.session_id in self.ended:
            return
        while (line := await queue.get()) is not None:
            writer.write(dp.EventLine.raw(line.encode()))
            await writer.drain()


def run(test: Callable[..., Awaitable[None]], **fake: Any) -> None:
    """Run `test(fake daemon, http client base URL, client session)` with serve in-process over TCP."""

    async def main() -> None:
        async with FakeDaemon(**fake) as daemon:
            app = make_app(AsyncControlClient(daemon.address, timeout=5), HostRule.of(["127.0.0.1"], []))
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            try:
                async with aiohttp.ClientSession() as client:
                    await test(daemon, str(server.make_url("/")), client)
            finally:
                await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))


class SSE:
    """A Server-Sent Events reader over an aiohttp response: messages as dicts of their fields."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.comments = 0

    async def next(self, timeout: float = 10) -> dict[str, str] | None:
        message: dict[str, str] = {}
        while True:
            raw = await asyncio.wait_for(self.response.content.readline(), timeout)
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if not line:
                if "data" in message:  # a block with no data (`retry:` alone) dispatches nothing
                    return message
                message = {}
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(":")
            message[name] = value.removeprefix(" ")

    async def events(self, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        got = []
        while len(got) < count:
            message = await self.next(timeout)
            assert message is not None, f"the stream ended after {len(got)} of {count} events"
            if "id" in message:
                event = json.loads(message["data"])
                host, session, number = message["id"].split("/")  # the host, the session, the event
                assert (host, len(session), int(number)) == ("local", len(SID), event["id"])
                got.append(event)
        return got


def _log(daemon: FakeDaemon, count: int) -> None:
    daemon.append(SID, type="session.start", message="tidy up")
    for index in range(count - 1):
        daemon.append(SID, type="assistant.delta", text=f"piece {index} ")


# --------------------------------------------------------------------------------------------------------
# Routes and error mapping


def test_health_names_the_daemon_and_its_protocol_number():
    async def test(daemon, base, client):
        async with client.get(base + "api/health") as response:
            assert response.status == 200
            body = await response.json()
        assert body == {"ok": True, "daemon": f"unix:{daemon.path}", "protocol": 1}

    run(test)


def test_a_daemon_of_another_protocol_number_is_502_naming_both_numbers():
    async def test(daemon, base, client):
        for path in ("api/health", "api/sessions?project=/srv/project"):
            async with client.get(base + path) as response:
                assert response.status == 502
                text = (await response.json())["message"]
            assert "chock-control 1" in text and "chock-control 2" in text, text

    run(test, number=2)


def test_no_daemon_is_502_naming_the_address():
    async def main() -> None:
        address = Address(path="/tmp/nowhere-chock-test/d.sock")
        server = TestServer(make_app(AsyncControlClient(address), HostRule.of(["127.0.0.1"], [])), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as client:
                async with client.get(server.make_url("/api/sessions?project=/srv/p")) as response:
                    assert response.status == 502
                    body = await response.json()
                assert "unix:/tmp/nowhere-chock-test/d.sock" in body["message"]
                async with client.get(server.make_url("/api/health")) as response:
                    assert response.status == 502
                    assert (await response.json())["ok"] is False
        finally:
            await server.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("code", "status"),
    [("not-found", 404), ("bad-request", 400), ("forbidden", 403), ("refused", 422), ("not-pending", 409),
     ("unreachable", 409), ("internal", 502)],
)  # fmt: skip
def test_daemon_errors_map_to_http_statuses_with_the_daemons_text(code, status):
    async def test(daemon, base, client):
        daemon.errors["start"] = (code, f"the daemon says {code}")
        body = {"project": PROJECT, "message": "hi"}
        async with client.post(base + "api/sessions", json=body) as response:
            assert response.status == status
            assert await response.json() == {"error": code, "message": f"the daemon says {code}"}

    run(test)


def test_a_daemon_too_old_to_know_a_steering_verb_is_502_saying_to_update_it():
    async def test(daemon, base, client):
        for route, verb, body in [
            ("stop", "stop", {"project": PROJECT}),
            ("messages", "say", {"project": PROJECT, "message": "more"}),
            ("remove", "remove", {"project": PROJECT}),
        ]:
            daemon.errors[verb] = ("unknown-verb", f"unknown verb {verb!r}")
            async with client.post(base + f"api/sessions/{SID}/{route}", json=body) as response:
                assert response.status == 502
                reply = await response.json()
            assert reply["error"] == "unknown-verb"
            assert reply["message"] == (
                f"the daemon at {daemon.address} needs a newer Chock for `{verb}` (it answered unknown-verb): "
                "upgrade chock there"
            )
        assert daemon.verbs == ["stop", "say", "remove"]

    run(test)


def test_each_route_is_one_daemon_verb():
    async def test(daemon, base, client):
        async with client.post(base + "api/sessions", json={"project": PROJECT, "message": "tidy\tup"}) as r:
            assert r.status == 201
            assert await r.json() == {"id": SID}
        daemon.append(SID, type="approval.request", request_id="r2", tool="shell", summary="ls")
        async with client.get(base + f"api/sessions?project={PROJECT}") as r:
            assert (await r.json())["sessions"][0]["id"] == SID
        async with client.get(base + f"api/sessions/{SID}/events?after=1") as r:
            events = (await r.json())["events"]
        assert [e["id"] for e in events] == [2] and events[0]["type"] == "approval.request"
        body = {"project": PROJECT, "request_id": "r2", "answer": "yes"}
        async with client.post(base + f"api/sessions/{SID}/answer", json=body) as r:
            assert r.status == 200
        assert daemon.answers == [(SID, "r2", True)]
        assert daemon.verbs == ["start", "list", "read", "answer"]
        async with client.get(base + "api/sessions/not-an-id/events") as r:
            assert r.status == 400
        async with client.get(base + f"api/sessions/{SID}/events?after=-1") as r:
            assert r.status == 400
        async with client.get(base + "api/sessions/20261201-073450-ffffff/events") as r:
            assert r.status == 404
        assert daemon.logs[SID][0] == json.dumps(
            {"id": 1, "at": "2026-12-01T07:34:50.123Z", "type": "session.start", "message": "tidy\tup"}
        )

    run(test)


def test_every_route_is_served_below_its_host_and_the_local_hosts_alias():
    async def test(daemon, base, client):
        async with client.get(base + "api/hosts") as r:
            assert await r.json() == [{"name": "local", "state": "reachable", "protocol": dp.PROTOCOL}]
        body = {"project": PROJECT, "message": "on the local host"}
        async with client.post(base + "api/hosts/local/sessions", json=body) as r:
            assert (r.status, await r.json()) == (201, {"id": SID})
        for prefix in ("api/hosts/local", "api"):
            async with client.get(base + f"{prefix}/sessions?project={PROJECT}") as r:
                assert [row["id"] for row in (await r.json())["sessions"]] == [SID]
            async with client.get(base + f"{prefix}/sessions/{SID}/events") as r:
                assert [e["message"] for e in (await r.json())["events"]] == ["on the local host"]
            async with client.get(base + f"{prefix}/health") as r:
                assert (await r.json())["ok"] is True
        assert daemon.verbs == ["start", "list", "read", "list", "read"]
        async with client.get(base + f"api/hosts/elsewhere/sessions?project={PROJECT}") as r:
            assert r.status == 404
            assert "no host 'elsewhere'" in (await r.json())["message"]
        async with client.post(base + f"api/hosts/elsewhere/sessions/{SID}/stop", json={"project": PROJECT}) as r:
            assert r.status == 404
        assert daemon.verbs == ["start", "list", "read", "list", "read"]  # nothing reached a daemon

    run(test)


def test_an_unsafe_method_needs_a_json_body_and_no_foreign_origin():
    async def test(daemon, base, client):
        async with client.post(
            base + "api/sessions",
            data="project=/srv/project&message=hi",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ) as r:
            assert r.status == 415
        async with client.post(
            base + "api/sessions", json={"project": PROJECT, "message": "hi"}, headers={"Origin": "http://evil.example"}
        ) as r:
            assert r.status == 403
        assert daemon.verbs == []

    run(test)


# --------------------------------------------------------------------------------------------------------
# The watch: fan-out, resume, heartbeat, the end


def test_many_browsers_on_one_session_share_one_upstream_watch():
    async def test(daemon, base, client):
        _log(daemon, 3)
        url = base + f"api/sessions/{SID}/watch?project={PROJECT}"
        responses = [await client.get(url) for _ in range(5)]
        streams = [SSE(r) for r in responses]
        for response in responses:
            assert response.headers["X-Accel-Buffering"] == "no"
            assert response.headers["Content-Type"].startswith("text/event-stream")
        first = await streams[0].next()
        assert first["event"] == "row" and json.loads(first["data"])["id"] == SID
        for stream in streams:
            assert [e["id"] for e in await stream.events(3)] == [1, 2, 3]
        for index in range(4, 21):
            daemon.append(SID, type="assistant.delta", text=f"more {index}")
        for stream in streams:
            assert [e["id"] for e in await stream.events(17)] == list(range(4, 21))
        assert daemon.verbs.count("watch") == 1
        daemon.append(SID, type="session.end", reason="completed", exit_code=0)
        for stream in streams:
            assert [e["id"] for e in await stream.events(1)] == [21]
            end = await stream.next()
            assert end["event"] == "end" and json.loads(end["data"]) == {"last_event_id": 21}
            assert await stream.next() is None
        for response in responses:
            response.close()

    run(test)


def test_last_event_id_resumes_after_it_and_wins_over_after():
    async def test(daemon, base, client):
        _log(daemon, 9)
        url = base + f"api/sessions/{SID}/watch?project={PROJECT}&after=2"
        async with client.get(url, headers={"Last-Event-ID": "5"}) as response:
            assert [e["id"] for e in await SSE(response).events(4)] == [6, 7, 8, 9]
        async with client.get(url) as response:
            assert [e["id"] for e in await SSE(response).events(7)] == list(range(3, 10))
        async with client.get(url, headers={"Last-Event-ID": "x"}) as response:
            assert response.status == 400

    run(test)


def test_a_browser_behind_the_buffer_reads_the_gap_from_the_daemon_with_no_hole_and_no_repeat(monkeypatch):
    monkeypatch.setattr(feeds, "BUFFER_EVENTS", 10)

    async def test(daemon, base, client):
        _log(daemon, 5)
        url = base + f"api/sessions/{SID}/watch?project={PROJECT}"
        first = await client.get(url + "&after=4")
        live = SSE(first)
        assert [e["id"] for e in await live.events(1)] == [5]
        for _ in range(40):
            daemon.append(SID, type="assistant.delta", text="x")
        assert [e["id"] for e in await live.events(40)] == list(range(6, 46))
        # The feed's buffer now starts at 36; a browser that has 3 needs 4..35 from the daemon's read.
        async with client.get(url + "&after=3") as response:
            late = SSE(response)
            assert [e["id"] for e in await late.events(42)] == list(range(4, 46))
            daemon.append(SID, type="assistant.delta", text="y")
            assert [e["id"] for e in await late.events(1)] == [46]
        assert daemon.verbs.count("watch") == 1 and daemon.verbs.count("read") == 1
        first.close()

    run(test)


def test_a_browser_that_cannot_keep_up_is_cut_off_and_resumes(monkeypatch):
    monkeypatch.setattr(feeds, "PENDING_EVENTS", 5)

    async def test(daemon, base, client):
        _log(daemon, 1)
        url = base + f"api/sessions/{SID}/watch?project={PROJECT}"
        async with client.get(url) as response:
            stream = SSE(response)
            assert [e["id"] for e in await stream.events(1)] == [1]
            for _ in range(20):  # all at once, before the response's task runs again
                daemon.append(SID, type="assistant.delta", text="x")
            await asyncio.sleep(0.5)
            while (message := await stream.next()) is not None:
                assert message.get("event") != "end"
        async with client.get(url, headers={"Last-Event-ID": "1"}) as response:
            assert [e["id"] for e in await SSE(response).events(20)] == list(range(2, 22))

    run(test)


def test_a_quiet_stream_gets_a_comment_heartbeat(monkeypatch):
    monkeypatch.setattr(feeds, "HEARTBEAT", 0.2)

    async def test(daemon, base, client):
        _log(daemon, 1)
        async with client.get(base + f"api/sessions/{SID}/watch?project={PROJECT}") as response:
            stream = SSE(response)
            await stream.events(1)
            lines = [await asyncio.wait_for(response.content.readline(), 2) for _ in range(6)]
        assert lines.count(b": keep-alive\n") == 3 and lines.count(b"\n") == 3, lines

    run(test)


def test_a_watch_of_an_unknown_session_is_404_before_any_stream():
    async def test(daemon, base, client):
        async with client.get(base + f"api/sessions/{SID}/watch?project={PROJECT}") as response:
            assert response.status == 404
            assert response.headers["Content-Type"].startswith("application/json")
        async with client.get(base + f"api/sessions/{SID}/watch") as response:
            assert response.status == 400

    run(test)


def test_an_ended_session_streams_its_events_then_end():
    async def test(daemon, base, client):
        _log(daemon, 3)
        daemon.append(SID, type="session.end", reason="completed", exit_code=0)
        async with client.get(base + f"api/sessions/{SID}/watch?project={PROJECT}&after=2") as response:
            stream = SSE(response)
            assert [e["id"] for e in await stream.events(2)] == [3, 4]
            assert (await stream.next())["event"] == "end"
            assert await stream.next() is None

    run(test)


def test_every_spelling_of_the_project_shares_one_upstream_watch_and_another_project_is_404():
    async def test(daemon, base, client):
        _log(daemon, 2)
        url = base + f"api/sessions/{SID}/watch"
        spellings = [PROJECT, PROJECT + "/.", "/srv//project/", "/srv/elsewhere/../project/./."]
        responses = [await client.get(url, params={"project": project}) for project in spellings]
        for response in responses:
            assert [e["id"] for e in await SSE(response).events(2)] == [1, 2]
        daemon.append(SID, type="assistant.delta", text="for all")
        for response in responses:
            assert [e["id"] for e in await SSE(response).events(1)] == [3]
        assert daemon.verbs.count("watch") == 1
        async with client.get(url, params={"project": "/srv/other"}) as response:
            assert response.status == 404
            body = await response.json()
        assert body["error"] == "not-found" and "/srv/other" in body["message"]
        for response in responses:
            response.close()

    run(test)


def test_a_browser_naming_the_right_project_is_not_refused_with_one_that_named_another_at_once():
    async def test(daemon, base, client):
        _log(daemon, 2)
        url = base + f"api/sessions/{SID}/watch"
        # The first asks the daemon; the second waits for that answer, which is about another project.
        wrong, right = await asyncio.gather(
            client.get(url, params={"project": "/srv/other"}), client.get(url, params={"project": PROJECT + "/."})
        )
        assert wrong.status == 404 and right.status == 200
        assert [e["id"] for e in await SSE(right).events(2)] == [1, 2]
        wrong.close()
        right.close()

    run(test)


def test_past_a_cap_an_event_stream_is_503_naming_the_cap_and_a_place_comes_back_when_a_stream_closes(monkeypatch):
    monkeypatch.setattr(feeds, "STREAMS_PER_SESSION", 2)
    monkeypatch.setattr(feeds, "STREAMS", 3)
    monkeypatch.setattr(feeds, "SESSIONS", 2)
    others = ["20261201-073450-000002", "20261201-073450-000003"]

    async def test(daemon, base, client):
        for session_id in (SID, *others):
            daemon.append(session_id, type="session.start", message="m")

        async def open_stream(session_id: str) -> aiohttp.ClientResponse:
            return await client.get(base + f"api/sessions/{session_id}/watch", params={"project": PROJECT})

        async def refusal(session_id: str) -> str:
            async with await open_stream(session_id) as response:
                assert response.status == 503
                assert response.headers["Retry-After"].isdigit()
                body = await response.json()
            assert body["error"] == "busy", body
            return body["message"]

        async def refused(session_id: str, words: str) -> None:
            # A stream the browser closed is let go once serve notices: that takes a moment.
            await wait_until_async(lambda: _says(refusal(session_id), words), 5, words)

        first = [await open_stream(SID), await open_stream(SID)]
        await refused(SID, f"session {SID} has 2 event streams open")
        second = await open_stream(others[0])
        await refused(others[1], "serve has 3 event streams open")
        first.pop().close()
        await refused(others[1], "serve is watching 2 sessions")
        for response in [*first, second]:
            assert (await SSE(response).next())["event"] == "row"
        second.close()  # its feed lingers for a reload, but gives way to a session somebody watches

        async def opened() -> aiohttp.ClientResponse | None:
            response = await open_stream(others[1])
            if response.status == 200:
                return response
            response.close()
            return None

        third = await wait_until_async(opened, 5, "a stream of a third session")
        assert [e["id"] for e in await SSE(third).events(1)] == [1]
        third.close()
        for response in first:
            response.close()

    run(test)


async def _says(text: Awaitable[str], words: str) -> bool:
    return words in await text


def test_a_browser_that_stops_reading_is_cut_off_and_its_place_freed(monkeypatch, caplog):
    monkeypatch.setattr(feeds, "WRITE_STALL", 0.5)
    monkeypatch.setattr(feeds, "HEARTBEAT", 0.5)  # the stream's one timer looks at its writes this often
    monkeypatch.setattr(feeds, "STREAMS_PER_SESSION", 1)

    async def test(daemon, base, client):
        _log(daemon, 1)
        url = yarl.URL(base)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes little, then nothing
        stalled.connect((url.host, url.port))
        stalled.sendall(
            f"GET /api/sessions/{SID}/watch?project={PROJECT} HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n\r\n".encode()
        )
        for _ in range(400):  # about 8 MB: more than the sockets between hold
            daemon.append(SID, type="tool.result", output="x" * 20_000)

        async def opened() -> aiohttp.ClientResponse | None:
            response = await client.get(base + f"api/sessions/{SID}/watch", params={"project": PROJECT})
            if response.status == 200:
                return response
            response.close()
            return None

        response = await wait_until_async(opened, 10, "the stalled stream's place")
        assert [e["id"] for e in await SSE(response).events(401)] == list(range(1, 402))
        response.close()
        stalled.close()

    run(test)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text


def test_events_replies_at_once_are_capped_and_each_is_the_whole_log(monkeypatch):
    monkeypatch.setattr(api, "READS", 1)

    async def test(daemon, base, client):
        _log(daemon, 1)
        for index in range(1500):  # about 15 MB: more than the sockets between hold, so the first reply waits
            daemon.append(SID, type="tool.result", output=f"{index} " + "x" * 10_000)
        url = base + f"api/sessions/{SID}/events"
        first = await client.get(url)
        assert first.status == 200
        async with client.get(url + "?after=1000") as response:
            assert response.status == 503
            assert "1 event replies" in (await response.json())["message"]
        events = json.loads(await first.read())["events"]
        assert [e["id"] for e in events] == list(range(1, 1502))
        assert [json.dumps(e) for e in events] == daemon.logs[SID]
        async with client.get(url + "?after=1000") as response:
            assert [e["id"] for e in (await response.json())["events"]] == list(range(1001, 1502))

    run(test)


def test_an_events_reply_that_fails_halfway_is_cut_short_never_a_shorter_log_that_looks_whole():
    async def test(daemon, base, client):
        _log(daemon, 2)
        daemon.logs[SID].append("this line is no event")
        for _ in range(300):
            daemon.append(SID, type="tool.result", output="x" * 4_000)
        async with client.get(base + f"api/sessions/{SID}/events") as response:
            assert response.status == 200  # the failure comes after the reply began
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()

    run(test)


@pytest.mark.parametrize(
    "body",
    [b'{"a":' * 20_000 + b"1" + b"}" * 20_000, b"[" * 20_000, b'{"project": "/p", "message": "m", "x": '
     + b"[" * 20_000 + b"]" * 20_000 + b"}"],
    ids=["deep-object", "deep-unclosed-array", "deep-inside-a-good-body"],
)  # fmt: skip
def test_a_body_nested_too_deep_is_400_and_nothing_reaches_the_daemon(body):
    async def test(daemon, base, client):
        headers = {"Content-Type": "application/json"}
        async with client.post(base + "api/sessions", data=body, headers=headers) as response:
            assert response.status == 400
            reply = await response.json()
        assert reply["error"] == "bad-request" and "deeper than" in reply["message"]
        async with client.post(base + f"api/sessions/{SID}/answer", data=body, headers=headers) as response:
            assert response.status == 400
        assert daemon.verbs == []

    run(test)


# --------------------------------------------------------------------------------------------------------
# The Host and Origin rules


def test_the_host_rule():
    rule = HostRule.of(["127.0.0.1"], ["chock.example.com", "other.example:8443"])
    local = ("127.0.0.1", 7891)
    for host in ("127.0.0.1:7891", "localhost:7891", "LOCALHOST:7891", "[::1]:7891", "chock.example.com",
                 "chock.example.com:443", "other.example:8443"):  # fmt: skip
        assert rule.accepts(host, local), host
    for host in ("evil.example:7891", "127.0.0.1:80", "localhost:7892", "other.example:443", "", None,
                 "a@localhost:7891", "localhost:7891/x", "127.0.0.2:7891"):  # fmt: skip
        assert not rule.accepts(host, local), host
    # --host 0.0.0.0 reached at one of the machine's addresses: that literal is the listener's own
    wild = HostRule.of(["0.0.0.0"], [])
    assert wild.accepts("192.168.1.5:7891", ("192.168.1.5", 7891))
    assert not wild.accepts("evil.example:7891", ("192.168.1.5", 7891))
    assert split_host("[::1]:80") == ("::1", 80)


def test_the_origin_rule():
    assert _origin_matches("http://127.0.0.1:7891", "127.0.0.1:7891")
    assert _origin_matches("https://chock.example.com", "chock.example.com")
    assert not _origin_matches("http://evil.example:7891", "127.0.0.1:7891")
    assert not _origin_matches("null", "127.0.0.1:7891")
    assert not _origin_matches("http://127.0.0.1:7892", "127.0.0.1:7891")
