"""The `replay` kind: a file of `assistant.message` events played back one per model call.

A whole session log works as a replay file: every other event type is skipped. Entries marked
`"for": "subagent"` belong to subagents; the parent skips them, and they are dealt out in blocks, each
block ending with an entry that makes no tool call (a subagent's final answer). Entries marked
`"for": "compaction"` are the summaries the session's compactions are answered with, one each, in order and
counted apart from the session's own turns. Tools still run for real.
An entry's `"delay": SECONDS` makes the model call take that long (a demo's thinking time; a test's window), and
its `stop_reason` is the reply's: a log's refused, cut or paused answer is heard as it was (docs/log.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

from chock.errors import Refused
from chock.providers import ProviderError, Reply, TextDelta, ToolCall


def load_entries(path: Path) -> list[dict[str, Any]]:
    """Every `assistant.message` entry of the file, in order; a missing or unreadable file is refused."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise Refused(f"the replay file {path} cannot be read: {error.strerror or error}") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise Refused(f"the replay file {path}: line {number} is not JSON") from None
        if isinstance(entry, dict) and entry.get("type") == "assistant.message":
            entries.append(entry)
    return entries


def entries_for(entries: list[dict[str, Any]], purpose: str | None) -> list[dict[str, Any]]:
    """The entries of one purpose, in order: the session's own turns (None) or its compactions' summaries
    ("compaction"). A subagent's are dealt out by `subagent_blocks`."""
    return [entry for entry in entries if entry.get("for") == purpose]


def subagent_blocks(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The subagents' entries cut into one block per subagent, in the order subagents start."""
    blocks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for entry in entries:
        if entry.get("for") != "subagent":
            continue
        current.append(entry)
        if not entry.get("tool_calls"):
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


class ReplayProvider:
    """Plays `entries[start:]`, one per call; running out is an error that ends the session clearly."""

    def __init__(
        self,
        entries: list[dict[str, Any]],
        *,
        start: int = 0,
        source: str = "the replay",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._entries = entries
        self._next = start
        self._source = source
        self._sleep = sleep  # how an entry's delay is waited (a test's clock)

    async def stream(
        self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str
    ) -> AsyncGenerator[TextDelta | Reply, None]:
        if self._next >= len(self._entries):
            raise ProviderError(
                f"{self._source} has no entry {self._next + 1}: it holds {len(self._entries)} model "
                "replies and this session asked for another"
            )
        entry = self._entries[self._next]
        self._next += 1
        if entry.get("delay"):
            await self._sleep(float(entry["delay"]))
        text = str(entry.get("text") or "")
        for piece in _pieces(text):
            yield TextDelta(piece)
        calls = [
            ToolCall(
                str(call.get("call_id") or f"call-{self._next}-{index}"),
                str(call.get("name", "")),
                dict(call.get("args") or {}),
            )
            for index, call in enumerate(entry.get("tool_calls") or [])
            if isinstance(call, dict)
        ]
        stop_reason = entry.get("stop_reason")  # a log's own, so a session replays as it stopped
        stopped = stop_reason if isinstance(stop_reason, str) and stop_reason else None
        yield Reply(text=text, tool_calls=calls, stop_reason=stopped)  # a replay logs zero usage

    async def aclose(self) -> None:
        return None


def _pieces(text: str, size: int = 24) -> list[str]:
    """Deltas of a few words, so a replay streams the way a real provider does."""
    return [text[i : i + size] for i in range(0, len(text), size)]
