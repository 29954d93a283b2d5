"""Showing a session's events at a terminal: streamed text, tool calls and results, approvals, usage.

`--json` prints each event as the log's own JSON line instead, for scripts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TextIO

import click

from chock.log.events import Event
from chock.session.tools import summary

RESULT_LINES = 8  # lines of a tool's output shown at the terminal; the log keeps it whole


def json_renderer(out: TextIO | None = None) -> Callable[[Event], None]:
    def render(event: Event) -> None:
        stream = out or sys.stdout
        stream.write(json.dumps(event, ensure_ascii=False) + "\n")
        stream.flush()

    return render


def terminal_renderer(out: TextIO | None = None) -> Callable[[Event], None]:
    streaming = False
    session_id = ""  # from session.start / session.adopt, for the `chock approve` hint
    color = (out or sys.stdout).isatty()

    def style(text: str, **kwargs: object) -> str:
        return click.style(text, **kwargs) if color else text

    def write(text: str) -> None:
        stream = out or sys.stdout
        stream.write(text)
        stream.flush()

    def render(event: Event) -> None:
        nonlocal streaming, session_id
        kind = event.get("type")
        session_id = str(event.get("session") or session_id)
        if kind == "assistant.delta":
            write(str(event.get("text", "")))
            streaming = True
            return
        if streaming:
            write("\n")
            streaming = False
        if kind == "session.start":
            write(style(f"session {event.get('session')}", bold=True) + f" on {event.get('instance')}\n")
        elif kind == "session.adopt":
            write(style(f"continuing (pid {event.get('pid')}, via {event.get('via')})", bold=True) + "\n")
        elif kind == "workspace.open":
            write(style(f"workspace {event.get('directory')} at {str(event.get('commit'))[:12]}", dim=True) + "\n")
        elif kind == "tool.call":
            line = summary(str(event.get("name")), event.get("args") or {})
            write(style(f"▸ {event.get('name')}", fg="cyan") + f" {line}\n")
        elif kind == "tool.result":
            lines = str(event.get("output", "")).splitlines()
            shown = lines[:RESULT_LINES] + (
                [f"… {len(lines) - RESULT_LINES} more lines"] if len(lines) > RESULT_LINES else []
            )
            colour = "red" if event.get("is_error") else None
            for line in shown:
                write(style(f"  │ {line}", fg=colour, dim=not colour) + "\n")
        elif kind == "approval.request" and not event.get("by_config"):
            write(
                style(f"? {event.get('tool')} needs approval ({event.get('request_id')}): ", fg="yellow")
                + f"{event.get('summary')}\n"
            )
            if session_id:
                write(style(f"  answer it here, or from another terminal: chock approve {session_id}", dim=True) + "\n")
        elif kind == "approval.answer" and event.get("via") != "config":
            write(style(f"  {event.get('answer')} (via {event.get('via')})", fg="yellow") + "\n")
        elif kind in ("background.start", "subagent.start"):
            what = event.get("command") or event.get("task")
            write(style(f"◆ {event.get('handle')} started", fg="magenta") + f" {what}\n")
        elif kind in ("background.end", "subagent.end"):
            tail = f"exit code {event.get('exit_code')}" if kind == "background.end" else "finished"
            write(style(f"◆ {event.get('handle')} {tail}", fg="magenta") + "\n")
        elif kind == "workspace.close":
            write(style(f"changes committed to branch {event.get('branch')}", fg="green") + "\n")
            for left_out in event.get("skipped") or []:
                write(style(f"  left out: {left_out}", fg="yellow") + "\n")
        elif kind == "session.end":
            reason = event.get("reason")
            text = f"session ended: {reason}"
            if event.get("error"):
                text += f": {event.get('error')}"
            write(style(text, fg="green" if reason == "completed" else "red", bold=True) + "\n")

    return render
