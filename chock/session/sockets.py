"""A session's own sockets, approval.sock and handover.sock, served by its one loop (docs/protocol.md#session-sockets).

They carry questions and answers and never a log write: the session writes its log. A reply that reports a logged
fact comes once the log holds it, synced: `ok answered` once the answer is logged (docs/log.md#durability); `ok
queued` says only that the message is held in memory. Every rule of a line and
of the greeting is `chock.control.connection.ServerConnection`'s; what a request does is the approvals
registry's, the handover machine's and the steering's (`chock.session.approvals`, `.handover`, `.steering`),
all handed in, so this module knows nothing of the session loop that owns it. A session that ends while a
client waits sends `ended <reason>` and closes.

Bounds: only our own uid is served; each socket takes at most MAX_CONNECTIONS at once (the one past it is told
so, then closed). `ServerConnection` owns the deadlines, given LINE_SECONDS and IDLE_SECONDS here (this pump
only keeps time): a line must arrive whole within LINE_SECONDS of its first byte; a connection that has not
greeted within LINE_SECONDS, or that sits idle between requests for IDLE_SECONDS (`chock approve` waits while a
person decides), is closed. A client waiting for an answer the session owes it (a handover ask) is never idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import Callable
from pathlib import Path

from chock.control import session_protocol as sp
from chock.control.connection import NEED_DATA, ServerConnection
from chock.control.framing import LINE_SECONDS, LINGER_SECONDS, ErrorCode, ProtocolError
from chock.control.greeting import Greeted
from chock.control.message import LineProtocol, ReplyLine, Request
from chock.platform.listening import Owned
from chock.platform.peer import is_own_user
from chock.session.approvals import Approvals
from chock.session.handover import Handover, HandoverRefused
from chock.session.parked import IDLE_SECONDS, MAX_CONNECTIONS, READ_SIZE
from chock.session.steering import SessionEnding, Steering

TYPE_CHECKING = False
if TYPE_CHECKING:
    from chock.session.parking import Carried


class _Client:
    """One connection: its writer and its protocol state (which holds its deadlines)."""

    def __init__(self, writer: asyncio.StreamWriter, protocol: LineProtocol) -> None:
        self.writer = writer
        self.connection = ServerConnection(protocol, now=_now(), line_seconds=LINE_SECONDS, idle_seconds=IDLE_SECONDS)

    async def read(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next bytes (`b""` at end of file); None once the connection is over (cut for time, silently)."""
        while self.connection.deadline_passed(_now()) is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(self.connection.next_deadline()):
                    data = await reader.read(READ_SIZE)
                    self.connection.receive_data(data, _now())
                    return data
        return None

    async def reply(self, reply: ReplyLine | ProtocolError) -> bool:
        """Send one reply line the exchange allows (the connection checks it); False when the client has gone."""
        return await self.send(self.connection.send(reply, _now()))

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
        """Send the refusal, stop writing, and drop what the client still sends while the connection lingers
        before closing, so that the close never resets a connection whose refusal the client has not read."""
        if await self.reply(error):
            with contextlib.suppress(Exception):
                self.writer.write_eof()
                self.connection.linger(_now())
                while await self.read(reader) is not None:
                    pass
        self.close()


class SessionSockets:
    def __init__(
        self,
        paths: dict[str, Path],
        approvals: Approvals,
        handover: Handover,
        steering: Steering,
        changed: Callable[[], None],
        *,
        inherited: dict[str, int] | None = None,
        carried: list[Carried] | None = None,
    ) -> None:
        self._paths = paths
        self._inherited = inherited or {}  # listening sockets a parked session handed on, by kind
        self._carried = carried or []  # connections its waiter held
        self._carrying: set[asyncio.Future[None]] = set()  # their servings (the server holds the others')
        self._approvals = approvals
        self._handover = handover
        self._steering = steering
        self._changed = changed  # the session loop looks at the handover again
        self._servers: list[asyncio.Server] = []
        self._owned: list[Owned] = []  # only these socket files are ours to remove (an adopter may rebind)
        self._clients: dict[str, set[_Client]] = {"approval": set(), "handover": set()}
        # `ok answered` owed once the answer is logged: to whom, and what their connection waits on meanwhile.
        self._unlogged: dict[str, tuple[_Client, asyncio.Future[None]]] = {}

    async def start(self) -> None:
        """Listen on both sockets; a stale socket file at either path is ours to replace (we hold the lock). A
        session rebuilt after parking listens on the sockets it inherited, and serves the connections carried
        over first, from the request its waiter left unserved."""
        protocols = {"approval": sp.APPROVAL, "handover": sp.HANDOVER}
        for kind, protocol in protocols.items():
            path = self._paths[kind]
            serve = functools.partial(self._serve, kind, protocol)
            if kind in self._inherited:
                listening = socket.socket(fileno=self._inherited[kind])
                server = await asyncio.start_unix_server(serve, sock=listening)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                previous = os.umask(0o177)  # the socket is born 0600; the process is single-threaded
                try:
                    server = await asyncio.start_unix_server(serve, path=str(path))
                finally:
                    os.umask(previous)
            self._servers.append(server)
            info = os.lstat(path)
            self._owned.append(Owned(os.fspath(path), info.st_dev, info.st_ino))
        for carried in self._carried:
            reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=carried.fd))
            serve = functools.partial(self._serve, carried.kind, protocols[carried.kind], carried=carried)
            self._carrying.add(asyncio.ensure_future(serve(reader, writer)))
        self._carried = []

    def listening(self) -> dict[str, int]:
        """The listening sockets' descriptors, by kind (what a parking session hands on)."""
        kinds = ("approval", "handover")
        return {kind: server.sockets[0].fileno() for kind, server in zip(kinds, self._servers, strict=True)}

    def idle(self) -> bool:
        """No client is connected and no reply is owed: nothing would be lost by parking."""
        return not self._unlogged and not any(self._clients.values())

    async def tell_asker(self, reply: ReplyLine) -> bool:
        """Send the handover asker what the machine said (`busy`, `ready`, `released`); False if it is gone."""
        asker = self._handover.asker
        return isinstance(asker, _Client) and await asker.reply(reply)

    def answer_logged(self, request_id: str) -> None:
        """The answer to `request_id` is in the log, synced: the client that gave it hears `ok answered` now,
        ahead of anything the session says next (its end, when it ends at once)."""
        owed = self._unlogged.pop(request_id, None)
        if owed is not None:
            client, waiting = owed
            client.put(client.connection.send(sp.Answered(), _now()))
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
                            told = await client.reply(sp.Ended(ended))
                if told:
                    client.close()
                else:
                    client.abort()
        for owned in self._owned:
            owned.remove()

    # One connection ----------------------------------------------------------------------------------------

    async def _serve(
        self, kind: str, protocol: LineProtocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        carried: Carried | None = None,
    ) -> None:  # fmt: skip
        client = _Client(writer, protocol)
        if carried is not None and carried.greeting:  # answered by the waiter: taken in again, not answered twice
            client.connection.receive_data(carried.greeting, _now())
            client.connection.next_event()
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
        if carried is not None and carried.owed:  # the waiter's replies the client had not taken yet, in order
            client.put(carried.owed)
        try:
            await self._exchange(client, reader, carried.unserved if carried is not None else b"")
        except (TimeoutError, ConnectionError):
            pass
        finally:
            clients.discard(client)
            if self._handover.asker is client:  # the asker went away: the ask is dropped, nothing changes
                self._handover.drop(client)
                self._changed()
            client.close()

    async def _exchange(self, client: _Client, reader: asyncio.StreamReader, unserved: bytes = b"") -> None:
        connection = client.connection
        if unserved:
            connection.receive_data(unserved, _now())
        while unserved or await client.read(reader):
            unserved = b""
            while True:
                try:
                    event = connection.next_event()
                except ProtocolError as error:
                    # One bad line gets its error and the connection serves the next request; a line past the
                    # bound or a bad greeting ends it.
                    if connection.fatal(error):
                        return await client.refuse(error, reader)
                    if not await client.reply(error):
                        return
                    continue
                if event is NEED_DATA:
                    break
                if isinstance(event, Greeted):
                    if not await client.send(connection.greeting_reply()):
                        return
                    continue
                replies = self._handle(client, event)  # type: ignore[arg-type]
                if isinstance(replies, asyncio.Future):  # the reply is put once the session has logged what it says
                    await replies
                    continue
                if replies and not await client.send(b"".join(connection.send(reply, _now()) for reply in replies)):
                    return  # one write, however many lines (`pending`)

    def _handle(self, client: _Client, event: Request) -> list[ReplyLine | ProtocolError] | asyncio.Future[None]:
        """The replies to send now for one request (none when the answer comes later, at a turn boundary), or what
        to wait on before the next request: the reply the session puts once it has logged what this one told it."""
        if isinstance(event, sp.PendingRequest):
            items = [sp.PendingItem(item.request_id, item.tool, item.summary) for item in self._approvals.pending()]
            return [*items, sp.PendingEnd()]
        if isinstance(event, sp.SessionAnswerRequest | sp.SessionAnswerWithRequest):
            more = {}
            if isinstance(event, sp.SessionAnswerWithRequest):
                more = {"scope": event.scope, "rule": event.rule, "note": event.note}
            try:
                taken = self._approvals.answer(event.request_id, "yes" if event.yes else "no", "socket", **more)
            except ValueError as refusal:  # the rule to save is not one (chock.rules.rule.check_pattern's words)
                return [ProtocolError(ErrorCode.BAD_REQUEST, f"the rule cannot be saved: {refusal}")]
            if taken:
                waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._unlogged[event.request_id] = (client, waiting)
                return waiting
            return [ProtocolError(ErrorCode.NOT_PENDING, f"{event.request_id} is not waiting for an answer")]
        if isinstance(event, sp.SessionSayRequest):
            try:
                self._steering.say(event.message)
            except SessionEnding as ending:
                return [ProtocolError(ErrorCode.UNREACHABLE, str(ending))]
            return [sp.Queued()]
        if isinstance(event, sp.SessionStopRequest):
            self._steering.stop("socket")  # its answer is the `ended interrupted` every client hears
            return []
        try:
            if isinstance(event, sp.HandoverRequest):
                self._handover.ask(client)
            elif isinstance(event, sp.ConfirmRequest):
                self._handover.confirm(client)
        except HandoverRefused as refusal:
            code = ErrorCode.REFUSED if isinstance(event, sp.HandoverRequest) else ErrorCode.BAD_REQUEST
            return [ProtocolError(code, str(refusal))]
        self._changed()
        return []


def _now() -> float:
    """The time every deadline of these sockets counts on: the event loop's clock."""
    return asyncio.get_running_loop().time()
