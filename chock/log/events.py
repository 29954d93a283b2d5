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

# A list an event records from the workspace (what a finish left out, and why) is as long as the agent makes it;
# the event keeps its first entries, at most this many and this many bytes, and counts the rest.
LIST_ENTRIES = 1000
LIST_BYTES = 64 * 1024

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

    return _dumps(shrink(event, MAX_EVENT_BYTES))


def _dumps(event: Event) -> bytes:
    # A lone surrogate (a model's JSON may hold one) becomes "?": a line is always valid UTF-8.
    return (json.dumps(event, ensure_ascii=False, separators=(", ", ": ")) + "\n").encode("utf-8", "replace")


def decode(line: bytes) -> Event | None:
    """Parse one complete line; a line that is not a JSON object is None (never a crash)."""
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None
