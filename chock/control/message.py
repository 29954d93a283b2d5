"""Requests, replies and the protocols made of them: what a line of each wire means (docs/protocol.md).

A `Request` is one verb: it checks its fields when it is built (so a request that exists is one the server
takes), encodes itself as one line, and declares the grammar of its reply — `REPLY` (a one-line answer, or
the header of a stream), `ITEM` (each further line) and `END` (the line that ends the stream; none: the server
closes the connection). A `ReplyLine` encodes itself and recognises its own line. A `LineProtocol` is a name, a
number and the table of requests one kind of socket serves; `ServerConnection` and `ClientConnection`
(chock.control.connection) hold every rule of an exchange over any of them, so adding a verb is adding its
request and reply types here and one line in the server's table.

Plain classes with `__slots__` rather than dataclasses: building a dataclass costs a millisecond at import, and
the daemon's socket-activated start pays for every one.
"""

from __future__ import annotations

from collections.abc import Callable

from chock.control.framing import (
    MAX_LINE,
    ErrorCode,
    ProtocolError,
    bad_request,
    escape,
    show,
    size,
    unescape,
)


class _Value:
    """Equality, hashing and repr from a message's values (what `_values` returns), for tests and logs."""

    __slots__ = ()

    def _values(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._values()!r}"


class Request(_Value):
    """One verb and its fields. Subclasses set `verb`, `FIELDS`, `ATTRS` (the fields' attributes, in wire
    order) and `__slots__`, and override `from_fields` where a field is not a plain string."""

    __slots__ = ()
    verb = ""
    FIELDS: tuple[str, ...] = ()  # the fields' names as the usage line shows them
    ATTRS: tuple[str, ...] = ()
    SEPARATOR = "\t"
    LIMIT = MAX_LINE
    # The reply's grammar (see the module docstring), and how long a client waits for its first line.
    REPLY: type[ReplyLine] | None = None
    ITEM: type[ReplyLine] | None = None
    END: type[ReplyLine] | None = None
    WAIT: float | None = None  # None: the client's own bound
    # A request followed by bytes that are not lines of the protocol (`receive`: a part of a session), read by the
    # connection as `Data` with the bounds `body_length()` and `body_line_limit()` give (chock.control.connection).
    BODY = False
    # A reply whose first line is followed by such bytes (`send`): its REPLY says how many (`body_length`).
    REPLY_BODY = False

    @classmethod
    def usage(cls) -> str:
        separator = "\\t" if cls.SEPARATOR == "\t" else cls.SEPARATOR
        return " ".join([cls.verb, separator.join(f"<{name}>" for name in cls.FIELDS)]).rstrip()

    @classmethod
    def from_fields(cls, fields: list[str]) -> Request:
        return cls(*fields)

    def fields(self) -> tuple[str, ...]:
        """The fields as strings, in wire order (before escaping)."""
        return tuple(str(getattr(self, name)) for name in self.ATTRS)

    def encode(self) -> bytes:
        """The request as one line. Refuses, as the server would, a line past its bound."""
        line = self.verb
        if self.FIELDS:
            line += " " + self.SEPARATOR.join(escape(field) for field in self.fields())
        try:
            data = line.encode("utf-8")
        except UnicodeEncodeError:
            raise bad_request(f"this {self.verb} request holds text that is not Unicode (a lone surrogate)") from None
        if len(data) > self.LIMIT:
            raise ProtocolError(
                ErrorCode.TOO_LARGE,
                f"a {self.verb} line may hold at most {size(self.LIMIT)}; this one is {len(data)} bytes",
            )
        return data + b"\n"

    def body_length(self) -> int:
        """How many bytes follow the request line (for a request with BODY)."""
        raise NotImplementedError

    def body_line_limit(self) -> int:
        """The longest line of those bytes, without its `\\n` (for a request with BODY)."""
        raise NotImplementedError

    @property
    def streams(self) -> bool:
        """Whether the reply has more lines than one."""
        return self.ITEM is not None

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.ATTRS)


class ReplyLine(_Value):
    """One line of a reply. `decode` returns None for a line that is not of this kind, so a client can tell
    which of the lines its request allows has come; `WHAT` names the line in an error."""

    __slots__ = ()
    WHAT = "a reply"  # as an error shows the line that was expected

    def encode(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def decode(cls, line: str) -> ReplyLine | None:
        raise NotImplementedError

    def _values(self) -> tuple[object, ...]:
        names: tuple[str, ...] = self.__slots__
        return tuple(getattr(self, name) for name in names)


class Bare(ReplyLine):
    """A reply that is one fixed line (`ready`, `end`, `ok answered`): subclasses set `LINE` and `WHAT`."""

    __slots__ = ()
    LINE = ""

    def encode(self) -> bytes:
        return self.LINE.encode() + b"\n"

    @classmethod
    def decode(cls, line: str) -> ReplyLine | None:
        return cls() if line == cls.LINE else None


class LineProtocol:
    """One kind of socket: its name and number (compared in the greeting), who serves it (for errors that say
    which end to update), the requests it takes, whether a connection carries one verb or several, the bound
    of a request line, and the replies that may come at any time (a session's `ended`)."""

    __slots__ = ("anytime", "limit_note", "line_limit", "name", "number", "one_verb", "requests", "server")

    def __init__(
        self,
        name: str,
        number: int,
        *,
        server: str,
        requests: tuple[type[Request], ...],
        one_verb: bool,
        line_limit: int | Callable[[bytes], int] = MAX_LINE,
        limit_note: str = "",
        anytime: tuple[type[ReplyLine], ...] = (),
    ) -> None:
        self.name = name
        self.number = number
        self.server = server
        self.requests = {cls.verb: cls for cls in requests}
        self.one_verb = one_verb
        self.line_limit = line_limit
        self.limit_note = limit_note
        self.anytime = anytime

    def parse_request(self, line: str) -> Request:
        """One request line (without its `\\n`) as a typed request; raises ProtocolError.

        `unknown-verb` for a verb this socket does not take, `bad-request` for anything wrong in the fields.
        """
        if "\0" in line:
            raise bad_request("a line holds a NUL character; lines are UTF-8 text")
        verb, space, rest = line.partition(" ")
        cls = self.requests.get(verb)
        if cls is None:
            if verb == "hello":
                raise ProtocolError(ErrorCode.UNKNOWN_VERB, "the greeting comes once, as the first line")
            shown = show(verb) if verb else "an empty line"
            raise ProtocolError(
                ErrorCode.UNKNOWN_VERB,
                f"{shown} is not a verb here (this {self.server} takes {', '.join(self.requests)})",
            )
        if not cls.FIELDS:
            if space:
                raise bad_request(f"{verb} takes no fields")
            return cls()
        if not space:
            raise bad_request(f"expected `{cls.usage()}`")
        raw = rest.split(cls.SEPARATOR)
        if len(raw) != len(cls.FIELDS):
            hint = ""
            if cls.SEPARATOR == " " and "\t" in rest:
                hint = f" ({verb} separates its fields by a space, not a TAB)"
            raise bad_request(f"expected `{cls.usage()}`: {len(cls.FIELDS)} fields, got {len(raw)}{hint}")
        return cls.from_fields([unescape(field) for field in raw])
