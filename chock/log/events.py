"""The event model of the session log (docs/log.md#lines): one JSON object per line, ids from 1, at most 1 MiB.

Events stay plain dicts: every field has a default where it is read and unknown fields are ignored,
so an older reader and a newer writer (or the reverse) never disagree about a line.
"""

from __future__ import annotations

import json
import time

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
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

# The fields of a `usage` event, in the order it carries them: `input_tokens` is the whole prompt, cached parts
# included; the cache counts say how much of it was read from or written to the provider's prompt cache. A
# provider's own words for them are mapped to these.
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


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


def encode(event: Event) -> bytes:
    """The event as one line, cut to fit MAX_EVENT_BYTES by shortening its longest strings (nested ones
    too: a `write_file` call's content sits inside `tool_calls`)."""
    line = _dumps(event)
    if len(line) <= MAX_EVENT_BYTES:
        return line
    import copy  # only for the rare line past the bound (docs/architecture.md#start-up)

    event = copy.deepcopy(event)
    original = len(line)
    while len(line) > MAX_EVENT_BYTES:
        holder, key, value = max(_strings(event), key=lambda found: len(found[2]), default=(None, None, ""))
        if holder is None or not value:
            raise ValueError(f"a {event.get('type')} event cannot be made smaller than {MAX_EVENT_BYTES} bytes")
        # Every character dropped removes at least one byte of the line, so each pass makes progress.
        holder[key] = value[: max(0, len(value) - (len(line) - MAX_EVENT_BYTES) - 64)]
        event["truncated"] = True
        event.setdefault("bytes", original)
        line = _dumps(event)
    return line


_FIXED_FIELDS = ("id", "at", "type")


def _strings(value: Any, top: bool = True):
    """(container, key, string) for every string in the event, its fixed fields excepted."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if top and key in _FIXED_FIELDS:
            continue
        if isinstance(item, str):
            yield value, key, item
        elif isinstance(item, dict | list):
            yield from _strings(item, top=False)


def _dumps(event: Event) -> bytes:
    return (json.dumps(event, ensure_ascii=False, separators=(", ", ": ")) + "\n").encode("utf-8")


def decode(line: bytes) -> Event | None:
    """Parse one complete line; a line that is not a JSON object is None (never a crash)."""
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None
