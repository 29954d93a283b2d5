"""The control protocol and the session-socket lines as a codec with no I/O (SPEC §6, §5 "Session sockets").

Nothing here touches a socket. Bytes go in (`LineBuffer.feed`), lines come out (`next_line`), lines
become typed requests (`parse_request`, `parse_session_request`) or a `ProtocolError` carrying one of the
SPEC's error codes; requests and replies become bytes again (`…Request.encode()`, `encode_…`), and the
client side decodes replies (`parse_…`). The daemon, every client, the session's own sockets and the tests
share this one module, so the two ends of a wire cannot disagree about a line, and every edge case is a
three-line test.

The wire, as SPEC §6 fixes it: text lines over a stream socket, UTF-8, `\\n`-terminated. A request line is
`<verb> <fields>`: the verb, one space, then fields separated by TAB — except `read`, whose two fields are
separated by a space. A field never holds a raw TAB, LF or backslash: those are written `\\t`, `\\n`, `\\\\`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from chock.errors import ChockError
from chock.log.events import MAX_EVENT_BYTES
from chock.paths import BadSessionId, check_session_id

# --------------------------------------------------------------------------------------------------------
# Names and numbers
#
# Seed, "Every connection opens with a number": "The client greets with the control protocol number it was
# built against, the daemon answers with its own, and both check the numbers and not the shape of the
# reply. They have to be equal." The number "moves when a client built against the old number would misread
# the new one, and at no other time. A field added to a session row is not such a change."

CONTROL_NAME = "chock-control"
SESSION_NAME = "chock-session"
PROTOCOL = 1  # the control protocol (`chock daemon`), SPEC §6: "The protocol number is 1."
# approval.sock and handover.sock, SPEC §5: `hello chock-session 1` -> `ok chock-session 1`
SESSION_PROTOCOL = 1

NUMBERS = {CONTROL_NAME: PROTOCOL, SESSION_NAME: SESSION_PROTOCOL}
# Who serves each protocol, for refusals that must say "which end to update" (SPEC §6).
SERVERS = {CONTROL_NAME: "daemon", SESSION_NAME: "session"}

# --------------------------------------------------------------------------------------------------------
# Bounds (SPEC §6: "Bounds apply to requests: 256 KiB for a `start` line, 8 KiB for any other line; past
# that the connection gets `error too-large …` and is closed.") Each bound counts the bytes of one line
# without its `\n`.

# A `start` line carries a whole task message (a pasted stack trace, a spec, a diff to review). 256 KiB is
# far more than a person types or pastes, and still small next to the 1 MiB an event may hold, so the
# `session.start` event that records the message always fits in one log line.
MAX_START_LINE = 256 * 1024

# Every other request is a verb, a project path (PATH_MAX is 4 KiB on Linux, 1 KiB on macOS), a session id
# and a number or two: 8 KiB holds the longest legal one twice over and keeps what an idle or hostile peer
# can make the daemon hold per connection small (the daemon caps concurrent connections too, SPEC §6).
MAX_LINE = 8 * 1024

# "Replies are not bounded beyond the 1 MiB event limit" (SPEC §6): an event line is the log's own line,
# passed through unchanged, and the log never holds a longer one (SPEC §4). A client reads with this bound.
MAX_REPLY_LINE = MAX_EVENT_BYTES

# An error's text is read by a person in a terminal (a child's last error line, relayed by `refused`); past
# this it is cut, since anything longer belongs in the session's run.log, not on one line of a reply.
MAX_ERROR_TEXT = 4 * 1024

# Event ids count log lines from 1 (SPEC §4); 19 decimal digits hold any signed 64-bit id, which is as far
# as a log can ever go, and refusing longer numbers keeps int() away from the interpreter's digit limit.
MAX_EVENT_ID = 2**63 - 1
_DECIMAL_RE = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() would take "٣" or "²"

# Protocol numbers in a greeting: a few digits, never a long string turned into an int.
_GREETING_NUMBER_RE = re.compile(r"[0-9]{1,9}")

# An approval request id is minted by the session (SPEC §4 `approval.request {request_id}`) and only ever
# compared, never used in a path; visible ASCII keeps it typeable at `chock approve` and printable anywhere.
REQUEST_ID_RE = re.compile(r"[!-~]{1,128}")

# The first bytes of a line that the framer hands to a per-line bound, so that bound can be chosen from the
# verb before the rest of the line has arrived (the longest verb plus its space is far shorter).
HEAD_BYTES = 16

# --------------------------------------------------------------------------------------------------------
# Error codes (SPEC §6: "A reply is either the verb's lines below or a single `error <code> <text>` line")


class ErrorCode(StrEnum):
    PROTOCOL = "protocol"  # the protocol numbers differ
    GREETING = "greeting"  # the first line was not the greeting (a verb came first)
    UNKNOWN_VERB = "unknown-verb"
    BAD_REQUEST = "bad-request"  # malformed fields, an id that fails the pattern, a non-number for a number
    NOT_FOUND = "not-found"  # no such session
    FORBIDDEN = "forbidden"  # a peer whose uid is not ours, or whom the kernel will not name
    REFUSED = "refused"  # e.g. the session child refused to start; its own message follows
    NOT_PENDING = "not-pending"  # relayed from the session: that request is not waiting
    TOO_LARGE = "too-large"
    UNREACHABLE = "unreachable"  # a session socket (or, at a client, the daemon) did not answer
    INTERNAL = "internal"


ERROR_CODES = frozenset(code.value for code in ErrorCode)


class ProtocolError(ChockError):
    """A line that cannot be taken, or an `error <code> <text>` reply, as a value.

    `code` is one of `ErrorCode` for every error this module raises; an error decoded from a peer keeps the
    peer's code even when it is one this version does not know (a newer daemon may add codes).
    """

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code: str = ErrorCode(code) if code in ERROR_CODES else code
        self.text = text

    def encode(self) -> bytes:
        """This error as the one reply line the peer gets (`error <code> <text>`)."""
        return encode_error(self.code, self.text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.text!r})"


def _bad(text: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_REQUEST, text)


def _show(value: str, limit: int = 60) -> str:
    """A value quoted for an error text, cut so one bad field cannot make a long reply."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


# --------------------------------------------------------------------------------------------------------
# Field escaping (SPEC §6: "A field never holds a raw TAB, LF or backslash: those are written `\t`, `\n`,
# `\\` (so a multi-line message travels in one line).")

_ESCAPE_TABLE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n"})
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n"}
_ESCAPE_RE = re.compile(r"\\(.?)", re.DOTALL)


def escape(text: str) -> str:
    """`text` as one field: backslash, TAB and LF become `\\\\`, `\\t`, `\\n`; nothing else changes."""
    return text.translate(_ESCAPE_TABLE)


def unescape(field: str) -> str:
    """The text a field carries; an unknown escape or a trailing lone backslash is `bad-request`."""
    if "\\" not in field:
        return field

    def one(match: re.Match[str]) -> str:
        escaped = match.group(1)
        try:
            return _UNESCAPES[escaped]
        except KeyError:
            if not escaped:
                raise _bad("a field ends in a lone backslash (write a backslash as \\\\)") from None
            raise _bad(f"{_show(chr(92) + escaped)} is not an escape (a field knows \\t, \\n and \\\\)") from None

    return _ESCAPE_RE.sub(one, field)


def _reply_field(text: str) -> str:
    """A free-text reply field (an error text, a tool summary): escaped, and NUL (which the framer refuses
    on every line) shown as U+FFFD, so text from a tool or a child can never make an unreadable reply."""
    return escape(text.replace("\0", "\ufffd"))


def _reply_line(line: str) -> bytes:
    return line.encode("utf-8", "replace") + b"\n"


# --------------------------------------------------------------------------------------------------------
# The framer


def request_line_limit(head: bytes) -> int:
    """The bound for a control request line, chosen from its first bytes.

    The daemon learns that a line is `start` only from its first bytes: a line that begins `start ` may hold
    MAX_START_LINE bytes, any other MAX_LINE (SPEC §6). The decision only matters once a line passes
    MAX_LINE, and by then its first HEAD_BYTES have long arrived.
    """
    return MAX_START_LINE if head.startswith(b"start ") else MAX_LINE


def _size(limit: int) -> str:
    if limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"


class LineBuffer:
    """Bytes in, complete lines out, with the bound enforced before more than the bound is held.

    `limit` is a number of bytes, or a function of a line's first bytes (`request_line_limit`) for a bound
    that depends on the verb. A line longer than its bound is `too-large` as soon as the buffered part passes
    the bound, without waiting for its `\\n` and without holding more of it than the bound (SPEC §6: "past
    that the connection gets `error too-large …` and is closed"). That error is sticky: the lines before it
    still come out, then every call raises it, and nothing fed afterwards is kept. A line holding NUL or bytes
    that are not UTF-8 is `bad-request` for that line alone (a session socket may take the next request).

    A line is what comes before `\\n`; a `\\r` before it stays part of the line. Bytes after the last `\\n`
    wait for more data; at end of file they are a request cut short, and `partial` says whether any are held.
    """

    def __init__(self, limit: int | Callable[[bytes], int] = MAX_LINE) -> None:
        self._limit = limit
        self._partial = bytearray()
        self._lines: deque[str | ProtocolError] = deque()
        self._failed: ProtocolError | None = None

    def feed(self, data: bytes) -> None:
        if self._failed is not None or not data:
            return
        view = memoryview(data)
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            limit = self._limit_for(data, start)
            if len(self._partial) + (end - start) > limit:
                # Refused before the excess is copied: a 2 MiB line costs at most `limit` bytes here.
                note = ""
                if self._limit is request_line_limit:
                    note = f" ({_size(MAX_START_LINE)} for start, {_size(MAX_LINE)} for any other request)"
                text = f"a line may hold at most {_size(limit)} here{note}; this one is longer"
                self._failed = ProtocolError(ErrorCode.TOO_LARGE, text)
                self._partial = bytearray()
                return
            self._partial += view[start:end]
            if newline < 0:
                return
            self._lines.append(self._decode(bytes(self._partial)))
            self._partial.clear()
            start = newline + 1

    def _limit_for(self, data: bytes, start: int) -> int:
        if isinstance(self._limit, int):
            return self._limit
        head = bytes(self._partial[:HEAD_BYTES])
        if len(head) < HEAD_BYTES:
            head += data[start : start + HEAD_BYTES - len(head)]
        return self._limit(head)

    @staticmethod
    def _decode(line: bytes) -> str | ProtocolError:
        if b"\0" in line:
            return _bad(f"a line holds a NUL byte at offset {line.index(0)}; lines are UTF-8 text")
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as error:
            return _bad(f"a line is not UTF-8 (byte 0x{line[error.start]:02x} at offset {error.start})")

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

    @property
    def partial(self) -> bool:
        """Whether bytes of an unfinished line are held (at end of file: a request cut short)."""
        return bool(self._partial)

    @property
    def buffered(self) -> int:
        """Bytes held: the unfinished line plus complete lines not yet taken."""
        return len(self._partial) + sum(len(item) for item in self._lines if isinstance(item, str))


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


# `ReplyReader.next_line`'s answer while a line is incomplete: read more bytes, feed them, ask again.
NEED_DATA = _NeedData()


class ReplyReader:
    """A client's end of a stream of reply lines: the framer, and end of file.

    Bytes in (`feed`; b"" is end of file, as `recv` says it), lines out (`next_line`): the next line, or
    NEED_DATA until more bytes arrive, or None once the peer has closed. An unfinished line at end of file is
    a reply cut short and is dropped. A line the framer refuses is a `protocol` error naming the peer: after
    the greeting, a reply this client cannot read means the two ends still differ. The blocking client and
    serve's asyncio one each only read bytes into this (SPEC §6: a reply line is bounded by the event limit).
    """

    def __init__(self, peer: str, *, reader: str = "this client", limit: int = MAX_REPLY_LINE) -> None:
        self.peer = peer  # "daemon at unix:/…", for errors
        self._reader = reader
        self._buffer = LineBuffer(limit)
        self.eof = False

    def feed(self, data: bytes) -> None:
        if not data:
            self.eof = True
        self._buffer.feed(data)

    def next_line(self) -> str | _NeedData | None:
        try:
            line = self._buffer.next_line()
        except ProtocolError as error:
            raise ProtocolError(
                ErrorCode.PROTOCOL, f"the {self.peer} sent a line {self._reader} cannot read: {error.text}"
            ) from None
        if line is None and not self.eof:
            return NEED_DATA
        return line


# --------------------------------------------------------------------------------------------------------
# The greeting (SPEC §6: "Both ends compare numbers, never reply shapes, and nothing else is read or written
# until they are equal. A refusal names both numbers and which end to update. A first line that is a verb
# instead of a greeting gets `error greeting …` saying the client predates the greeting.")


def encode_greeting(name: str = CONTROL_NAME, number: int | None = None) -> bytes:
    """The client's first line: `hello chock-control 1`."""
    return f"hello {name} {NUMBERS[name] if number is None else number}\n".encode()


def encode_greeting_reply(name: str = CONTROL_NAME, number: int | None = None) -> bytes:
    """The server's answer to a greeting it accepted: `ok chock-control 1`."""
    return f"ok {name} {NUMBERS[name] if number is None else number}\n".encode()


def _mismatch(name: str, this: str, ours: int, other: str, theirs: int) -> str:
    older = this if ours < theirs else other
    return f"this {this} speaks {name} {ours}, the {other} {name} {theirs}: update the {older}"


def parse_greeting(line: str, expect_name: str = CONTROL_NAME, *, number: int | None = None) -> int:
    """The server's check of a client's first line; returns the client's number (equal to ours).

    - `hello <expect_name> <ours>` is accepted.
    - `hello <expect_name> <other number>` is `protocol`, naming both numbers and the older end
      ("this daemon speaks chock-control 1, the client chock-control 2: update the daemon").
    - `hello <another protocol's name> <n>` is `protocol` too: the client reached the wrong kind of socket,
      and the refusal names what this one speaks.
    - A verb of this protocol first is `greeting`: the client predates the greeting (seed: "A client built
      before the greeting existed opens with a verb, which is not a greeting, and is told so"), and the text
      names this end's number (SPEC §6: "`error greeting` names the daemon's own number").
    - Anything else (a malformed `hello`, an empty line, noise) is `greeting` as well — it is a first line
      that is not the greeting, and the reply says what the greeting looks like.
    """
    ours = NUMBERS[expect_name] if number is None else number
    server = SERVERS.get(expect_name, "server")
    greeting = f"hello {expect_name} {ours}"
    word, _, rest = line.partition(" ")
    if word != "hello":
        verbs = CONTROL_REQUESTS if expect_name == CONTROL_NAME else SESSION_REQUESTS
        if word in verbs:
            raise ProtocolError(
                ErrorCode.GREETING,
                f"{word} came before the greeting, so the client predates the greeting: update the client "
                f"(this {server} speaks {expect_name} {ours}; a client opens with `{greeting}`)",
            )
        raise ProtocolError(
            ErrorCode.GREETING,
            f"the first line must be the greeting `{greeting}` (this {server} speaks {expect_name} {ours})",
        )
    parts = rest.split(" ")
    if len(parts) != 2 or not _GREETING_NUMBER_RE.fullmatch(parts[1]):
        raise ProtocolError(
            ErrorCode.GREETING,
            f"{_show(line)} is not a greeting; this {server} speaks {expect_name} {ours}: greet with `{greeting}`",
        )
    name, theirs = parts[0], int(parts[1])
    if name != expect_name:
        raise ProtocolError(
            ErrorCode.PROTOCOL,
            f"this {server} speaks {expect_name} {ours}, the client {name} {theirs}: "
            f"the client reached the wrong socket",
        )
    if theirs != ours:
        raise ProtocolError(ErrorCode.PROTOCOL, _mismatch(expect_name, server, ours, "client", theirs))
    return theirs


def check_greeting_reply(
    line: str, expect_name: str = CONTROL_NAME, *, number: int | None = None, peer: str | None = None
) -> int:
    """The client's check of the server's answer to its greeting; returns the server's number.

    Numbers are compared, never shapes beyond `ok <name> <n>`. A different number is `protocol`, naming both
    and the older end. An `error …` reply keeps the server's code and text (its refusal already names both
    numbers), except that `unknown-verb` or `bad-request` in answer to `hello` means the server predates the
    greeting, which is `protocol` with our number named. A reply with no number at all is `protocol` too.
    """
    ours = NUMBERS[expect_name] if number is None else number
    peer = peer or SERVERS.get(expect_name, "server")
    refused = parse_error(line)
    if refused is not None:
        if refused.code in (ErrorCode.UNKNOWN_VERB, ErrorCode.BAD_REQUEST):
            raise ProtocolError(
                ErrorCode.PROTOCOL,
                f"the {peer} does not know the greeting, so it predates {expect_name} {ours} "
                f"(this client speaks {expect_name} {ours}): update the {peer} ({refused.text})",
            )
        raise refused
    parts = line.split(" ")
    if len(parts) == 3 and parts[0] == "ok" and _GREETING_NUMBER_RE.fullmatch(parts[2]):
        name, theirs = parts[1], int(parts[2])
        if name != expect_name:
            raise ProtocolError(
                ErrorCode.PROTOCOL,
                f"this client speaks {expect_name} {ours}, the {peer} {name} {theirs}: "
                f"this address is not a chock {peer}'s socket",
            )
        if theirs != ours:
            raise ProtocolError(ErrorCode.PROTOCOL, _mismatch(expect_name, "client", ours, peer, theirs))
        return theirs
    raise ProtocolError(
        ErrorCode.PROTOCOL,
        f"the {peer} answered the greeting with {_show(line)}, which names no protocol number: it is not a "
        f"chock {peer}, or it predates {expect_name} {ours} (this client's number); update the {peer}",
    )


# --------------------------------------------------------------------------------------------------------
# Field checks shared by the requests. Each runs when a request is built, so a request that exists is one
# the daemon takes: a client fails locally, with the same words, before it sends a line the daemon refuses.


def _project(value: str) -> str:
    # "Nothing here takes [a path] except the project directory a person already typed" (seed); the daemon
    # resolves it and compares real paths (SPEC §3), so the wire only insists that it is absolute.
    if not isinstance(value, str) or not value.startswith("/"):
        raise _bad(f"the project must be an absolute path (got {_show(str(value))})")
    return value


def _session_id(value: str) -> str:
    # SPEC §3: "Every id taken from a client is validated against that pattern before it touches a path."
    try:
        return check_session_id(value)
    except BadSessionId as error:
        raise _bad(str(error)) from None


def _event_id(name: str, value: int) -> int:
    if type(value) is not int or not 0 <= value <= MAX_EVENT_ID:
        raise _bad(f"{name} must be a whole number from 0 (got {_show(str(value))})")
    return value


def _number(name: str, field: str) -> int:
    if not _DECIMAL_RE.fullmatch(field) or int(field) > MAX_EVENT_ID:
        raise _bad(f"{name} must be a whole number from 0 (got {_show(field)})")
    return int(field)


def _request_id(value: str) -> str:
    if not isinstance(value, str) or not REQUEST_ID_RE.fullmatch(value):
        raise _bad(f"{_show(str(value))} is not a request id (1 to 128 visible ASCII characters)")
    return value


def _yes_no(field: str) -> bool:
    if field == "yes":
        return True
    if field == "no":
        return False
    raise _bad(f"the answer must be yes or no (got {_show(field)})")


def _text(name: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(f"the {name} is empty")
    if "\0" in value:
        raise _bad(f"the {name} holds a NUL character, which no line may carry")
    return value


# --------------------------------------------------------------------------------------------------------
# Requests: one frozen dataclass per verb. `FIELDS` names the fields in wire order, `SEPARATOR` joins them,
# `from_fields` builds the request from unescaped fields, `fields()` gives them back for `encode()`.


class _Request:
    verb: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]] = ()
    SEPARATOR: ClassVar[str] = "\t"
    LIMIT: ClassVar[int] = MAX_LINE

    @classmethod
    def usage(cls) -> str:
        separator = "\\t" if cls.SEPARATOR == "\t" else cls.SEPARATOR
        return " ".join([cls.verb, separator.join(f"<{name}>" for name in cls.FIELDS)]).rstrip()

    @classmethod
    def from_fields(cls, fields: list[str]) -> Any:
        return cls(*fields)

    def fields(self) -> tuple[str, ...]:
        return ()

    def encode(self) -> bytes:
        """The request as one line. Refuses, as the daemon would, a line past its bound."""
        fields = self.fields()
        line = self.verb + (" " + self.SEPARATOR.join(escape(f) for f in fields) if self.FIELDS else "")
        try:
            data = line.encode("utf-8")
        except UnicodeEncodeError:
            raise _bad(f"a {self.verb} request holds text that is not Unicode (a lone surrogate)") from None
        if len(data) > self.LIMIT:
            raise ProtocolError(
                ErrorCode.TOO_LARGE,
                f"a {self.verb} line may hold at most {_size(self.LIMIT)}; this one is {len(data)} bytes",
            )
        return data + b"\n"


@dataclass(frozen=True, slots=True)
class StartRequest(_Request):
    """`start <project>\\t<message>` -> `ok <session id>\\t<log path>`."""

    verb: ClassVar[str] = "start"
    FIELDS: ClassVar[tuple[str, ...]] = ("project", "message")
    LIMIT: ClassVar[int] = MAX_START_LINE
    project: str
    message: str

    def __post_init__(self) -> None:
        _project(self.project)
        _text("message", self.message)

    def fields(self) -> tuple[str, ...]:
        return (self.project, self.message)


@dataclass(frozen=True, slots=True)
class AdoptRequest(_Request):
    """`adopt <project>\\t<session id>` -> `ok <session id>\\t<log path>`."""

    verb: ClassVar[str] = "adopt"
    FIELDS: ClassVar[tuple[str, ...]] = ("project", "session id")
    project: str
    session_id: str

    def __post_init__(self) -> None:
        _project(self.project)
        _session_id(self.session_id)

    def fields(self) -> tuple[str, ...]:
        return (self.project, self.session_id)


@dataclass(frozen=True, slots=True)
class ReadRequest(_Request):
    """`read <session id> <last event id>` -> event lines, then close.

    The one request whose fields are separated by a space, "as the seed writes it (neither can hold one)"
    (SPEC §6). "<last event id> means 'I already have this one'" (seed): replay sends `after + 1` onward.
    """

    verb: ClassVar[str] = "read"
    FIELDS: ClassVar[tuple[str, ...]] = ("session id", "last event id")
    SEPARATOR: ClassVar[str] = " "
    session_id: str
    after: int = 0

    def __post_init__(self) -> None:
        _session_id(self.session_id)
        _event_id("the last event id", self.after)

    @classmethod
    def from_fields(cls, fields: list[str]) -> ReadRequest:
        return cls(fields[0], _number("the last event id", fields[1]))

    def fields(self) -> tuple[str, ...]:
        return (self.session_id, str(self.after))


@dataclass(frozen=True, slots=True)
class ListRequest(_Request):
    """`list <project>` -> `<started at>\\t<row JSON>` per session, oldest first, then close.

    SPEC §6: "An unknown project is not an error: `list` sends no rows."
    """

    verb: ClassVar[str] = "list"
    FIELDS: ClassVar[tuple[str, ...]] = ("project",)
    project: str

    def __post_init__(self) -> None:
        _project(self.project)

    def fields(self) -> tuple[str, ...]:
        return (self.project,)


@dataclass(frozen=True, slots=True)
class WatchRequest(_Request):
    """`watch <project>\\t<session id>\\t<last id>` -> `ok <row JSON>`, then event lines as the log grows."""

    verb: ClassVar[str] = "watch"
    FIELDS: ClassVar[tuple[str, ...]] = ("project", "session id", "last id")
    project: str
    session_id: str
    after: int = 0

    def __post_init__(self) -> None:
        _project(self.project)
        _session_id(self.session_id)
        _event_id("the last id", self.after)

    @classmethod
    def from_fields(cls, fields: list[str]) -> WatchRequest:
        return cls(fields[0], fields[1], _number("the last id", fields[2]))

    def fields(self) -> tuple[str, ...]:
        return (self.project, self.session_id, str(self.after))


@dataclass(frozen=True, slots=True)
class AnswerRequest(_Request):
    """`answer <project>\\t<session id>\\t<request id>\\t<yes|no>` -> `ok answered` | `error unreachable …`.

    Seed: "A connect that failed is reported as a failure and never as ok answered."
    """

    verb: ClassVar[str] = "answer"
    FIELDS: ClassVar[tuple[str, ...]] = ("project", "session id", "request id", "yes|no")
    project: str
    session_id: str
    request_id: str
    yes: bool

    def __post_init__(self) -> None:
        _project(self.project)
        _session_id(self.session_id)
        _request_id(self.request_id)
        if not isinstance(self.yes, bool):
            raise _bad("the answer must be yes or no")

    @classmethod
    def from_fields(cls, fields: list[str]) -> AnswerRequest:
        return cls(fields[0], fields[1], fields[2], _yes_no(fields[3]))

    def fields(self) -> tuple[str, ...]:
        return (self.project, self.session_id, self.request_id, "yes" if self.yes else "no")


ControlRequest = StartRequest | AdoptRequest | ReadRequest | ListRequest | WatchRequest | AnswerRequest

# The verbs the daemon takes, by name: the daemon keeps one handler per entry (STYLE: tmux's command table).
CONTROL_REQUESTS: dict[str, type[_Request]] = {
    cls.verb: cls for cls in (StartRequest, AdoptRequest, ReadRequest, ListRequest, WatchRequest, AnswerRequest)
}


def _parse(line: str, table: Mapping[str, type[_Request]], served: str) -> Any:
    if "\0" in line:
        raise _bad("a line holds a NUL character; lines are UTF-8 text")
    verb, space, rest = line.partition(" ")
    cls = table.get(verb)
    if cls is None:
        if verb == "hello":
            raise ProtocolError(ErrorCode.UNKNOWN_VERB, "the greeting comes once, as the first line")
        shown = _show(verb) if verb else "an empty line"
        verbs = ", ".join(table)
        raise ProtocolError(ErrorCode.UNKNOWN_VERB, f"{shown} is not a verb here ({served} takes {verbs})")
    if not cls.FIELDS:
        if space:
            raise _bad(f"{verb} takes no fields")
        return cls()
    if not space:
        raise _bad(f"expected `{cls.usage()}`")
    raw = rest.split(cls.SEPARATOR)
    if len(raw) != len(cls.FIELDS):
        hint = ""
        if cls.SEPARATOR == " " and "\t" in rest:
            hint = " (read separates its two fields by a space, not a TAB)"
        raise _bad(f"expected `{cls.usage()}`: {len(cls.FIELDS)} fields, got {len(raw)}{hint}")
    return cls.from_fields([unescape(field) for field in raw])


def parse_request(line: str) -> ControlRequest:
    """One control request line (without its `\\n`) as a typed request; raises ProtocolError.

    `unknown-verb` for a verb the daemon does not take, `bad-request` for anything wrong in the fields.
    """
    return _parse(line, CONTROL_REQUESTS, "the daemon")


# --------------------------------------------------------------------------------------------------------
# Control replies. Text fields are escaped like request fields. JSON (a session row, an event line) goes on
# the line as is: JSON never holds a raw TAB or LF (it writes control characters as `\t`, `\n`, `\u0000`),
# so it needs no escaping to stay one line, and it comes last on its line, so no TAB can be mistaken for a
# separator inside it. An event line is "the log's own JSON" (SPEC §6), passed through byte for byte.


def encode_ok(*fields: str) -> bytes:
    """`ok <fields>`, TAB-separated and escaped; `ok` alone with no fields."""
    if not fields:
        return b"ok\n"
    return _reply_line("ok " + "\t".join(_reply_field(field) for field in fields))


def encode_error(code: str, text: str) -> bytes:
    """`error <code> <text>`: the text escaped so it stays one line, and cut at MAX_ERROR_TEXT."""
    if len(text) > MAX_ERROR_TEXT:
        text = text[:MAX_ERROR_TEXT] + "…"
    return _reply_line(f"error {code} {_reply_field(text)}" if text else f"error {code}")


def encode_started(session_id: str, log_path: str) -> bytes:
    """`ok <session id>\\t<log path>`, the reply to `start` and `adopt`."""
    return encode_ok(session_id, str(log_path))


def _dumps(row: Mapping[str, Any]) -> str:
    return json.dumps(dict(row), ensure_ascii=False, separators=(", ", ": "))


def encode_list_row(started_at: str, row: Mapping[str, Any]) -> bytes:
    """`<started at>\\t<row JSON>`, one `list` reply line."""
    return _reply_line(f"{_reply_field(started_at)}\t{_dumps(row)}")


def encode_watch_header(row: Mapping[str, Any]) -> bytes:
    """`ok <row JSON>`, the first reply line of `watch`."""
    return _reply_line(f"ok {_dumps(row)}")


def encode_event_line(line: bytes) -> bytes:
    """An event line for `read` and `watch`: the log's own line, unchanged (its `\\n` added if missing)."""
    return line if line.endswith(b"\n") else line + b"\n"


ANSWERED = "ok answered"


def encode_answered() -> bytes:
    """`ok answered`, the reply to the daemon's `answer` and to the approval socket's `answer`."""
    return (ANSWERED + "\n").encode()


def parse_error(line: str) -> ProtocolError | None:
    """`error <code> <text>` as a ProtocolError (returned, not raised); None for any other line.

    Decoding is lenient about the text: a peer's text that does not unescape is kept as it came.
    """
    if not line.startswith("error "):
        return None
    code, _, text = line[len("error ") :].partition(" ")
    with contextlib.suppress(ProtocolError):
        text = unescape(text)
    return ProtocolError(code, text)


def _unreadable(line: str, expected: str) -> ProtocolError:
    # A reply this client cannot read after the numbers matched: most likely two ends that still differ.
    return ProtocolError(ErrorCode.PROTOCOL, f"expected {expected}, got {_show(line)}")


def _raise_error(line: str) -> None:
    error = parse_error(line)
    if error is not None:
        raise error


def parse_ok(line: str) -> tuple[str, ...]:
    """The fields of an `ok <fields>` reply; an `error` reply is raised as its ProtocolError."""
    _raise_error(line)
    if line == "ok":
        return ()
    if not line.startswith("ok "):
        raise _unreadable(line, "an ok reply")
    try:
        return tuple(unescape(field) for field in line[3:].split("\t"))
    except ProtocolError:
        raise _unreadable(line, "an ok reply") from None


def parse_started(line: str) -> tuple[str, str]:
    """`ok <session id>\\t<log path>` as (session id, log path); the id is checked like any id taken in."""
    fields = parse_ok(line)
    if len(fields) != 2 or not fields[1]:
        raise _unreadable(line, "ok <session id>\\t<log path>")
    try:
        return check_session_id(fields[0]), fields[1]
    except BadSessionId:
        raise _unreadable(line, "ok <session id>\\t<log path>") from None


def _json_object(text: str, line: str, expected: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise _unreadable(line, expected)
    return value


def parse_list_row(line: str) -> tuple[str, dict[str, Any]]:
    """One `list` reply line as (started at, row); an `error` line is raised as its ProtocolError."""
    _raise_error(line)
    started_at, tab, row = line.partition("\t")
    if not tab:
        raise _unreadable(line, "<started at>\\t<row JSON>")
    try:
        started_at = unescape(started_at)
    except ProtocolError:
        raise _unreadable(line, "<started at>\\t<row JSON>") from None
    return started_at, _json_object(row, line, "<started at>\\t<row JSON>")


def parse_watch_header(line: str) -> dict[str, Any]:
    """`ok <row JSON>` as the row; an `error` line is raised as its ProtocolError."""
    _raise_error(line)
    if not line.startswith("ok "):
        raise _unreadable(line, "ok <row JSON>")
    return _json_object(line[3:], line, "ok <row JSON>")


def parse_event_line(line: str) -> dict[str, Any]:
    """One event line of `read` or `watch` as the event; an `error` line is raised as its ProtocolError."""
    _raise_error(line)
    return _json_object(line, line, "an event (a JSON object)")


def parse_answered(line: str) -> None:
    """`ok answered`, or the `error` it was instead, raised."""
    _raise_error(line)
    if line != ANSWERED:
        raise _unreadable(line, ANSWERED)


# --------------------------------------------------------------------------------------------------------
# Session sockets (SPEC §5): the same line and escaping rules, several requests on one connection.
#
#   approval.sock   pending                      -> request <request id>\t<tool>\t<summary> (each), then end
#                   answer <request id>\t<yes|no> -> ok answered | error not-pending <text>
#   handover.sock   handover                     -> busy <background> <subagents> (zero or more), then ready
#                   confirm                      -> released, then the session closes and exits 8
#   either          (a session that ends while a client waits) ended <reason>, then close


@dataclass(frozen=True, slots=True)
class PendingRequest(_Request):
    """`pending`: list the approval requests waiting for an answer."""

    verb: ClassVar[str] = "pending"


@dataclass(frozen=True, slots=True)
class SessionAnswerRequest(_Request):
    """`answer <request id>\\t<yes|no>` on approval.sock."""

    verb: ClassVar[str] = "answer"
    FIELDS: ClassVar[tuple[str, ...]] = ("request id", "yes|no")
    request_id: str
    yes: bool

    def __post_init__(self) -> None:
        _request_id(self.request_id)
        if not isinstance(self.yes, bool):
            raise _bad("the answer must be yes or no")

    @classmethod
    def from_fields(cls, fields: list[str]) -> SessionAnswerRequest:
        return cls(fields[0], _yes_no(fields[1]))

    def fields(self) -> tuple[str, ...]:
        return (self.request_id, "yes" if self.yes else "no")


@dataclass(frozen=True, slots=True)
class HandoverRequest(_Request):
    """`handover`: ask the session to let go at its next turn boundary."""

    verb: ClassVar[str] = "handover"


@dataclass(frozen=True, slots=True)
class ConfirmRequest(_Request):
    """`confirm`, after `ready`: the session logs `session.end {reason: handover}` and releases its lock."""

    verb: ClassVar[str] = "confirm"


SessionRequest = PendingRequest | SessionAnswerRequest | HandoverRequest | ConfirmRequest

SESSION_REQUESTS: dict[str, type[_Request]] = {
    cls.verb: cls for cls in (PendingRequest, SessionAnswerRequest, HandoverRequest, ConfirmRequest)
}
APPROVAL_VERBS = frozenset({"pending", "answer"})
HANDOVER_VERBS = frozenset({"handover", "confirm"})


def parse_session_request(line: str, verbs: frozenset[str] | None = None) -> SessionRequest:
    """One session-socket request line as a typed request; raises ProtocolError.

    `verbs` is what this socket serves (APPROVAL_VERBS or HANDOVER_VERBS); another verb is `unknown-verb`.
    """
    table = {verb: cls for verb, cls in SESSION_REQUESTS.items() if verbs is None or verb in verbs}
    return _parse(line, table, "this socket")


@dataclass(frozen=True, slots=True)
class PendingItem:
    """`request <request id>\\t<tool>\\t<summary>`: one approval request waiting for an answer."""

    request_id: str
    tool: str
    summary: str

    def encode(self) -> bytes:
        fields = (self.request_id, self.tool, self.summary)
        return _reply_line("request " + "\t".join(_reply_field(field) for field in fields))


@dataclass(frozen=True, slots=True)
class PendingEnd:
    """`end`: the last line of the reply to `pending`."""

    def encode(self) -> bytes:
        return b"end\n"


@dataclass(frozen=True, slots=True)
class Answered:
    """`ok answered`: the session took the answer."""

    def encode(self) -> bytes:
        return encode_answered()


@dataclass(frozen=True, slots=True)
class Busy:
    """`busy <background> <subagents>`: the session holds that much work; sent each time the counts change."""

    background: int
    subagents: int

    def encode(self) -> bytes:
        return f"busy {self.background} {self.subagents}\n".encode()


@dataclass(frozen=True, slots=True)
class Ready:
    """`ready`: at a turn boundary with nothing held; the session waits up to 30 s for `confirm`."""

    def encode(self) -> bytes:
        return b"ready\n"


@dataclass(frozen=True, slots=True)
class Released:
    """`released`: the session logged its handover end and let go of the log's lock."""

    def encode(self) -> bytes:
        return b"released\n"


@dataclass(frozen=True, slots=True)
class Ended:
    """`ended <reason>`: the session ended while the client waited; it closes next."""

    reason: str

    def encode(self) -> bytes:
        return _reply_line(f"ended {_reply_field(self.reason)}")


SessionReply = PendingItem | PendingEnd | Answered | Busy | Ready | Released | Ended

_BARE_REPLIES: dict[str, SessionReply] = {
    "end": PendingEnd(),
    ANSWERED: Answered(),
    "ready": Ready(),
    "released": Released(),
}


def parse_session_reply(line: str) -> SessionReply:
    """One line from a session socket as a typed reply; an `error` line is raised as its ProtocolError."""
    _raise_error(line)
    if line in _BARE_REPLIES:
        return _BARE_REPLIES[line]
    word, _, rest = line.partition(" ")
    try:
        if word == "request":
            fields = [unescape(field) for field in rest.split("\t")]
            if len(fields) == 3 and REQUEST_ID_RE.fullmatch(fields[0]):
                return PendingItem(*fields)
        elif word == "busy":
            counts = rest.split(" ")
            if len(counts) == 2:
                return Busy(_number("background", counts[0]), _number("subagents", counts[1]))
        elif word == "ended":
            return Ended(unescape(rest))
    except ProtocolError:
        pass
    raise _unreadable(line, "a session reply (request, end, ok answered, busy, ready, released, ended)")


# --------------------------------------------------------------------------------------------------------
# The server's side of one connection, for the daemon and for the session's sockets alike.


@dataclass(frozen=True, slots=True)
class Greeted:
    """The client's greeting was accepted; the server answers `encode_greeting_reply(name)`."""

    name: str
    number: int


class ServerConnection:
    """Bytes in, events out: first the greeting (`Greeted`), then requests.

    The framer's bound follows the protocol: control lines by `request_line_limit`, session lines by
    MAX_LINE. Any ProtocolError raised is the one reply line to send (`error.encode()`) before closing.
    The daemon takes one verb per connection (SPEC §6) and stops reading after it; a session socket takes
    several.
    """

    def __init__(
        self, name: str = CONTROL_NAME, *, number: int | None = None, verbs: frozenset[str] | None = None
    ) -> None:
        self.name = name
        self.number = NUMBERS[name] if number is None else number
        self.greeted = False
        self._verbs = verbs
        self.buffer = LineBuffer(request_line_limit if name == CONTROL_NAME else MAX_LINE)

    def receive_data(self, data: bytes) -> None:
        self.buffer.feed(data)

    def next_event(self) -> Greeted | ControlRequest | SessionRequest | None:
        line = self.buffer.next_line()
        if line is None:
            return None
        if not self.greeted:
            number = parse_greeting(line, self.name, number=self.number)
            self.greeted = True
            return Greeted(self.name, number)
        if self.name == CONTROL_NAME:
            return parse_request(line)
        return parse_session_request(line, self._verbs)

    def greeting_reply(self) -> bytes:
        return encode_greeting_reply(self.name, self.number)
