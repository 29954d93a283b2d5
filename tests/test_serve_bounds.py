"""serve's bounds on a connection (docs/architecture.md#serve), end to end: a real `chock serve` in front of a
real daemon, and raw sockets that send a request's bytes when the test says, as a slow or hostile client, or a
browser that sends a fetch's body in a packet of its own, would."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

import chock
from chock.serve.headers import SECURITY_HEADERS
from chock.serve.sites import HEAD_SECONDS, MAX_CONNECTIONS
from tests.fakes.serve import ASKS, RawConnection, closed_by_peer, running_stack, slow_session


@pytest.fixture
def stack(home, project, daemons):  # type: ignore[no-untyped-def]
    with running_stack(home, project, daemons, ASKS) as running:
        yield running


@pytest.mark.parametrize("client", ["silent", "trickling", "trickling after a request"])
def test_a_head_not_whole_within_its_bound_is_cut_and_others_are_served_meanwhile(stack, client):
    """A connection's first head is due within the bound of its opening, a later one within the bound of its
    own first byte; a silent connection is cut like one that trickles."""
    serve = stack.start_serve()
    connections = [RawConnection(serve.port) for _ in range(20)]
    if client == "trickling after a request":
        for connection in connections:
            assert connection.request("GET", "/api/health").status == 200
        time.sleep(4)  # idle: the next head's bound runs from its own first byte, not from here
    sockets = [connection.sock for connection in connections]
    began = time.monotonic()
    try:
        if client != "silent":
            for sock in sockets:
                sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        while time.monotonic() - began < HEAD_SECONDS - 2:
            if client != "silent":
                for sock in sockets:
                    sock.sendall(b"a")  # a byte now and then does not move the head's deadline
            assert serve.get("/api/health").status == 200  # others are served all the while
            time.sleep(1)
        assert not any(closed_by_peer(sock, time.monotonic()) for sock in sockets)  # the bound, not less
        deadline = began + HEAD_SECONDS + 5
        assert all(closed_by_peer(sock, deadline) for sock in sockets)  # cut: nothing answered, closed
    finally:
        for connection in connections:
            connection.close()


def test_a_post_whose_body_follows_its_head_gets_its_answer_however_long_the_route_takes(stack):
    session_id = "20260101-000000-5e55e5"
    with slow_session(stack.home, stack.project, session_id, greet_after=7, end_after=7):
        serve = stack.start_serve()
        connection = RawConnection(serve.port)
        try:
            began = time.monotonic()
            stopped = connection.request(
                "POST", f"/api/sessions/{session_id}/stop", {"project": str(stack.project)}, body_after=0.2
            )
            took = time.monotonic() - began
        finally:
            connection.close()
    assert stopped.status == 200 and stopped.json == {"stopped": True}, stopped.body
    assert took > HEAD_SECONDS + 2  # the route outlived a head's bound by far, and its answer came
    assert stack.read(session_id)[-1]["type"] == "session.end"


def test_a_keep_alive_connection_idles_longer_than_a_head_may_take_and_serves_its_next_request(stack):
    serve = stack.start_serve()
    connection = RawConnection(serve.port)
    try:
        unknown = connection.request(
            "POST", "/api/sessions/20260101-000000-0dd0dd/stop", {"project": str(stack.project)}, body_after=0.2
        )
        assert unknown.status == 404, unknown.body
        time.sleep(HEAD_SECONDS + 3)  # idle: aiohttp's keep-alive bound (sites.KEEPALIVE_SECONDS) is the one
        assert connection.request("GET", "/api/health").status == 200
    finally:
        connection.close()


def test_idle_connections_past_the_cap_close_the_oldest_and_serve_answers_on(stack):
    serve = stack.start_serve()
    connections: list[RawConnection] = []
    try:
        for _ in range(MAX_CONNECTIONS + 10):
            connection = RawConnection(serve.port)
            connections.append(connection)
            assert connection.request("GET", "/api/health").status == 200  # then idle, kept alive
        assert serve.get("/api/health").status == 200  # a newcomer is answered: an idle one made room
        deadline = time.monotonic() + 10
        oldest, newest = connections[:10], connections[-10:]
        assert all(closed_by_peer(connection.sock, deadline) for connection in oldest)
        assert all(connection.request("GET", "/api/health").status == 200 for connection in newest)
        # Thirty at once: each closes a different idle one, so the cap holds however they arrive.
        rush = [socket.create_connection(("127.0.0.1", serve.port)) for _ in range(30)]
        time.sleep(1)
        sockets = [connection.sock for connection in connections] + rush
        still = [sock for sock in sockets if not closed_by_peer(sock, time.monotonic())]
        assert len(still) <= MAX_CONNECTIONS, len(still)
        for sock in rush:
            sock.close()
    finally:
        for connection in connections:
            connection.close()


# Requests aiohttp's own parser refuses with a 400, before any route or middleware of serve's runs.
UNPARSABLE = {
    "a bad request line": b"GET /a b c d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "not HTTP at all": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    "a header past its limit": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    "a byte HTTP forbids in a header name": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-B\x01d: y\r\n\r\n",
}

DEBIAN_PYTHON = "/usr/bin/python3"


def _debian_aiohttp() -> bool:
    found = (
        subprocess.run([DEBIAN_PYTHON, "-c", "import aiohttp"], capture_output=True)
        if Path(DEBIAN_PYTHON).exists()
        else None
    )
    return found is not None and found.returncode == 0


@pytest.mark.parametrize("python", ["venv", "debian"])
def test_a_request_aiohttps_parser_refuses_gets_a_400_with_the_security_headers(stack, python):
    """aiohttp answers these without the application (3.8 on Debian 12 and the pip one alike): its 400 must
    still carry the page's Content-Security-Policy and the other headers every response does."""
    if python == "debian":
        # Required: scripts/test installs it (debian-packages.txt lists python3-aiohttp).
        assert _debian_aiohttp(), "Debian's python3-aiohttp is not installed: run scripts/system-packages"
        checkout = str(Path(chock.__file__).resolve().parent.parent)
        serve = stack.start_serve(python=DEBIAN_PYTHON, env={"PYTHONPATH": checkout})
    else:
        serve = stack.start_serve()
    for what, request in UNPARSABLE.items():
        with socket.create_connection(("127.0.0.1", serve.port), timeout=30) as sock:
            sock.sendall(request)
            answer = b""
            try:
                while chunk := sock.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass  # after its answer (what it had not read of the request is thrown away)
        head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        assert re.match(r"HTTP/1\.[01] 400 ", head[0]), (python, what, answer[:200])
        headers = dict(line.split(": ", 1) for line in head[1:])
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (python, what, name, headers)
    assert serve.get("/api/health").status == 200  # and serve goes on serving
