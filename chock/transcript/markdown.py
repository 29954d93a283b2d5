"""A transcript as Markdown (CommonMark), where nothing the log holds can change the transcript's structure.

Every text of the log is either a code span (a name, a fact: its line breaks made spaces, between backtick runs
longer than any it holds) or a fenced code block (a message, arguments, an output, a diff: fenced by more
backticks than its longest run, so no line of it can close the fence — CommonMark 0.31, 4.5 and 6.1). So a
heading, a list, raw HTML or a link in a model's text stays text inside its block; only Chock's own words are
Markdown.
"""

from __future__ import annotations

import re

from chock.transcript.entries import EventView

_TICKS = re.compile(r"`+")
_BREAKS = re.compile(r"[\r\n]+")


def _longest_run(text: str) -> int:
    return max((len(run) for run in _TICKS.findall(text)), default=0)


def code_span(text: str) -> str:
    """`text` as one inline code span: its line breaks made spaces, delimited by one more backtick than its longest
    run, with a space inside each side (which CommonMark takes off again)."""
    text = _BREAKS.sub(" ", text)
    if not text.strip():
        return "(none)" if not text else f"`{text}`"
    ticks = "`" * (_longest_run(text) + 1)
    return f"{ticks} {text} {ticks}"


def fenced(text: str, lang: str) -> str:
    """`text` as a fenced code block whose fence is longer than any backtick run in it (at least 3)."""
    fence = "`" * max(3, _longest_run(text) + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}\n"


class Markdown:
    """Writes a transcript's pieces as Markdown text."""

    def head(self, session_id: str) -> str:
        return f"# Chock session {code_span(session_id)}\n\n"

    def entry(self, entry: EventView) -> str:
        title = f"## {entry.event_id}. {entry.kind}"
        if entry.name:
            title += f" {code_span(entry.name)}"
        if entry.at:
            title += f" · {code_span(entry.at)}"
        parts = [title + "\n\n"]
        if entry.facts:
            parts.append("".join(f"- {label}: {code_span(text)}\n" for label, text in entry.facts) + "\n")
        for block in entry.blocks:
            parts.append(f"{block.label}:\n\n{fenced(block.text, block.lang)}\n")
        return "".join(parts)

    def tail(self) -> str:
        return ""
