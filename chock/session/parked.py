"""A parked session: the lean waiter a session waiting on a person becomes (docs/architecture.md#parking).

A session whose only work in flight is a tool call waiting for a person's answer execs this module (same pid,
under `python3 -I -S`) once it has synced its log: what it needs again only after the answer is dropped, and
this waiter holds only the log's lock and the listening approval.sock and handover.sock it inherited. It
serves chock.control.session_protocol as the session does while it waits — `pending` it answers from what it
was given, `say` it queues (`ok queued`) — and for anything only the session can do (an answer, a stop, a
handover ask or confirm) and on SIGTERM or SIGINT it unparks: it execs `chock run --unpark` (same pid again),
carrying every connection it holds, each with the bytes of the request not yet served, and what was said.
The rebuilt session folds its log (the whole state) and serves those requests as if they had just arrived.

It imports only the standard library's socket, select, os, json, signal, time and Chock's import-light framing
modules; the rules of a line, a greeting and a deadline are chock.control.connection's, as in the session.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

TYPE_CHECKING = False  # typing is not imported at run time: the waiter imports as little as it can
if TYPE_CHECKING:
    from typing import Any

    from chock.control.connection import ServerConnection
    from chock.control.framing import ProtocolError
    from chock.control.message import ReplyLine, Request
# A person answering at `chock approve` may take a while; a connection idle longer than this is closed.
IDLE_SECONDS = 15 * 60.0
# Connections each socket serves at once: a person's few terminals and the daemon's relays.
MAX_CONNECTIONS = 16
READ_SIZE = 4096
# What stops a session: blocked across each exec, so that one sent meanwhile waits for the next program's handler.
STOPPING = {signal.SIGTERM, signal.SIGINT}


def read_record(fd: int) -> dict[str, Any]:
    """The JSON record handed over in the memory file `fd` (closed here)."""
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks))


def write_record(record: dict[str, Any]) -> int:
    """A memory file holding `record` as JSON, inheritable across exec: its descriptor."""
    fd = os.memfd_create("chock-park", 0)  # not MFD_CLOEXEC: the next program reads it
    data = json.dumps(record).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return fd


def inherit(fds: list[int]) -> None:
    """Keep each descriptor open across the coming exec (the log's lock is this very open file description)."""
    for fd in fds:
        os.set_inheritable(fd, True)


class _Held:
    """One connection: its socket, its protocol state, and the raw bytes of what it has not been served yet."""

    def __init__(self, kind: str, sock: socket.socket, connection: ServerConnection) -> None:
        self.kind = kind
        self.sock = sock
        self.connection = connection
        self.greeting = b""  # the greeting line as the client sent it, once answered: the rebuilt session takes it in
        self.unserved = bytearray()  # from the first byte of the first request not served here
        # Replies not yet taken by the client. While any are, nothing more of its requests is served (as a
        # session's drain waits), so a client that never reads holds only its own connection, never the waiter.
        self.owed = bytearray()


class _Unpark(Exception):
    """Something only the whole session can do arrived: exec it."""


class Waiter:
    def __init__(self, record: dict[str, Any]) -> None:
        from chock.control import session_protocol as sp
        from chock.control.connection import NEED_DATA, ServerConnection
        from chock.control.framing import LINE_SECONDS, ErrorCode, ProtocolError
        from chock.control.greeting import Greeted
        from chock.platform.peer import is_own_user

        self.sp, self.need_data, self.server_connection = sp, NEED_DATA, ServerConnection
        self.line_seconds, self.error_code, self.protocol_error = LINE_SECONDS, ErrorCode, ProtocolError
        self.greeted_type, self.is_own_user = Greeted, is_own_user
        self.record = record
        self.listening = {
            kind: socket.socket(fileno=fd) for kind, fd in record["listen"].items()
        }  # fmt: skip
        self.protocols = {"approval": sp.APPROVAL, "handover": sp.HANDOVER}
        self.clients: list[_Held] = []
        self.said: list[str] = list(record.get("said", []))
        self.pending = {item["request_id"]: item for item in record["pending"]}
        # SIGTERM and SIGINT stop the session, as they stop it in process: their handler only wakes the select.
        self.signals, wake = socket.socketpair()
        self.signals.setblocking(False)
        wake.setblocking(False)
        signal.set_wakeup_fd(wake.fileno())
        self._wake = wake
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _ignore)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)  # blocked by the session across its exec

    def serve(self) -> None:
        """Serve until something needs the session; then exec it, carrying every connection."""
        try:
            while True:
                self._once()
        except _Unpark:
            pass
        except Exception:  # never die holding the session: the rebuilt session serves what the waiter could not
            import traceback

            traceback.print_exc()
        self._unpark()

    def _once(self) -> None:
        now = time.monotonic()
        deadlines = [c.connection.next_deadline() for c in self.clients]
        soonest = min((d for d in deadlines if d is not None), default=None)
        timeout = None if soonest is None else max(0.0, soonest - now)
        watched = [self.signals, *self.listening.values(), *(c.sock for c in self.clients if not c.owed)]
        owing = [c.sock for c in self.clients if c.owed]
        readable, writable, _ = select.select(watched, owing, [], timeout)
        now = time.monotonic()
        if self.signals in readable:
            self.record["stop"] = "signal"
            raise _Unpark
        for kind, listener in self.listening.items():
            if listener in readable:
                self._accept(kind, listener, now)
        for client in list(self.clients):
            if client.sock in writable and self._flush(client) and not client.owed:
                self._serve_lines(client, now)  # what it asked meanwhile, already read
            elif client.sock in readable:
                self._read(client, now)
            elif client.connection.deadline_passed(now) is not None:
                self._drop(client)

    def _accept(self, kind: str, listener: socket.socket, now: float) -> None:
        try:
            sock, _ = listener.accept()
        except OSError:
            return
        connection = self.server_connection(
            self.protocols[kind], now=now, line_seconds=self.line_seconds, idle_seconds=IDLE_SECONDS
        )
        client = _Held(kind, sock, connection)
        ErrorCode = self.error_code
        if not self.is_own_user(sock):
            self._refuse(client, self.protocol_error(ErrorCode.FORBIDDEN, "this session serves only its own user"))
            return
        if sum(c.kind == kind for c in self.clients) >= MAX_CONNECTIONS:
            refusal = f"this session's {kind} socket serves {MAX_CONNECTIONS} connections at once; try again shortly"
            self._refuse(client, self.protocol_error(ErrorCode.REFUSED, refusal))
            return
        sock.setblocking(False)
        self.clients.append(client)

    def _read(self, client: _Held, now: float) -> None:
        try:
            data = client.sock.recv(READ_SIZE)
        except OSError:
            data = b""
        connection = client.connection
        connection.receive_data(data, now)
        client.unserved += data
        if not data:
            self._drop(client)
            return
        self._serve_lines(client, now)

    def _serve_lines(self, client: _Held, now: float) -> None:
        """Serve the requests read from `client`, until its replies are owed (its socket is full) or it is gone."""
        connection = client.connection
        while client in self.clients and not client.owed:
            try:
                event = connection.next_event()
            except self.protocol_error as error:
                self._served_line(client)
                if connection.fatal(error):
                    self._refuse(client, error)
                    return
                self._send(client, connection.send(error, now))
                continue
            if event is self.need_data:
                return
            if isinstance(event, self.greeted_type):
                client.greeting = self._served_line(client)
                self._send(client, connection.greeting_reply())
                continue
            replies = self._handle(event)  # type: ignore[arg-type]
            self._served_line(client)
            self._send(client, b"".join(connection.send(reply, now) for reply in replies))

    def _handle(self, event: Request) -> list[ReplyLine | ProtocolError]:
        """The replies the waiter gives itself; raises _Unpark (leaving the request unserved) for the rest."""
        sp = self.sp
        if isinstance(event, sp.PendingRequest):
            items = [sp.PendingItem(p["request_id"], p["tool"], p["summary"]) for p in self.pending.values()]
            return [*items, sp.PendingEnd()]
        if isinstance(event, sp.SessionSayRequest):
            self.said.append(event.message)
            return [sp.Queued()]
        answer = sp.SessionAnswerRequest | sp.SessionAnswerWithRequest
        if isinstance(event, answer) and event.request_id not in self.pending:
            code = self.error_code.NOT_PENDING
            return [self.protocol_error(code, f"{event.request_id} is not waiting for an answer")]
        raise _Unpark

    @staticmethod
    def _served_line(client: _Held) -> bytes:
        """Drop the line just served from what is carried over; that line."""
        end = client.unserved.find(b"\n") + 1
        line = bytes(client.unserved[:end])
        del client.unserved[:end]
        return line

    def _send(self, client: _Held, data: bytes) -> None:
        client.owed += data
        self._flush(client)

    def _flush(self, client: _Held) -> bool:
        """Send what `client` is owed, as far as its socket takes it now; False when it has gone (dropped)."""
        try:
            while client.owed:
                del client.owed[: client.sock.send(client.owed)]
        except BlockingIOError:
            pass
        except OSError:
            self._drop(client)
            return False
        return True

    def _refuse(self, client: _Held, error: ProtocolError) -> None:
        with _quiet():
            client.sock.sendall(client.connection.send(error))
            client.sock.shutdown(socket.SHUT_WR)
        self._drop(client)

    def _drop(self, client: _Held) -> None:
        if client in self.clients:
            self.clients.remove(client)
        client.sock.close()

    def _unpark(self) -> None:
        # A signal from here on stays pending across the exec: the rebuilt session takes it once it handles it.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
        record = self.record
        with _quiet():  # one that came since the last select (while an answer was read) is a stop all the same
            if self.signals.recv(1):
                record["stop"] = "signal"
        record["said"] = self.said
        record["clients"] = [
            {"kind": c.kind, "fd": c.sock.detach(), "greeting": c.greeting.decode("latin-1"),
             "unserved": bytes(c.unserved).decode("latin-1"), "owed": bytes(c.owed).decode("latin-1")}
            for c in self.clients
        ]  # fmt: skip
        fds = [record["log"], *record["listen"].values(), *(c["fd"] for c in record["clients"])]
        for listener in self.listening.values():
            listener.detach()
        inherit(fds)
        memo = write_record(record)
        os.execv(record["python"], [record["python"], *record["unpark"], str(memo)])


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


def _ignore(signum: int, frame: object) -> None:
    return None


def main() -> None:
    record = read_record(int(sys.argv[1]))
    sys.path.insert(0, record["path"])
    Waiter(record).serve()


if __name__ == "__main__":
    main()
