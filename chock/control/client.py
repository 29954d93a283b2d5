"""The blocking clients every command uses: of the daemon (`ControlClient`) and of a session's own sockets
(`SessionClient`).

Each is a thin pump around `chock.control.connection.ClientConnection`: it connects, moves bytes between the
socket and the connection, and bounds each wait as a whole (not each `recv`). Every rule of the exchange and
every line are the connection's and the message types'; a verb is `call(request)` (a one-line reply) or
`stream(request)` (a header and lines until the reply ends), and nothing here knows a verb: a caller builds the
verb's request (`StartRequest(…)`) and reads the typed reply (`expect(reply, Started)`). Which daemon — the host
— is the client's address, given when it is made.

Every failure is a `ProtocolError` carrying a protocol error code: the peer's own `error <code> <text>`, or
`unreachable` (`Unreachable`) when nothing answers at the address or the peer goes away, or `protocol` when the
two ends do not speak the same protocol number or a reply cannot be read.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from chock.control import daemon_protocol as dp
from chock.control import session_protocol as sp
from chock.control.address import Address, parse_address
from chock.control.connection import END_OF_BODY, NEED_DATA, ClientConnection, Data
from chock.control.framing import ErrorCode, ProtocolError, Unreachable
from chock.control.message import LineProtocol, ReplyLine, Request
from chock.control.reach import connect, ended_why, open_transport

if TYPE_CHECKING:
    from concurrent.futures import Future

R = TypeVar("R", bound=ReplyLine)

# Connect, greeting and the reply to a quick verb (list, read, answer). The daemon's own idle bound before a
# verb is 30 s, so a client that waits as long has given a slow machine every chance.
DEFAULT_TIMEOUT = 30.0

_CHUNK = 64 * 1024
# A part of a moving session is read in larger pieces: fewer trips through the pump for the same bytes.
_BODY_CHUNK = 1024 * 1024
# A connection dialed ahead is used within this of its greeting, well inside the daemon's 30 s bound on a greeted
# connection without its verb; older, it is closed and another dialed.
SPARE_SECONDS = 15.0
# How many such pieces a relay holds read and not yet written (at most this many MiB).
AHEAD = 8
# The next step for a person when no daemon answers; serve says the same.
START_DAEMON = "start one with `chock daemon`, or `systemctl --user start chock.socket` where its units are installed"


class NoAnswer(Unreachable):
    """The peer is there but sent nothing within the bound; the connection is still usable."""


class SessionEnded(ProtocolError):
    """The session sent `ended <reason>` while this client waited."""

    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.UNREACHABLE, f"the session ended ({reason}) while this client waited")
        self.reason = reason


def os_reason(error: OSError) -> str:
    """An OSError from connecting or reading, in a few words."""
    if isinstance(error, FileNotFoundError):
        return "there is no socket at that path"
    if isinstance(error, ConnectionRefusedError):
        return "nothing is listening there"
    if isinstance(error, TimeoutError):
        return "timed out"
    return error.strerror or type(error).__name__


class Deadline:
    """A wait bounded as a whole: what is left of `timeout` (None: no bound), or NoAnswer once it is spent."""

    def __init__(self, timeout: float | None, now: Callable[[], float]) -> None:
        self._timeout = timeout
        self._now = now
        self._end = None if timeout is None else now() + timeout

    def left(self, peer: str, what: str) -> float | None:
        if self._end is None:
            return None
        remaining = self._end - self._now()
        if remaining <= 0:
            raise NoAnswer(f"the {peer} did not answer {what} within {self._timeout:g} s")
        return remaining


class Pump:
    """One connected socket and the ClientConnection that reads it, greeted by `greet`."""

    def __init__(self, sock: socket.socket, connection: ClientConnection) -> None:
        self.sock = sock
        self.connection = connection

    @classmethod
    def greet(
        cls, sock: socket.socket, protocol: LineProtocol, peer: str, timeout: float, request: Request | None = None
    ) -> Pump:
        """Greet over a connected socket and check the number; a refusal is raised and the socket closed. With
        `request`, it is sent with the greeting (`ClientConnection.greeting_with`)."""
        pump = cls(sock, ClientConnection(protocol, peer=peer))
        try:
            connection = pump.connection
            pump.write(connection.greeting() if request is None else connection.greeting_with(request))
            pump.next_event(timeout, "the greeting")
        except BaseException:
            pump.close()
            raise
        return pump

    def write(self, data: bytes | bytearray) -> None:
        try:
            self.sock.sendall(data)
        except OSError as error:
            raise Unreachable(f"the {self.connection.peer} closed the connection ({os_reason(error)})") from None

    def send(self, request: Request) -> None:
        """Send one request; a field the codec refuses raises here, before anything is written."""
        self.write(self.connection.send(request))

    def next_event(self, timeout: float | None, what: str) -> object:
        """The connection's next event (a ReplyLine, Greeted, or CLOSED), waiting at most `timeout` for it as a
        whole; the peer's refusal is raised as a ProtocolError."""
        deadline = Deadline(timeout, time.monotonic)
        while (event := self.connection.next_event()) is NEED_DATA:
            self._receive(deadline, what)
        return event

    def fill(self, lines: int, timeout: float | None, what: str) -> None:
        """Receive until `lines` complete lines are held or the peer has closed (each wait at most `timeout` for
        it as a whole), so that they can be decoded together."""
        deadline = Deadline(timeout, time.monotonic)
        while self.connection.held() < lines and not self.connection.closed:
            self._receive(deadline, what)

    def whole(self, most: int, first: float | None, rest: float | None, what: str) -> list[ReplyLine] | None:
        """The reply to the request just sent, read to its end (the peer's close: its first bytes within `first`,
        the others within `rest` as a whole, as a stream's lines are waited for) and decoded in one pass
        (`ClientConnection.read_whole`): its items, at most `most`; None when it cannot be read so, and then
        `next_event` reads the same bytes line by line."""
        connection = self.connection
        if not connection.read_whole():
            return None
        deadline = Deadline(first, time.monotonic)
        while connection.reading_whole and not connection.whole_held:
            self._receive(deadline, what)
        deadline = Deadline(rest, time.monotonic)
        while connection.reading_whole:
            self._receive(deadline, what)
        return connection.whole_items(most)

    def _receive(self, deadline: Deadline, what: str) -> None:
        """One read from the peer into the connection, waiting at most what is left of `deadline` (which raises,
        naming `what`, once none is)."""
        self.sock.settimeout(deadline.left(self.connection.peer, what))
        try:
            data = self.sock.recv(_BODY_CHUNK if self.connection.in_body else _CHUNK)
        except TimeoutError:
            return  # the deadline says so at the next call
        except OSError:
            data = b""  # a reset is the peer going away, like end of file
        self.connection.receive_data(data)

    def reply(self, timeout: float | None, what: str) -> ReplyLine:
        """The next line of a reply that must come: end of file first is `unreachable`."""
        event = self.next_event(timeout, what)
        if not isinstance(event, ReplyLine):
            raise Unreachable(f"the {self.connection.peer} closed the connection before answering {what}")
        return event

    def body(self, timeout: float | None, what: str) -> Iterator[bytes | bytearray]:
        """The bytes after a reply's first line (`send`'s part), as they come, each wait at most `timeout`; the
        peer closing before the last is Unreachable, so a part cut short never looks whole."""
        while True:
            event = self.next_event(timeout, what)
            if isinstance(event, Data):
                yield event.data
            elif event is END_OF_BODY:
                return
            else:
                raise Unreachable(f"the {self.connection.peer} ended {what} before its last byte")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Pump:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplyStream:
    """A streamed reply: its `header` (None for a reply without one) and its lines as an iterator.

    The connection closes when the reply ends, when the iterator is closed, or with `close()`.
    """

    def __init__(self, pump: Pump, header: ReplyLine | None, first: object, idle: float | None, what: str) -> None:
        # `first` is the first line when it was read to surface a refusal early (a reply with no header).
        self.header = header
        self._pump = pump
        self._first = first
        self._idle = idle
        self._what = what

    def __iter__(self) -> Iterator[ReplyLine]:
        try:
            event = self._first or self._pump.next_event(self._idle, self._what)
            while isinstance(event, ReplyLine):
                yield event
                event = self._pump.next_event(self._idle, self._what)
        finally:
            self.close()

    def within(self, seconds: float) -> Iterator[ReplyLine]:
        """The stream's lines, as iterating it gives them, all of them within `seconds` of this call as a whole
        (each also within the idle bound): NoAnswer once that is spent, however steadily they come."""
        whole = Deadline(seconds, time.monotonic)
        try:
            event, self._first = self._first, None
            while True:
                if event is None:
                    left = whole.left(self._pump.connection.peer, self._what) or 0.0
                    event = self._pump.next_event(left if self._idle is None else min(left, self._idle), self._what)
                if not isinstance(event, ReplyLine):
                    return
                yield event
                event = None
        finally:
            self.close()

    def rest(self, most: int) -> list[ReplyLine]:
        """The stream's lines to its end, at most `most`: what came is read as it comes, then every line held is
        decoded in one pass where the item type can (`ClientConnection.items`), else one by one."""
        lines: list[ReplyLine] = []
        first, self._first = self._first, None
        if isinstance(first, ReplyLine):
            lines.append(first)
        elif first is not None:
            return lines  # the stream ended before its first line
        connection = self._pump.connection
        while len(lines) < most:
            if connection.batches():  # it ends when the peer closes: what is on its way is read first
                self._pump.fill(most - len(lines), self._idle, self._what)
                batch = connection.items(most - len(lines))
                if batch:
                    lines += batch
                    continue
            event = self._pump.next_event(self._idle, self._what)
            if not isinstance(event, ReplyLine):
                break
            lines.append(event)
        return lines

    def close(self) -> None:
        self._pump.close()


def expect(reply: object, cls: type[R]) -> R:
    """`reply` as the type its request declares (the connection decoded it as that type)."""
    if not isinstance(reply, cls):
        raise ProtocolError(ErrorCode.PROTOCOL, f"expected {cls.WHAT}, got {reply!r}")
    return reply


class ControlClient:
    """The daemon at `address`: every call opens its own connection, greets, sends one verb, reads its reply."""

    def __init__(self, address: Address | str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = parse_address(address) if isinstance(address, str) else address
        self.timeout = timeout

    def _open(self, request: Request | None = None) -> Pump:
        """A greeted connection to the daemon; with `request`, that request sent with the greeting."""
        address = self.address
        try:
            sock = open_transport(address, self.timeout)
        except OSError as error:
            raise Unreachable(f"no chock daemon answers at {address} ({os_reason(error)}); {START_DAEMON}") from None
        try:
            return Pump.greet(sock, dp.CONTROL, f"daemon at {address}", self.timeout, request)
        except Unreachable as error:
            raise ended_why(sock, error) from None

    def ping(self) -> int:
        """Greet and close: proves a daemon speaking our number is there; returns its number."""
        with self._open() as pump:
            return pump.connection.server_number

    def call(self, request: Request) -> ReplyLine:
        """A verb answered by one line (`start`, `adopt`, `answer`): its reply, or its refusal raised."""
        with self._open() as pump:
            pump.send(request)
            return pump.reply(request.WAIT or self.timeout, request.verb)

    def call_with_body(self, request: Request, body: Iterable[bytes | bytearray]) -> ReplyLine:
        """A verb whose request is followed by bytes (`receive`): the request, `body` written as it comes, then its
        one-line reply. A daemon that refuses before taking the bytes (a length past its bound) closes early: its
        refusal is what is raised, not the failed write."""
        with self._open() as pump:
            pump.send(request)
            try:
                for chunk in body:
                    pump.write(chunk)
            except Unreachable as cut:
                try:
                    reply = pump.reply(self.timeout, request.verb)
                except ProtocolError as refusal:
                    raise (cut if isinstance(refusal, Unreachable) else refusal) from None
                raise unexpected(reply, cut) from None
            return pump.reply(request.WAIT or self.timeout, request.verb)

    def open_body(self, request: Request) -> tuple[ReplyLine, Iterator[bytes | bytearray]]:
        """A verb whose reply's first line is followed by bytes (`send`): that line, and the bytes as they come
        (the connection closes when they end, or when the iterator is closed). The bytes are read by a thread of
        their own, up to AHEAD chunks before the caller takes them: a relay reads one peer while it writes the
        other."""
        pump = self._open()
        try:
            pump.send(request)
            header = pump.reply(request.WAIT or self.timeout, request.verb)
        except BaseException:
            pump.close()
            raise

        def body() -> Iterator[bytes | bytearray]:
            with pump:
                yield from read_ahead(pump.body(self.timeout, request.verb), pump.sock)

        return header, body()

    def stream(self, request: Request, *, idle_timeout: float | None = DEFAULT_TIMEOUT) -> ReplyStream:
        """A streamed verb (`read`, `list`, `watch`): the header and first line are read before this returns,
        so a refusal is raised here; each later line is waited for at most `idle_timeout` (None: as long as it
        takes — a watched session may be quiet for minutes)."""
        return self._stream(self._open(), request, idle_timeout)

    def _stream(self, pump: Pump, request: Request, idle_timeout: float | None, *, sent: bool = False) -> ReplyStream:
        try:
            if not sent:
                pump.send(request)
            if request.REPLY is not None:
                header, first = pump.reply(request.WAIT or self.timeout, request.verb), None
            else:
                header, first = None, pump.next_event(self.timeout, request.verb)
        except BaseException:
            pump.close()
            raise
        return ReplyStream(pump, header, first, idle_timeout, request.verb)

    def collect(self, request: Request, *, most: int) -> list[ReplyLine]:
        """A streamed verb's lines read to the end of its reply (its header, if any, left out), at most `most` of
        them (a daemon, perhaps another machine's, decides how many it sends; the rest are not read): for a reply
        that ends by itself (`list`, `sessions`, `read`), never for a `watch`. A listing is read to its end and
        parsed in one pass (`Pump.whole`). The request goes with the greeting: one round trip, not two."""
        pump = self._open(request)
        try:
            items = pump.whole(most, self.timeout, DEFAULT_TIMEOUT, request.verb)
        except BaseException:
            pump.close()
            raise
        if items is not None:
            pump.close()
            return items
        stream = self._stream(pump, request, DEFAULT_TIMEOUT, sent=True)
        try:
            return stream.rest(most)
        finally:
            stream.close()


class WarmClient(ControlClient):
    """A ControlClient for a run of verbs to one daemon (a move's): the connection for the next verb is dialed and
    greeted by a thread while the verb before it runs, so the run pays one connection's start, not one each. A
    connection kept past SPARE_SECONDS is closed unused (the daemon bounds the wait for a greeted connection's verb)
    and another dialed; `close` closes the one kept."""

    def __init__(self, address: Address | str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(address, timeout=timeout)
        self.ahead = True  # False before the run's last verb: nothing is dialed after it
        self._spare: Future[tuple[float, Pump]] | None = self._dial_ahead()
        self._given: list[Pump] = []  # the connections verbs took, for `cut`
        self._cut = False

    def _dial_ahead(self) -> Future[tuple[float, Pump]]:
        import threading
        from concurrent.futures import Future  # a move's, not every command's start (docs/architecture.md#start-up)

        future: Future[tuple[float, Pump]] = Future()

        def dial() -> None:
            try:
                pump = super(WarmClient, self)._open()
            except BaseException as error:  # the verb that needs it dials again, and says why it could not
                future.set_exception(error)
            else:
                future.set_result((time.monotonic(), pump))

        threading.Thread(target=dial, name="dial-ahead", daemon=True).start()
        return future

    def _open(self, request: Request | None = None) -> Pump:
        pump = self._take(request)
        self._given = [*(given for given in self._given if given.sock.fileno() >= 0), pump]
        if self._cut:  # cut while this connection was being taken
            _shut(pump)
        return pump

    def _take(self, request: Request | None) -> Pump:
        spare, self._spare = self._spare, (self._dial_ahead() if self.ahead else None)
        if spare is None:
            return super()._open(request)
        try:
            dialed, pump = spare.result()
        except ProtocolError:
            return super()._open(request)
        if time.monotonic() - dialed < SPARE_SECONDS:
            if request is not None:  # greeted already: the request goes now
                pump.send(request)
            return pump
        pump.close()
        return super()._open(request)

    def cut(self) -> None:
        """Shut every connection a verb took and has not closed, and each one taken from now on, from any thread:
        the verb running on it fails at once as Unreachable (a move's part stops being sent once another failed)."""
        self._cut = True
        for pump in self._given:
            _shut(pump)

    def close(self) -> None:
        """Close the connection dialed ahead, once it is (without waiting for it)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.add_done_callback(_close_dialed)


def _shut(pump: Pump) -> None:
    with contextlib.suppress(OSError):  # closed already
        pump.sock.shutdown(socket.SHUT_RDWR)


def _close_dialed(done: Future[tuple[float, Pump]]) -> None:
    """Close a connection dialed ahead that nothing took, once its dial is done (a failed one holds nothing)."""
    if done.exception() is None:
        done.result()[1].close()


def read_ahead(chunks: Iterator[bytes | bytearray], sock: socket.socket) -> Iterator[bytes | bytearray]:
    """`chunks` (read from `sock`), pulled by a thread of their own at most AHEAD chunks before they are taken; what
    the reading raises is raised here, in its turn. Closed early, the socket is shut so the thread's wait ends."""
    import queue
    import threading

    box: queue.Queue[tuple[bool, object]] = queue.Queue(AHEAD)
    taken = threading.Event()  # the consumer is gone: the thread puts nothing more

    def put(item: tuple[bool, object]) -> None:
        while not taken.is_set():
            try:
                box.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def pull() -> None:
        try:
            for chunk in chunks:
                put((True, chunk))
                if taken.is_set():
                    return
            put((False, None))
        except BaseException as error:  # handed to the consumer, raised there
            put((False, error))

    thread = threading.Thread(target=pull, name="read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            more, item = box.get()
            if not more:
                if item is not None:
                    raise item  # type: ignore[misc]  # what the reading raised
                return
            yield item  # type: ignore[misc]  # a chunk
    finally:
        taken.set()
        if thread.is_alive():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        thread.join()


def unexpected(reply: ReplyLine, cut: Unreachable) -> Unreachable:
    """A peer that answered while its request's bytes were still being written, with no refusal: the bytes are cut."""
    return Unreachable(f"{cut.text} (it answered {reply!r} before taking them all)")


def events_of(lines: Iterable[ReplyLine]) -> Iterator[dict[str, object]]:
    """The events of a `read` or `watch` reply, each as its parsed object."""
    return (expect(line, dp.EventLine).event for line in lines)


class SessionClient:
    """A session's approval.sock or handover.sock (`protocol` is `APPROVAL` or `HANDOVER`): several requests
    on one connection. `path` comes from `Layout.session_socket`, the rule both ends share."""

    def __init__(self, path: str | os.PathLike[str], protocol: LineProtocol, *, timeout: float = DEFAULT_TIMEOUT):
        self.path = os.fspath(path)
        self.timeout = timeout
        try:
            sock = connect(self.path, timeout)
        except OSError as error:
            raise Unreachable(
                f"no session answers at {self.path} ({os_reason(error)}): the session is not running on this machine, "
                "or it has ended"
            ) from None
        self._pump = Pump.greet(sock, protocol, f"session at {self.path}", timeout)

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pump.close()

    def ask(self, request: Request) -> None:
        """Send a request whose reply is read with `next_reply` (the handover exchange, line by line)."""
        self._pump.send(request)

    def next_reply(self, timeout: float | None) -> ReplyLine:
        """The session's next line (`Busy`, `Ready`, `Ended`, …); raises NoAnswer when `timeout` passes first
        (the session carries on unchanged), Unreachable when it closed the connection."""
        return self._pump.reply(timeout, "the request")

    def _reply(self, request: Request, timeout: float | None) -> ReplyLine:
        reply = self._pump.reply(self.timeout if timeout is None else timeout, request.verb)
        if isinstance(reply, sp.Ended):  # the session ended while this client waited
            raise SessionEnded(reply.reason)
        return reply

    def call(self, request: Request, timeout: float | None = None) -> ReplyLine:
        """A request answered by one line; `ended <reason>` is raised as SessionEnded."""
        self.ask(request)
        return self._reply(request, timeout)

    def collect(self, request: Request) -> list[ReplyLine]:
        """A request answered by lines up to its END line (`pending` -> `request …` lines, then `end`)."""
        self.ask(request)
        items = []
        while not isinstance(reply := self._reply(request, None), request.END or ()):
            items.append(reply)
        return items

    # approval.sock ----------------------------------------------------------------------------------------

    def pending(self) -> list[sp.PendingItem]:
        """The approval requests waiting for an answer."""
        return [expect(item, sp.PendingItem) for item in self.collect(sp.PendingRequest())]

    def answer(self, request_id: str, yes: bool) -> None:
        """Answer one request; `error not-pending …` (not waiting, or already answered) is a ProtocolError."""
        self.call(sp.SessionAnswerRequest(request_id, yes))
