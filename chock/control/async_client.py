"""The daemon over asyncio streams, for serve: the same exchange as `ControlClient`, on an event loop.

A thin pump around `chock.control.connection.ClientConnection`: it opens a connection per verb (one
connection = the greeting + one verb), moves bytes, and bounds each wait as a whole. Nothing here knows a
verb: serve builds the request (`StartRequest(…)`) and gets the typed reply, or a `Stream` of lines. Nothing
branches on whether the daemon is local: a unix, a TCP and an ssh address differ only in how the stream opens
(chock/control/reach.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from chock.control import daemon_protocol as dp
from chock.control.address import Address
from chock.control.client import DEFAULT_TIMEOUT, START_DAEMON, Deadline, os_reason
from chock.control.connection import NEED_DATA, ClientConnection
from chock.control.framing import MAX_REPLY_LINE, Unreachable
from chock.control.message import ReplyLine, Request
from chock.control.reach import SshSocket, ended_why, open_transport

_CHUNK = 64 * 1024


class AsyncPump:
    """One greeted connection: lines in through the ClientConnection, requests out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: ClientConnection):
        self._reader = reader
        self._writer = writer
        self.connection = connection

    async def write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as error:
            raise Unreachable(f"the {self.connection.peer} closed the connection ({os_reason(error)})") from None

    async def send(self, request: Request) -> None:
        await self.write(self.connection.send(request))

    async def next_event(self, timeout: float | None, what: str) -> object:
        """The next event (a ReplyLine, Greeted or CLOSED) within `timeout` as a whole; a refusal is raised."""
        deadline = Deadline(timeout, asyncio.get_running_loop().time)
        while (event := self.connection.next_event()) is NEED_DATA:
            try:
                data = await asyncio.wait_for(self._reader.read(_CHUNK), deadline.left(self.connection.peer, what))
            except TimeoutError:
                continue
            except OSError:
                data = b""  # a reset is the daemon going away, like end of file
            self.connection.receive_data(data)
        return event

    async def reply(self, timeout: float | None, what: str) -> ReplyLine:
        event = await self.next_event(timeout, what)
        if not isinstance(event, ReplyLine):
            raise Unreachable(f"the {self.connection.peer} closed the connection before answering {what}")
        return event

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


class AsyncReplyStream:
    """A streamed reply: its `header` (None for a reply without one), then its lines with `async for`.

    The connection closes when the reply ends, when iteration stops, or with `close()`.
    """

    def __init__(self, pump: AsyncPump, header: ReplyLine | None, first: object, idle: float | None, what: str) -> None:
        # `first` is the first line when it was read to surface a refusal early (a reply with no header).
        self.header = header
        self._pump = pump
        self._first = first
        self._idle = idle
        self._what = what

    async def __aiter__(self) -> AsyncIterator[ReplyLine]:
        try:
            event = self._first or await self._pump.next_event(self._idle, self._what)
            while isinstance(event, ReplyLine):
                yield event
                event = await self._pump.next_event(self._idle, self._what)
        finally:
            self.close()

    def close(self) -> None:
        self._pump.close()


class AsyncControlClient:
    """The daemon at `address`, one verb per connection."""

    def __init__(self, address: Address, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address
        self.timeout = timeout

    async def _open(self) -> AsyncPump:
        address = self.address
        sock = None
        try:
            if address.ssh is not None:
                sock = await asyncio.to_thread(open_transport, address, self.timeout)
                if isinstance(sock, SshSocket):
                    sock.wait_on_close = False  # a thread reaps it: the loop never waits on an ssh
                opening = asyncio.open_unix_connection(sock=sock, limit=MAX_REPLY_LINE)
            elif address.is_unix:
                opening = asyncio.open_unix_connection(address.path, limit=MAX_REPLY_LINE)
            else:
                opening = asyncio.open_connection(address.host, address.port, limit=MAX_REPLY_LINE)
            reader, writer = await asyncio.wait_for(opening, self.timeout)
        except TimeoutError:
            why = f"no answer within {self.timeout:g} s"
        except OSError as error:
            why = os_reason(error)
        else:
            pump = AsyncPump(reader, writer, ClientConnection(dp.CONTROL, peer=f"daemon at {address}"))
            try:
                await pump.write(pump.connection.greeting())
                await pump.next_event(self.timeout, "the greeting")
            except Unreachable as error:
                pump.close()
                if sock is None:
                    raise
                raise await asyncio.to_thread(ended_why, sock, error) from None
            except BaseException:
                pump.close()
                raise
            return pump
        raise Unreachable(f"no chock daemon answers at {address} ({why}); {START_DAEMON}")

    async def ping(self) -> int:
        """Greet and close: the daemon's protocol number (equal to ours, or this raised)."""
        pump = await self._open()
        pump.close()
        return pump.connection.server_number

    async def call(self, request: Request) -> ReplyLine:
        """A verb answered by one line: its reply, or its refusal raised."""
        pump = await self._open()
        try:
            await pump.send(request)
            return await pump.reply(request.WAIT or self.timeout, request.verb)
        finally:
            pump.close()

    async def stream(self, request: Request, *, idle_timeout: float | None = DEFAULT_TIMEOUT) -> AsyncReplyStream:
        """A streamed verb: the header and the first line are awaited before this returns, so a refusal
        (`not-found`, …) is raised here and not halfway through a response."""
        pump = await self._open()
        try:
            await pump.send(request)
            if request.REPLY is not None:
                header, first = await pump.reply(self.timeout, request.verb), None
            else:
                header, first = None, await pump.next_event(self.timeout, request.verb)
        except BaseException:
            pump.close()
            raise
        return AsyncReplyStream(pump, header, first, idle_timeout, request.verb)
