"""MCP's stdio framing, sans-I/O: each message is one line of JSON ended by `\n` (a message holds no newline).

`LineMessages.feed` takes bytes as they arrive and returns the whole lines they completed. A line longer than the
bound is never held whole: its first `limit + 1` bytes are kept and the rest is skipped up to its newline, so the
client sees a message past the bound (and says so) while memory stays at the bound.
"""

from __future__ import annotations

from chock.mcp.jsonrpc_client import MAX_MESSAGE_BYTES


def frame(message: bytes) -> bytes:
    """One message as a line. A message holding a newline would be two lines: refused (a bug of ours)."""
    if b"\n" in message or b"\r" in message:
        raise ValueError("an MCP stdio message may not hold a newline")
    return message + b"\n"


class LineMessages:
    """The lines of a byte stream, each at most `limit + 1` bytes (longer ones cut there)."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._skipping = False  # past the bound: dropping bytes up to the next newline

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            if not self._skipping:
                room = self._limit + 1 - len(self._buffer)
                self._buffer += piece[:room]
                self._skipping = len(piece) > room
            if end < 0:
                break
            line = bytes(self._buffer).rstrip(b"\r")
            self._buffer.clear()
            self._skipping = False
            if line.strip():
                lines.append(line)
            start = end + 1
        return lines

    def unfinished(self) -> int:
        """Bytes of a line not yet ended (kept, at most `limit + 1`): at end of stream, a message cut short."""
        return len(self._buffer)
