"""Showing a session's events at a terminal: streamed text, tool calls and results, approvals, retries, the
plan, compactions, and at the end what the run used.

`--json` prints each event as the log's own JSON line instead, for scripts. Like every reader of the log, the
terminal view skips an event type it does not know (docs/log.md, "Reading rules").

Everything an event holds is the agent's, a tool's or the log's: each value passes `chock.terminal.safe` before it
is written, and `--json` lines pass `safe_json` (docs/architecture.md#what-reaches-a-terminal).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TextIO

import click

from chock.log.events import USAGE_FIELDS, Event, value
from chock.session.tools import summary
from chock.terminal import as_lines, colour, safe, safe_json

RESULT_LINES = 8  # lines of a tool's output shown at the terminal; the log keeps it whole
PLAN_MARKS = {"done": "[x]", "in_progress": "[>]", "pending": "[ ]"}
# What a failed attempt was, by its HTTP status (None: no answer came), as "…, retrying in 4 s" says it.
RETRY_WORDS = {None: "no connection", 408: "timed out", 409: "conflict", 429: "rate limited", 529: "overloaded"}


def plan_lines(steps: list[dict[str, str]]) -> list[str]:
    """A plan's steps as `chock plan` and the terminal view print them."""
    return [f"{PLAN_MARKS.get(step.get('status', ''), '[?]')} {step.get('step', '')}" for step in steps]


def result_lines(output: str) -> list[str]:
    """A tool's output as lines: split at each newline only, so a carriage return or a form feed inside a line
    is shown (escaped) where it stands; a line's CRLF ending is its end."""
    return [line.removesuffix("\r") for line in output.removesuffix("\n").split("\n")] if output else []


def retry_words(status: int | None) -> str:
    if status in RETRY_WORDS:
        return RETRY_WORDS[status]
    return "the provider failed" if isinstance(status, int) and status >= 500 else f"HTTP {status}"


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def usage_line(usage: dict[str, float], cost: float | None) -> str:
    """Tokens (and the cost, when there is a price) as `chock usage` and the end of `chock run` say them."""
    cached = ""
    if usage.get("cache_read_tokens") or usage.get("cache_write_tokens"):
        cached = f" ({usage.get('cache_read_tokens', 0):,.0f} read from the cache, "
        cached += f"{usage.get('cache_write_tokens', 0):,.0f} written to it)"
    text = f"{usage.get('input_tokens', 0):,.0f} in{cached} · {usage.get('output_tokens', 0):,.0f} out tokens"
    return text + (f" · cost {cost:.4f}" if cost is not None else "")


def json_renderer(out: TextIO | None = None) -> Callable[[Event], None]:
    def render(event: Event) -> None:
        stream = out or sys.stdout
        stream.write(safe_json(json.dumps(event, ensure_ascii=False)) + "\n")
        stream.flush()

    return render


def terminal_renderer(out: TextIO | None = None) -> Callable[[Event], None]:
    streaming = False
    session_id = ""  # from session.start / session.adopt, for the `chock approve` hint
    shown_plan: list[str] = []
    used: dict[str, float] = {}  # what this run's calls used, said at its end
    cost: float | None = None
    color = colour(out or sys.stdout)

    def style(text: str, fg: str | None = None, bold: bool | None = None, dim: bool | None = None) -> str:
        return click.style(text, fg=fg, bold=bold, dim=dim) if color else text

    def s(value: object) -> str:
        """A value of the event, on one line, as it may reach the terminal."""
        return safe(str(value), styled=color, one_line=True)

    def command(value: object) -> str:
        """A command or a task, one line per line, as it will run."""
        return as_lines(str(value), styled=color, indent="    ")

    def write(text: str) -> None:
        stream = out or sys.stdout
        stream.write(text)
        stream.flush()

    def render(event: Event) -> None:
        nonlocal streaming, session_id, shown_plan, cost
        kind = event.get("type")
        session_id = str(event.get("session") or session_id)
        if kind == "assistant.delta":
            write(safe(str(event.get("text", "")), styled=color))
            streaming = True
            return
        if streaming:
            write("\n")
            streaming = False
        if kind == "session.start":
            write(style(f"session {s(event.get('session'))}", bold=True) + f" on {s(event.get('instance'))}\n")
            if event.get("instructions"):
                write(style("following the project's AGENTS.md", dim=True) + "\n")
            if event.get("instructions_note"):
                write(style(s(event.get("instructions_note")), fg="yellow") + "\n")
        elif kind == "session.adopt":
            write(style(f"continuing (pid {s(event.get('pid'))}, via {s(event.get('via'))})", bold=True) + "\n")
        elif kind == "workspace.open":
            write(
                style(f"workspace {s(event.get('directory'))} at {s(str(event.get('commit'))[:12])}", dim=True) + "\n"
            )
        elif kind == "tool.call":
            line = summary(str(event.get("name")), event.get("args") or {})
            write(style(f"▸ {s(event.get('name'))}", fg="cyan") + command(line).rstrip("\n") + "\n")
        elif kind == "tool.result":
            lines = result_lines(str(event.get("output", "")))
            shown = lines[:RESULT_LINES] + (
                [f"… {len(lines) - RESULT_LINES} more lines"] if len(lines) > RESULT_LINES else []
            )
            tone = "red" if event.get("is_error") else None
            for line in shown:
                write(style(f"  │ {safe(line, styled=color)}", fg=tone, dim=not tone) + "\n")
        elif kind == "approval.request" and not event.get("by_config"):
            asked = f"? {s(event.get('tool'))} needs approval ({s(event.get('request_id'))}):"
            write(style(asked, fg="yellow") + command(event.get("summary")).rstrip("\n") + "\n")
            if session_id:
                write(
                    style(f"  answer it here, or from another terminal: chock approve {s(session_id)}", dim=True) + "\n"
                )
        elif kind == "approval.answer" and event.get("via") != "config":
            write(style(f"  {s(_answered(event))}", fg="yellow") + "\n")
        elif kind in ("background.start", "subagent.start"):
            what = event.get("command") or event.get("task")
            write(style(f"◆ {s(event.get('handle'))} started", fg="magenta") + command(what).rstrip("\n") + "\n")
        elif kind in ("background.end", "subagent.end"):
            tail = f"exit code {s(event.get('exit_code'))}" if kind == "background.end" else "finished"
            write(style(f"◆ {s(event.get('handle'))} {tail}", fg="magenta") + "\n")
        elif kind == "workspace.close":
            write(style(f"changes committed to branch {s(event.get('branch'))}", fg="green") + "\n")
            for left_out in value(event, "skipped"):
                write(style(f"  left out: {s(left_out)}", fg="yellow") + "\n")
            if value(event, "left_out"):
                write(style(f"  left out: {value(event, 'left_out'):,} more, not listed", fg="yellow") + "\n")
        elif kind == "provider.retry":
            wait = event.get("wait_seconds")
            wait_text = f"{wait:.3g} s" if isinstance(wait, int | float) else "a moment"
            write(style(f"{s(retry_words(event.get('status')))}, retrying in {wait_text}", fg="yellow") + "\n")
        elif kind == "plan":
            lines = plan_lines([step for step in value(event, "steps") if isinstance(step, dict)])
            if lines != shown_plan:
                shown_plan = lines
                write(style("plan", bold=True) + "\n" + "".join(f"  {s(line)}\n" for line in lines))
        elif kind == "compaction":
            tokens, window = (_count(event.get(name)) for name in ("tokens", "window"))
            write(style(f"compacted the conversation (about {tokens} tokens of a {window}-token window)", dim=True))
            write("\n")
        elif kind == "usage":
            for name in USAGE_FIELDS:
                used[name] = used.get(name, 0) + value(event, name)
            if value(event, "cost") is not None:
                cost = (cost or 0.0) + value(event, "cost")
        elif kind == "session.end":
            if any(used.values()) or cost is not None:
                write(style(f"used {usage_line(used, cost)}", dim=True) + "\n")
            reason = event.get("reason")
            text = f"session ended: {s(reason)}"
            if event.get("error"):
                text += f": {safe(str(event.get('error')), styled=color)}"
            write(style(text, fg="green" if reason == "completed" else "red", bold=True) + "\n")

    return render


def _answered(event: Event) -> str:
    """How an approval was answered, in words: by which rule, that nobody answered in time, or who answered and
    what the answer saved or told the model (docs/approvals.md)."""
    answer, via = value(event, "answer"), value(event, "via")
    rule, scope, note = value(event, "rule"), value(event, "scope"), value(event, "note")
    if via == "rule":
        return f"{answer} by rule `{rule}` ({scope})"
    if via == "timeout":
        return f"{answer}: nobody answered within .approvals.timeout, and the model was told so"
    said = f"{answer} (via {via})"
    if scope in ("session", "project") and rule:
        said += f", and always in this {scope}: `{rule}`"
    return f"{said}: {note}" if note else said
