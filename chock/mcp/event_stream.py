"""A text/event-stream (server-sent events) parser with no I/O, bounded: what an MCP server's stream carries.

The rules are WHATWG HTML §9.2.6 ("Interpreting an event stream"): lines end at CRLF, LF or CR; a line that
starts with `:` is a comment; `field: value` drops one space after the colon; `data` lines join with `\\n`; a
blank line dispatches the event; `id` sets the last event id (one holding NUL is ignored) and it outlives the
event; `retry` is the reconnection time in milliseconds (digits only); an event the stream ends inside is
discarded. A UTF-8 byte order mark at the very start is skipped, and invalid UTF-8 is replaced, never raised.

The bounds are Chock's: a line, and an event's data, of at most `MAX_BYTES` (4 MiB, an MCP message's bound);
past either, `feed` raises `TooLarge` and the stream is not worth reading further.
"""

from __future__ import annotations

from dataclasses import dataclass

from chock.errors import ChockError

MAX_BYTES = 4 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"


class TooLarge(ChockError):
    """A line, an event or a message past the bound: what brought it is cut there."""


@dataclass(frozen=True)
class ServerEvent:
    """One dispatched event: `event` is its type ("message" when none was named), `id` the stream's last event
    id when it was dispatched ("" for none)."""

    data: str
    event: str = "message"
    id: str = ""


class EventStream:
    """Feed bytes as they arrive; get back the events they complete. `last_event_id` and `retry_ms` (None until
    the server sends one) are what a reconnection needs."""

    def __init__(self, *, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.last_event_id = ""
        self.retry_ms: int | None = None
        self._pending = bytearray()
        self._started = False  # the byte order mark is looked for before the first line only
        self._after_cr = False  # a line ended at CR: an LF that follows belongs to that ending
        self._searched = 0  # how much of the pending bytes holds no line ending
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""

    def feed(self, chunk: bytes) -> list[ServerEvent]:
        """The events that `chunk` completes, in order. Raises TooLarge past a bound."""
        buffer = self._pending
        buffer += chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(bytes(buffer)):
                return []
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
            self._started = True
        events: list[ServerEvent] = []
        start = 0
        end = len(buffer)
        # Where the next CR and LF are, each searched for once from where the last search left off: a long
        # line fed in small chunks is scanned once, not once per chunk.
        cr = lf = -1
        while start < end:
            if self._after_cr:
                self._after_cr = False
                if buffer[start] == 0x0A:
                    start += 1
                    continue
            searched = max(start, self._searched)
            if cr < start:
                cr = buffer.find(b"\r", searched)
                cr = end if cr == -1 else cr
            if lf < start:
                lf = buffer.find(b"\n", searched)
                lf = end if lf == -1 else lf
            stop = min(cr, lf)
            if stop == end:
                break
            self._check_line(stop - start)
            event = self._line(bytes(buffer[start:stop]))
            if event is not None:
                events.append(event)
            self._after_cr = stop == cr
            start = stop + 1
            self._searched = 0
        del buffer[:start]
        self._searched = len(buffer)
        self._check_line(len(buffer))
        return events

    def _check_line(self, size: int) -> None:
        if size > self.max_bytes:
            raise TooLarge(
                f"an event-stream line longer than {self.max_bytes} bytes: the server's stream was cut there"
            )

    def _line(self, raw: bytes) -> ServerEvent | None:
        """One line's effect; the event it dispatches, if it was the blank line ending one."""
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_bytes += len(raw)  # the line's bytes, its `data:` too: a bound, not a count
            if self._data_bytes > self.max_bytes:
                raise TooLarge(f"an event's data past {self.max_bytes} bytes: the server's stream was cut there")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> ServerEvent | None:
        data, event = self._data, self._event
        self._data, self._data_bytes, self._event = [], 0, ""
        if not data:
            return None
        return ServerEvent("\n".join(data), event or "message", self.last_event_id)
