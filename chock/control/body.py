"""The bytes after a request line, as a server's end reads them (docs/protocol.md#moving-a-session), and the events a
connection gives when there is no line: sans-I/O, like chock.control.connection, which frames everything else.

`receive` is the one request with a body: exactly `<length>` bytes in lines of a bounded length, each line whole
within the line deadline of the one before it. The body comes out as `Data`, then END_OF_BODY (h11's `Data` and
`EndOfMessage`); a body that breaks a bound is a ProtocolError once the bytes before it came out.
"""

from __future__ import annotations

from chock.control.framing import ErrorCode, ProtocolError, bad_request


class Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# `next_event`'s answers when there is no event: read more bytes and feed them (NEED_DATA), or the peer has
# closed and nothing more will come (CLOSED).
NEED_DATA = Sentinel("NEED_DATA")
CLOSED = Sentinel("CLOSED")
# The bytes that follow a request with a body (or a reply's first line, for a reply with one) came whole.
END_OF_BODY = Sentinel("END_OF_BODY")


class Data:
    """Some of the bytes that follow a request line or a reply's first line (docs/protocol.md#moving-a-session)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data  # a buffer of its own: nothing else holds it

    def __repr__(self) -> str:
        return f"Data({len(self.data)} bytes)"


class RequestBody:
    """The bytes after a request line, as the server reads them: exactly `length` of them, in lines each at most
    `limit` bytes and each whole within the line deadline of the one before it (`since`, when the last ended), the
    last ending the body. Bytes past `length` are not read (one verb per connection)."""

    __slots__ = ("eof", "failed", "held", "left", "limit", "line", "since", "told")

    def __init__(self, length: int, limit: int, now: float) -> None:
        self.left = length
        self.limit = limit
        self.since = now
        self.line = 0  # bytes of the line under way
        self.held = bytearray()
        self.failed: ProtocolError | None = None
        self.eof = False
        self.told = False  # END_OF_BODY was returned

    @property
    def whole(self) -> bool:
        return self.left == 0 or self.failed is not None or self.eof

    def receive(self, data: bytes, now: float) -> None:
        if not data:
            self.eof = True
            return
        if self.failed is not None or not self.left:
            return
        take = data if len(data) <= self.left else data[: self.left]
        self.left -= len(take)
        last = take.rfind(b"\n")
        if self._longest(take, last) > self.limit:
            self.failed = ProtocolError(
                ErrorCode.TOO_LARGE, f"a line after the request may hold at most {self.limit:,} bytes here"
            )
            return
        if last >= 0:
            self.since = now
            self.line = len(take) - last - 1
        else:
            self.line += len(take)
        self.held += take
        if not self.left and self.line:
            self.failed = bad_request("the bytes after the request do not end with a whole line")

    def _longest(self, take: bytes, last: int) -> int:
        """The longest line `take` ends or holds, counting the line under way before it (`last`: its last
        `\n`). A line wholly inside `take` is no longer than `take`, so only a chunk longer than the bound is
        walked, a bound's width at a time: per chunk, a few calls into C, never a step per line."""
        first = take.find(b"\n")
        if first < 0:
            return self.line + len(take)
        longest = max(self.line + first, len(take) - last - 1)
        if len(take) - first <= self.limit + 1:
            return longest
        at = first  # a `\n`; is there another within the bound after it?
        while at < last:
            found = take.rfind(b"\n", at + 1, at + self.limit + 2)
            if found < 0:
                return self.limit + 1
            at = found
        return longest

    def next_event(self) -> Data | Sentinel:
        if self.held:
            data, self.held = self.held, bytearray()
            return Data(data)
        if self.failed is not None:
            raise self.failed
        if not self.left:
            if self.told:
                return NEED_DATA
            self.told = True
            return END_OF_BODY
        return CLOSED if self.eof else NEED_DATA
