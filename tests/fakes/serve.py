"""A real `chock serve` in front of a real daemon, and the HTTP a test speaks to it.

`running_stack` gives the daemon (from the `daemons` fixture) with a replay instance; `Stack.start_serve`
starts a serve on it and returns once the serve printed where it listens. `RawConnection` speaks HTTP/1.1 on a
raw socket where the timing of the bytes is the point; `slow_session` is a running session whose socket takes
its time, so a route that relays to it does too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, events_of
from chock.control.connection import ServerConnection
from chock.control.session_protocol import HANDOVER, Ended, SessionStopRequest
from chock.log.writer import SessionLog
from tests.fakes.daemon import Daemon, Daemons
from tests.fakes.sessions import replay_config
from tests.fakes.wait import wait_until

# Waits for an approval at each shell call (a daemon child has no terminal: it waits on approval.sock alone).
ASKS = [
    {"text": "Looking around first.", "tool_calls": [
        {"call_id": "c1", "name": "shell", "args": {"command": "echo step-one"}}]},
    {"text": "Now the second step.", "tool_calls": [
        {"call_id": "c2", "name": "shell", "args": {"command": "echo step-two"}}]},
    {"text": "All done: both steps ran.", "tool_calls": []},
]  # fmt: skip


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Serve:
    process: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT/ or unix:/path
    stderr_path: Path

    @property
    def port(self) -> int:
        return int(self.url.rstrip("/").rsplit(":", 1)[1])

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(20)

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, raw: bytes | None = None
    ) -> Response:
        """One HTTP request to serve's TCP listener; a `Host` in `headers` replaces the real one."""
        headers = dict(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if body is not None and raw is None:
            headers.setdefault("Content-Type", "application/json")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=150)
        try:
            connection.putrequest(method, path, skip_host="Host" in headers, skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            if data is not None:
                connection.putheader("Content-Length", str(len(data)))
            connection.endheaders(data)
            reply = connection.getresponse()
            return Response(reply.status, dict(reply.getheaders()), reply.read())
        finally:
            connection.close()

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> Response:
        return self.request("POST", path, body, **kwargs)


class RawConnection:
    """One keep-alive connection to serve's TCP listener on a raw socket, for what http.client does not do on
    demand: a body in a packet of its own, as Chromium sends a fetch body past about 1.4 KB, and a pause of the
    test's choosing between the requests of one connection."""

    def __init__(self, port: int, timeout: float = 60) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each sendall goes out as it is
        self._buffer = b""

    def request(self, method: str, path: str, body: Any = None, *, body_after: float | None = None) -> Response:
        """One request and its response; with `body_after`, the body follows its head that many seconds later."""
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        head_bytes = f"{head}\r\n".encode()
        if body_after is None:
            self.sock.sendall(head_bytes + data)
        else:
            self.sock.sendall(head_bytes)
            time.sleep(body_after)
            self.sock.sendall(data)
        return self.response()

    def response(self) -> Response:
        """The next response (serve's carry a Content-Length); serve closing first is an AssertionError."""
        while b"\r\n\r\n" not in self._buffer:
            self._receive()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines)
        length = int(next(value for name, value in headers.items() if name.lower() == "content-length"))
        while len(self._buffer) < length:
            self._receive()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return Response(int(status_line.split()[1]), headers, body)

    def _receive(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise AssertionError(f"serve closed the connection before it answered (received {self._buffer!r})")
        self._buffer += chunk

    def close(self) -> None:
        self.sock.close()


def closed_by_peer(sock: socket.socket, deadline: float) -> bool:
    """Whether the other end closes `sock` (an end of file or a reset) by `deadline` (time.monotonic()),
    sending nothing first."""
    sock.settimeout(max(deadline - time.monotonic(), 0.01))
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@contextlib.contextmanager
def slow_session(home: Any, project: Path, session_id: str, *, greet_after: float, end_after: float) -> Iterator[None]:
    """A running session, owned by this process (it holds the log's lock), whose handover socket greets
    `greet_after` seconds after a client connects and, asked to stop, ends `end_after` seconds later: it logs
    `session.end {reason: interrupted, via: socket}`, tells the client `ended interrupted` and lets go of the
    log, as a session
    deep in a tool call would. A `stop` through the daemon takes about the sum, and succeeds."""
    log_path = home.layout.log_path(session_id)
    log_path.parent.mkdir(parents=True)
    owner = SessionLog.create(log_path)
    owner.append("session.start", session=session_id, project=str(project), message="a slow one", owner="terminal")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(home.layout.session_socket(session_id, "handover")))
    listener.listen()

    def serve() -> None:
        with contextlib.suppress(OSError), listener.accept()[0] as conn, conn.makefile("rb") as lines:
            codec = ServerConnection(HANDOVER)
            codec.receive_data(lines.readline())
            codec.next_event()  # the greeting
            time.sleep(greet_after)
            conn.sendall(codec.greeting_reply())
            codec.receive_data(lines.readline())
            if isinstance(codec.next_event(), SessionStopRequest):
                time.sleep(end_after)
                owner.append("session.end", reason="interrupted", via="socket")
                conn.sendall(Ended("interrupted").encode())
                owner.release()  # as a session lets go of its log once it has said how it ended

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes an accept that nobody answered
        listener.close()
        thread.join(greet_after + end_after + 5)
        owner.release()


@dataclass
class Stack:
    """A real daemon (from the `daemons` fixture) and the serves a test starts in front of it."""

    home: Any
    project: Path
    tmp: Path
    daemon: Daemon
    serves: list[Serve] = field(default_factory=list)

    @property
    def daemon_socket(self) -> Path:
        return self.daemon.socket

    @property
    def client(self) -> ControlClient:
        return self.daemon.client

    def start_serve(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        tcp: bool = True,
        under: tuple[str, ...] = (),
        python: str = sys.executable,
    ) -> Serve:
        """`chock serve --daemon unix:<ours> ARGS` (with no ARGS: TCP on 127.0.0.1 at a free port, unless
        `tcp` is False) under `python`, run by the command `under` when given (`prlimit …`); returns once it
        printed where it listens."""
        if not args and tcp:
            args = ("--host", "127.0.0.1", "--port", "0")
        stderr_path = self.tmp / f"serve-{len(self.serves)}.err"
        process = subprocess.Popen(
            [*under, python, "-m", "chock", "serve", "--daemon", f"unix:{self.daemon_socket}", *args],
            env={**self.home.env, **(env or {})}, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=open(stderr_path, "w"),  # noqa: SIM115
        )  # fmt: skip
        line = process.stdout.readline()
        if not line.startswith("listening on "):
            process.kill()
            raise AssertionError(f"serve printed {line!r}; stderr: {stderr_path.read_text()}")
        serve = Serve(process, line.split()[-1], stderr_path)
        self.serves.append(serve)
        return serve

    def read(self, session_id: str) -> list[dict[str, Any]]:
        """The daemon's own `read` of the whole session: what every view must equal."""
        return list(events_of(self.client.stream(dp.ReadRequest(session_id, 0))))

    def cleanup(self) -> None:
        for serve in self.serves:
            with contextlib.suppress(Exception):
                serve.process.kill()
                serve.process.wait(10)


@contextlib.contextmanager
def running_stack(home: Any, project: Path, daemons: Daemons, entries: list[dict[str, Any]]) -> Iterator[Stack]:
    """`entries` as the replay instance, a daemon, and at the end every serve started on it killed (the
    daemon and its sessions are the `daemons` fixture's to end)."""
    replay_config(home, entries, shell="ask")
    stack = Stack(home, project, daemons.tmp, daemons.start())
    try:
        yield stack
    finally:
        stack.cleanup()


def pending(serve: Serve, session_id: str, after: int = 0) -> dict[str, Any]:
    """The next approval request of the session after event `after`, as the events route shows it."""

    def find() -> dict[str, Any] | None:
        events = serve.get(f"/api/sessions/{session_id}/events?after={after}").json["events"]
        answered = {e["request_id"] for e in events if e["type"] == "approval.answer"}
        return next((e for e in events if e["type"] == "approval.request" and e["request_id"] not in answered), None)

    return wait_until(find, 60, "an approval request")


def answer(serve: Serve, project: Path, session_id: str, request_id: str, reply: str = "yes") -> Response:
    body = {"project": str(project), "request_id": request_id, "answer": reply}
    return serve.post(f"/api/sessions/{session_id}/answer", body)


def ended(serve: Serve, project: Path, session_id: str) -> dict[str, Any]:
    def row() -> dict[str, Any] | None:
        rows = serve.get(f"/api/sessions?project={project}").json["sessions"]
        found = next(r for r in rows if r["id"] == session_id)
        return found if found["status"] == "ended" else None

    return wait_until(row, 60, "the session to end")
