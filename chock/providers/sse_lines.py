"""The lines of a server-sent-event stream, split from its bytes with no I/O.

A line ends at LF, CRLF or CR and nowhere else (HTML §9.2.5; `str.splitlines` also ends one at U+2028 or NEL,
which a model's text may hold unescaped inside a JSON string), and is read as UTF-8, a byte that is not UTF-8
becoming U+FFFD. Every byte is counted, line ends and the line not yet ended included, so a line that never
ends costs no more memory than the bound.
"""

from __future__ import annotations


class PastLimit(Exception):
    """The stream brought more bytes than its bound."""


class SSELines:
    """Bytes in, lines out: `feed` each chunk as it comes (it returns the lines the chunk ended), then `close`
    at the stream's end (a last line with no line end is still a line). `feed` raises PastLimit, keeping
    nothing of the chunk, once `received` would pass `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.received = 0  # every byte fed
        self._partial = bytearray()  # the line begun and not yet ended
        self._after_cr = False  # the last chunk ended in CR: an LF opening the next ends no line of its own

    def feed(self, data: bytes) -> list[str]:
        if self.received + len(data) > self.limit:
            raise PastLimit(self.limit)
        self.received += len(data)
        if self._after_cr and data[:1] == b"\n":
            data = data[1:]
            self._after_cr = False
        if not data:
            return []
        self._after_cr = data[-1:] == b"\r"
        pieces = data.splitlines()  # of bytes, at ASCII line ends alone: LF, CRLF, CR
        rest = b"" if data[-1:] in b"\r\n" else pieces.pop()
        if pieces and self._partial:
            self._partial += pieces[0]
            pieces[0] = bytes(self._partial)
            self._partial.clear()
        self._partial += rest
        return [piece.decode("utf-8", "replace") for piece in pieces]

    def close(self) -> list[str]:
        """The last line, when the stream ended in the middle of one."""
        if not self._partial:
            return []
        line = self._partial.decode("utf-8", "replace")
        self._partial.clear()
        return [line]
