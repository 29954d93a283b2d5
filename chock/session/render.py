"""Showing a session's events at a terminal: streamed text (as Markdown at a colour terminal), messages, tool
calls and results, approvals (with the bell), retries, the plan, compactions, and at the end what the run used;
below them, while the session works, the spinner (chock/session/spinner.py).

`--json` prints each event as the log's own JSON line instead, for scripts. Like every reader of the log, the
terminal view skips an event type it does not know (docs/log.md, "Reading rules").

Everything an event holds is the agent's, a tool's or the log's: each value passes `chock.terminal.safe` before it
is written, and `--json` lines pass `safe_json` (docs/architecture.md#what-reaches-a-terminal).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from chock.log.events import PAUSED_STOP, USAGE_FIELDS, Event, value
from chock.session.spinner import Screen, put
from chock.session.tools import summary
from chock.terminal import as_lines, colour, safe, safe_json

if TYPE_CHECKING:
    from chock.session.rich_text import Blocks

MARKDOWN_MAX = 256 * 1024  # a block of model text longer than this is shown as it is, not laid out by rich
RESULT_LINES = 8  # lines of a tool's output shown at the terminal; the log keeps it whole
PLAN_MARKS = {"done": "[x]", "in_progress": "[>]", "pending": "[ ]"}
# What a failed attempt was, by its HTTP status (None: no answer came), as "…, retrying in 4 s" says it.
# The events after which the model is (about to be) called: the spinner says "thinking".
THINKING = ("session.start", "session.adopt", "workspace.open", "user.message", "assistant.message", "tool.result",
            "compaction")  # fmt: skip
# The colours a line may have, as SGR foreground codes.
COLOURS = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
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


def _width() -> int:
    """The terminal's width in columns: `$COLUMNS`, else the terminal's, else 80."""
    return shutil.get_terminal_size().columns


def json_renderer(out: TextIO | None = None) -> Callable[[Event], None]:
    gone = False  # a write failed (chock.session.spinner.put): the lines go nowhere from then on

    def render(event: Event) -> None:
        nonlocal gone
        if not gone:
            gone = not put(out or sys.stdout, safe_json(json.dumps(event, ensure_ascii=False)) + "\n")

    render.as_json = True  # type: ignore[attr-defined]  # a session rebuilt after parking renders as this one did
    return render


class TerminalView:
    """The terminal view of a session's events, written through a `Screen` (its spinner, its bell). Model text is
    rendered as Markdown (`chock.session.rich_text`) at a terminal showing colour, whole blocks as they come in;
    elsewhere it is streamed as it arrives. `line` writes a line of the caller's own (attach's) through the
    same screen; `close` ends the spinner."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.screen = Screen(self.out)
        self.color = colour(self.out)
        # Markdown where colour and a live terminal are, and rich is installed (a missing one shows plain text).
        self.markdown = self.color and self.screen.live and _rich_installed()
        self.streaming = False
        self.text: Blocks | None = None  # Markdown: the streamed text not rendered yet
        self.blocks = 0  # blocks of this answer rendered so far
        self.task = ""  # the session's task, for the desktop notification
        self.session_id = ""  # from session.start / session.adopt, for the `chock approve` hint
        self.shown_plan: list[str] = []
        self.used: dict[str, float] = {}  # what this run's calls used, said at its end
        self.cost: float | None = None
        self.asked: dict[str, str] = {}  # the tool each waiting approval is for, by its request id

    def line(self, text: str) -> None:
        self.screen.write(text)

    def close(self) -> None:
        self.screen.close()

    def __call__(self, event: Event) -> None:
        self._progress(event)
        self._render(event)

    def _progress(self, event: Event) -> None:
        """What the spinner says once `event` is in: the session thinks (a model call), runs a tool, writes, waits
        to retry, waits for a person (the bell, no spinner), or is over (nothing)."""
        kind = event.get("type")
        if kind == "session.start":
            self.task = str(event.get("message") or "")
        elif kind == "user.message" and not self.task:
            self.task = str(event.get("text") or "")
        if kind == "tool.call":
            self.screen.doing(f"running {safe(str(event.get('name')), styled=False, one_line=True)[:40]}")
        elif kind == "approval.request" and not event.get("by_config"):
            self.asked[str(event.get("request_id"))] = safe(str(event.get("tool")), styled=False, one_line=True)[:40]
            self.screen.waiting(self.task)
        elif kind == "approval.answer":
            self.screen.answered()
            if event.get("answer") == "yes":
                self.screen.doing(f"running {self.asked.pop(str(event.get('request_id')), 'the tool')}")
        elif kind == "assistant.delta":
            self.screen.doing("writing")
        elif kind == "provider.retry":
            self.screen.doing("waiting to retry")
        elif kind == "assistant.message" and not event.get("tool_calls") and value(event, "stop_reason") != PAUSED_STOP:
            self.screen.doing("finishing")  # the last answer: its commit, then the end (a paused one is sent again)
        elif kind == "session.end":
            self.screen.answered()
            self.screen.doing(None)
        elif kind in THINKING:
            self.screen.doing("thinking")

    def tool_progress(self, name: str, progress: float, total: float | None, message: str) -> None:
        """An MCP call's progress, on the spinner's line (never logged: docs/mcp.md)."""
        done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        said = f" {message}" if message else ""
        self.screen.relabel(safe(f"running {name[:40]} {done}{said}", styled=False, one_line=True)[:80])

    def _stream(self, text: str) -> None:
        if not self.markdown:
            self.screen.write(safe(text, styled=self.color))
            self.streaming = True
            return
        if self.text is None:
            from chock.session.rich_text import Blocks

            self.text = Blocks()
        # Made safe first, then laid out (docs/architecture.md#what-reaches-a-terminal).
        self._blocks(self.text.add(safe(text, styled=False)))

    def _blocks(self, whole: str) -> None:
        """Render whole blocks of the streamed text as Markdown."""
        from chock.session.rich_text import rendered

        if whole.strip():
            shown = None  # too big to lay out, or what rich would lose or fail on: as the model wrote it (safe)
            if len(whole) <= MARKDOWN_MAX:
                with contextlib.suppress(Exception):  # a fault of the view's library must not end the session
                    shown = rendered(whole, _width())
            self.screen.write(("\n" if self.blocks else "") + (shown or whole))
            self.blocks += 1

    def _end_stream(self) -> None:
        if self.text is not None:
            self._blocks(self.text.rest())
        self.blocks = 0
        if self.streaming:
            self.screen.write("\n")
            self.streaming = False

    def _style(self, text: str, fg: str | None = None, bold: bool | None = None, dim: bool | None = None) -> str:
        return styled(text, fg=fg, bold=bold, dim=dim) if self.color else text

    def _s(self, value: object) -> str:
        """A value of the event, on one line, as it may reach the terminal."""
        return safe(str(value), styled=self.color, one_line=True)

    def _command(self, value: object) -> str:
        """A command or a task, one line per line, as it will run."""
        return as_lines(str(value), styled=self.color, indent="    ")

    def _render(self, event: Event) -> None:
        kind = event.get("type")
        self.session_id = str(event.get("session") or self.session_id)
        if kind == "assistant.delta":
            self._stream(str(event.get("text", "")))
            return
        self._end_stream()
        if kind == "session.start":
            self.screen.write(
                self._style(f"session {self._s(event.get('session'))}", bold=True)
                + f" on {self._s(event.get('instance'))}\n"
            )
            if event.get("instructions"):
                self.screen.write(self._style("following the project's AGENTS.md", dim=True) + "\n")
            if event.get("instructions_note"):
                self.screen.write(self._style(self._s(event.get("instructions_note")), fg="yellow") + "\n")
        elif kind == "session.adopt":
            self.screen.write(
                self._style(f"continuing (pid {self._s(event.get('pid'))}, via {self._s(event.get('via'))})", bold=True)
                + "\n"
            )
        elif kind == "user.message":
            said = " (said)" if event.get("via") == "socket" else ""
            self.screen.write(self._style(f"›{said}", bold=True) + self._command(event.get("text")).rstrip("\n") + "\n")
        elif kind == "workspace.open":
            self.screen.write(
                self._style(
                    f"workspace {self._s(event.get('directory'))} at {self._s(str(event.get('commit'))[:12])}", dim=True
                )
                + "\n"
            )
        elif kind == "tool.call":
            line = summary(str(event.get("name")), event.get("args") or {})
            self.screen.write(
                self._style(f"▸ {self._s(event.get('name'))}", fg="cyan") + self._command(line).rstrip("\n") + "\n"
            )
        elif kind == "tool.result":
            lines = result_lines(str(event.get("output", "")))
            shown = lines[:RESULT_LINES] + (
                [f"… {len(lines) - RESULT_LINES} more lines"] if len(lines) > RESULT_LINES else []
            )
            tone = "red" if event.get("is_error") else None
            for line in shown:
                self.screen.write(self._style(f"  │ {safe(line, styled=self.color)}", fg=tone, dim=not tone) + "\n")
        elif kind == "approval.request" and not event.get("by_config"):
            asked = f"? {self._s(event.get('tool'))} needs approval ({self._s(event.get('request_id'))}):"
            self.screen.write(self._style(asked, fg="yellow") + self._command(event.get("summary")).rstrip("\n") + "\n")
            if self.session_id:
                self.screen.write(
                    self._style(
                        f"  answer it here, or from another terminal: chock approve {self._s(self.session_id)}",
                        dim=True,
                    )
                    + "\n"
                )
        elif kind == "approval.answer" and event.get("via") != "config":
            self.screen.write(self._style(f"  {self._s(_answered(event))}", fg="yellow") + "\n")
        elif kind in ("background.start", "subagent.start"):
            what = event.get("command") or event.get("task")
            self.screen.write(
                self._style(f"◆ {self._s(event.get('handle'))} started", fg="magenta")
                + self._command(what).rstrip("\n")
                + "\n"
            )
        elif kind in ("background.end", "subagent.end"):
            tail = f"exit code {self._s(event.get('exit_code'))}" if kind == "background.end" else "finished"
            self.screen.write(self._style(f"◆ {self._s(event.get('handle'))} {tail}", fg="magenta") + "\n")
        elif kind == "workspace.close" and event.get("branch", "") is None:
            self.screen.write(
                self._style("no changes: the work equals its base, so no branch was made", fg="green") + "\n"
            )
        elif kind == "workspace.close":
            self.screen.write(
                self._style(f"changes committed to branch {self._s(event.get('branch'))}", fg="green") + "\n"
            )
            for left_out in value(event, "skipped"):
                self.screen.write(self._style(f"  left out: {self._s(left_out)}", fg="yellow") + "\n")
            if value(event, "left_out"):
                self.screen.write(
                    self._style(f"  left out: {value(event, 'left_out'):,} more, not listed", fg="yellow") + "\n"
                )
        elif kind == "mcp.server" and value(event, "state") != "stopped":
            state, reason = value(event, "state"), value(event, "reason")
            text = f"MCP server {self._s(value(event, 'server'))} {self._s(state)}"
            text += f" ({value(event, 'tools')} tools)" if state == "started" else ""
            text += f": {self._s(reason)}" if reason else ""
            self.screen.write(self._style(text, fg=None if state == "started" else "yellow", dim=state == "started"))
            self.screen.write("\n")
        elif kind == "mcp.tools":
            names = ", ".join(str(name) for name in value(event, "names")) or "none"
            self.screen.write(
                self._style(
                    f"MCP server {self._s(value(event, 'server'))} changed its tools: {self._s(names)}", dim=True
                )
                + "\n"
            )
        elif kind == "provider.retry":
            wait = event.get("wait_seconds")
            wait_text = f"{wait:.3g} s" if isinstance(wait, int | float) else "a moment"
            self.screen.write(
                self._style(f"{self._s(retry_words(event.get('status')))}, retrying in {wait_text}", fg="yellow") + "\n"
            )
        elif kind == "plan":
            lines = plan_lines([step for step in value(event, "steps") if isinstance(step, dict)])
            if lines != self.shown_plan:
                self.shown_plan = lines
                self.screen.write(
                    self._style("plan", bold=True) + "\n" + "".join(f"  {self._s(line)}\n" for line in lines)
                )
        elif kind == "compaction":
            tokens, window = (_count(event.get(name)) for name in ("tokens", "window"))
            self.screen.write(
                self._style(f"compacted the conversation (about {tokens} tokens of a {window}-token window)", dim=True)
            )
            self.screen.write("\n")
        elif kind == "usage":
            for name in USAGE_FIELDS:
                self.used[name] = self.used.get(name, 0) + value(event, name)
            if value(event, "cost") is not None:
                self.cost = (self.cost or 0.0) + value(event, "cost")
        elif kind == "session.end":
            if any(self.used.values()) or self.cost is not None:
                self.screen.write(self._style(f"used {usage_line(self.used, self.cost)}", dim=True) + "\n")
            reason = event.get("reason")
            text = f"session ended: {self._s(reason)}"
            if event.get("error"):
                text += f": {safe(str(event.get('error')), styled=self.color)}"
            self.screen.write(self._style(text, fg="green" if reason == "completed" else "red", bold=True) + "\n")


def terminal_renderer(out: TextIO | None = None) -> TerminalView:
    """The terminal view of `chock run` and `chock attach`."""
    return TerminalView(out)


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


def styled(text: str, fg: str | None = None, bold: bool | None = None, dim: bool | None = None) -> str:
    """`text` in colour `fg` (a name of COLOURS), bold or not, dim or not (None: as it was), then every style
    reset: the sequences click.style writes, without importing click."""
    codes = [str(COLOURS[fg])] if fg else []
    if bold is not None:
        codes.append("1" if bold else "22")
    if dim is not None:
        codes.append("2" if dim else "22")
    return "".join(f"\x1b[{code}m" for code in codes) + text + "\x1b[0m"


def _rich_installed() -> bool:
    """Whether rich (the Markdown layout) can be imported; asked only at a colour terminal."""
    import importlib.util

    return importlib.util.find_spec("rich") is not None
