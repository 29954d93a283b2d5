"""serve's side of the control protocol: an asyncio client of `chock daemon`, built from the shared codec.

The blocking `chock.control.client` is what commands use; serve runs on an event loop and holds a long
`watch` per watched session, so it speaks the same lines through `asyncio` streams instead of a thread per
connection. Every line is still made and read by `chock.control.protocol`, so this client and the daemon
cannot disagree about one. SPEC §6: "One connection = the greeting + one verb", so every method here opens
its own connection, greets, checks the number, sends its verb, and reads its reply.

Nothing here branches on whether the daemon is local (seed: "in a hosted world the daemon is somewhere
else"): a unix address and a TCP address differ only in how the stream is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from chock.control import protocol as p
from chock.control.client import DEFAULT_TIMEOUT, SPAWN_TIMEOUT, START_DAEMON, Address, ControlError, checked

_CHUNK = 64 * 1024


class DaemonUnreachable(ControlError):
    """Nothing answered at the daemon's address, or it went away mid-reply: serve's upstream failed.

    Apart from the daemon's own `error unreachable …` (a *session* socket did not answer), which arrives as a
    plain ControlError: the daemon was there, the session was not.
    """

    def __init__(self, text: str) -> None:
        super().__init__(p.ErrorCode.UNREACHABLE, text)


def _why(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "there is no socket at that path"
    if isinstance(error, ConnectionRefusedError):
        return "nothing is listening there"
    return error.strerror or type(error).__name__


@dataclass(frozen=True)
class Event:
    """One event line as the daemon sent it (the log's own JSON, unchanged) and its id."""

    id: int
    line: str
    event: dict[str, Any]


class _Connection:
    """One greeted connection: lines in through the codec's reply reader, requests out."""

    def __init__(self, address: Address, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._replies = p.ReplyReader(f"daemon at {address}", reader="serve")
        self.number = 0

    async def send(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as error:
            raise DaemonUnreachable(f"the daemon at {self.address} closed the connection ({_why(error)})") from None

    async def line(self, timeout: float | None, what: str) -> str | None:
        """The next line, or None at end of file."""
        while (line := checked(self._replies.next_line)) is p.NEED_DATA:
            try:
                data = await asyncio.wait_for(self._reader.read(_CHUNK), timeout)
            except TimeoutError:
                raise DaemonUnreachable(
                    f"the daemon at {self.address} did not answer {what} within {timeout:g} s"
                ) from None
            except OSError:
                data = b""  # a reset is the daemon going away, like end of file
            self._replies.feed(data)
        return line

    async def first(self, timeout: float | None, what: str) -> str:
        line = await self.line(timeout, what)
        if line is None:
            raise DaemonUnreachable(f"the daemon at {self.address} closed the connection before answering {what}")
        return line

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


class Watch:
    """An open upstream `watch`: the row from its header, then the events as the log grows.

    `events()` ends when the daemon closes the connection (the session ended, was abandoned, or the daemon
    went away); `close()` ends it from this side.
    """

    def __init__(self, connection: _Connection, row: dict[str, Any]) -> None:
        self._connection = connection
        self.row = row

    async def events(self) -> AsyncIterator[Event]:
        try:
            while (line := await self._connection.line(None, "watch")) is not None:
                yield _event(line)
        finally:
            self._connection.close()

    def close(self) -> None:
        self._connection.close()


def _event(line: str) -> Event:
    event = checked(p.parse_event_line, line)
    number = event.get("id")
    if type(number) is not int or number < 1:
        raise ControlError(p.ErrorCode.PROTOCOL, f"the daemon sent an event with no id: {line[:80]!r}")
    return Event(number, line, event)


class Daemon:
    """The daemon at `address`, spoken to one verb per connection (SPEC §6)."""

    def __init__(self, address: Address, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address
        self.timeout = timeout

    async def _connect(self) -> _Connection:
        try:
            if self.address.is_unix:
                opened = asyncio.open_unix_connection(self.address.path, limit=p.MAX_REPLY_LINE)
            else:
                opened = asyncio.open_connection(self.address.host, self.address.port, limit=p.MAX_REPLY_LINE)
            reader, writer = await asyncio.wait_for(opened, self.timeout)
        except TimeoutError:
            why = f"no answer within {self.timeout:g} s"
        except OSError as error:
            why = _why(error)
        else:
            connection = _Connection(self.address, reader, writer)
            try:
                # Seed: "Nothing below the greeting is read or written until they are [equal]".
                await connection.send(p.encode_greeting(p.CONTROL_NAME))
                line = await connection.first(self.timeout, "the greeting")
                connection.number = checked(p.check_greeting_reply, line, p.CONTROL_NAME)
            except BaseException:
                connection.close()
                raise
            return connection
        raise DaemonUnreachable(f"no chock daemon answers at {self.address} ({why}); {START_DAEMON}")

    async def _request(self, request: type[p.ControlRequest], *fields: Any) -> _Connection:
        """Build the request first (a field the daemon would refuse sends nothing), then connect and send."""
        data = checked(lambda: request(*fields).encode())
        connection = await self._connect()
        try:
            await connection.send(data)
        except BaseException:
            connection.close()
            raise
        return connection

    async def ping(self) -> int:
        """Greet and close: the daemon's protocol number (equal to ours, or this raised)."""
        connection = await self._connect()
        connection.close()
        return connection.number

    async def list(self, project: str) -> list[dict[str, Any]]:
        connection = await self._request(p.ListRequest, project)
        try:
            rows = []
            while (line := await connection.line(self.timeout, "list")) is not None:
                rows.append(checked(p.parse_list_row, line)[1])
            return rows
        finally:
            connection.close()

    async def start(self, project: str, message: str) -> str:
        connection = await self._request(p.StartRequest, project, message)
        try:
            line = await connection.first(SPAWN_TIMEOUT, "start")
        finally:
            connection.close()
        session_id, _log_path = checked(p.parse_started, line)
        return session_id  # seed: "Nothing here hands out a path"; the browser gets the id alone

    async def read(self, session_id: str, after: int) -> AsyncIterator[Event]:
        """The events after `after`. The first line is awaited before the iterator is returned, so a
        refusal (`not-found`, …) is raised here and not halfway through a response."""
        connection = await self._request(p.ReadRequest, session_id, after)
        try:
            first = await connection.line(self.timeout, "read")
            head = [] if first is None else [_event(first)]
        except BaseException:
            connection.close()
            raise

        async def events() -> AsyncIterator[Event]:
            try:
                for event in head:
                    yield event
                if first is None:
                    return
                while (line := await connection.line(self.timeout, "read")) is not None:
                    yield _event(line)
            finally:
                connection.close()

        return events()

    async def watch(self, project: str, session_id: str, after: int) -> Watch:
        connection = await self._request(p.WatchRequest, project, session_id, after)
        try:
            row = checked(p.parse_watch_header, await connection.first(self.timeout, "watch"))
        except BaseException:
            connection.close()
            raise
        return Watch(connection, row)

    async def answer(self, project: str, session_id: str, request_id: str, yes: bool) -> None:
        connection = await self._request(p.AnswerRequest, project, session_id, request_id, yes)
        try:
            line = await connection.first(self.timeout, "answer")
        finally:
            connection.close()
        checked(p.parse_answered, line)
