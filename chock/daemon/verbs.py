"""The daemon's verbs (docs/protocol.md#verbs), one small function each, looked up by name in `VERBS`.

Each takes the shared `Daemon`, the connection's `ReplyWriter` and its typed request (the codec has already checked
every field: a session id matches its pattern before it touches a path, a project is absolute, a number is a
number). A verb refuses by raising a `ProtocolError`, which the connection sends as its one `error <code>
<text>` line; a verb that has begun its reply never raises one. The verbs in `INLINE` are answered from the
selector loop without a thread, so they must not block: their reply is bytes, or a producer of them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from chock.control import daemon_protocol as dp
from chock.control.framing import ErrorCode, ProtocolError
from chock.daemon.context import Daemon
from chock.log.catalog import Entry
from chock.log.reader import offset_after

# Lines are gathered into sends of about this size: a `read` of a long log is a few large writes, not one
# per event.
SEND_BATCH = 64 * 1024

# A `read` takes the log in pieces of this size, so a long log never sits whole in the daemon.
READ_CHUNK = 256 * 1024

# How long `answer` waits for the session's approval socket: a session answers between two steps of its
# own loop, which it serves whenever it waits.
ANSWER_TIMEOUT = 10.0


class ClientGone(Exception):
    """The client closed its end while we were replying: nothing to do but stop."""


class ReplyWriter:
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

    def stream(self, chunks: Iterator[bytes]) -> None:
        """Send what `chunks` produces, as the client takes it."""
        for chunk in chunks:
            self.buffer(chunk)
        self.flush()


def _not_found(text: str) -> ProtocolError:
    return ProtocolError(ErrorCode.NOT_FOUND, text)


def _session(daemon: Daemon, project: str, session_id: str) -> Entry:
    """The session `session_id` of `project` (compared by resolved real path), or `not-found`."""
    entry = daemon.catalog.entry(session_id)
    if entry is None:
        raise _not_found(f"there is no session {session_id}")
    if entry.project_real != os.path.realpath(project):
        raise _not_found(f"session {session_id} is not a session of {project} (it works in {entry.state.project})")
    return entry


def _list_line(started_at: str, row: dict[str, Any]) -> bytes:
    return dp.ListRow(started_at, row).encode()


# --------------------------------------------------------------------------------------------------------
# The verbs


def start(daemon: Daemon, reply: ReplyWriter, request: dp.StartRequest) -> None:
    """`start <project>\\t<message>` -> `ok <session id>\\t<log path>`, once the child has logged its start."""
    session_id = daemon.children.start(request.project, request.message)
    reply.send(dp.Started(session_id, str(daemon.layout.log_path(session_id))).encode())


def adopt(daemon: Daemon, reply: ReplyWriter, request: dp.AdoptRequest) -> None:
    """`adopt <project>\\t<session id>` -> `ok <session id>\\t<log path>`, once the child holds the log."""
    entry = _session(daemon, request.project, request.session_id)
    daemon.children.adopt(request.session_id, request.project, entry.state.last_event_id)
    reply.send(dp.Started(request.session_id, str(daemon.layout.log_path(request.session_id))).encode())


def read(daemon: Daemon, reply: ReplyWriter, request: dp.ReadRequest) -> None:
    """`read <session id> <last event id>` -> the log's own lines after that id, then close."""
    try:
        handle = open(daemon.layout.log_path(request.session_id), "rb")  # noqa: SIM115 - the producer closes it
    except FileNotFoundError:
        raise _not_found(f"there is no session {request.session_id}") from None
    try:
        start = offset_after(handle, request.after)
    except BaseException:
        handle.close()
        raise
    reply.stream(_complete_lines(handle, start))


def _complete_lines(handle: BinaryIO, start: int) -> Iterator[bytes]:
    """The log from `start` in chunks of whole lines, up to the last `\n` (a torn tail is never sent)."""
    with handle:
        handle.seek(start)
        held = b""
        while data := handle.read(READ_CHUNK):
            data = held + data
            end = data.rfind(b"\n") + 1
            held = data[end:]
            if end:
                yield data[:end]


def list_(daemon: Daemon, reply: ReplyWriter, request: dp.ListRequest) -> None:
    """`list <project>` -> `<started at>\\t<row JSON>` per session, oldest first; none for an unknown project."""
    catalog = daemon.catalog
    for entry in catalog.of_project(request.project):
        reply.buffer(entry.line(catalog.alive(entry), _list_line))
    reply.flush()


def watch(daemon: Daemon, reply: ReplyWriter, request: dp.WatchRequest) -> None:
    """`watch <project>\\t<session id>\\t<last id>` -> `ok <row JSON>`, then event lines as the log grows."""
    _session(daemon, request.project, request.session_id)
    reply.sock.settimeout(None)  # the subscription sends with its own bounds
    subscription = daemon.hub.subscribe(request.session_id, reply.sock, request.after)
    daemon.watch_opened()
    try:
        subscription.serve()
    finally:
        daemon.hub.unsubscribe(subscription)
        daemon.watch_closed()


def answer(daemon: Daemon, reply: ReplyWriter, request: dp.AnswerRequest) -> None:
    """`answer <project>\\t<session id>\\t<request id>\\t<yes|no>` -> `ok answered`, through approval.sock only.

    A connect that failed is reported as a failure and never as `ok answered`.
    """
    from chock.control.client import SessionClient
    from chock.control.session_protocol import APPROVAL
    from chock.errors import ChockError

    _session(daemon, request.project, request.session_id)
    try:
        path = daemon.layout.session_socket(request.session_id, "approval")
        with SessionClient(path, APPROVAL, timeout=ANSWER_TIMEOUT) as client:
            client.answer(request.request_id, request.yes)
    except ProtocolError as error:
        code = ErrorCode.NOT_PENDING if error.code == ErrorCode.NOT_PENDING else ErrorCode.UNREACHABLE
        raise ProtocolError(code, error.text) from None
    except (ChockError, OSError) as error:
        raise ProtocolError(ErrorCode.UNREACHABLE, f"the session's approval socket: {error}") from None
    reply.send(dp.Answered().encode())


Verb = Callable[[Daemon, ReplyWriter, Any], None]

VERBS: dict[str, Verb] = {
    "start": start,
    "adopt": adopt,
    "read": read,
    "list": list_,
    "watch": watch,
    "answer": answer,
}

assert set(VERBS) == set(dp.CONTROL.requests), "every verb the codec parses has its handler here"

# Answered from the selector loop: their reply is produced from memory or the log, never waited for.
INLINE = frozenset({"list", "read"})
