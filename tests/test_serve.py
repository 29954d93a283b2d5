"""`chock serve` end to end: a real `chock daemon`, a real `chock serve`, real `chock run` children.

Each test starts its own daemon (tests/fakes/daemon.py) and serve on short socket paths (a unix socket
path must stay under 108 bytes, and a pytest tmp dir is long), talks HTTP to serve as a browser or curl
would, and kills whatever sessions it left running. `tests/test_serve_unit.py` covers what a real daemon
will not show on demand.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from chock.control import daemon_protocol as dp
from chock.log.writer import SessionLog
from tests.fakes.daemon import short_dir
from tests.fakes.notify import NotifySocket
from tests.fakes.serve import ASKS, Serve, answer, ended, pending, running_stack
from tests.fakes.wait import wait_until


@pytest.fixture
def stack(home, project, daemons):  # type: ignore[no-untyped-def]
    with running_stack(home, project, daemons, ASKS) as running:
        yield running


# --------------------------------------------------------------------------------------------------------
# A streaming HTTP client: real curl -N where it is installed, else a raw socket doing the same


_RAW_CLIENT = r"""
import socket, sys
host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
headers = "".join(f"{h}\r\n" for h in sys.argv[4:])
sock = socket.create_connection((host, port))
sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n{headers}\r\n".encode())
buffer = b""
while b"\r\n\r\n" not in buffer:
    buffer += sock.recv(65536)
head, _, body = buffer.partition(b"\r\n\r\n")
chunked = b"transfer-encoding: chunked" in head.lower()
out = sys.stdout.buffer
def emit(data):
    out.write(data)
    out.flush()
pending = body
while True:
    if chunked:
        while b"\r\n" in pending:
            size_line, _, rest = pending.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                sys.exit(0)
            if len(rest) < size + 2:
                break
            emit(rest[:size])
            pending = rest[size + 2:]
    else:
        emit(pending)
        pending = b""
    data = sock.recv(65536)
    if not data:
        break
    pending += data
"""


class Stream:
    """`curl -N URL` (or the raw client) on a thread: its output lines as they come."""

    def __init__(self, serve: Serve, path: str, headers: dict[str, str] | None = None) -> None:
        headers = headers or {}
        if shutil.which("curl"):
            command = ["curl", "-sSN", *[a for h in headers.items() for a in ("-H", f"{h[0]}: {h[1]}")]]
            command.append(f"http://127.0.0.1:{serve.port}{path}")
        else:
            command = [sys.executable, "-c", _RAW_CLIENT, "127.0.0.1", str(serve.port), path,
                       *[f"{k}: {v}" for k, v in headers.items()]]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def messages(self, timeout: float = 60):  # type: ignore[no-untyped-def]
        """SSE messages as dicts of their fields, as they arrive; ends when the stream does."""
        message: dict[str, str] = {}
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                return
            if not line:
                if "data" in message:
                    yield message
                message = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                message[name] = value.removeprefix(" ")

    def events_until(self, predicate, timeout: float = 60) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        got = []
        for message in self.messages(timeout):
            if "id" in message:
                event = json.loads(message["data"])
                assert message["id"].startswith("local/") and message["id"].endswith(f"/{event['id']}")
                got.append(event)
                if predicate(event):
                    return got
        raise AssertionError(f"the stream ended first; it sent {[e['type'] for e in got]}")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait(10)


# --------------------------------------------------------------------------------------------------------
# The API


def test_each_route_maps_onto_a_daemon_verb(stack):
    serve = stack.start_serve()
    health = serve.get("/api/health")
    assert health.status == 200
    assert health.json == {"ok": True, "daemon": f"unix:{stack.daemon_socket}", "protocol": 1}

    listed = serve.get(f"/api/sessions?project={stack.project}")
    assert listed.status == 200 and listed.json == {"project": str(stack.project), "sessions": []}

    started = serve.post("/api/sessions", {"project": str(stack.project), "message": "do\tboth\nsteps"})
    assert started.status == 201, started.body
    session_id = started.json["id"]
    assert list(started.json) == ["id"]  # no path handed out

    rows = serve.get(f"/api/sessions?project={stack.project}").json["sessions"]
    assert [r["id"] for r in rows] == [session_id]
    assert rows[0]["message"] == "do\tboth\nsteps" and rows[0]["owner"] == "daemon"

    request = pending(serve, session_id)
    assert request["tool"] == "shell" and "step-one" in request["summary"]
    waiting = serve.get(f"/api/sessions?project={stack.project}").json["sessions"][0]
    assert waiting["status"] == "waiting" and waiting["pending_approvals"] == 1

    assert answer(serve, stack.project, session_id, request["request_id"]).json == {"answered": True, "answer": "yes"}
    again = answer(serve, stack.project, session_id, request["request_id"])
    assert again.status == 409 and again.json["error"] == "not-pending", again.body
    second = pending(serve, session_id, request["id"])
    assert answer(serve, stack.project, session_id, second["request_id"], "no").status == 200
    row = ended(serve, stack.project, session_id)
    assert row["end_reason"] == "completed"

    events = serve.get(f"/api/sessions/{session_id}/events").json["events"]
    assert events == stack.read(session_id)
    assert serve.get(f"/api/sessions/{session_id}/events?after=5").json["events"] == events[5:]
    results = [e for e in events if e["type"] == "tool.result"]
    assert "step-one" in results[0]["output"] and results[1]["is_error"]  # the second was denied

    # Refusals carry the daemon's code and words.
    missing = serve.get("/api/sessions/20260101-000000-abcdef/events")
    assert missing.status == 404 and missing.json["error"] == "not-found"
    assert serve.get("/api/sessions/nope/events").status == 400
    assert serve.post("/api/sessions", {"project": str(stack.project)}).status == 400
    refused = serve.post("/api/sessions", {"project": str(stack.tmp), "message": "not a git repo"})
    assert refused.status == 422 and refused.json["error"] == "refused", refused.body
    assert refused.json["message"]
    relative = serve.post("/api/sessions", {"project": "relative/path", "message": "hi"})
    assert relative.status == 400 and "absolute" in relative.json["message"]


def test_an_unreachable_daemon_is_502_naming_its_address(stack):
    serve = stack.start_serve()
    stack.daemon.stop()
    for path in ("/api/health", f"/api/sessions?project={stack.project}"):
        response = serve.get(path)
        assert response.status == 502
        assert f"unix:{stack.daemon_socket}" in response.json["message"]


def test_port_without_host_is_refused_by_name(home):
    result = home.chock("serve", "--port", "7891", timeout=60)
    assert result.returncode == 2
    assert "--port" in result.stderr and "--host" in result.stderr


# --------------------------------------------------------------------------------------------------------
# Server-Sent Events


def test_curl_on_the_watch_route_receives_id_tagged_events_as_they_are_appended(stack):
    serve = stack.start_serve()
    session_id = serve.post("/api/sessions", {"project": str(stack.project), "message": "both steps"}).json["id"]
    watch = Stream(serve, f"/api/sessions/{session_id}/watch?project={stack.project}")
    try:
        first = watch.events_until(lambda e: e["type"] == "approval.request")
        assert [e["id"] for e in first] == list(range(1, len(first) + 1))
        # The session waits for the answer: everything after it is appended while curl listens.
        answer(serve, stack.project, session_id, first[-1]["request_id"])
        second = watch.events_until(lambda e: e["type"] == "approval.request")
        assert second[0]["id"] == first[-1]["id"] + 1 and second[0]["type"] == "approval.answer"
        assert any(e["type"] == "tool.result" and "step-one" in e["output"] for e in second)
        answer(serve, stack.project, session_id, second[-1]["request_id"])
        rest = watch.events_until(lambda e: e["type"] == "session.end")
        messages = list(watch.messages())
        assert [m.get("event") for m in messages] == ["end"]
        assert watch.process.wait(10) == 0  # serve closed the stream: the session is over
    finally:
        watch.close()
    assert first + second + rest == stack.read(session_id)

    resumed = Stream(serve, f"/api/sessions/{session_id}/watch?project={stack.project}&after=2",
                     {"Last-Event-ID": "5"})  # fmt: skip
    try:
        events = resumed.events_until(lambda e: e["type"] == "session.end")
    finally:
        resumed.close()
    assert events[0]["id"] == 6  # Last-Event-ID wins over ?after=
    assert events == stack.read(session_id)[5:]


def test_the_watch_stream_headers_and_its_first_message(stack):
    serve = stack.start_serve()
    session_id = serve.post("/api/sessions", {"project": str(stack.project), "message": "both steps"}).json["id"]
    connection = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=30)
    connection.request("GET", f"/api/sessions/{session_id}/watch?project={stack.project}")
    reply = connection.getresponse()
    assert reply.status == 200
    assert reply.getheader("Content-Type").startswith("text/event-stream")
    assert reply.getheader("X-Accel-Buffering") == "no"
    assert reply.getheader("Cache-Control").startswith("no-cache")
    head = b""
    while f"id: local/{session_id}/1\n".encode() not in head:
        head += reply.read1(65536)
    text = head.decode()
    assert text.startswith("retry: ")
    assert "event: row\ndata: " in text
    row = json.loads(text.split("event: row\ndata: ", 1)[1].split("\n", 1)[0])
    assert row["id"] == session_id
    connection.close()


def test_300_streams_over_every_spelling_of_the_project_share_one_daemon_watch_and_both_keep_answering(stack):
    session_id = "20260101-000000-5e55e5"
    log = stack.home.layout.log_path(session_id)
    log.parent.mkdir(parents=True)
    owner = SessionLog.create(log)  # this test owns the session, as `chock run` would: it is running
    owner.append("session.start", session=session_id, project=str(stack.project), message="m", owner="terminal")
    link = stack.tmp / "link-to-project"
    link.symlink_to(stack.project)
    spellings = [str(stack.project), f"{stack.project}/.", f"{stack.project}/./.", f"{stack.project}//", str(link)]
    serve = stack.start_serve()

    def status() -> dict[str, Any]:
        return json.loads((stack.home.layout.state / "daemon-status.json").read_text())["connections"]

    def answering() -> None:
        assert serve.get("/api/health").json["ok"] is True
        assert stack.client.ping() == 1

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:
            responses = []
            for index in range(300):
                project = spellings[index % len(spellings)]
                url = f"http://127.0.0.1:{serve.port}/api/sessions/{session_id}/watch"
                response = await client.get(url, params={"project": project})
                assert response.status == 200, await response.text()
                responses.append(response)
                if index % 50 == 49:
                    answering()
            for number in range(2, 12):
                owner.append("assistant.delta", text=f"piece {number}")
            for response in responses:
                assert await _sse_ids(response, 11) == list(range(1, 12))
            answering()
            watching = wait_until(lambda: status()["watching"] == 1 and status(), 10, "the status record")
            assert watching["too_many"] == 0
            for response in responses:
                response.close()

    with owner:
        asyncio.run(main())
    answering()


async def _sse_ids(response: aiohttp.ClientResponse, last: int) -> list[int]:
    """The event ids of an SSE stream, read until `last`."""
    ids: list[int] = []
    while not ids or ids[-1] < last:
        line = await asyncio.wait_for(response.content.readline(), 30)
        assert line, f"the stream ended after {ids}"
        if line.startswith(b"id: "):
            ids.append(int(line[4:].rpartition(b"/")[2]))  # local/<session id>/<N>
    return ids


def test_four_slow_readers_of_a_100_mib_log_each_get_all_of_it_from_a_serve_held_to_256_mib(stack):
    """A serve that held a reply whole (the log's bytes, then the reply built from them) needs more than its
    limit for one reader, let alone four: serve runs near 50 MiB of address space, its limit is 256 MiB."""
    session_id = "20260101-000000-b16b16"
    log = stack.home.layout.log_path(session_id)
    log.parent.mkdir(parents=True)
    filler = "x" * 10_000
    expected = hashlib.sha256(b'{"events": [')
    with open(log, "wb") as handle:
        first = {"id": 1, "at": "2026-01-01T00:00:00.000Z", "type": "session.start", "session": session_id,
                 "project": str(stack.project), "message": "m", "owner": "terminal"}  # fmt: skip
        for number in range(1, 10_500):
            event = first if number == 1 else {"id": number, "type": "tool.result", "output": f"{number}{filler}"}
            line = json.dumps(event).encode()
            handle.write(line + b"\n")
            expected.update((b", " if number > 1 else b"") + line)
    expected.update(b"]}")
    assert log.stat().st_size > 100 * 1024 * 1024
    serve = stack.start_serve(under=("prlimit", f"--as={256 * 1024 * 1024}", "--"))

    def slow_reader() -> str:
        connection = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=120)
        connection.request("GET", f"/api/sessions/{session_id}/events")
        reply = connection.getresponse()
        assert reply.status == 200
        digest = hashlib.sha256()
        while chunk := reply.read(256 * 1024):
            digest.update(chunk)
            time.sleep(0.01)  # about 25 MiB/s: slower than serve can read the daemon
        connection.close()
        return digest.hexdigest()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        digests = list(pool.map(lambda _: slow_reader(), range(4)))
    assert digests == [expected.hexdigest()] * 4
    assert serve.process.poll() is None and serve.get("/api/health").json["ok"] is True
    assert "Error" not in serve.stderr, serve.stderr


# --------------------------------------------------------------------------------------------------------
# Who may ask


def test_over_the_unix_socket_another_uid_gets_403_and_ours_200(stack):
    if os.getuid() != 0:
        pytest.fail("setpriv --reuid needs root: run the suite as root, as scripts/test and CI do")
    if not shutil.which("curl"):
        pytest.fail("needs curl: apt-get install curl (scripts/debian-packages.txt lists it)")
    directory = short_dir(0o755)  # reachable, so the kernel lets the other uid connect ...
    path = directory / "s.sock"
    serve = stack.start_serve("--socket", str(path))
    assert serve.url == f"unix:{path}"
    assert (os.stat(path).st_mode & 0o777) == 0o600
    os.chmod(path, 0o777)  # ... and only serve's peer check stands in its way
    url = "http://localhost/api/health"
    ours = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", str(path), url],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    body, status = ours.stdout.rsplit("\n", 1)
    assert status == "200" and json.loads(body)["protocol"] == 1
    theirs = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
         "curl", "-s", "-w", "\n%{http_code}", "--unix-socket", str(path), url],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip
    assert theirs.returncode == 0, theirs.stderr  # connected: the kernel let it through, serve refused it
    body, status = theirs.stdout.rsplit("\n", 1)
    assert status == "403" and "Forbidden" in body
    # A POST from the other uid is refused the same way, and starts nothing.
    post = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
         "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", str(path),
         "-H", "Content-Type: application/json",
         "-d", json.dumps({"project": str(stack.project), "message": "hi"}), "http://localhost/api/sessions"],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip
    assert post.stdout == "403"
    # Any Host is fine on the unix socket: a proxy in front of it sets its own.
    proxied = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", str(path),
         "-H", "Host: chock.example.com", url], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proxied.stdout == "200"
    assert stack.client.collect(dp.ListRequest(stack.project), most=dp.MAX_SESSIONS) == []
    assert serve.stop() == 0
    assert not path.exists()  # serve removes the socket it made


def test_the_default_listener_is_serve_sock_in_the_state_dir(stack):
    state = short_dir()
    serve = stack.start_serve(env={"CHOCK_STATE_DIR": str(state)}, tcp=False)
    assert serve.url == f"unix:{state / 'serve.sock'}"
    assert (os.stat(state / "serve.sock").st_mode & 0o777) == 0o600
    assert serve.stop(signal.SIGINT) == 0
    assert not (state / "serve.sock").exists()


def test_a_cross_origin_post_is_refused(stack):
    serve = stack.start_serve()
    body = {"project": str(stack.project), "message": "from another site"}
    foreign = serve.post("/api/sessions", body, headers={"Origin": "http://evil.example"})
    assert foreign.status == 403 and b"cross-origin" in foreign.body
    form = serve.request("POST", "/api/sessions", raw=b"project=x&message=y",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert form.status == 415
    text = serve.request("POST", "/api/sessions", raw=json.dumps(body).encode(), headers={"Content-Type": "text/plain"})
    assert text.status == 415
    assert serve.get(f"/api/sessions?project={stack.project}").json["sessions"] == []
    same = serve.post("/api/sessions", body, headers={"Origin": f"http://127.0.0.1:{serve.port}"})
    assert same.status == 201  # its own page, and a client with no Origin at all, may
    assert len(stack.client.collect(dp.ListRequest(stack.project), most=dp.MAX_SESSIONS)) == 1


def test_a_dns_rebinding_request_is_refused_by_the_host_check(stack):
    serve = stack.start_serve()
    port = serve.port
    evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    body = {"project": str(stack.project), "message": "rebound"}
    refused = serve.post("/api/sessions", body, headers=evil)
    assert refused.status == 421 and b"--allow-host" in refused.body
    assert serve.get(f"/api/sessions?project={stack.project}", headers=evil).status == 421
    assert serve.get("/", headers=evil).status == 421
    assert serve.get(f"/api/sessions?project={stack.project}").json["sessions"] == []
    assert stack.client.collect(dp.ListRequest(stack.project), most=dp.MAX_SESSIONS) == []
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert serve.get("/api/health", headers={"Host": host}).status == 200, host
    assert serve.get("/api/health", headers={"Host": f"localhost:{port + 1}"}).status == 421

    allowed = stack.start_serve("--host", "127.0.0.1", "--port", "0", "--allow-host", "chock.example.com")
    assert allowed.get("/api/health", headers={"Host": "chock.example.com"}).status == 200
    assert allowed.get("/api/health", headers={"Host": f"evil.example:{allowed.port}"}).status == 421


# --------------------------------------------------------------------------------------------------------
# Its life


def test_idle_exit_waits_for_an_open_stream_then_exits_0(stack):
    serve = stack.start_serve("--host", "127.0.0.1", "--port", "0", "--idle-exit", "1")
    session_id = serve.post("/api/sessions", {"project": str(stack.project), "message": "both steps"}).json["id"]
    watch = Stream(serve, f"/api/sessions/{session_id}/watch?project={stack.project}")
    watch.events_until(lambda e: e["type"] == "approval.request")
    time.sleep(2.5)
    assert serve.process.poll() is None  # an SSE stream is open: not idle
    watch.close()
    assert serve.process.wait(15) == 0
    assert "idle" in serve.stderr


def test_the_page_and_its_files_are_served_from_the_package(stack):
    serve = stack.start_serve()
    page = serve.get("/")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    assert b'src="/static/app.js"' in page.body
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    static = Path(__file__).parent.parent / "chock/serve/static"
    # Every module as JavaScript: a browser runs no ES module served as anything else.
    kinds = {p.name: "text/javascript" for p in static.glob("*.js")} | {"style.css": "text/css"}
    assert "app.js" in kinds and "timeline.js" in kinds
    for name, kind in kinds.items():
        response = serve.get(f"/static/{name}")
        assert response.status == 200 and response.headers["Content-Type"].startswith(kind), name
    assert serve.get("/static/../app.py").status == 404
    assert serve.get("/static/nothing.js").status == 404
    assert serve.get("/static/package.json").status == 404  # there for node, not for a browser
    for path in ["index.html", *kinds]:
        text = (static / path).read_text()
        assert "http://" not in text.replace("http://127", "") and "https://" not in text, path  # nothing external


def test_socket_activation_readiness_and_the_watchdog(stack):
    """LISTEN_FDS (name `http`) and NOTIFY_SOCKET as a service manager sets them (the manager is not needed)."""
    directory = short_dir()
    path = directory / "activated.sock"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(path))
    unix.listen(8)
    tcp = socket.create_server(("127.0.0.1", 0))
    port = tcp.getsockname()[1]
    notifications = NotifySocket(directory)
    wrapper = (
        "import fcntl, os, sys\n"
        "fds = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3]]  # above 3 and 4\n"
        "for target, fd in enumerate(fds, 3):\n"
        "    os.dup2(fd, target)\n"
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='2', LISTEN_FDNAMES='http:http')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'chock', 'serve', '--daemon', sys.argv[3]])\n"
    )
    env = {**stack.home.env, **notifications.env()}
    process = subprocess.Popen(
        [sys.executable, "-c", wrapper, str(unix.fileno()), str(tcp.fileno()), f"unix:{stack.daemon_socket}"],
        pass_fds=(unix.fileno(), tcp.fileno()), env=env, text=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=open(stack.tmp / "activated.err", "w"),  # noqa: SIM115
    )  # fmt: skip
    serve = Serve(process, f"http://127.0.0.1:{port}/", stack.tmp / "activated.err")
    stack.serves.append(serve)

    ready = notifications.next()
    assert ready[0] == "READY=1" and ready[1].startswith(f"STATUS=serving unix:{path}"), ready
    assert f"http://127.0.0.1:{port}/" in ready[1]
    assert serve.get("/api/health").json["protocol"] == 1  # served on the TCP socket it was handed
    assert serve.get("/api/health", headers={"Host": f"evil.example:{port}"}).status == 421
    ours = subprocess.run(["curl", "-s", "--unix-socket", str(path), "http://localhost/api/health"],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert json.loads(ours.stdout)["ok"] is True
    assert not stack.home.layout.serve_socket.exists()  # and nothing else was bound
    assert "WATCHDOG=1" in notifications.next()  # at half of WATCHDOG_USEC
    process.send_signal(signal.SIGTERM)
    notifications.until_stopping()
    assert process.wait(15) == 0
    assert path.exists()  # a socket that activation handed over is never unlinked by serve
    for sock in (unix, tcp, notifications):
        sock.close()


def test_a_socket_handed_over_under_another_name_is_refused_by_name(stack):
    tcp = socket.create_server(("127.0.0.1", 0))
    wrapper = (
        "import os, sys\n"
        "os.dup2(int(sys.argv[1]), 3)\n"
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1', LISTEN_FDNAMES='control')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'chock', 'serve'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", wrapper, str(tcp.fileno())], pass_fds=(tcp.fileno(),), env=stack.home.env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    tcp.close()
    assert result.returncode == 1
    assert "'control'" in result.stderr and "'http'" in result.stderr, result.stderr


def test_idle_exit_with_nothing_asked_exits_0(stack):
    serve = stack.start_serve("--socket", str(short_dir() / "s.sock"), "--idle-exit", "0.5")
    started = time.monotonic()
    assert serve.process.wait(15) == 0
    assert time.monotonic() - started < 10
