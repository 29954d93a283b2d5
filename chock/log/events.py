"""The event model of the session log (docs/log.md#lines): one JSON object per line, ids from 1, at most 1 MiB.

Every event type is declared here, once, with its fields, their JSON types and their defaults (`EVENTS`; the
table of docs/log.md#event-types says the same in words, and a test holds the two together). The writer
refuses a type or a field that is not declared (`check`): an undeclared one is a bug in Chock, never the agent's
input. Events stay plain dicts: a reader skips a type it does not know, ignores a field it does not know and
reads a missing field, or one of another type, as its declared default (`value`), so an older reader and a
newer writer (or the reverse) never disagree about a line.
"""

from __future__ import annotations

import json
import time
from types import MappingProxyType

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    Event = dict[str, Any]
else:
    Event = dict  # what every reader of a log holds: a plain dict (at run time the name is all that is needed)

# A line is written with one write(); bounding it keeps that write small enough to be atomic in practice
# and keeps a reader's memory bounded. Replies carry events unchanged, so this is also the reply bound.
MAX_EVENT_BYTES = 1024 * 1024

# What a tool may put in one event before it is cut: large enough for a real build log's tail, small
# enough that a model context is not flooded by one `cat` of a binary.
TOOL_OUTPUT_LIMIT = 64 * 1024

# A list an event records from the workspace (what a finish left out, and why) is as long as the agent makes it;
# the event keeps its first entries, at most this many and this many bytes, and counts the rest.
LIST_ENTRIES = 1000
LIST_BYTES = 64 * 1024

# The fields of a `usage` event, in the order it carries them: `input_tokens` is the whole prompt, cached parts
# included; the cache counts say how much of it was read from or written to the provider's prompt cache. A
# provider's own words for them are mapped to these.
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

# Why an owner lets go, as `session.end` says it: the work is done; it failed; it was handed over; it was stopped;
# it spent past its `.budget` (exit 1, continuable once the budget is raised).
# it moved to another host (`moved`: on the source, once the target adopted it; docs/remote.md#moving-a-session).
END_REASONS = ("completed", "error", "handover", "interrupted", "budget", "moved")

# What a model's `stop_reason` (on `assistant.message`: the provider's own word for why it stopped) says beyond an
# answer, as docs/log.md#stop-reasons tells it. Refused (the Messages API's `refusal`, chat completions'
# `content_filter`): the session ends with an error, and the refused answer is left out of the conversation (the
# API asks that a refused turn not be sent again). Cut at a limit, with no tool call to run: the session ends with
# an error saying which limit. Paused (`pause_turn`): the conversation is sent again, and the model goes on.
REFUSED_STOPS = ("refusal", "content_filter")
CUT_STOPS = {
    "max_tokens": "the model's output limit",
    "length": "the model's output limit",
    "model_context_window_exceeded": "the model's context window",
}
PAUSED_STOP = "pause_turn"


# The declarations -----------------------------------------------------------------------------------------
#
# A field is `name: (types, default)`: the JSON types a writer gives it (as Python types, `NULL` for null; the
# form of `chock.log.row.FIELDS`) and what a reader takes when it is missing or of another type. Adding a field
# is one line in its event's table (and its words in docs/log.md's table).

NULL = type(None)
TEXT: tuple[type, ...] = (str,)
WHOLE: tuple[type, ...] = (int,)
FLAG: tuple[type, ...] = (bool,)
NUMBER: tuple[type, ...] = (int, float)
LIST: tuple[type, ...] = (list,)
OBJECT: tuple[type, ...] = (dict,)
NONE: tuple[()] = ()  # the default of a list: an empty one no reader can change
EMPTY: MappingProxyType[str, Any] = MappingProxyType({})  # the default of an object, likewise

if TYPE_CHECKING:
    Field = tuple[tuple[type, ...], object]

# What every event has (the writer adds `id`, `at` and `type`), and what any may carry: `truncated` and `bytes`
# say an event was cut, by its writer (a tool's output) or by `encode` (an event past MAX_EVENT_BYTES).
COMMON: dict[str, Field] = {
    "id": (WHOLE, 0),
    "at": (TEXT, ""),
    "type": (TEXT, ""),
    "truncated": (FLAG, False),
    "bytes": (WHOLE, 0),
}
_CARRIED = ("truncated", "bytes")  # what a writer may give any event; `id`, `at` and `type` are the log's own

# What an owner counts the session's spend in, as it records itself in `session.start` and `session.adopt`: its
# instance's price currency ("" with no price) and the session's budget in it (null: none).
SPENDING: dict[str, Field] = {
    "currency": (TEXT, ""),
    "budget": ((int, float, NULL), None),
}

# Where an owner runs, as it records itself in `session.start` and `session.adopt` (chock/platform/host.py).
OWNER_PLACE: dict[str, Field] = {
    "pid": ((int, NULL), None),
    "pid_start": ((int, NULL), None),
    "machine_id": (TEXT, ""),
    "boot_id": (TEXT, ""),
    "host": (TEXT, ""),
}

EVENTS: dict[str, dict[str, Field]] = {
    "session.start": {
        "session": (TEXT, ""),
        "project": (TEXT, ""),
        "message": (TEXT, ""),
        "instance": (TEXT, ""),
        "model": (TEXT, ""),
        "owner": (TEXT, "terminal"),
        "approve_all": (FLAG, False),
        **OWNER_PLACE,
        "instructions": (TEXT, ""),
        "instructions_note": (TEXT, ""),
        **SPENDING,
    },
    "session.adopt": {
        "session": (TEXT, ""),
        "via": (TEXT, "terminal"),
        "approve_all": (FLAG, False),
        **OWNER_PLACE,
        "after": (TEXT, ""),
        **SPENDING,
        "from": (TEXT, ""),  # via: move, on the target: the source's host name
        "project": (TEXT, ""),  # via: move, on the target: the project there
    },
    "workspace.open": {
        "directory": (TEXT, ""),
        "commit": (TEXT, ""),
        "admin": (TEXT, ""),
        "base": (TEXT, ""),  # the commit of the session's first workspace.open ("" in older logs: that commit)
        "machine_id": (TEXT, ""),  # the machine that made it: only its own are taken over or removed there
    },
    "workspace.close": {
        "branch": ((str, NULL), ""),  # null: the work did not differ from the base, and no branch was made
        "commit": ((str, NULL), ""),
        "removed": (FLAG, False),
        "skipped": (LIST, NONE),
        "left_out": (WHOLE, 0),
        # The branch's whole work against the session's base (chock.session.wholediff), when a branch holds it.
        "base": (TEXT, ""),
        "diff": (TEXT, ""),
        "diff_truncated": (FLAG, False),
        "files": (LIST, NONE),  # {path, status, added, deleted, binary}
        "files_left_out": (WHOLE, 0),
    },
    "user.message": {
        "text": (TEXT, ""),
        "via": (TEXT, ""),
    },
    "assistant.delta": {
        "text": (TEXT, ""),
    },
    "assistant.message": {
        "text": (TEXT, ""),
        "tool_calls": (LIST, NONE),
        "stop_reason": (TEXT, ""),  # the provider's own word; "" when it gave none (a replay, an older log)
    },
    "tool.call": {
        "call_id": (TEXT, ""),
        "name": (TEXT, ""),
        "args": (OBJECT, EMPTY),
        "server": (TEXT, ""),  # an MCP tool's server ("" for a built-in tool)
        "tool": (TEXT, ""),  # an MCP tool's own name on its server (`name` is the one the model was given)
    },
    "tool.result": {
        "call_id": (TEXT, ""),
        "name": (TEXT, ""),
        "output": (TEXT, ""),
        "is_error": (FLAG, False),
        "diff": (TEXT, ""),
        "server": (TEXT, ""),
    },
    "mcp.server": {
        "server": (TEXT, ""),
        "state": (TEXT, ""),  # started, skipped, failed, restarted, stopped
        "origin": (TEXT, ""),  # config, or project (.chock/mcp.zon)
        "reason": (TEXT, ""),
        "tools": (WHOLE, 0),
    },
    "mcp.tools": {
        "server": (TEXT, ""),
        "names": (LIST, NONE),  # the model's names of the server's tools, as of this turn boundary
    },
    "approval.request": {
        "request_id": (TEXT, ""),
        "tool": (TEXT, ""),
        "summary": (TEXT, ""),
        "call_id": (TEXT, ""),
        "by_config": (FLAG, False),
        "rule": (TEXT, ""),
        "propose": (TEXT, ""),
        "propose_whole": (FLAG, False),
        "propose_why": (TEXT, ""),
    },
    "approval.answer": {
        "request_id": (TEXT, ""),
        "answer": (TEXT, ""),
        "via": (TEXT, ""),
        "rule": (TEXT, ""),
        "scope": (TEXT, "once"),
        "note": (TEXT, ""),
    },
    "background.start": {
        "handle": (TEXT, ""),
        "kind": (TEXT, ""),
        "command": (TEXT, ""),
    },
    "background.end": {
        "handle": (TEXT, ""),
        "kind": (TEXT, ""),
        "command": (TEXT, ""),
        "exit_code": ((int, NULL), None),
        "output": (TEXT, ""),
    },
    "subagent.start": {
        "handle": (TEXT, ""),
        "task": (TEXT, ""),
    },
    "subagent.end": {
        "handle": (TEXT, ""),
        "result": (TEXT, ""),
    },
    "usage": {
        **{name: (WHOLE, 0) for name in USAGE_FIELDS},
        "cost": ((int, float, NULL), None),
        "for": (TEXT, ""),
    },
    "provider.retry": {
        "attempt": (WHOLE, 0),
        "status": ((int, NULL), None),
        "wait_seconds": (NUMBER, 0),
        "error": (TEXT, ""),
        "for": (TEXT, ""),
    },
    "compaction": {
        "summary": (TEXT, ""),
        "through": (WHOLE, 0),
        "cut": (WHOLE, 0),
        "tokens": (WHOLE, 0),
        "window": (WHOLE, 0),
        "window_from": (TEXT, ""),
    },
    "plan": {
        "steps": (LIST, NONE),
    },
    "turn.end": {},
    "session.end": {
        "reason": (TEXT, ""),
        "exit_code": ((int, NULL), None),
        "error": (TEXT, ""),
        "via": (TEXT, ""),
        "to": (TEXT, ""),  # handover or moved to another host: its host name
        "address": (TEXT, ""),  # a move's handover: where the client reached `to` (`--continue` asks there)
    },
}


class UndeclaredEvent(ValueError):
    """Chock itself was about to write an event type or a field that EVENTS does not declare: a bug."""


def check(type: str, fields: Iterable[str]) -> None:
    """Refuse an event type, or a field of it, that is not declared (the writer calls this for every line)."""
    declared = EVENTS.get(type)
    if declared is None:
        raise UndeclaredEvent(
            f"chock tried to log an event of type {type!r}, which chock/log/events.py does not declare; declare it "
            "in EVENTS (and in docs/log.md's table), or fix the type's spelling"
        )
    for name in fields:
        if name not in declared and name not in _CARRIED:
            raise UndeclaredEvent(
                f"chock tried to log {type!r} with a field {name!r} that chock/log/events.py does not declare"
                + (" (the writer sets it)" if name in COMMON else "")
                + f"; declare it in EVENTS[{type!r}] (and in docs/log.md's table), or fix its spelling"
            )


def value(event: Event, name: str) -> Any:
    """Field `name` of `event` as its type declares it: the declared default when it is missing, of another type
    (a bool is no number), or not a field of that type at all (an unknown type declares none)."""
    kind = event.get("type")
    declared = (EVENTS.get(kind, EMPTY) if type(kind) is str else EMPTY).get(name) or COMMON.get(name)
    if declared is None:
        return None
    types, default = declared
    found = event.get(name, default)
    if isinstance(found, types) and not (isinstance(found, bool) and bool not in types):
        return found
    return default


def timestamp(now: float | None = None) -> str:
    """UTC with milliseconds, as every event's `at` is written: 2026-12-01T07:34:50.123Z."""
    now = time.time() if now is None else now
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def cut(text: str, limit: int = TOOL_OUTPUT_LIMIT) -> tuple[str, dict[str, Any]]:
    """Cut `text` to `limit` bytes of UTF-8; return the kept text and the fields that say so."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, {}
    kept = data[:limit].decode("utf-8", "ignore")
    return kept, {"truncated": True, "bytes": len(data)}


def listed(name: str, items: list[str]) -> dict[str, Any]:
    """`{name: the first items}` — at most LIST_ENTRIES of them and LIST_BYTES in all — with `left_out: N`
    when N more were not listed."""
    kept, size = [], 0
    for item in items[:LIST_ENTRIES]:
        size += len(item.encode("utf-8", "replace")) + 4
        if size > LIST_BYTES:
            break
        kept.append(item)
    left_out = len(items) - len(kept)
    return {name: kept, "left_out": left_out} if left_out else {name: kept}


def encode(event: Event) -> bytes:
    """The event as one line of at most MAX_EVENT_BYTES: an event too large is cut once, in time linear in
    its size, its longest values giving way first (`chock.log.shrink`)."""
    try:
        line = _dumps(event)
        if len(line) <= MAX_EVENT_BYTES:
            return line
    except RecursionError:  # nested deeper than json encodes from here: the cut replaces what is too deep
        pass
    from chock.log.shrink import shrink  # only for the rare line past the bound (docs/architecture.md#start-up)

    line = _dumps(shrink(event, MAX_EVENT_BYTES))
    if len(line) > MAX_EVENT_BYTES:  # never expected: then the event says only what it was and that it was cut
        kept = {key: event[key] for key in ("id", "at", "type") if key in event}
        line = _dumps({**kept, "truncated": True, "bytes": len(line)})
    return line


def _dumps(event: Event) -> bytes:
    # A lone surrogate (a model's JSON may hold one) becomes "?": a line is always valid UTF-8.
    return (json.dumps(event, ensure_ascii=False, separators=(", ", ": ")) + "\n").encode("utf-8", "replace")


def decode(line: bytes) -> Event | None:
    """Parse one complete line; a line that is not a JSON object is None (never a crash)."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; RecursionError: nested too deep
        return None
    return event if isinstance(event, dict) else None
