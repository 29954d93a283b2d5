"""A session's own sockets, approval.sock and handover.sock, served by its one loop (docs/protocol.md#session-sockets).

They carry questions and answers and never a log write: the session writes its log. A reply that reports a logged
fact comes once the log holds it, synced: `ok answered` once the answer is logged (docs/log.md#durability); `ok
queued` says only that the message is held in memory. Every rule of a line and
of the greeting is `chock.control.connection.ServerConnection`'s; what a request does is the approvals
registry's, the handover machine's and the steering's (`chock.session.approvals`, `.handover`, `.steering`),
all handed in, so this module knows nothing of the session loop that owns it. A session that ends while a
client waits sends `ended <reason>` and closes.

Bounds: only our own uid is served; each socket takes at most MAX_CONNECTIONS at once (the one past it is told
so, then closed); a line must arrive whole within LINE_SECONDS of its first byte; a connection that has not
greeted within LINE_SECONDS, or that sits idle between requests for IDLE_SECONDS (`chock approve` waits while a
person decides), is closed. A client waiting for an answer the session owes it (a handover ask) is never idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

from chock.control import session_protocol as sp
from chock.control.connection import NEED_DATA, ServerConnection
from chock.control.framing import LINE_SECONDS, LINGER_BYTES, LINGER_SECONDS, ErrorCode, ProtocolError
from chock.control.greeting import Greeted
from chock.control.message import LineProtocol, ReplyLine, Request
from chock.platform.listening import Owned
from chock.platform.peer import is_own_user
from chock.session.approvals import Approvals
from chock.session.handover import Handover, HandoverRefused
from chock.session.steering import SessionEnding, Steering

# A person answering at `chock approve` may take a while; a connection idle longer than this is closed.
IDLE_SECONDS = 15 * 60.0
# Connections each socket serves at once: a person's few terminals and the daemon's relays.
MAX_CONNECTIONS = 16
READ_SIZE = 4096


class _Client:
    """One connection: its writer, its protocol state, and whether the session owes it an answer."""

    def __init__(self, writer: asyncio.StreamWriter, protocol: LineProtocol) -> None:
        self.writer = writer
        self.connection = ServerConnection(protocol)
        self.owed = False  # a handover ask waits for the session's turn boundary

    async def send(self, data: bytes) -> bool:
        """Write and drain; False when the client has gone (which never disturbs the session)."""
        try:
            self.writer.write(data)
            await self.writer.drain()
            return True
        except (ConnectionError, RuntimeError):
            return False

    def put(self, data: bytes) -> None:
        """Queue `data` at once, in order with every other write (drained by the next `send`)."""
        with contextlib.suppress(Exception):
            self.writer.write(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    def abort(self) -> None:
        """Close at once, dropping what is still unsent."""
        with contextlib.suppress(Exception):
            self.writer.transport.abort()

    async def refuse(self, error: ProtocolError, reader: asyncio.StreamReader) -> None:
        """Send the refusal, stop writing, and drop what the client still sends for a moment before closing,
        so that the close never resets a connection whose refusal the client has not read."""
        if await self.send(error.encode()):
            with contextlib.suppress(Exception):
                self.writer.write_eof()
                async with asyncio.timeout(LINGER_SECONDS):
                    drained = 0
                    while drained < LINGER_BYTES and (data := await reader.read(READ_SIZE)):
                        drained += len(data)
        self.close()


class SessionSockets:
    def __init__(
        self,
        paths: dict[str, Path],
        approvals: Approvals,
        handover: Handover,
        steering: Steering,
        changed: Callable[[], None],
    ) -> None:
        self._paths = paths
        self._approvals = approvals
        self._handover = handover
        self._steering = steering
        self._changed = changed  # the session loop looks at the handover again
        self._servers: list[asyncio.AbstractServer] = []
        self._owned: list[Owned] = []  # only these socket files are ours to remove (an adopter may rebind)
        self._clients: dict[str, set[_Client]] = {"approval": set(), "handover": set()}
        # `ok answered` owed once the answer is logged: to whom, and what their connection waits on meanwhile.
        self._unlogged: dict[str, tuple[_Client, asyncio.Future[None]]] = {}

    async def start(self) -> None:
        """Listen on both sockets; a stale socket file at either path is ours to replace (we hold the lock)."""
        for kind, protocol in (("approval", sp.APPROVAL), ("handover", sp.HANDOVER)):
            path = self._paths[kind]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            previous = os.umask(0o177)  # the socket is born 0600; the process is single-threaded
            try:
                server = await asyncio.start_unix_server(
                    lambda r, w, kind=kind, protocol=protocol: self._serve(kind, protocol, r, w), path=str(path)
                )
            finally:
                os.umask(previous)
            self._servers.append(server)
            info = os.lstat(path)
            self._owned.append(Owned(Path(path), info.st_dev, info.st_ino))

    async def tell_asker(self, reply: ReplyLine) -> bool:
        """Send the handover asker what the machine said (`busy`, `ready`, `released`); False if it is gone."""
        asker = self._handover.asker
        return isinstance(asker, _Client) and await asker.send(reply.encode())

    def answer_logged(self, request_id: str) -> None:
        """The answer to `request_id` is in the log, synced: the client that gave it hears `ok answered` now,
        ahead of anything the session says next (its end, when it ends at once)."""
        owed = self._unlogged.pop(request_id, None)
        if owed is not None:
            client, waiting = owed
            client.put(sp.Answered().encode())
            if not waiting.done():
                waiting.set_result(None)

    def dismiss_asker(self, asker: object) -> None:
        """Close the connection of an ask that was dropped: the client reads that nothing was handed over."""
        if isinstance(asker, _Client):
            asker.close()

    async def close(self, *, ended: str) -> None:
        """Tell every waiting client how the session ended, close, and remove our socket files."""
        for server in self._servers:
            server.close()
        for _, waiting in self._unlogged.values():  # never logged (the session stopped first): `ended` says so
            if not waiting.done():
                waiting.set_result(None)
        self._unlogged.clear()
        for clients in self._clients.values():
            for client in list(clients):
                told = False
                if client.connection.greeted:  # before its greeting is answered, a client reads no reply
                    # Bounded: a client that reads nothing (its socket full) must not keep the session from ending.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(LINGER_SECONDS):
                            told = await client.send(sp.Ended(ended).encode())
                if told:
                    client.close()
                else:
                    client.abort()
        for owned in self._owned:
            owned.remove()

    # One connection ----------------------------------------------------------------------------------------

    async def _serve(
        self, kind: str, protocol: LineProtocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        client = _Client(writer, protocol)
        sock: socket.socket | None = writer.get_extra_info("socket")
        if sock is None or not is_own_user(sock):
            await client.refuse(ProtocolError(ErrorCode.FORBIDDEN, "this session serves only its own user"), reader)
            return
        clients = self._clients[kind]
        if len(clients) >= MAX_CONNECTIONS:
            refusal = f"this session's {kind} socket serves {MAX_CONNECTIONS} connections at once; try again shortly"
            await client.refuse(ProtocolError(ErrorCode.REFUSED, refusal), reader)
            return
        clients.add(client)
        try:
            await self._exchange(client, reader)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            clients.discard(client)
            if self._handover.asker is client:  # the asker went away: the ask is dropped, nothing changes
                self._handover.drop(client)
                self._changed()
            client.close()

    async def _exchange(self, client: _Client, reader: asyncio.StreamReader) -> None:
        connection = client.connection
        loop = asyncio.get_running_loop()
        line_deadline = loop.time() + LINE_SECONDS  # the greeting is a line that starts at once
        while True:
            if connection.mid_line or not connection.greeted:
                timeout = line_deadline - loop.time()
            else:
                timeout = None if client.owed else IDLE_SECONDS
            data = await asyncio.wait_for(reader.read(READ_SIZE), timeout)
            if not data:
                return
            was_mid_line = connection.mid_line and b"\n" not in data
            connection.receive_data(data)
            while True:
                try:
                    event = connection.next_event()
                except ProtocolError as error:
                    # One bad line gets its error and the connection serves the next request; a line past the
                    # bound or a bad greeting ends it.
                    if not await client.send(error.encode()) or connection.fatal(error):
                        return
                    continue
                if event is NEED_DATA:
                    break
                reply = self._handle(client, event)  # type: ignore[arg-type]
                if isinstance(reply, asyncio.Future):  # the reply is put once the session has logged what it says
                    await reply
                    continue
                if reply and not await client.send(reply):
                    return
            if connection.mid_line and not was_mid_line:
                line_deadline = loop.time() + LINE_SECONDS

    def _handle(self, client: _Client, event: Greeted | Request) -> bytes | asyncio.Future[None]:
        """The reply to send now for one event (empty when the answer comes later, at a turn boundary), or what to
        wait on before the next request: the reply the session puts once it has logged what this one told it."""
        if isinstance(event, Greeted):
            return client.connection.greeting_reply()
        if isinstance(event, sp.PendingRequest):
            items = [sp.PendingItem(item.request_id, item.tool, item.summary) for item in self._approvals.pending()]
            return b"".join(item.encode() for item in items) + sp.PendingEnd().encode()
        if isinstance(event, sp.SessionAnswerRequest):
            if self._approvals.answer(event.request_id, "yes" if event.yes else "no", "socket"):
                waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._unlogged[event.request_id] = (client, waiting)
                return waiting
            return ProtocolError(ErrorCode.NOT_PENDING, f"{event.request_id} is not waiting for an answer").encode()
        if isinstance(event, sp.SessionSayRequest):
            try:
                self._steering.say(event.message)
            except SessionEnding as ending:
                return ProtocolError(ErrorCode.UNREACHABLE, str(ending)).encode()
            return sp.Queued().encode()
        if isinstance(event, sp.SessionStopRequest):
            client.owed = True  # its answer is the `ended interrupted` every client hears
            self._steering.stop("socket")
            return b""
        try:
            if isinstance(event, sp.HandoverRequest):
                self._handover.ask(client)
                client.owed = True
            elif isinstance(event, sp.ConfirmRequest):
                self._handover.confirm(client)
        except HandoverRefused as refusal:
            code = ErrorCode.REFUSED if isinstance(event, sp.HandoverRequest) else ErrorCode.BAD_REQUEST
            return ProtocolError(code, str(refusal)).encode()
        self._changed()
        return b""
