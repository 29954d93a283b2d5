"""Making an event that is too large fit its line, in time linear in its size (docs/log.md#lines).

Everything in an event may be written by an adversary — a model's 5 MB tool call, a plan of 50,000 steps — and
the cut happens on the session's only loop, so it is made once, from measured lengths, never by cutting a
little and encoding again:

1. one pass measures the encoded size of every value of the event, from the bottom up (a string by the JSON
   text it becomes, a container by its children plus its own brackets and separators);
2. one pass from the top gives each container's children their share of the room it has: the smallest keep
   all they need and the largest share what is left equally (water-filling), so short fields — ids, names, a
   status — are never touched while one huge string is cut to fit;
3. a list whose items would each get less than MIN_SHARE bytes keeps its first items whole instead (a plan of
   50,000 steps becomes its first few thousand, not 50,000 mangled ones), and a container whose own brackets
   and keys do not fit is replaced by the start of its JSON text, as a string.

Only the containers on the way to something cut are copied; what fits is shared with the caller's event. The
event gets `truncated: true` and `bytes` (its size before the cut), as a cut tool output does.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

# The fields every event keeps whole: they name the event.
FIXED_FIELDS = ("id", "at", "type")

# A list item gets at least this much room, or the list keeps fewer items: a step, a path or a call cut to a
# few bytes tells a reader nothing.
MIN_SHARE = 256

# Room kept for `"truncated": true, "bytes": N` and a nested value's separators (generously).
_MARK_ROOM = 64

_SEPARATOR = 2  # ", " between items, ": " between a key and its value
_quote = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) makes of a string

# Below this depth a value is measured as a whole (json.dumps, in C) and, when it does not fit, replaced by the
# start of its JSON text: Python's own recursion must never be what an adversary's nesting exhausts.
_MAX_DEPTH = 16


def string_bytes(text: str, quoted: str | None = None) -> int:
    """The bytes `text` takes in a line, quotes included (`quoted`: its JSON text, when it was made already)."""
    quoted = quoted or _quote(text)
    return len(quoted) if text.isascii() else len(quoted.encode("utf-8", "replace"))


def _scalar_bytes(value: object) -> int:
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if type(value) is int:
        return len(int.__repr__(value))
    return len(json.dumps(value))


# A string this long keeps its JSON text from the measuring to its cut, rather than having it made twice.
_KEEP_QUOTED = 64 * 1024

# What stands for a value nested deeper than json can encode from where the cut runs.
TOO_DEEP = "(nested too deep to keep)"


class _Sizes:
    """The encoded size of every container and string of an event, keyed by `id()` (the values are alive in
    the event, so an id cannot be reused while this is). A value below _MAX_DEPTH is measured whole."""

    def __init__(self) -> None:
        self.of: dict[int, int] = {}
        self.whole: set[int] = set()  # containers measured whole, below _MAX_DEPTH
        self.quoted: dict[int, str] = {}  # the JSON text of each long string, for its cut

    def _string(self, text: str) -> int:
        quoted = _quote(text)
        size = self.of[id(text)] = string_bytes(text, quoted)
        if len(text) >= _KEEP_QUOTED:
            self.quoted[id(text)] = quoted
        return size

    def measure(self, value: Any, depth: int = 0) -> int:
        if isinstance(value, str):
            return self._string(value)
        if not isinstance(value, dict | list):
            return _scalar_bytes(value)
        if depth >= _MAX_DEPTH:
            self.whole.add(id(value))
            try:
                size = len(_dumps(value))
            except RecursionError:
                size = 1 << 62  # never fits: it is replaced by TOO_DEEP
        elif isinstance(value, dict):
            measure = self.measure
            size = 2 + sum(
                string_bytes(str(key)) + _SEPARATOR + measure(item, depth + 1) for key, item in value.items()
            )
            size += _SEPARATOR * max(0, len(value) - 1)
        else:
            measure = self.measure
            size = 2 + sum([measure(item, depth + 1) for item in value]) + _SEPARATOR * max(0, len(value) - 1)
        self.of[id(value)] = size
        return size

    def size(self, value: Any) -> int:
        found = self.of.get(id(value))
        if isinstance(value, str):
            return found if found is not None else string_bytes(value)
        return found if found is not None else _scalar_bytes(value)


def shrink(event: dict[str, Any], limit: int) -> dict[str, Any]:
    """A copy of `event` whose line is at most `limit` bytes, with `truncated` and `bytes` set, or the event
    itself when it fits already."""
    sizes = _Sizes()
    total = sizes.measure(event) + 1  # the newline
    if total <= limit:
        return event
    room = limit - 1 - _MARK_ROOM - 2  # the braces of the event
    fixed = {key: event[key] for key in FIXED_FIELDS if key in event}
    others = [(key, value) for key, value in event.items() if key not in fixed and key not in ("truncated", "bytes")]
    room -= sum(string_bytes(key) + _SEPARATOR + sizes.size(value) + _SEPARATOR for key, value in fixed.items())
    room -= sum(string_bytes(key) + 2 * _SEPARATOR for key, _ in others)
    shares = _shares([value for _, value in others], room, sizes)
    cut = dict(fixed)
    for (key, value), share in zip(others, shares or [], strict=False):  # none fit at all: the event says so alone
        cut[key] = _fit(value, share, sizes, 1)
    cut["truncated"] = True
    cut["bytes"] = event.get("bytes") if isinstance(event.get("bytes"), int) else total
    return cut


def _shares(values: list[Any], room: int, sizes: _Sizes) -> list[int] | None:
    """Each value's share of `room`: at least the 2 bytes its smallest cut takes (`""`, `[]`, `{}`, or a scalar's
    text cut to nothing), then water-filled; None when not even that fits."""
    needs = [sizes.size(value) for value in values]
    floors = [min(need, 2) for need in needs]
    left = room - sum(floors)
    if left < 0:
        return None
    extra = _water_fill([need - floor for need, floor in zip(needs, floors, strict=True)], left)
    return [floor + more for floor, more in zip(floors, extra, strict=True)]


def _water_fill(sizes: list[int], room: int) -> list[int]:
    """Each value's share of `room`: all it needs when it is among the smallest, else an equal share of what
    the smaller ones left; never more than it needs."""
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    shares = [0] * len(sizes)
    left = room
    for position, index in enumerate(order):
        fair = left // (len(order) - position)
        shares[index] = min(sizes[index], fair)
        left -= shares[index]
    return shares


def _fit(value: Any, room: int, sizes: _Sizes, depth: int) -> Any:
    """`value`, or a cut copy of it whose JSON text takes at most `room` bytes."""
    size = sizes.size(value)
    if size <= room:
        return value
    if isinstance(value, str):
        return cut_string(value, room, sizes.quoted.get(id(value)))
    whole = id(value) in sizes.whole
    if isinstance(value, list) and not whole:
        return _fit_list(value, room, sizes, depth)
    if isinstance(value, dict) and not whole:
        keys = [string_bytes(str(key)) + 2 * _SEPARATOR for key in value]
        shares = _shares(list(value.values()), room - 2 - sum(keys), sizes)
        if shares is not None:
            return {
                key: _fit(item, share, sizes, depth + 1)
                for (key, item), share in zip(value.items(), shares, strict=True)
            }
    try:  # nested too deep, or all brackets and keys: the start of its JSON text
        return cut_string(_dumps(value).decode("utf-8", "replace")[:room], room)
    except RecursionError:
        return cut_string(TOO_DEEP, room)


def _fit_list(items: list[Any], room: int, sizes: _Sizes, depth: int) -> list[Any]:
    """The list's first items: as many as fit whole, or as many as get MIN_SHARE bytes each, whichever is more."""
    whole, used = 0, 2
    for item in items:
        used += sizes.size(item) + _SEPARATOR
        if used > room:
            break
        whole += 1
    shared = min(len(items), max(0, room - 2) // (MIN_SHARE + _SEPARATOR))
    if whole >= shared:
        return items[:whole]
    head = items[:shared]
    shares = _shares(head, room - 2 - _SEPARATOR * shared, sizes)
    if shares is None:
        return []
    return [_fit(item, share, sizes, depth + 1) for item, share in zip(head, shares, strict=True)]


def cut_string(text: str, room: int, quoted: str | None = None) -> str:
    """The longest start of `text` whose JSON text (quotes included) takes at most `room` bytes; `quoted` is that
    JSON text when it was made already."""
    body = room - 2
    if body <= 0:
        return ""
    quoted = quoted or _quote(text)
    if text.isascii() and len(quoted) == len(text) + 2:  # nothing escaped: a character is a byte
        return text[:body]
    escaped = quoted[1:-1].encode("utf-8", "replace")[:body].decode("utf-8", "ignore")
    cut: str = json.loads('"' + _without_cut_escape(escaped) + '"')  # a JSON string reads as a str
    return cut


def _without_cut_escape(escaped: str) -> str:
    """`escaped` without an escape sequence its cut split (`\\` alone, or `\\u` with fewer than 4 digits)."""
    start = escaped.rfind("\\")
    if start < 0:
        return escaped
    run = len(escaped[: start + 1]) - len(escaped[: start + 1].rstrip("\\"))
    if run % 2 == 0:  # the last backslash ends a `\\` pair: complete
        return escaped
    complete = start + 6 if escaped[start + 1 : start + 2] == "u" else start + 2
    return escaped if len(escaped) >= complete else escaped[:start]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": ")).encode("utf-8", "replace")
