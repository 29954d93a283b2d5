"""A daemon of an older Chock: protocol 1, the real codec, and only the nine verbs Chock served before `sessions`,
`find`, `instances` and `start-with` (and issue 23's `answer-with`, `rules` and `rule-remove`, and issue 27's verbs
that move a session) — so each of those is answered `error unknown-verb`, in the older daemon's own words, exactly
as such a daemon answers it. A verb it knows is refused (`refused`): no test needs more of it. With OLD_APPROVAL it
is a session's approval.sock of that older Chock instead: `pending` and `answer` only."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from chock.control import daemon_protocol as dp
from chock.control import session_protocol as sp
from chock.control.connection import NEED_DATA, ServerConnection
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.greeting import Greeted
from chock.control.message import LineProtocol, Request
from chock.control.move_protocol import MOVE_VERBS
from tests.fakes.daemon import short_dir

OLD_VERBS = tuple(
    request
    for request in dp.VERBS
    if request.verb not in ("sessions", "find", "instances", "start-with", "answer-with", "rules", "rule-remove")
    and request not in MOVE_VERBS
)
OLD_CONTROL = LineProtocol(dp.CONTROL_NAME, 1, server="daemon", requests=OLD_VERBS, one_verb=True)
OLD_APPROVAL = LineProtocol(
    sp.SESSION_NAME,
    sp.SESSION_PROTOCOL,
    server="session",
    requests=(sp.PendingRequest, sp.SessionAnswerRequest),
    one_verb=False,
)


class OldDaemon:
    """Listens on a unix socket of its own, speaking `protocol`; `address` is what a client is given."""

    def __init__(self, path: Path, protocol: LineProtocol = OLD_CONTROL) -> None:
        self.path = path
        self.protocol = protocol
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.asked: list[str] = []  # the verb of each request, in order
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"unix:{self.path}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            # A client gone without a verb (a connection it dialed ahead, then closed) may reset it mid-reply: that
            # connection ends, and the next is served.
            with conn, contextlib.suppress(OSError):
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        codec = ServerConnection(self.protocol)
        while True:
            try:
                event = codec.next_event()
            except ProtocolError as refusal:
                self.asked.append(refusal.code)
                conn.sendall(codec.send(refusal))
                return
            if event is NEED_DATA:
                data = conn.recv(65536)
                if not data:
                    return
                codec.receive_data(data)
            elif isinstance(event, Greeted):
                conn.sendall(codec.greeting_reply())
            elif isinstance(event, Request):
                self.asked.append(event.verb)
                conn.sendall(codec.send(ProtocolError(ErrorCode.REFUSED, "this older daemon is only a test's")))
                return
            else:
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)


@contextlib.contextmanager
def old_daemon() -> Iterator[OldDaemon]:
    daemon = OldDaemon(short_dir() / "old.sock")
    try:
        yield daemon
    finally:
        daemon.close()
