"""What every Chock wire shares: error codes, bounds, field escaping and the line framer (docs/protocol.md).

Both protocols — the daemon's control protocol and a session's own sockets — are text lines over a stream
socket, UTF-8, `\\n`-terminated. A request line is `<verb> <fields>`: the verb, one space, then fields separated
by TAB (`read` separates its two by a space). A field never holds a raw TAB, LF or backslash: those are written
`\\t`, `\\n`, `\\\\`, so a multi-line message travels in one line. Nothing here touches a socket; the daemon, the
session, every client and the tests share it, so two ends of a wire cannot disagree about a line.

The module imports nothing heavy: the daemon's socket-activated start pays for every import (no dataclasses,
no enums, no regular expressions).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable

from chock.errors import ChockError
from chock.log.events import MAX_EVENT_BYTES

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from os import PathLike

# --------------------------------------------------------------------------------------------------------
# Bounds (docs/protocol.md#bounds). Each bound counts the bytes of one line without its `\n`.

# A `start` or `say` line carries a whole task message (a pasted stack trace, a spec, a diff to review).
# 256 KiB is far more than a person types or pastes, and still small next to the 1 MiB an event may hold, so
# the event that records the message always fits in one log line.
MAX_MESSAGE_LINE = 256 * 1024

# Every other request is a verb, a project path (PATH_MAX is 4 KiB on Linux, 1 KiB on macOS), a session id and
# a number or two: 8 KiB holds the longest legal one twice over and keeps what an idle or hostile peer can make
# a server hold per connection small.
MAX_LINE = 8 * 1024

# Replies are not bounded beyond the event limit: an event line is the log's own line, passed through
# unchanged, and the log never holds a longer one. A client reads with this bound.
MAX_REPLY_LINE = MAX_EVENT_BYTES

# An error's text is read by a person in a terminal (a child's last error line, relayed by `refused`); past
# this it is cut, since anything longer belongs in the session's run.log, not on one line of a reply.
MAX_ERROR_TEXT = 4 * 1024

# A line's first byte to its `\n`: a client that has begun a request finishes it within this long or is cut
# off. Slowloris defence: a bound on the whole line, not on each read, so trickling a byte at a time buys
# nothing. A person never types a line into these sockets; every client writes a request in one go.
LINE_SECONDS = 10.0

# A server that closes after its last line (a reply, or a refusal such as `forbidden`) first stops writing and
# reads, and drops, what the client still sends for at most this long and this much: closing a socket with
# unread input resets it, and the client would lose the line it has not read yet.
LINGER_SECONDS = 1.0
LINGER_BYTES = 256 * 1024

# Event ids count log lines from 1; 19 decimal digits hold any signed 64-bit id, which is as far as a log can
# ever go, and refusing longer numbers keeps int() away from the interpreter's digit limit.
MAX_EVENT_ID = 2**63 - 1

# The first bytes of a line that decide its bound (`start ` and `say ` lines may be long), long enough for the
# longest verb and its space.
HEAD_BYTES = 16

# --------------------------------------------------------------------------------------------------------
# Error codes (docs/protocol.md#errors): a reply is either the verb's lines or one `error <code> <text>` line.


class ErrorCode:
    PROTOCOL = "protocol"  # the protocol numbers differ, or a reply cannot be read
    GREETING = "greeting"  # the first line was not the greeting (a verb came first)
    UNKNOWN_VERB = "unknown-verb"
    BAD_REQUEST = "bad-request"  # malformed fields, an id that fails the pattern, a non-number for a number
    NOT_FOUND = "not-found"  # no such session
    FORBIDDEN = "forbidden"  # a peer whose uid is not ours, or whom the kernel will not name
    REFUSED = "refused"  # e.g. the session child refused to start; its own message follows
    NOT_PENDING = "not-pending"  # relayed from the session: that request is not waiting
    TOO_LARGE = "too-large"
    UNREACHABLE = "unreachable"  # a session socket (or, at a client, the daemon) did not answer
    BUSY = "busy"  # the session's log is held by another process (e.g. `remove` of a running session)
    INTERNAL = "internal"


ERROR_CODES = frozenset(value for name, value in vars(ErrorCode).items() if name.isupper())


class ProtocolError(ChockError):
    """A line that cannot be taken, or an `error <code> <text>` reply, as a value.

    `code` is one of `ErrorCode` for every error this package raises; an error decoded from a peer keeps the
    peer's code even when it is one this version does not know (a newer peer may add codes).
    """

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text

    def encode(self) -> bytes:
        """This error as the one reply line the peer gets (`error <code> <text>`)."""
        text = self.text if len(self.text) <= MAX_ERROR_TEXT else self.text[:MAX_ERROR_TEXT] + "…"
        return reply_line(f"error {self.code} {reply_field(text)}" if text else f"error {self.code}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.text!r})"


class Unreachable(ProtocolError):
    """Nothing answered at the address, or the peer went away or fell silent before its reply was whole — as
    opposed to the daemon's own `error unreachable`, which says a session's socket did not answer it."""

    def __init__(self, text: str) -> None:
        super().__init__(ErrorCode.UNREACHABLE, text)


def bad_request(text: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_REQUEST, text)


def unreadable(line: str, expected: str) -> ProtocolError:
    """A reply this end cannot read after the numbers matched: most likely two ends that still differ."""
    return ProtocolError(ErrorCode.PROTOCOL, f"expected {expected}, got {show(line)}")


def decode_error(line: str) -> ProtocolError | None:
    """`error <code> <text>` as a ProtocolError (returned, not raised); None for any other line.

    Lenient about the text: a peer's text that does not unescape is kept as it came.
    """
    if not line.startswith("error "):
        return None
    code, _, text = line[len("error ") :].partition(" ")
    with contextlib.suppress(ProtocolError):
        text = unescape(text)
    return ProtocolError(code, text)


def show(value: str, limit: int = 60) -> str:
    """A value quoted for an error text, cut so one bad field cannot make a long reply."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def size(limit: int) -> str:
    if limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"


# --------------------------------------------------------------------------------------------------------
# Field escaping

_ESCAPE_TABLE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n"})
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n"}


def escape(text: str) -> str:
    """`text` as one field: backslash, TAB and LF become `\\\\`, `\\t`, `\\n`; nothing else changes."""
    return text.translate(_ESCAPE_TABLE)


def unescape(field: str) -> str:
    """The text a field carries; an unknown escape or a trailing lone backslash is `bad-request`."""
    if "\\" not in field:
        return field
    out = []
    start = 0
    while (slash := field.find("\\", start)) >= 0:
        out.append(field[start:slash])
        escaped = field[slash + 1 : slash + 2]
        if escaped not in _UNESCAPES:
            if not escaped:
                raise bad_request("a field ends in a lone backslash (write a backslash as \\\\)")
            raise bad_request(f"{show(chr(92) + escaped)} is not an escape (a field knows \\t, \\n and \\\\)")
        out.append(_UNESCAPES[escaped])
        start = slash + 2
    out.append(field[start:])
    return "".join(out)


def reply_field(text: str) -> str:
    """A free-text reply field (an error text, a tool summary): escaped, and NUL (which the framer refuses on
    every line) shown as U+FFFD, so text from a tool or a child can never make an unreadable reply."""
    return escape(text.replace("\0", "\ufffd"))


def reply_line(line: str) -> bytes:
    return line.encode("utf-8", "replace") + b"\n"


# --------------------------------------------------------------------------------------------------------
# Field checks shared by the requests. Each runs when a request is built, so a request that exists is one the
# server takes: a client fails locally, with the same words, before it sends a line the server refuses.

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdef")


def absolute_project(value: str | PathLike[str]) -> str:
    # The project is the one path a client names: the daemon resolves it and compares real paths, so the wire
    # only insists that it is absolute. A client may build a request from a Path.
    if not isinstance(value, str) and callable(getattr(value, "__fspath__", None)):
        value = value.__fspath__()
    if not isinstance(value, str) or not value.startswith("/"):
        raise bad_request(f"the project must be an absolute path (got {show(str(value))})")
    if "\0" in value:  # no path holds one: the system refuses it, and a line must not carry it
        raise bad_request(f"the project path holds a NUL character (got {show(value)})")
    return value


def session_id(value: str) -> str:
    """An id of the form 20261201-073450-a1b2c3 (UTC start time plus random hex), checked before it touches a
    path. The same rule as `chock.paths.check_session_id`, without importing `re` on the daemon's start."""
    if (
        isinstance(value, str)
        and len(value) == 22
        and value[8] == "-"
        and value[15] == "-"
        and _DIGITS.issuperset(value[:8] + value[9:15])
        and _HEX.issuperset(value[16:])
    ):
        return value
    raise bad_request(f"{show(str(value))} is not a session id (expected the form 20261201-073450-a1b2c3)")


def event_id(name: str, value: int) -> int:
    if type(value) is not int or not 0 <= value <= MAX_EVENT_ID:
        raise bad_request(f"{name} must be a whole number from 0 (got {show(str(value))})")
    return value


def number(name: str, field: str) -> int:
    """A decimal field: ASCII digits only (str.isdigit() would take "٣" or "²"), at most 19 of them."""
    if not 0 < len(field) <= 19 or not _DIGITS.issuperset(field) or int(field) > MAX_EVENT_ID:
        raise bad_request(f"{name} must be a whole number from 0 (got {show(field)})")
    return int(field)


def request_id(value: str) -> str:
    # Minted by the session (`approval.request {request_id}`) and only ever compared, never used in a path;
    # visible ASCII keeps it typeable at `chock approve` and printable anywhere.
    if not isinstance(value, str) or not 0 < len(value) <= 128 or not all("!" <= c <= "~" for c in value):
        raise bad_request(f"{show(str(value))} is not a request id (1 to 128 visible ASCII characters)")
    return value


def yes_no(field: str) -> bool:
    if field == "yes":
        return True
    if field == "no":
        return False
    raise bad_request(f"the answer must be yes or no (got {show(field)})")


_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_NAME_REST = _NAME_FIRST | frozenset(".-")


def instance_name(value: str) -> str:
    """An instance's name as config.zon and `chock login --name` write one: a letter, digit or `_`, then up to
    63 of those, `.` or `-`. Never starts with `-`, so it is never an option of the child that is given it."""
    if isinstance(value, str) and 0 < len(value) <= 64 and value[0] in _NAME_FIRST and _NAME_REST.issuperset(value):
        return value
    raise bad_request(
        f"{show(str(value))} is not an instance name (a letter, digit or _, then up to 63 of those, . or -)"
    )


def text(name: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise bad_request(f"the {name} is empty")
    if "\0" in value:
        raise bad_request(f"the {name} holds a NUL character, which no line may carry")
    return value


# --------------------------------------------------------------------------------------------------------
# The framer


class LineBuffer:
    """Bytes in, complete lines out, with the bound enforced before more than the bound is held.

    `limit` is a number of bytes, or a function of a line's first bytes for a bound that depends on the verb;
    `first`, when given, bounds the first line instead (a greeting is no verb, whatever its first word).
    A line longer than its bound is `too-large` as soon as the buffered part passes the bound, without waiting
    for its `\\n` and without holding more of it than the bound. That error is sticky: the lines before it
    still come out, then every call raises it, and nothing fed afterwards is kept. A line holding NUL or bytes
    that are not UTF-8 is `bad-request` for that line alone (a session socket may take the next request).

    A line is what comes before `\\n`; a `\\r` before it stays part of the line. Bytes after the last `\\n` wait
    for more data; at end of file they are a request cut short, and `partial` says whether any are held.
    """

    def __init__(
        self, limit: int | Callable[[bytes], int] = MAX_LINE, *, note: str = "", first: int | None = None
    ) -> None:
        self._limit = limit
        self._note = note  # said with a too-large refusal: which lines may be longer
        self._first = first  # the first line's own bound (a greeting's), whatever `limit` says of its words
        self._partial = bytearray()
        self._lines: deque[str | ProtocolError] = deque()
        self._failed: ProtocolError | None = None

    def feed(self, data: bytes) -> None:
        """Take `data`, split at its newlines in one pass; each line is checked against its bound before it is
        copied anywhere (a 2 MiB line costs at most its bound here)."""
        if self._failed is not None or not data:
            return
        fixed = self._limit if isinstance(self._limit, int) else None
        pieces = data.split(b"\n")
        rest = pieces.pop()  # after the last newline: a line not ended yet
        held = self._partial
        if pieces and held:
            limit = self._first or fixed or self._bound(held, pieces[0])
            if len(held) + len(pieces[0]) > limit:
                self._refuse(limit)
                return
            pieces[0] = bytes(held) + pieces[0]
            held.clear()
        for piece in pieces:
            limit = self._first or fixed or self._bound(b"", piece)
            if len(piece) > limit:
                self._refuse(limit)
                return
            self._lines.append(self._decode(piece))
            self._first = None
        if not rest:
            return
        limit = self._first or fixed or self._bound(held, rest)
        if len(held) + len(rest) > limit:
            self._refuse(limit)
            return
        held += rest

    def _refuse(self, limit: int) -> None:
        said = "the first line is the greeting" if self._first is not None else self._note
        note = f" ({said})" if said else ""
        self._failed = ProtocolError(
            ErrorCode.TOO_LARGE, f"a line may hold at most {size(limit)} here{note}; this one is longer"
        )
        self._partial = bytearray()

    def _bound(self, held: bytes | bytearray, more: bytes) -> int:
        """The bound of a line whose bytes so far are `held` then `more`, decided by its first HEAD_BYTES."""
        assert not isinstance(self._limit, int)
        head = bytes(held[:HEAD_BYTES])
        if len(head) < HEAD_BYTES:
            head += more[: HEAD_BYTES - len(head)]
        return self._limit(head)

    @staticmethod
    def _decode(line: bytes) -> str | ProtocolError:
        if b"\0" in line:
            return bad_request(f"a line holds a NUL byte at offset {line.index(0)}; lines are UTF-8 text")
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as error:
            return bad_request(f"a line is not UTF-8 (byte 0x{line[error.start]:02x} at offset {error.start})")

    def next_line(self) -> str | None:
        """The next complete line without its `\\n`, or None until more data arrives; raises ProtocolError."""
        if self._lines:
            item = self._lines.popleft()
            if isinstance(item, ProtocolError):
                raise item
            return item
        if self._failed is not None:
            raise self._failed
        return None

    def take_lines(self, most: int) -> list[str | ProtocolError]:
        """Up to `most` complete lines (or their errors) at once, as `next_line` would give them one by one."""
        taken: list[str | ProtocolError] = []
        while self._lines and len(taken) < most:
            taken.append(self._lines.popleft())
        return taken

    def give_back(self, lines: list[str | ProtocolError]) -> None:
        """Lines `take_lines` gave, put back first, in their order."""
        self._lines.extendleft(reversed(lines))

    @property
    def complete(self) -> int:
        """How many complete lines are held."""
        return len(self._lines)

    @property
    def partial(self) -> bool:
        """Whether bytes of an unfinished line are held (at end of file: a request cut short)."""
        return bool(self._partial)

    @property
    def buffered(self) -> int:
        """Bytes held: the unfinished line plus complete lines not yet taken."""
        return len(self._partial) + sum(len(item) for item in self._lines if isinstance(item, str))
