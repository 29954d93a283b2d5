"""Both ends of one connection, with no I/O (docs/protocol.md), in the shape of h11.

Bytes in (`receive_data`; `b""` is end of file), events out (`next_event`), requests in (`send`), bytes out. A
socket, a thread or an event loop is the caller's: the daemon, the session's sockets, the blocking client every
command uses and serve's asyncio client are thin pumps around these two classes, so every rule of the exchange
— the greeting first, the bounds, one verb per control connection, which lines a reply may hold and how it
ends — lives here once, and a test drives both ends with plain bytes.
"""

from __future__ import annotations

from chock.control.framing import (
    MAX_REPLY_LINE,
    ErrorCode,
    LineBuffer,
    ProtocolError,
    Unreachable,
    decode_error,
    unreadable,
)
from chock.control.greeting import Greeted, check_greeting_reply, encode_greeting, encode_greeting_reply, parse_greeting
from chock.control.message import LineProtocol, ReplyLine, Request


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# `next_event`'s answers when there is no event: read more bytes and feed them (NEED_DATA), or the peer has
# closed and nothing more will come (CLOSED).
NEED_DATA = _Sentinel("NEED_DATA")
CLOSED = _Sentinel("CLOSED")


class ServerConnection:
    """The server's end: the greeting (`Greeted`, to be answered with `greeting_reply()`), then requests.

    Any ProtocolError `next_event` raises is the one reply line to send (`error.encode()`). A refusal of the
    greeting, or a line past its bound, ends the connection; after any other refusal a protocol of several
    verbs per connection serves the next request. A control connection takes one verb: once it has been
    returned, nothing more is read.
    """

    def __init__(self, protocol: LineProtocol, *, number: int | None = None) -> None:
        self.protocol = protocol
        self.number = protocol.number if number is None else number
        self.greeted = False
        self.requests = 0  # how many requests have been taken
        self._buffer = LineBuffer(protocol.line_limit, note=protocol.limit_note)

    def receive_data(self, data: bytes) -> None:
        self._buffer.feed(data)

    def next_event(self) -> Greeted | Request | _Sentinel:
        """The next event, or NEED_DATA; raises ProtocolError for a line to refuse."""
        if self.protocol.one_verb and self.requests:
            return NEED_DATA  # one verb per connection: what else the client sends is not read
        line = self._buffer.next_line()
        if line is None:
            return NEED_DATA
        if not self.greeted:
            greeted = parse_greeting(line, self.protocol, number=self.number)
            self.greeted = True
            return greeted
        request = self.protocol.parse_request(line)
        self.requests += 1
        return request

    def greeting_reply(self) -> bytes:
        return encode_greeting_reply(self.protocol, self.number)

    @property
    def mid_line(self) -> bool:
        """Bytes of an unfinished request line are held: the line's deadline runs (framing.LINE_SECONDS)."""
        return self._buffer.partial

    @staticmethod
    def fatal(error: ProtocolError) -> bool:
        """Whether a refusal ends the connection: the framer keeps nothing after a line too large, and a
        client that did not greet right is not spoken to further."""
        return error.code in (ErrorCode.TOO_LARGE, ErrorCode.PROTOCOL, ErrorCode.GREETING)


class ClientConnection:
    """The client's end: `greeting()` first, then `send(request)` and the reply's lines as typed events.

    `next_event` returns `Greeted` once the server's number matches ours; then, for each request, the reply
    its grammar allows: a one-line reply; or a stream's header and items, ended by its END line or by CLOSED.
    A reply the server sent as `error <code> <text>` is raised as that ProtocolError (the peer's code); a line
    the request does not allow, or an end of file before a reply is whole, is `protocol` or `unreachable`.
    Lines that may come at any time (a session's `ended`) are returned whenever they come, and end the
    exchange.
    """

    def __init__(self, protocol: LineProtocol, *, peer: str | None = None, number: int | None = None) -> None:
        self.protocol = protocol
        self.number = protocol.number if number is None else number
        self.peer = peer or protocol.server  # "daemon at unix:/…", for errors
        self.server_number = 0  # the server's protocol number, once greeted
        self._replies = LineBuffer(MAX_REPLY_LINE)
        self._eof = False
        self._state = "new"  # new -> greeting -> ready -> reply -> ready (or done, for one verb) ; over
        self._request: Request | None = None
        self._header_seen = False
        self._used = False

    # What this end sends ------------------------------------------------------------------------------------

    def greeting(self) -> bytes:
        if self._state != "new":
            raise RuntimeError("the greeting is sent once, first")
        self._state = "greeting"
        return encode_greeting(self.protocol, self.number)

    def send(self, request: Request) -> bytes:
        """The request's line. A field this client refuses raises ProtocolError and sends nothing; a request
        out of turn (before the greeting is answered, during a reply, a second verb of a one-verb protocol)
        is a RuntimeError: the caller's mistake, not the peer's."""
        if self.protocol.one_verb and self._used:
            raise RuntimeError(
                f"this connection already carried {self._request.verb if self._request else 'a verb'}: one "
                "connection = the greeting + one verb; open another"
            )
        if self._state != "ready":
            raise RuntimeError(f"a request cannot be sent now (the exchange is at {self._state})")
        data = request.encode()
        self._request, self._header_seen, self._used = request, False, True
        self._state = "reply"
        return data

    # What the server sends ----------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if not data:
            self._eof = True
        else:
            self._replies.feed(data)

    @property
    def replying(self) -> bool:
        """A reply (or the greeting's answer) is still to come."""
        return self._state in ("greeting", "reply")

    def next_event(self) -> Greeted | ReplyLine | _Sentinel:
        try:
            line = self._replies.next_line()
        except ProtocolError as error:
            raise ProtocolError(
                ErrorCode.PROTOCOL, f"the {self.peer} sent a line this client cannot read: {error.text}"
            ) from None
        if line is None:
            return self._at_end() if self._eof else NEED_DATA
        if self._state == "greeting":
            greeted = check_greeting_reply(line, self.protocol, number=self.number)
            self.server_number = greeted.number
            self._state = "ready"
            return greeted
        for cls in self.protocol.anytime:
            reply = cls.decode(line)
            if reply is not None:
                self._state = "over"
                return reply
        refusal = decode_error(line)
        if refusal is not None:
            self._end_reply()
            if refusal.code == ErrorCode.UNKNOWN_VERB and self._request is not None:
                # A verb this client knows and the server does not: the server is the older end.
                verb = self._request.verb
                raise ProtocolError(
                    ErrorCode.UNKNOWN_VERB,
                    f"the {self.peer} does not know `{verb}`: it is older than this client; update it, and restart "
                    f"it so the new one serves ({refusal.text})",
                )
            raise refusal
        if self._state != "reply" or self._request is None:
            raise unreadable(line, f"nothing from the {self.peer} (no request is waiting for a reply)")
        return self._reply(line, self._request)

    def _reply(self, line: str, request: Request) -> ReplyLine:
        if request.REPLY is not None and not self._header_seen:
            reply = request.REPLY.decode(line)
            if reply is None:
                raise unreadable(line, request.REPLY.WHAT)
            self._header_seen = True
            if request.ITEM is None:
                self._end_reply()
            return reply
        if request.END is not None:
            end = request.END.decode(line)
            if end is not None:
                self._end_reply()
                return end
        assert request.ITEM is not None
        item = request.ITEM.decode(line)
        if item is None:
            expected = request.ITEM.WHAT + (f" or {request.END.WHAT}" if request.END is not None else "")
            raise unreadable(line, expected)
        return item

    def _end_reply(self) -> None:
        self._state = "done" if self.protocol.one_verb else "ready"

    def _at_end(self) -> _Sentinel:
        request = self._request
        if self._replies.partial:
            # The server's last line never got its `\n`: the reply was cut, not ended, whatever came before.
            verb = f"its answer to {request.verb}" if request is not None else "its answer"
            raise Unreachable(f"the {self.peer} closed the connection in the middle of a line of {verb}")
        if self._state == "greeting":
            raise Unreachable(f"the {self.peer} closed the connection before answering the greeting")
        if self._state == "reply" and request is not None:
            # A stream with no END line ends when the server closes, once its header (if any) has come.
            whole = request.END is None and request.ITEM is not None and (request.REPLY is None or self._header_seen)
            if not whole:
                raise Unreachable(f"the {self.peer} closed the connection before answering {request.verb}")
        self._state = "over"
        return CLOSED
