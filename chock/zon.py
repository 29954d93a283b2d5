"""A reader and writer for the subset of ZON (Zig Object Notation) that Chock's files use.

ZON is what `config.zon`, `instances.zon` and `tokens.zon` are written in: people edit them by
hand, so a mistake is reported with its line and column and what was expected there. The subset:

    .{ .name = value, .@"any name" = value }   a struct   -> dict (in file order)
    .{ value, value }                          a list     -> list
    .{}                                        empty      -> {} (an empty struct and list look the same)
    "text\\n\\x41\\u{263a}"                       a string   -> str (Zig escapes)
    12  -3  0xff  0o17  0b101  1_000  1.5  2e-3  inf  -inf  nan
    true  false  null
    .ask                                       an enum literal -> EnumLiteral, a str
    // a comment to the end of the line; a trailing comma is allowed everywhere

Reading is a tokenizer (`_Tokenizer`) feeding a recursive-descent parser (`_Parser`); writing is `dumps`,
whose output reads back through `loads` to an equal value (an empty list reads back as `{}`).
Multiline strings (`\\\\`) and hex floats are not part of the subset.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chock.errors import ChockError
from chock.value import Value

# A config file nests three or four levels; the bound keeps a broken or hostile file from walking the parser
# into Python's own recursion limit (1000 frames) and failing with a traceback instead of a line and column.
MAX_DEPTH = 128

# Zig's keywords (std.zig.Token.keywords) and the primitive values a bare name would collide with: a field
# of one of these names is written `.@"name"` so that Zig itself reads the file back.
# fmt: off
ZIG_KEYWORDS = frozenset({
    "addrspace", "align", "allowzero", "and", "anyframe", "anytype", "asm", "async", "await", "break",
    "callconv", "catch", "comptime", "const", "continue", "defer", "else", "enum", "errdefer", "error",
    "export", "extern", "fn", "for", "if", "inline", "linksection", "noalias", "noinline", "nosuspend",
    "opaque", "or", "orelse", "packed", "pub", "resume", "return", "struct", "suspend", "switch", "test",
    "threadlocal", "try", "union", "unreachable", "usingnamespace", "var", "volatile", "while",
})
# fmt: on
ZIG_PRIMITIVE_VALUES = frozenset({"true", "false", "null", "undefined", "_"})

IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WHITESPACE = " \t\r\n"
DIGITS = "0123456789"  # ASCII only: str.isdigit() also says yes to "²" and "٣"

# A number is scanned greedily (so `12ab` is one bad number, not `12` then garbage) and then checked against
# Zig's own literal forms: digits with single underscores between them, and a sign only after an exponent.
_NUMBER_SCAN_RE = re.compile(r"-?[0-9](?:[0-9A-Za-z_]|(?<=[eE])[-+]|\.(?=[0-9]))*")
_DEC = r"[0-9](?:_?[0-9])*"
_INT_RES = (
    (re.compile(rf"-?{_DEC}"), 10, 0),
    (re.compile(r"-?0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*"), 16, 2),
    (re.compile(r"-?0o[0-7](?:_?[0-7])*"), 8, 2),
    (re.compile(r"-?0b[01](?:_?[01])*"), 2, 2),
)
_FLOAT_RE = re.compile(rf"-?{_DEC}(?:\.{_DEC}(?:[eE][-+]?{_DEC})?|[eE][-+]?{_DEC})")
# A bare word: true, false, null, inf, nan (and -inf); any other word is reported as not a value.
_WORD_RE = re.compile(r"-?[A-Za-z_][A-Za-z0-9_]*")
_HEX_BYTE_RE = re.compile(r"[0-9A-Fa-f]{2}")
_UNICODE_ESCAPE_RE = re.compile(r"\{([0-9A-Fa-f]{1,6})\}")

# The one-character escapes of a Zig string literal; `\xNN` and `\u{N…}` are handled apart.
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "'": "'", '"': '"'}
_WRITE_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", '"': '\\"'}
MAX_CODE_POINT = 0x10FFFF
SURROGATES = range(0xD800, 0xE000)

# How much of an unexpected word to quote back in an error before cutting it short.
FOUND_PREVIEW = 20


class ZonError(ChockError):
    """ZON that does not parse: the message says where (1-based line and column) and what was expected."""

    def __init__(self, what: str, *, line: int, column: int, source: str | None = None) -> None:
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}line {line}, column {column}: {what}")
        self.what = what
        self.line = line
        self.column = column
        self.source = source


class EnumLiteral(str):
    """`.ask` in ZON: a bare name, not a string. A `str`, so `value == "ask"` holds for code taking either."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"EnumLiteral({str.__repr__(self)})"


class Placed(str):
    """A string of the file that knows its 1-based `line` (`loads(..., placed=True)`): what a message or a rule's
    origin names ("config.zon line 12"). A `str`, equal to the same text."""

    __slots__ = ("line",)
    line: int


class Fields(dict[str, Any]):
    """A struct of the file (`placed=True`) that knows the 1-based line of each field's name: `lines[name]`."""

    lines: dict[str, int]


class Items(list[Any]):
    """A list of the file (`placed=True`) that knows the 1-based line each item starts on: `lines[index]`."""

    lines: list[int]


def _placed(value: str, line: int) -> Placed:
    text = Placed(value)
    text.line = line
    return text


def loads(text: str, *, source: str | None = None, placed: bool = False) -> Any:
    """Parse one ZON value from `text`; `source` (a file name) prefixes every error message. `placed`: every string
    is a `Placed`, every struct a `Fields` and every list an `Items`, which know their lines."""
    return _Parser(text, source, placed).parse_document()


def load(path: str | Path, *, source: str | None = None, placed: bool = False) -> Any:
    """Read and parse the ZON file at `path`, naming it in errors. OSError (a missing file too) propagates."""
    path = Path(path)
    source = str(path) if source is None else source
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8")
        line, column = _line_column(before, len(before))
        raise ZonError("the file is not UTF-8 text", line=line, column=column, source=source) from None
    return loads(text, source=source, placed=placed)


def dumps(value: Any, indent: int = 4) -> str:
    """Write `value` as ZON that `loads` reads back equal; structs and lists of structs go one item a line."""
    return _dump(value, 0, " " * indent) + "\n"


def as_written(value: Any) -> str:
    """A value as it would be written in the file, for a message's "(got …)": structs and lists by name
    only, and a string that cannot be written (a byte of argv that was not UTF-8) as Python shows it."""
    if isinstance(value, dict):
        return "a struct"
    if isinstance(value, list):
        return "a list"
    try:
        return _dump(value, 0, "")
    except ValueError:
        return repr(value)


def dot_name(name: str) -> str:
    """A field or enum name as ZON spells it: `.kind`, or `.@"my-box"` when not a plain Zig identifier."""
    if not name:
        raise ValueError("a ZON name cannot be empty")
    if IDENTIFIER_RE.fullmatch(name) and name not in ZIG_KEYWORDS and name not in ZIG_PRIMITIVE_VALUES:
        return f".{name}"
    return f".@{_quote(name)}"


# ---- writing --------------------------------------------------------------------------------


def _dump(value: Any, depth: int, indent: str) -> str:
    if isinstance(value, dict):
        if not value:
            return ".{}"
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"ZON field names are strings, not {type(key).__name__} ({key!r})")
            items.append(f"{dot_name(key)} = {_dump(item, depth + 1, indent)}")
        return _block(items, depth, indent)
    if isinstance(value, list | tuple):
        if not value:
            return ".{}"
        items = [_dump(item, depth + 1, indent) for item in value]
        if any(isinstance(item, dict | list | tuple) and item for item in value):
            return _block(items, depth, indent)
        return ".{ " + ", ".join(items) + " }"
    if isinstance(value, EnumLiteral):
        return dot_name(value)
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float.__repr__(value)
    raise TypeError(f"cannot write {type(value).__name__} as ZON ({value!r})")


def _block(items: list[str], depth: int, indent: str) -> str:
    inner = indent * (depth + 1)
    lines = "".join(f"{inner}{item},\n" for item in items)
    return ".{\n" + lines + indent * depth + "}"


def _quote(text: str) -> str:
    """A Zig string literal for `text`: control characters escaped, everything else written as UTF-8."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _WRITE_ESCAPES:
            out.append(_WRITE_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code in SURROGATES:
            raise ValueError(f"cannot write a lone surrogate (U+{code:04X}) in a ZON string")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


# ---- reading --------------------------------------------------------------------------------

# Token kinds. A `.` never stands alone in the subset, so the tokenizer joins it to what follows.
T_OPEN = "'.{'"
T_CLOSE = "'}'"
T_COMMA = "','"
T_EQUALS = "'='"
T_DOT_NAME = "a .name"
T_STRING = "a string"
T_NUMBER = "a number"
T_WORD = "a word"
T_END = "end of input"
# The most digits an integer literal may have: more than any setting needs, and few enough that the number can
# always be written back in decimal (Python refuses to convert an int past 4300 digits).
MAX_DIGITS = 1000

_PUNCTUATION = {"}": T_CLOSE, ",": T_COMMA, "=": T_EQUALS}


class _Token(Value):
    __slots__ = ("kind", "pos", "text", "value")

    def __init__(self, kind: str, text: str, value: Any, pos: int) -> None:
        self.kind = kind
        self.text = text  # the source text, for error messages
        self.value = value  # the decoded name, string or number
        self.pos = pos  # offset of the first character in the source


def _line_column(text: str, pos: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, pos) + 1
    return text.count("\n", 0, pos) + 1, pos - line_start + 1


class _Tokenizer:
    def __init__(self, text: str, source: str | None) -> None:
        self.text = text
        self.source = source
        self.pos = 0
        self._newlines: list[int] | None = None  # the offset of every newline, found at the first position asked

    def line_column(self, pos: int) -> tuple[int, int]:
        """The 1-based line and column of offset `pos`, as `_line_column` counts them: the newlines are found
        once and each position is a binary search among them, so placing every value of a file is linear in it
        (bench/zon_placed.py), not a count from the file's start each time."""
        newlines = self._newlines
        if newlines is None:
            newlines = self._newlines = [match.start() for match in re.finditer("\n", self.text)]
        before = bisect.bisect_left(newlines, pos)  # the newlines at offsets below pos
        line_start = newlines[before - 1] + 1 if before else 0
        return before + 1, pos - line_start + 1

    def error(self, what: str, pos: int) -> ZonError:
        line, column = self.line_column(pos)
        return ZonError(what, line=line, column=column, source=self.source)

    def tokens(self) -> Iterator[_Token]:
        text = self.text
        while True:
            self._skip_space_and_comments()
            start = self.pos
            if start >= len(text):
                yield _Token(T_END, "", None, start)
                return
            char = text[start]
            if char in _PUNCTUATION:
                self.pos += 1
                yield _Token(_PUNCTUATION[char], char, None, start)
            elif char == ".":
                yield self._dot(start)
            elif char == '"':
                value = self._string(start)
                yield _Token(T_STRING, text[start : self.pos], value, start)
            elif char in DIGITS or (char == "-" and start + 1 < len(text) and text[start + 1] in DIGITS):
                yield self._number(start)
            elif match := _WORD_RE.match(text, start):
                self.pos = match.end()
                yield _Token(T_WORD, match.group(), match.group(), start)
            else:
                raise self.error(f"unexpected character {_show(char)}", start)

    def _skip_space_and_comments(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos] in WHITESPACE:
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            else:
                return

    def _dot(self, start: int) -> _Token:
        """`.{` opens a struct or list; `.name` and `.@"name"` are field names or enum literals."""
        text = self.text
        after = start + 1
        if text.startswith("{", after):
            self.pos = after + 1
            return _Token(T_OPEN, ".{", None, start)
        if text.startswith('@"', after):
            name = self._string(after + 1)
            if not name:
                raise self.error('a name cannot be empty: .@""', start)
            return _Token(T_DOT_NAME, text[start : self.pos], name, start)
        if match := IDENTIFIER_RE.match(text, after):
            self.pos = match.end()
            return _Token(T_DOT_NAME, text[start : self.pos], match.group(), start)
        found = _show(text[after]) if after < len(text) else "end of input"
        raise self.error(f"expected '{{', a name or @\"name\" after '.', found {found}", after)

    def _number(self, start: int) -> _Token:
        match = _NUMBER_SCAN_RE.match(self.text, start)
        assert match is not None  # the caller saw a digit
        literal = match.group()
        self.pos = match.end()
        for pattern, base, prefix in _INT_RES:
            if pattern.fullmatch(literal):
                sign = -1 if literal.startswith("-") else 1
                digits = literal.lstrip("-")[prefix:].replace("_", "")
                if len(digits) > MAX_DIGITS:
                    raise self.error(f"number too long: {len(digits)} digits, at most {MAX_DIGITS}", start)
                return _Token(T_NUMBER, literal, sign * int(digits, base), start)
        if _FLOAT_RE.fullmatch(literal):
            return _Token(T_NUMBER, literal, float(literal.replace("_", "")), start)
        raise self.error(f"malformed number {_show(literal)}", start)

    def _string(self, start: int) -> str:
        """Decode the string literal whose opening quote is at `start`; leaves `pos` after the closing quote.

        Zig strings are bytes: `\\xNN` adds one byte, so the result is decoded as UTF-8 once it is complete.
        """
        text = self.text
        out = bytearray()
        pos = start + 1
        while True:
            if pos >= len(text) or text[pos] in "\r\n":
                raise self.error("unterminated string (use \\n for a line break inside a string)", start)
            char = text[pos]
            if char == '"':
                break
            if char != "\\":
                run_end = pos + 1
                while run_end < len(text) and text[run_end] not in '"\\\r\n':
                    run_end += 1
                out += text[pos:run_end].encode("utf-8", "surrogatepass")
                pos = run_end
                continue
            pos = self._escape(pos, out)
        self.pos = pos + 1
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error("string is not valid UTF-8 (check its \\x escapes)", start) from None

    def _escape(self, pos: int, out: bytearray) -> int:
        """Decode the escape whose backslash is at `pos` into `out`; return the offset just after it."""
        text = self.text
        code = text[pos + 1 : pos + 2]
        if code in _ESCAPES:
            out += _ESCAPES[code].encode()
            return pos + 2
        if code == "x":
            digits = text[pos + 2 : pos + 4]
            if not _HEX_BYTE_RE.fullmatch(digits):
                raise self.error("invalid escape: \\x takes exactly two hex digits, as in \\x41", pos)
            out.append(int(digits, 16))
            return pos + 4
        if code == "u":
            match = _UNICODE_ESCAPE_RE.match(text, pos + 2)
            if not match:
                raise self.error("invalid escape: \\u takes hex digits in braces, as in \\u{263a}", pos)
            point = int(match.group(1), 16)
            if point > MAX_CODE_POINT or point in SURROGATES:
                shown = f"\\u{{{match.group(1)}}}"
                raise self.error(f"invalid escape: {shown} is not a Unicode scalar value", pos)
            out += chr(point).encode()
            return match.end()
        shown = "end of input" if not code else _show("\\" + code)
        raise self.error(f"invalid escape {shown} (escapes are \\n \\r \\t \\\\ \\' \\\" \\xNN \\u{{N}})", pos)


def _show(text: str) -> str:
    """Quote a piece of source for an error message, cut short when long."""
    if len(text) > FOUND_PREVIEW:
        text = text[:FOUND_PREVIEW] + "…"
    return f"'{text}'"


class _Parser:
    def __init__(self, text: str, source: str | None, placed: bool = False) -> None:
        self.tokenizer = _Tokenizer(text, source)
        self.placed = placed
        self._tokens = self.tokenizer.tokens()
        self._ahead: list[_Token] = []

    # -- token stream

    def peek(self, n: int = 0) -> _Token:
        while len(self._ahead) <= n:
            self._ahead.append(next(self._tokens))
        return self._ahead[n]

    def take(self) -> _Token:
        token = self.peek()
        self._ahead.pop(0)
        return token

    def expect(self, kind: str, what: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            raise self.unexpected(token, what)
        return self.take()

    def unexpected(self, token: _Token, expected: str, opened: _Token | None = None) -> ZonError:
        what = f"expected {expected}, found {_found(token)}"
        if opened is not None and token.kind == T_END:
            line, column = self.tokenizer.line_column(opened.pos)
            what += f" (the '.{{' at line {line}, column {column} is never closed)"
        return self.tokenizer.error(what, token.pos)

    # -- grammar

    def parse_document(self) -> Any:
        value = self.value(0)
        end = self.peek()
        if end.kind != T_END:
            raise self.unexpected(end, "end of input after the value")
        return value

    def value(self, depth: int) -> Any:
        token = self.peek()
        if token.kind == T_OPEN:
            if depth >= MAX_DEPTH:
                raise self.tokenizer.error(f"nested deeper than {MAX_DEPTH} levels", token.pos)
            return self.braced(depth + 1)
        if token.kind == T_STRING and self.placed:
            return _placed(self.take().value, self.tokenizer.line_column(token.pos)[0])
        if token.kind in (T_STRING, T_NUMBER):
            return self.take().value
        if token.kind == T_DOT_NAME:
            return EnumLiteral(self.take().value)
        if token.kind == T_WORD and token.text in _WORDS:
            self.take()
            return _WORDS[token.text]
        raise self.unexpected(token, "a value")

    def braced(self, depth: int) -> Any:
        """After `.{`: `}` is empty, `.name` starts a struct, anything else starts a list.

        `.name` followed by `,` or `}` is an enum literal in a list (`.{ .a, .b }`); followed by anything
        else it is a field name, so `.{ .kind "x" }` is reported as a missing `=` rather than a bad list.
        """
        opened = self.take()
        if self.peek().kind == T_CLOSE:
            self.take()
            return {}
        if self.peek().kind == T_DOT_NAME and self.peek(1).kind not in (T_COMMA, T_CLOSE):
            return self.struct(opened, depth)
        return self.list(opened, depth)

    def line_of(self, token: _Token) -> int:
        return self.tokenizer.line_column(token.pos)[0]

    def struct(self, opened: _Token, depth: int) -> dict[str, Any]:
        fields: dict[str, Any] = Fields() if self.placed else {}
        lines: dict[str, int] = {}
        first_seen: dict[str, _Token] = {}
        while True:
            name = self.peek()
            if name.kind != T_DOT_NAME:
                raise self.unexpected(name, "a field name like .name", opened)
            self.take()
            shown = dot_name(name.value)
            if name.value in first_seen:
                line, column = self.tokenizer.line_column(first_seen[name.value].pos)
                raise self.tokenizer.error(
                    f"duplicate field {shown} (first set at line {line}, column {column})", name.pos
                )
            self.expect(T_EQUALS, f"'=' after field name {shown}")
            first_seen[name.value] = name
            if self.placed:
                lines[name.value] = self.line_of(name)
            fields[name.value] = self.value(depth)
            if self.end_of_item(opened, f"the value of {shown}"):
                if isinstance(fields, Fields):
                    fields.lines = lines
                return fields

    def list(self, opened: _Token, depth: int) -> list[Any]:
        items: list[Any] = Items() if self.placed else []
        lines: list[int] = []
        while True:
            if self.placed:
                lines.append(self.line_of(self.peek()))
            items.append(self.value(depth))
            if self.end_of_item(opened, "a list item"):
                if isinstance(items, Items):
                    items.lines = lines
                return items

    def end_of_item(self, opened: _Token, after: str) -> bool:
        """Consume `,` or `}` after an item; True when the braces close (a trailing comma is allowed)."""
        token = self.peek()
        if token.kind == T_COMMA:
            self.take()
            if self.peek().kind == T_CLOSE:
                self.take()
                return True
            return False
        if token.kind == T_CLOSE:
            self.take()
            return True
        raise self.unexpected(token, f"',' or '}}' after {after}", opened)


_WORDS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
}


def _found(token: _Token) -> str:
    if token.kind == T_END:
        return "end of input"
    if token.kind == T_STRING:
        return "'\"'"  # the column points at the opening quote; the whole string may be long
    return _show(token.text)
