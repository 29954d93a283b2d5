"""One serve over several daemons (docs/remote.md#one-page-over-several-daemons): which hosts it serves, each
host's state behind `GET /api/hosts`, and every route reaching the daemon that owns the session, in-process
against loopback daemons speaking the control protocol's wire (tests/test_serve_unit.py's `FakeDaemon`)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from chock.config import ConfigError, load_config
from chock.control import daemon_protocol as dp
from chock.control.address import Address, BadAddress, parse_address
from chock.control.async_client import AsyncControlClient
from chock.serve import api
from chock.serve.app import make_app
from chock.serve.guard import HostRule
from chock.serve.hosts import serve_hosts
from tests.test_serve_unit import PROJECT, SID, SSE, FakeDaemon, _log

BUILD = parse_address("ssh://me@build.lan")
VM = parse_address("ssh://dev@[fd00::5]:2222")
CONNECTIONS = {"build": BUILD, "vm": VM}
HERE = Address(path="/run/user/1000/chock/daemon.sock")


# --------------------------------------------------------------------------------------------------------
# Which hosts


def test_several_daemons_are_each_local_or_a_connection_by_name_the_first_standing_for_api():
    hosts = serve_hosts(("local", "build", "vm"), connections=CONNECTIONS, local=HERE, environ={})
    assert hosts == [("local", HERE), ("build", BUILD), ("vm", VM)]
    # Nothing named: $CHOCK_DAEMON (one, as before), else config.zon's .serve.daemons, else local.
    assert serve_hosts((), configured=("build", "local"), connections=CONNECTIONS, local=HERE, environ={}) == [
        ("build", BUILD),
        ("local", HERE),
    ]
    assert serve_hosts((), connections=CONNECTIONS, local=HERE, environ={}) == [("local", HERE)]
    env = {"CHOCK_DAEMON": "unix:/tmp/d.sock"}
    assert serve_hosts((), configured=("build",), connections=CONNECTIONS, local=HERE, environ=env) == [
        ("local", Address(path="/tmp/d.sock"))
    ]


def test_one_address_alone_is_served_as_local_as_it_always_was():
    assert serve_hosts(("unix:/tmp/d.sock",), connections={}, local=HERE, environ={}) == [
        ("local", Address(path="/tmp/d.sock"))
    ]
    assert serve_hosts(("build",), connections=CONNECTIONS, local=HERE, environ={}) == [("build", BUILD)]


@pytest.mark.parametrize(
    ("daemon", "says"),
    [
        (("local", "ssh://me@build.lan"), "names each one `local` or a connection's name"),
        (("local", "127.0.0.1:7890"), '.connections = .{ .NAME = "127.0.0.1:7890" }'),
        (("local", "build", "local"), "'local' is given twice"),
        (("local", "nowhere"), "'nowhere' is not a connection in config.zon (connections: build, vm"),
    ],
)
def test_a_host_serve_cannot_name_is_refused_saying_what_to_do(daemon: tuple[str, ...], says: str):
    with pytest.raises(BadAddress) as refused:
        serve_hosts(daemon, connections=CONNECTIONS, local=HERE, environ={})
    assert says in str(refused.value)


def test_config_serve_daemons_is_checked_when_the_file_is_read(tmp_path: Path):
    path = tmp_path / "config.zon"
    path.write_text(
        '.{ .connections = .{ .build = "ssh://me@build.lan" }, .serve = .{ .daemons = .{ "local", "build" } } }'
    )
    assert load_config(path).serve_daemons == ("local", "build")
    for text, says in [
        ('.{ .serve = .{ .daemons = .{ "local", "build" } } }', "'build' is neither `local` nor a connection"),
        ('.{ .serve = .{ .daemons = .{ "local", "local" } } }', "'local' is named twice"),
        ('.{ .serve = .{ .daemons = "local" } }', ".serve.daemons must be a list of names"),
        (".{ .serve = .{ .port = 1 } }", "unknown key .serve.port"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError) as refused:
            load_config(path)
        assert says in str(refused.value), text


# --------------------------------------------------------------------------------------------------------
# Routes over two daemons


class Daemon(FakeDaemon):
    """FakeDaemon with the verbs a client with no project path uses: `sessions`, `instances`, `start-with`."""

    instances: list[dp.InstanceRow] | None = None  # None: an older daemon, which knows no `instances`

    async def _sessions(self, request: dp.SessionsRequest, writer: asyncio.StreamWriter) -> None:
        for session_id in reversed(list(self.logs)):
            writer.write(dp.ListRow("2026-12-01T07:34:50.123Z", self.row(session_id)).encode())

    async def _instances(self, request: dp.InstancesRequest, writer: asyncio.StreamWriter) -> None:
        for row in self.instances or []:
            writer.write(row.encode())

    async def _start_with(self, request: dp.StartWithRequest, writer: asyncio.StreamWriter) -> None:
        self.append(SID, type="session.start", message=request.message, instance=request.instance)
        writer.write(dp.Started(SID, f"/state/sessions/{SID}/log.jsonl").encode())


setattr(Daemon, "_start-with", Daemon._start_with)  # the verb's name, as FakeDaemon looks it up


def two(test: Callable[..., Awaitable[None]], ttl: float = 60.0) -> None:
    """Run `test(local, build, base URL, client, serve's state)` with serve in-process over two daemons."""

    async def main() -> None:
        async with Daemon() as local, Daemon() as build:
            daemons = {
                "local": AsyncControlClient(local.address, timeout=5),
                "build": AsyncControlClient(build.address),
            }
            app = make_app(daemons, HostRule.of(["127.0.0.1"], []))
            app[api.STATE].probes.ttl = ttl
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            try:
                async with aiohttp.ClientSession() as client:
                    await test(local, build, str(server.make_url("/")), client, app[api.STATE])
            finally:
                await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))


async def _json(client: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with client.request(method, url, **kwargs) as response:
        return response.status, await response.json()


def test_each_route_reaches_the_daemon_that_owns_the_session_and_api_stays_locals():
    async def test(local: Daemon, build: Daemon, base: str, client: aiohttp.ClientSession, state: api.State) -> None:
        _log(build, 3)
        body = {"project": PROJECT, "request_id": "r1", "answer": "yes"}
        assert await _json(client, "POST", base + f"api/hosts/build/sessions/{SID}/answer", json=body) == (
            200,
            {"answered": True, "answer": "yes"},
        )
        assert (build.answers, local.answers) == ([(SID, "r1", True)], [])
        # `/api/…` is local's: the session is not there.
        status, _ = await _json(client, "GET", base + f"api/sessions/{SID}/events")
        assert status == 404 and local.verbs == ["read"]
        status, listed = await _json(client, "GET", base + "api/hosts/build/sessions/all")
        assert status == 200 and [row["id"] for row in listed["sessions"]] == [SID]
        assert build.verbs == ["answer", "sessions"]

    two(test)


def test_a_hosts_listing_reaches_the_page_well_typed_and_bounded_as_a_whole(monkeypatch: pytest.MonkeyPatch):
    """Another machine's daemon need not be honest: a row with no session id is left out, a field of the wrong
    kind is its default, and a listing that trickles is cut at LISTING_SECONDS, as a whole."""
    monkeypatch.setattr(api, "LISTING_SECONDS", 1.0)

    async def test(local: Daemon, build: Daemon, base: str, client: aiohttp.ClientSession, state: api.State) -> None:
        _log(build, 3)

        async def hostile(request: dp.SessionsRequest, writer: asyncio.StreamWriter) -> None:
            writer.write(dp.ListRow("t", {"id": ["not", "an", "id"], "status": "running"}).encode())
            writer.write(dp.ListRow("t", {"id": SID, "status": {"x": 1}, "pending_approvals": "9"}).encode())

        build._sessions = hostile  # type: ignore[method-assign]
        status, listed = await _json(client, "GET", base + "api/hosts/build/sessions/all")
        assert status == 200 and len(listed["sessions"]) == 1, listed
        row = listed["sessions"][0]
        assert (row["id"], row["status"], row["pending_approvals"]) == (SID, "", 0)

        async def trickling(request: dp.SessionsRequest, writer: asyncio.StreamWriter) -> None:
            for _ in range(20):
                writer.write(dp.ListRow("t", build.row(SID)).encode())
                await writer.drain()
                await asyncio.sleep(0.3)  # each row well within the wait for a line, the whole far past its bound

        build._sessions = trickling  # type: ignore[method-assign]
        status, refused = await _json(client, "GET", base + "api/hosts/build/sessions/all")
        assert status == 502 and "did not finish answering `sessions` within 1 s" in refused["message"], refused

    two(test)


def test_a_hosts_instances_and_a_start_with_one_of_them():
    async def test(local: Daemon, build: Daemon, base: str, client: aiohttp.ClientSession, state: api.State) -> None:
        build.instances = [dp.InstanceRow("work", "anthropic", True), dp.InstanceRow("cheap", "replay", False)]
        status, listed = await _json(client, "GET", base + "api/hosts/build/instances")
        assert (status, listed) == (
            200,
            {"instances": [
                {"name": "work", "kind": "anthropic", "default": True},
                {"name": "cheap", "kind": "replay", "default": False},
            ]},
        )  # fmt: skip
        body = {"project": PROJECT, "instance": "cheap", "message": "on the cheap one"}
        assert await _json(client, "POST", base + "api/hosts/build/sessions/start-with", json=body) == (
            201,
            {"id": SID},
        )
        assert build.verbs == ["instances", "start-with"] and local.verbs == []
        assert '"instance": "cheap"' in build.logs[SID][0]
        # An older daemon: its unknown-verb says so, and the page offers its default alone (`start`).
        local.errors["instances"] = ("unknown-verb", "unknown verb 'instances'")
        status, refused = await _json(client, "GET", base + "api/hosts/local/instances")
        assert status == 502 and refused["error"] == "unknown-verb"

    two(test)


def test_api_hosts_says_each_hosts_state_and_why_one_does_not_answer_greeting_each_once_per_ttl():
    async def test(local: Daemon, build: Daemon, base: str, client: aiohttp.ClientSession, state: api.State) -> None:
        assert await _json(client, "GET", base + "api/hosts") == (
            200,
            [
                {"name": "local", "state": "reachable", "protocol": dp.PROTOCOL},
                {"name": "build", "state": "reachable", "protocol": dp.PROTOCOL},
            ],
        )
        assert build.server is not None
        build.server.close()
        build.path.unlink()
        # Within the TTL the state is the one already known: a page's polling opens no connection.
        assert (await _json(client, "GET", base + "api/hosts"))[1][1]["state"] == "reachable"
        state.probes.ttl = 0
        status, states = await _json(client, "GET", base + "api/hosts")
        assert status == 200 and states[0]["state"] == "reachable"
        gone = states[1]
        assert gone["name"] == "build" and gone["state"] == "unreachable", gone
        assert gone["reason"].startswith("no chock daemon answers at") and "\n" not in gone["reason"]
        # The other host keeps working.
        status, _ = await _json(client, "GET", base + f"api/hosts/local/sessions?project={PROJECT}")
        assert status == 200

    two(test)


def test_an_sse_id_names_the_host_and_the_session_and_a_resume_from_one_names_the_same():
    async def test(local: Daemon, build: Daemon, base: str, client: aiohttp.ClientSession, state: api.State) -> None:
        _log(build, 6)
        url = base + f"api/hosts/build/sessions/{SID}/watch?project={PROJECT}"
        async with client.get(url) as response:
            stream = SSE(response)
            ids = []
            while len(ids) < 6:
                message = await stream.next()
                assert message is not None
                if "id" in message:
                    ids.append(message["id"])
        assert ids == [f"build/{SID}/{n}" for n in range(1, 7)]
        async with client.get(url, headers={"Last-Event-ID": f"build/{SID}/4"}) as response:
            stream = SSE(response)
            message = await stream.next()
            while message is not None and "id" not in message:
                message = await stream.next()
            assert message is not None and message["id"] == f"build/{SID}/5"
        for other in (f"local/{SID}/4", "build/20261201-073450-ffffff/4"):
            async with client.get(url, headers={"Last-Event-ID": other}) as response:
                assert response.status == 400
                assert "another stream" in (await response.json())["message"]

    two(test)


def test_serve_acts_on_no_path_a_daemon_sends():
    """A start's reply holds the log's path on the daemon's machine; serve answers with the id alone."""

    async def test(local: Daemon, build: Daemon, base: str, client: aiohttp.ClientSession, state: api.State) -> None:
        body = {"project": PROJECT, "message": "go"}
        status, started = await _json(client, "POST", base + "api/hosts/build/sessions", json=body)
        assert (status, started) == (201, {"id": SID})

    two(test)


def test_serve_resolves_no_project_path_of_a_daemon_on_another_machine(monkeypatch, tmp_path: Path):
    """A project a daemon over ssh names is a directory on that machine: serve compares it as text, and never
    resolves it (nor the one a browser names for it) through this machine's files — a symlink here says
    nothing of a path there, and resolving a path a remote chose can hang serve on a mount of this one."""
    from chock.control import reach

    resolved: list[str] = []
    real_realpath = os.path.realpath

    def realpath(path: Any, **kwargs: Any) -> str:
        if sys._getframe(1).f_globals["__name__"].startswith("chock."):  # serve's, not the fake daemon's
            resolved.append(os.fspath(path))
        return real_realpath(path, **kwargs)

    async def main() -> None:
        async with Daemon() as build:
            _log(build, 2)
            # The ssh transport alone is stood in for: the bytes go to the fake daemon's socket.
            monkeypatch.setattr(reach, "dial_ssh", lambda target: reach.connect(str(build.path), 5))
            monkeypatch.setattr(os.path, "realpath", realpath)
            app = make_app({"build": AsyncControlClient(BUILD, timeout=5)}, HostRule.of(["127.0.0.1"], []))
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            try:
                async with aiohttp.ClientSession() as client:
                    url = str(server.make_url(f"/api/hosts/build/sessions/{SID}/watch?project={PROJECT}/."))
                    async with client.get(url) as response:
                        assert response.status == 200
                        stream = SSE(response)
                        while (message := await stream.next()) is not None and "id" not in message:
                            pass
                        assert message is not None and message["id"] == f"build/{SID}/1"
                    url = str(server.make_url(f"/api/hosts/build/sessions/{SID}/watch?project=/srv/other"))
                    async with client.get(url) as response:
                        assert response.status == 404
            finally:
                monkeypatch.setattr(os.path, "realpath", real_realpath)
                await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert not [path for path in resolved if path.startswith(("/srv", PROJECT))], resolved


class Flooding(Daemon):
    """A daemon that answers `list` and `instances` with more lines than any listing keeps."""

    async def _list(self, request: dp.ListRequest, writer: asyncio.StreamWriter) -> None:
        line = dp.ListRow("2026-12-01T07:34:50.123Z", self.row(SID)).encode()
        for _ in range(dp.MAX_SESSIONS + 5):
            writer.write(line)
            await writer.drain()

    async def _instances(self, request: dp.InstancesRequest, writer: asyncio.StreamWriter) -> None:
        line = dp.InstanceRow("work", "anthropic", False).encode()
        for _ in range(dp.MAX_SESSIONS + 5):
            writer.write(line)
            await writer.drain()


def test_a_host_that_lists_without_end_is_cut_at_the_most_a_listing_keeps():
    """A host's `list` and `instances` are untrusted as its `sessions` is: serve keeps at most MAX_SESSIONS
    lines of each, not whatever a daemon goes on sending."""

    async def main() -> None:
        async with Flooding() as build:
            _log(build, 1)
            app = make_app({"build": AsyncControlClient(build.address)}, HostRule.of(["127.0.0.1"], []))
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            try:
                async with aiohttp.ClientSession() as client:
                    base = str(server.make_url("/api/hosts/build/"))
                    status, listed = await _json(client, "GET", base + f"sessions?project={PROJECT}")
                    assert status == 200 and len(listed["sessions"]) == dp.MAX_SESSIONS
                    status, listed = await _json(client, "GET", base + "instances")
                    assert status == 200 and len(listed["instances"]) == dp.MAX_SESSIONS
            finally:
                await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))
