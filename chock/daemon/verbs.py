"""The daemon's verbs (SPEC §6), one small function each, looked up by name (STYLE: tmux's command table).

Each takes the shared `Daemon`, the connection's `Reply` and its typed request (the codec has already
checked every field: a session id matches its pattern before it touches a path, a project is absolute, a
number is a number). A verb refuses by raising a `ProtocolError`, which the connection sends as its one
`error <code> <text>` line; a verb that has begun its reply never raises one.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from chock.control import protocol as p
from chock.control.protocol import ErrorCode, ProtocolError
from chock.daemon.context import Daemon
from chock.daemon.rows import Entry, real
from chock.log.reader import iter_lines

# Lines are gathered into sends of about this size: a `read` of a long log is a few large writes, not one
# per event.
SEND_BATCH = 64 * 1024

# How long `answer` waits for the session's approval socket: a session answers between two steps of its
# own loop, which it serves whenever it waits.
ANSWER_TIMEOUT = 10.0


class ClientGone(Exception):
    """The client closed its end while we were replying: nothing to do but stop."""


class Reply:
    """The write side of one connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer: list[bytes] = []
        self._size = 0

    def send(self, data: bytes) -> None:
        self.buffer(data)
        self.flush()

    def buffer(self, data: bytes) -> None:
        self._buffer.append(data)
        self._size += len(data)
        if self._size >= SEND_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer.clear()
        self._size = 0
        try:
            self.sock.sendall(data)
        except OSError:
            raise ClientGone from None


def _not_found(text: str) -> ProtocolError:
    return ProtocolError(ErrorCode.NOT_FOUND, text)


def _session(daemon: Daemon, project: str, session_id: str) -> Entry:
    """The session `session_id` of `project` (compared by resolved real path), or `not-found`."""
    entry = daemon.rows.entry(session_id)
    if entry is None:
        raise _not_found(f"there is no session {session_id}")
    if entry.project_real != real(project):
        raise _not_found(f"session {session_id} is not a session of {project} (it works in {entry.project})")
    return entry


# --------------------------------------------------------------------------------------------------------
# The verbs


def start(daemon: Daemon, reply: Reply, request: p.StartRequest) -> None:
    """`start <project>\\t<message>` -> `ok <session id>\\t<log path>`, once the child has logged its start."""
    session_id = daemon.children.start(request.project, request.message)
    reply.send(p.encode_started(session_id, str(daemon.layout.log_path(session_id))))


def adopt(daemon: Daemon, reply: Reply, request: p.AdoptRequest) -> None:
    """`adopt <project>\\t<session id>` -> `ok <session id>\\t<log path>`, once the child holds the log."""
    entry = _session(daemon, request.project, request.session_id)
    daemon.children.adopt(request.session_id, request.project, entry.last_event_id)
    reply.send(p.encode_started(request.session_id, str(daemon.layout.log_path(request.session_id))))


def read(daemon: Daemon, reply: Reply, request: p.ReadRequest) -> None:
    """`read <session id> <last event id>` -> the log's own lines after that id, then close."""
    path = daemon.layout.log_path(request.session_id)
    try:
        lines = iter_lines(path, request.after)
        first = next(lines, None)
    except FileNotFoundError:
        raise _not_found(f"there is no session {request.session_id}") from None
    if first is None:
        return
    reply.buffer(p.encode_event_line(first))
    for line in lines:
        reply.buffer(p.encode_event_line(line))
    reply.flush()


def list_(daemon: Daemon, reply: Reply, request: p.ListRequest) -> None:
    """`list <project>` -> `<started at>\\t<row JSON>` per session, oldest first; none for an unknown project."""
    for entry in daemon.rows.of_project(request.project):
        reply.buffer(daemon.rows.line(entry))
    reply.flush()


def watch(daemon: Daemon, reply: Reply, request: p.WatchRequest) -> None:
    """`watch <project>\\t<session id>\\t<last id>` -> `ok <row JSON>`, then event lines as the log grows."""
    subscription = daemon.hub.subscribe(request.project, request.session_id, reply.sock, request.after)
    reply.sock.settimeout(None)  # the subscription sends with its own bounds
    daemon.watch_opened()
    try:
        subscription.serve()
    finally:
        daemon.hub.unsubscribe(subscription)
        daemon.watch_closed()


def answer(daemon: Daemon, reply: Reply, request: p.AnswerRequest) -> None:
    """`answer <project>\\t<session id>\\t<request id>\\t<yes|no>` -> `ok answered`, through approval.sock only.

    Seed: "A connect that failed is reported as a failure and never as ok answered."
    """
    from chock.control.client import ControlError, SessionSocketClient
    from chock.errors import ChockError

    _session(daemon, request.project, request.session_id)
    try:
        path = daemon.layout.session_socket(request.session_id, "approval")
        with SessionSocketClient(path, timeout=ANSWER_TIMEOUT) as client:
            client.answer(request.request_id, request.yes)
    except ControlError as error:
        code = ErrorCode.NOT_PENDING if error.code == ErrorCode.NOT_PENDING else ErrorCode.UNREACHABLE
        raise ProtocolError(code, error.text) from None
    except (ChockError, OSError) as error:
        raise ProtocolError(ErrorCode.UNREACHABLE, f"the session's approval socket: {error}") from None
    reply.send(p.encode_answered())


Verb = Callable[[Daemon, Reply, Any], None]

VERBS: dict[str, Verb] = {
    "start": start,
    "adopt": adopt,
    "read": read,
    "list": list_,
    "watch": watch,
    "answer": answer,
}

assert set(VERBS) == set(p.CONTROL_REQUESTS), "every verb the codec parses has its handler here"
