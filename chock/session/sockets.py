"""The session's own sockets, served by its one loop: approval.sock and handover.sock (SPEC §5).

They carry questions and answers and never a log write: the session writes the log. Both open with
`hello chock-session 1` and take several requests on one connection; a session that ends while a client
waits sends `ended <reason>` and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chock.control import protocol
from chock.control.protocol import ProtocolError
from chock.platform.listening import Owned
from chock.platform.peer import is_own_user

if TYPE_CHECKING:
    from chock.session.runner import Session

# After `ready` the session waits this long for `confirm`; then the ask is dropped and it carries on.
CONFIRM_WAIT_SECONDS = 30.0
# A connection that has not greeted within this long is closed (the control protocol's idle bound).
GREETING_WAIT_SECONDS = 30.0
READ_SIZE = 4096
# Errors after which a connection cannot go on: the framer drops everything after a too-large line.
_FATAL = frozenset({"too-large", "protocol", "greeting"})


class HandoverAsk:
    """One open `handover` ask: answered only at a turn boundary, confirmed by the client, or dropped."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.confirmed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.ready_sent = False
        self._last_busy: tuple[int, int] | None = None

    def drop(self) -> None:
        if not self.confirmed.done():
            self.confirmed.set_result(False)

    async def at_boundary(self, session: Session) -> None:
        counts = session.outstanding()
        if any(counts):
            # Work that lives in this process would be lost; name it and keep the ask open (seed 000).
            if counts != self._last_busy:
                self._last_busy = counts
                await _send(self.writer, protocol.Busy(*counts).encode())
            return
        self.ready_sent = await _send(self.writer, protocol.Ready().encode())
        try:
            confirmed = self.ready_sent and await asyncio.wait_for(asyncio.shield(self.confirmed), CONFIRM_WAIT_SECONDS)
        except TimeoutError:
            confirmed = False
        if not confirmed:  # the client went away or never confirmed: nothing about the session changes
            session.handover = None
            self.writer.close()
            return
        session.record_handover()
        await _send(self.writer, protocol.Released().encode())
        self.writer.close()
        session.finish_handover()


class _Servers:
    def __init__(self) -> None:
        self.servers: list[asyncio.AbstractServer] = []
        self.owned: list[Owned] = []  # only these socket files are ours to remove (an adopter may rebind)
        self.writers: set[asyncio.StreamWriter] = set()


async def serve(session: Session) -> _Servers:
    """Listen on both sockets; a stale socket file at either path is ours to replace (we hold the lock)."""
    servers = _Servers()
    for kind, verbs in (("approval", protocol.APPROVAL_VERBS), ("handover", protocol.HANDOVER_VERBS)):
        path = session.settings.sockets[kind]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        previous = os.umask(0o177)  # the socket is born 0600; the process is single-threaded
        try:
            server = await asyncio.start_unix_server(
                lambda r, w, verbs=verbs: _connection(session, servers, verbs, r, w), path=str(path)
            )
        finally:
            os.umask(previous)
        servers.servers.append(server)
        info = os.lstat(path)
        servers.owned.append(Owned(Path(path), info.st_dev, info.st_ino))
    return servers


async def close(servers: _Servers, *, ended: str) -> None:
    """Tell every waiting client how the session ended, close, and remove our socket files."""
    for server in servers.servers:
        server.close()
    for writer in list(servers.writers):
        await _send(writer, protocol.Ended(ended).encode())
        writer.close()
    for owned in servers.owned:
        owned.remove()


async def _connection(
    session: Session, servers: _Servers, verbs: frozenset[str],
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
) -> None:  # fmt: skip
    sock: socket.socket | None = writer.get_extra_info("socket")
    if sock is None or not is_own_user(sock):
        await _send(writer, ProtocolError("forbidden", "this session serves only its own user").encode())
        writer.close()
        return
    servers.writers.add(writer)
    connection = protocol.ServerConnection(protocol.SESSION_NAME, verbs=verbs)
    ask: HandoverAsk | None = None
    try:
        while True:
            timeout = None if connection.greeted else GREETING_WAIT_SECONDS
            data = await asyncio.wait_for(reader.read(READ_SIZE), timeout)
            if not data:
                return
            connection.receive_data(data)
            while True:
                try:
                    event = connection.next_event()
                except ProtocolError as error:
                    # One bad line gets its error and the connection serves the next request (SPEC §5:
                    # several requests on one connection); a line past the bound or a bad greeting ends it.
                    if not await _send(writer, error.encode()) or error.code in _FATAL or not connection.greeted:
                        return
                    continue
                if event is None:
                    break
                reply, ask = _handle(session, connection, event, ask, writer)
                if reply and not await _send(writer, reply):
                    return
    except (TimeoutError, ConnectionError):
        pass
    finally:
        if ask is not None:  # the asker went away: the ask is dropped and the session carries on unchanged
            ask.drop()
            if session.handover is ask:
                session.handover = None
        servers.writers.discard(writer)
        writer.close()


def _handle(
    session: Session, connection: protocol.ServerConnection, event: Any, ask: HandoverAsk | None,
    writer: asyncio.StreamWriter,
) -> tuple[bytes, HandoverAsk | None]:  # fmt: skip
    if isinstance(event, protocol.Greeted):
        return connection.greeting_reply(), ask
    if isinstance(event, protocol.PendingRequest):
        items = [protocol.PendingItem(p["request_id"], p["tool"], p["summary"]).encode() for p in session.pending()]
        return b"".join(items) + protocol.PendingEnd().encode(), ask
    if isinstance(event, protocol.SessionAnswerRequest):
        if session.answer(event.request_id, "yes" if event.yes else "no", "socket"):
            return protocol.Answered().encode(), ask
        return ProtocolError("not-pending", f"{event.request_id} is not waiting for an answer").encode(), ask
    if isinstance(event, protocol.HandoverRequest):
        if session.handover is not None:
            return ProtocolError("refused", "another handover ask is already open").encode(), ask
        ask = HandoverAsk(writer)
        session.handover = ask
        session.wake()
        return b"", ask
    if isinstance(event, protocol.ConfirmRequest):
        if ask is None or not ask.ready_sent:
            return ProtocolError("bad-request", "confirm comes after the session said ready").encode(), ask
        if not ask.confirmed.done():
            ask.confirmed.set_result(True)
        return b"", ask
    return ProtocolError("unknown-verb", "this socket does not serve that").encode(), ask


async def _send(writer: asyncio.StreamWriter, data: bytes) -> bool:
    """Write and drain; False when the client has gone (which never disturbs the session)."""
    try:
        writer.write(data)
        await writer.drain()
        return True
    except (ConnectionError, RuntimeError):
        return False
