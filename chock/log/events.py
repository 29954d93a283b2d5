"""The event model of the session log (SPEC §4): one JSON object per line, ids from 1, at most 1 MiB.

Events stay plain dicts: every field has a default where it is read and unknown fields are ignored,
so an older reader and a newer writer (or the reverse) never disagree about a line.
"""

from __future__ import annotations

import json
import time
from typing import Any

# A line is written with one write(); bounding it keeps that write small enough to be atomic in practice
# and keeps a reader's memory bounded. Replies carry events unchanged, so this is also the reply bound.
MAX_EVENT_BYTES = 1024 * 1024

# What a tool may put in one event before it is cut: large enough for a real build log's tail, small
# enough that a model context is not flooded by one `cat` of a binary.
TOOL_OUTPUT_LIMIT = 64 * 1024

Event = dict[str, Any]


def timestamp(now: float | None = None) -> str:
    """UTC with milliseconds, as SPEC §4 writes it: 2026-12-01T07:34:50.123Z."""
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
    """The event as one line, cut to fit MAX_EVENT_BYTES by shortening its longest strings."""
    line = _dumps(event)
    if len(line) <= MAX_EVENT_BYTES:
        return line
    event = dict(event)
    original = len(line)
    while len(line) > MAX_EVENT_BYTES:
        key = max(
            (k for k, v in event.items() if isinstance(v, str)), key=lambda k: len(event[k]), default=None
        )
        if key is None:
            raise ValueError(
                f"a {event.get('type')} event cannot be made smaller than {MAX_EVENT_BYTES} bytes"
            )
        excess = len(line) - MAX_EVENT_BYTES
        value = event[key]
        event[key] = value[: max(0, len(value) - excess - 64)]
        event["truncated"] = True
        event.setdefault("bytes", original)
        line = _dumps(event)
    return line


def _dumps(event: Event) -> bytes:
    return (json.dumps(event, ensure_ascii=False, separators=(", ", ": ")) + "\n").encode("utf-8")


def decode(line: bytes) -> Event | None:
    """Parse one complete line; a line that is not a JSON object is None (never a crash)."""
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None
