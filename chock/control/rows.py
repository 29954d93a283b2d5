"""A session row on the wire (docs/protocol.md#list): compact JSON with every field, and a client that gives a
field a row leaves out its default, so a row reads the same at every end.

A listing's reply is read in one pass: `rows_of` makes the whole reply one JSON text and parses it with one
`json.loads`, or says it cannot (then the reply is read line by line, as it always was, and refused the same way).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

# Every field of a row, in the order the daemon makes it (chock.log.row.RowState.row), with the value a client
# gives it when a row leaves it out (a daemon that does not know it yet).
ROW_DEFAULTS: dict[str, Any] = {
    "id": "",
    "project": "",
    "started_at": "",
    "status": "",
    "owner": "none",
    "message": "",
    "last_event_id": 0,
    "ended_at": "",
    "end_reason": "",
    "end_to": "",
    "exit_code": None,
    "pending_approvals": 0,
    "background": 0,
    "workspace_kept": False,
    "free": False,
    "interrupted_by": "",
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "cost": None,
    "currency": "",
    "budget": None,
}
_FIELDS = frozenset(ROW_DEFAULTS)


def encode_row(row: dict[str, Any]) -> str:
    """The row's JSON as a reply carries it: compact (no space after `,` or `:`), every field written out, so
    that every client, however old, reads each field it knows."""
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


def full_row(wire: dict[str, Any]) -> dict[str, Any]:
    """A row as a reply carried it, with every field it left out at its default, in the daemon's order (a
    field this client does not know comes after them)."""
    return {**ROW_DEFAULTS, **wire}


def well_typed(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row as a page may use it: None unless its `id` is a session id, and each field whose value is not of
    its default's kind at that default (a field whose default is None, and a field this client does not know,
    as it came). Another machine's daemon need not be honest, and a page sorts and compares what it shows."""
    from chock.paths import is_session_id

    if not is_session_id(row.get("id")):
        return None
    typed = dict(row)
    for name, default in ROW_DEFAULTS.items():
        if default is not None and type(typed.get(name, default)) is not type(default):
            typed[name] = default
    return typed


# A line's start, after the newline before it, up to its tab: a time the one-pass parse can put in a JSON string as
# it is (no escape, no quote). Led by a newline, it is found at the speed of a byte search. Compiled at the first
# listing read, not when a command that never reads one imports the protocol (docs/architecture.md#start-up).
_PLAIN_TIME = '\n[^\t\n"\\\\]*\t'


def rows_of(data: bytes, make: Callable[[str, dict[str, Any]], T]) -> list[T] | None:
    """Every `<started at>\\t<row JSON>` line of `data` (whole lines, each ending in `\\n`) as `make(time, full
    row)`, with one `json.loads` of the whole; None unless each line is exactly one such row as the line-by-line
    reader takes it (one tab, a time with no escape or quote, valid UTF-8 with no NUL, a JSON object after the tab).

    A reply whose rows hold every field this client knows and no other (every row as long as `ROW_DEFAULTS`, and
    no field but those in any row: each row then holds exactly those) gives its rows as parsed, not copied over
    the defaults: what a daemon of the same version sends is read once, with no dict made twice."""
    if not data.endswith(b"\n") or b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except ValueError:
        return None
    # `T1\tJ1\nT2\tJ2\n` -> `[["T1",J1],["T2",J2]]`: the tab and newline appear nowhere else (one tab a line, and
    # a JSON text holds neither outside its whitespace, which the count of tabs rules out). Each replacement is a
    # character longer than what it replaces (`",`) or three (`],["`): the lengths count the tabs and lines, with no
    # pass over the text of their own.
    body = text[:-1]
    tabbed = body.replace("\t", '",')
    joined = tabbed.replace("\n", '],["')
    lines = (len(joined) - len(tabbed)) // 3 + 1
    if len(tabbed) - len(body) != lines:
        return None
    import re  # re caches the compiled pattern

    if len(re.findall(_PLAIN_TIME, "\n" + body)) != lines:
        return None
    try:
        pairs = json.loads("".join(('[["', joined, "]]")))
    except (ValueError, RecursionError):
        return None
    if len(pairs) != lines:
        return None
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str or type(pair[1]) is not dict:
            return None
    rows = [pair[1] for pair in pairs]
    if sum(map(len, rows)) == len(ROW_DEFAULTS) * lines and _FIELDS.issuperset(set().union(*rows)):
        return [make(pair[0], pair[1]) for pair in pairs]
    defaults = ROW_DEFAULTS
    return [make(pair[0], {**defaults, **pair[1]}) for pair in pairs]
