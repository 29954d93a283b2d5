"""Both ends of one connection, with no I/O (docs/protocol.md), in the shape of h11.

Bytes in (`receive_data`; `b""` is end of file), events out (`next_event`), requests in (`send`), bytes out. A
socket, a thread or an event loop is the caller's: the daemon, the session's sockets, the blocking client every
command uses and serve's asyncio client are thin pumps around these two classes, so every rule of the exchange
— the greeting first, the bounds, one verb per control connection, which lines a reply may hold and how it
ends — lives here once, and a test drives both ends with plain bytes. A request with a body (`receive`) and a
reply with one (`send`) are followed by exactly the bytes they announce: those come out as `Data`, then
END_OF_BODY, and are never framed as lines (h11's `Data` and `EndOfMessage`); a request's body is read by
chock.control.body.

Time is the caller's too, the way aioquic's `get_timer()`/`handle_timer(now)` have it: the server's end owns its
deadlines (the greeting's, a line's — a body's lines' too —, the idle bound's, and the linger after its last
line) and never reads a clock. A pump tells it the time with what it feeds it, asks `next_deadline()` when to
wake, and at that time calls `deadline_passed(now)`.
"""

from __future__ import annotations

from chock.control.body import CLOSED, END_OF_BODY, NEED_DATA, Data, RequestBody, Sentinel
from chock.control.framing import (
    LINE_SECONDS,
    LINGER_BYTES,
    LINGER_SECONDS,
    MAX_LINE,
    MAX_REPLY_LINE,
    ErrorCode,
    LineBuffer,
    ProtocolError,
    Unreachable,
    decode_error,
    size,
    unreadable,
)
from chock.control.greeting import Greeted, check_greeting_reply, encode_greeting, encode_greeting_reply, parse_greeting
from chock.control.message import LineProtocol, ReplyLine, Request

# A listing's reply (rows that end when the peer closes: `list`, `sessions`, …), whole: ten thousand rows
# (dp.MAX_SESSIONS) of about 3 KiB each, where a row is rarely past one. A peer that sends more — another
# machine's daemon need not be honest — is refused (`protocol`: a reply this client cannot read), and nothing more
# of it is held.
WHOLE_MOST = 32 * 1024 * 1024

# What a pump sees of a connection: these classes and the events `next_event` gives (the body's among them).
__all__ = ["CLOSED", "END_OF_BODY", "NEED_DATA", "ClientConnection", "Data", "Sentinel", "ServerConnection"]


def _newlines_cut(data: bytes, wanted: int) -> int:
    """Where `data` ends its `wanted`-th line (the offset after that `\\n`), or -1 when it holds fewer."""
    at = -1
    for _ in range(wanted):
        at = data.find(b"\n", at + 1)
        if at < 0:
            return -1
    return at + 1


class _Owed:
    """A request taken and not yet answered whole, and how far its reply has come."""

    __slots__ = ("began", "request")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.began = False  # its REPLY line (the one-line answer, or a stream's header) was sent


class ServerConnection:
    """The server's end: the greeting (`Greeted`, to be answered with `greeting_reply()`), then requests, then
    the replies they allow (`send`), and the deadlines of all of it.

    Any ProtocolError `next_event` raises is the one reply line to send (`send(error)`). A refusal of the
    greeting, or a line past its bound, ends the connection; after any other refusal a protocol of several
    verbs per connection serves the next request. A control connection takes one verb: once it has been
    returned, nothing more is read.

    Deadlines (docs/protocol.md#bounds), every one counted on the caller's clock (`now`, as given to the
    constructor, `receive_data`, `send` and `deadline_passed`; a call without it means "no time has passed"):

    - the greeting arrives within `line_seconds` of the opening: every client greets at once;
    - a request line arrives whole within `line_seconds` of its first byte, however it trickles;
    - `idle_seconds` (None: no bound) — for a one-verb protocol, the verb arrives within it of the greeting,
      mid-line too; for a protocol of several verbs, the connection may sit that long between requests, since
      its last byte in or its last reply out, and never while a request it took waits for its answer;
    - after `linger(now)` (the pump has written its last line and shut its sending side), what the client still
      sends is dropped for LINGER_SECONDS or LINGER_BYTES, whichever comes first, or until its end of file.
    """

    def __init__(
        self,
        protocol: LineProtocol,
        *,
        number: int | None = None,
        now: float = 0.0,
        line_seconds: float = LINE_SECONDS,
        idle_seconds: float | None = None,
    ) -> None:
        self.protocol = protocol
        self.number = protocol.number if number is None else number
        self.greeted = False
        self.requests = 0  # how many requests have been taken
        self.line_seconds = line_seconds
        self.idle_seconds = idle_seconds
        # The greeting is bounded as any line but a message's: no first word makes an ungreeted peer's line longer.
        self._buffer = LineBuffer(protocol.line_limit, note=protocol.limit_note, first=MAX_LINE)
        self._now = now
        self._opened = now
        self._greeted_at = now
        self._line_began = now  # the first byte of the line under way
        self._active = now  # the last byte in or reply out (the idle bound of several verbs counts from it)
        self._owed: list[_Owed] = []
        self._refusing = False  # `next_event` refused a line: its refusal is the next error sent
        self._lingered: int | None = None  # bytes dropped since the linger began; None: not lingering
        self._linger_until = 0.0
        self._closed = False
        # A control connection's lines are its greeting and its request: bytes after them are never framed as
        # lines, only read as the request's body when it has one.
        self._lines_left = 2 if protocol.one_verb else None
        self._beyond = bytearray()  # bytes after the request line, not yet taken
        self._body: RequestBody | None = None

    # Bytes and events in ------------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float | None = None) -> None:
        """The bytes that arrived at `now` (`b""`: end of file)."""
        self._tick(now)
        if self._closed:
            return
        if self._lingered is not None:
            self._lingered += len(data)
            if not data or self._lingered >= LINGER_BYTES:
                self._closed = True
            return
        if self._body is not None:
            self._body.receive(data, self._now)
            return
        if not data:
            return
        if self._lines_left is not None:
            if self._lines_left == 0:
                self._beyond += data
                return
            cut = _newlines_cut(data, self._lines_left)
            if cut >= 0:
                self._beyond += data[cut:]
                data = data[:cut]
            self._lines_left -= data.count(b"\n")
        continues = self._buffer.partial and b"\n" not in data
        self._buffer.feed(data)
        if self._buffer.partial and not continues:
            self._line_began = self._now  # a line began in these bytes
        self._active = self._now

    def next_event(self) -> Greeted | Request | Data | Sentinel:
        """The next event, or NEED_DATA; raises ProtocolError for a line to refuse."""
        if self._closed or self._lingered is not None:
            return CLOSED
        if self._body is not None:
            return self._body.next_event()
        if self.protocol.one_verb and self.requests:
            return NEED_DATA  # one verb per connection: what else the client sends is not read
        try:
            line = self._buffer.next_line()
            if line is None:
                return NEED_DATA
            if not self.greeted:
                greeted = parse_greeting(line, self.protocol, number=self.number)
                self.greeted = True
                self._greeted_at = self._now
                return greeted
            request = self.protocol.parse_request(line)
        except ProtocolError:
            self._refusing = True
            raise
        self.requests += 1
        self._owed.append(_Owed(request))
        if request.BODY:
            self._body = RequestBody(request.body_length(), request.body_line_limit(), self._now)
            if self._beyond:
                self._body.receive(bytes(self._beyond), self._now)
                self._beyond.clear()
        return request

    # Replies out --------------------------------------------------------------------------------------------

    def greeting_reply(self) -> bytes:
        return encode_greeting_reply(self.protocol, self.number)

    def send(self, reply: ReplyLine | ProtocolError, now: float | None = None) -> bytes:
        """The bytes of one reply line the exchange allows now.

        An error may always be sent: it refuses the line `next_event` just refused, else it is the answer of
        the latest request waiting for one (a stream that cannot finish ends with one). Any other line must be
        one the protocol sends at any time (a session's `ended`, which answers everything), or the next line of
        the reply of a request waiting for its answer, as its grammar allows (`REPLY`, then `ITEM`s, then
        `END`). Anything else is a RuntimeError: the server's mistake, caught before a client misreads it.
        """
        self._tick(now)
        self._active = self._now
        if isinstance(reply, ProtocolError):
            if self._refusing:
                self._refusing = False
            elif self._owed:
                self._owed.pop()
            return reply.encode()
        if not self.greeted:
            raise RuntimeError(f"{reply!r} cannot be sent before the greeting is answered")
        if isinstance(reply, self.protocol.anytime):
            self._owed.clear()
            return reply.encode()
        for owed in self._owed:
            if self._takes(owed, reply):
                return reply.encode()
        waiting = ", ".join(owed.request.verb for owed in self._owed) or "no request"
        raise RuntimeError(f"{reply!r} answers nothing on this connection (waiting for an answer: {waiting})")

    def _takes(self, owed: _Owed, reply: ReplyLine) -> bool:
        """Whether `reply` is the next line `owed`'s grammar allows; if so, the reply moves on (or ends)."""
        request = owed.request
        if request.REPLY is not None and not owed.began:
            if not isinstance(reply, request.REPLY):
                return False
            owed.began = True
            if request.ITEM is None:
                self._owed.remove(owed)
            return True
        if request.END is not None and isinstance(reply, request.END):
            self._owed.remove(owed)
            return True
        return request.ITEM is not None and isinstance(reply, request.ITEM)

    @property
    def owed(self) -> bool:
        """A request taken waits for (the rest of) its answer."""
        return bool(self._owed)

    # Deadlines ----------------------------------------------------------------------------------------------

    def linger(self, now: float | None = None) -> None:
        """The last line is written and the sending side shut: drop what the client still sends for a moment,
        so the close never resets a connection whose last line the client has not read."""
        self._tick(now)
        if self._lingered is None:
            self._lingered = 0
            self._linger_until = self._now + LINGER_SECONDS

    @property
    def lingering(self) -> bool:
        return self._lingered is not None and not self._closed

    @property
    def closed(self) -> bool:
        """Nothing more to do but close: a deadline passed, or the linger is over."""
        return self._closed

    def next_deadline(self) -> float | None:
        """When `deadline_passed` has something to do, on the caller's clock; None: no deadline runs."""
        return None if self._closed else self._deadline()[0]

    def deadline_passed(self, now: float) -> bytes | None:
        """The time is `now`. None while no deadline has passed; else the connection is over (`closed`), and
        this is its last line to write before the close: the bound that cut it, said (empty after a linger, or
        once over)."""
        self._tick(now)
        if self._closed:
            return b""
        deadline, why = self._deadline()
        if deadline is None or now < deadline:
            return None
        self._closed = True
        return ProtocolError(ErrorCode.BAD_REQUEST, why).encode() if why else b""

    def _deadline(self) -> tuple[float | None, str]:
        """The next deadline and, for a bound the client broke, what it is told."""
        line, idle = self.line_seconds, self.idle_seconds
        if self._lingered is not None:
            return self._linger_until, ""
        if not self.greeted:
            return self._opened + line, f"the greeting must come within {line:g} s of the connection's opening"
        if self._body is not None and not self._body.whole:
            why = f"a line of the bytes after the request must arrive whole within {line:g} s of the line before it"
            return self._body.since + line, why
        if self.protocol.one_verb and self.requests:
            return None, ""  # the verb is the caller's to answer
        # A one-verb protocol bounds the whole request from the greeting, mid-line too.
        verb_by = self._greeted_at + idle if self.protocol.one_verb and idle is not None else None
        no_verb = f"no verb came within {verb_by - self._greeted_at:g} s" if verb_by is not None else ""
        if self._buffer.partial:
            line_by = self._line_began + line
            if verb_by is not None and verb_by < line_by:
                return verb_by, no_verb
            return line_by, f"a request line must arrive whole within {line:g} s of its first byte"
        if verb_by is not None:
            return verb_by, no_verb
        if idle is None or self._owed:
            return None, ""  # a client owed an answer is never idle
        return self._active + idle, f"this connection sat idle for {idle:g} s between requests"

    def _tick(self, now: float | None) -> None:
        if now is not None:
            self._now = now

    @property
    def mid_line(self) -> bool:
        """Bytes of an unfinished request line are held: the line's deadline runs."""
        return self._buffer.partial

    @staticmethod
    def fatal(error: ProtocolError) -> bool:
        """Whether a refusal ends the connection: the framer keeps nothing after a line too large, and a
        client that did not greet right is not spoken to further."""
        return error.code in (ErrorCode.TOO_LARGE, ErrorCode.PROTOCOL, ErrorCode.GREETING)


def _longest(data: bytes) -> int:
    """The length of the longest line of `data`, without its `\\n`."""
    return max(map(len, data.split(b"\n")))


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
        # A reply with a body (`send`): its first line is framed, the bytes after it are counted, never framed.
        self._header_fed = False
        self._beyond = bytearray()
        self._body_left: int | None = None
        self._whole: bytearray | None = None  # a reply being read whole, to be decoded at once at its end
        self._ahead: Request | None = None  # the request sent with the greeting, until the greeting is answered
        self._listing_left: int | None = None  # bytes a listing's reply may still bring (WHOLE_MOST in all)
        self._refused: ProtocolError | None = None  # the reply went past its bound: raised, and nothing read

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
        self._begin(request)
        return data

    def greeting_with(self, request: Request) -> bytes:
        """The greeting with the request right behind it, for a protocol of one verb a connection: the server
        reads the request only once the numbers are equal, and never reads it when they are not, so sending it
        first only saves the wait for the greeting's answer. A field this client refuses raises here, before
        anything is written. A reply `read_whole` would take is held whole from its first byte."""
        if not self.protocol.one_verb:
            raise RuntimeError("only a connection of one verb sends its request with its greeting")
        data = request.encode()
        greeting = self.greeting()
        self._ahead = request
        if self._whole_reply(request):
            self._whole = bytearray()
            self._listing_left = WHOLE_MOST + MAX_LINE  # the greeting's answer comes first
        return greeting + data

    def _begin(self, request: Request) -> None:
        """`request` is sent: its reply comes next."""
        self._request, self._header_seen, self._used = request, False, True
        self._header_fed, self._body_left = False, None
        self._beyond.clear()
        self._state = "reply"
        if self._listing_left is None and self._whole_reply(request):
            self._listing_left = WHOLE_MOST

    # What the server sends ----------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if not data:
            self._eof = True
            return
        if self._refused is not None:
            return
        if self._listing_left is not None:
            self._listing_left -= len(data)
            if self._listing_left < 0:
                self._refuse_listing()
                return
        if self._whole is not None:
            if self._state == "greeting":  # the greeting's answer is a line; the reply's bytes come after it
                newline = data.find(b"\n") + 1
                self._replies.feed(data[:newline] if newline else data)
                data = data[newline:] if newline else b""
            self._whole += data
            return
        request = self._request
        if self._state == "reply" and request is not None and request.REPLY_BODY:
            if self._header_fed:
                self._beyond += data
                return
            newline = data.find(b"\n")
            if newline >= 0:
                self._header_fed = True
                self._beyond += data[newline + 1 :]
                data = data[: newline + 1]
        self._replies.feed(data)

    def _refuse_listing(self) -> None:
        """The listing's reply passed WHOLE_MOST: what is held goes, and reading it ends with `protocol`."""
        verb = f"`{self._request.verb}`" if self._request is not None else "its listing"
        self._refused = ProtocolError(
            ErrorCode.PROTOCOL,
            f"the {self.peer} sent more than {size(WHOLE_MOST)} in answer to {verb}, more than any listing holds: "
            "refused, and the rest not read",
        )
        self._whole = None
        self._replies = LineBuffer(MAX_REPLY_LINE)
        self._eof = True

    def batches(self) -> bool:
        """The reply being received is a stream whose items `items` decodes together: its item type has
        `decode_many`, it has no end line (it ends when the peer closes), and no line may come at any time."""
        request = self._request
        if self._state != "reply" or request is None or request.END is not None or self.protocol.anytime:
            return False
        return hasattr(request.ITEM, "decode_many")

    def read_whole(self) -> bool:
        """Hold the reply just requested as bytes until the peer closes, for `whole_items` to decode in one pass:
        for a stream that `batches` whose item type decodes a block (`decode_block`), with no header. False (and
        nothing changes) for any other reply."""
        if self._whole is not None:
            return True  # held whole since the greeting
        request = self._request
        if self._state != "reply" or request is None or self._replies.complete or not self._whole_reply(request):
            return False
        self._whole = bytearray()
        return True

    def _whole_reply(self, request: Request) -> bool:
        """Whether `request`'s reply can be read whole: items with `decode_block`, no header, no end line (it
        ends when the peer closes), and no line that may come at any time."""
        return (
            request.REPLY is None
            and request.END is None
            and not self.protocol.anytime
            and hasattr(request.ITEM, "decode_block")
        )

    @property
    def reading_whole(self) -> bool:
        """A reply is being read whole and the peer has not closed yet: receive more."""
        return self._whole is not None and not self._eof

    @property
    def whole_held(self) -> int:
        """How many bytes of a reply read whole are held."""
        return len(self._whole) if self._whole is not None else 0

    def whole_items(self, most: int) -> list[ReplyLine] | None:
        """The reply read whole, every item decoded by one call of the item type's `decode_block`; None when it
        cannot be read so (a refusal, a line that is not an item, a line past its bound, more than `most`
        items): then its bytes are read line by line by `next_event`, which refuses what it always refused."""
        if self._refused is not None:
            raise self._refused
        data, self._whole = self._whole, None
        if data is None or not self._eof:
            if data is not None:
                self._whole = data
                self._unwhole()
            return None
        request = self._request
        assert request is not None
        whole = bytes(data)
        items = request.ITEM.decode_block(whole) if whole else []  # type: ignore[union-attr]  # read_whole checked
        if items is None or len(items) > most or (len(whole) > MAX_REPLY_LINE and _longest(whole) > MAX_REPLY_LINE):
            self._replies.feed(whole)
            return None
        return items

    def _unwhole(self) -> None:
        """Read what is held of a whole reply (and all that comes after) line by line."""
        data, self._whole = self._whole, None
        if data:
            self._replies.feed(bytes(data))

    def held(self) -> int:
        """How many complete lines are received and not yet read."""
        return self._replies.complete

    @property
    def closed(self) -> bool:
        """The peer closed its end: nothing more will be received."""
        return self._eof

    @property
    def in_body(self) -> bool:
        """The bytes after a reply's first line are being received (a pump may read them in larger pieces)."""
        return self._body_left is not None

    @property
    def replying(self) -> bool:
        """A reply (or the greeting's answer) is still to come."""
        return self._state in ("greeting", "reply")

    def next_event(self) -> Greeted | ReplyLine | Data | Sentinel:
        if self._refused is not None:
            raise self._refused
        if self._whole is not None and self._state != "greeting":
            self._unwhole()
        if self._body_left is not None:
            return self._body_event()
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
            if self._ahead is not None:  # sent with the greeting: its reply comes next
                self._begin(self._ahead)
                self._ahead = None
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
                # A verb this client knows and the server does not: the server is the older end. The one place
                # an `unknown-verb` becomes words, for every verb, every client and serve's pages.
                raise ProtocolError(
                    ErrorCode.UNKNOWN_VERB,
                    f"the {self.peer} needs a newer Chock for `{self._request.verb}` (it answered unknown-verb): "
                    "upgrade chock there",
                )
            raise refusal
        if self._state != "reply" or self._request is None:
            raise unreadable(line, f"nothing from the {self.peer} (no request is waiting for a reply)")
        return self._reply(line, self._request)

    def items(self, most: int) -> list[ReplyLine] | None:
        """Every item of the stream being replied that is already received (at most `most`), decoded in one pass
        by the item type's `decode_many`; None when they cannot be read so — no item type with `decode_many`,
        a header still to come, lines that may come at any time, or a line among them that is not an item (an
        error, the end): then `next_event` reads them, one by one, as it always does."""
        request = self._request
        if request is None or not self.batches() or not (request.REPLY is None or self._header_seen):
            return None
        many = request.ITEM.decode_many  # type: ignore[union-attr]  # batches() says it has one
        lines = self._replies.take_lines(most)
        texts = [line for line in lines if isinstance(line, str)]
        decoded = many(texts) if len(texts) == len(lines) else None
        if decoded is None:
            self._replies.give_back(lines)
        return decoded

    def _reply(self, line: str, request: Request) -> ReplyLine:
        if request.REPLY is not None and not self._header_seen:
            reply = request.REPLY.decode(line)
            if reply is None:
                raise unreadable(line, request.REPLY.WHAT)
            self._header_seen = True
            if request.REPLY_BODY:
                self._body_left = reply.body_length  # type: ignore[attr-defined]  # a REPLY of a reply with a body
            elif request.ITEM is None:
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

    def _body_event(self) -> Data | Sentinel:
        """The next bytes of a reply's body, END_OF_BODY once all came; the peer closing first is `unreachable`."""
        left = self._body_left
        assert left is not None
        if self._beyond:
            data, self._beyond = self._beyond[:left] if len(self._beyond) > left else self._beyond, bytearray()
            self._body_left = left - len(data)
            return Data(data)
        if not left:
            self._body_left = None
            self._end_reply()
            return END_OF_BODY
        if self._eof:
            verb = self._request.verb if self._request is not None else "its answer"
            raise Unreachable(f"the {self.peer} closed the connection with {left:,} bytes of its {verb} to come")
        return NEED_DATA

    def _end_reply(self) -> None:
        self._state = "done" if self.protocol.one_verb else "ready"

    def _at_end(self) -> Sentinel:
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
