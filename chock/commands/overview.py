"""What `chock --help` prints: what Chock is, its options, and each command with its one line.

The one-line summaries are defined here, once: the click group (chock/commands/cli.py) gives them to its commands and
prints its help with `render`, and chock/entry.py prints the same text for `chock --help` without importing
click, whose import alone costs more than the four interpreter starts a `--help` may take
(docs/architecture.md#start-up). The layout is click's: usage, the description, then definition lists.
"""

from __future__ import annotations

import os

from chock.errors import exit_status

DESCRIPTION = "Chock: a coding agent that works in a sandboxed git worktree and logs every step."

CONFIG_HELP = "config.zon to read (default: $XDG_CONFIG_HOME/chock/config.zon)."

OPTIONS = (
    ("--version", "Show the version and exit."),
    ("--config FILE", CONFIG_HELP),
    ("-h, --help", "Show this message and exit."),
)

# Every command of `chock`, with the line `chock --help` shows for it.
COMMANDS = {
    "approve": "Answer the requests a session on this machine is waiting on.",
    "attach": "Follow a session through the daemon, as `chock run` shows one.",
    "completion": "Print the shell completion script for bash, zsh or fish.",
    "config": "The configuration in force, and where each value came from.",
    "connections": "Each daemon on another machine config.zon names, and its state.",
    "credentials": "Each instance, its address and its credential's source.",
    "daemon": "Own sessions so they outlive terminals; serve their logs.",
    "detach": "Hand a running terminal session to the daemon.",
    "export": "A session's transcript: Markdown, self-contained HTML, or its log.",
    "doctor": "Whether each piece Chock needs works here.",
    "login": "Check a provider credential and store it.",
    "logout": "Remove an instance's stored credential.",
    "mcp": "The MCP servers this project's sessions start; trust the project's own.",
    "move": "Move a session to another host, its work with it; it goes on there.",
    "plan": "The plan a session keeps.",
    "rules": "The approval rules in force for this project, and where each came from.",
    "run": "Work on a task in a sandboxed worktree, here or --on a daemon.",
    "say": "Tell a session more: queued, or carried on by the daemon.",
    "serve": "A browser front end: purely a client of the daemon.",
    "sessions": "This project's sessions (--all: every project's), newest first.",
    "stop": "Stop a running session now, wherever it is.",
    "usage": "Tokens used by each session of this project, and their cost.",
    "workspace": "Kept workspaces: those of sessions that did not complete.",
}

# click's layout: at most this wide, less its margin, and definitions' first column at most COLUMN wide.
MAX_WIDTH = 80
COLUMN = 30


def width() -> int:
    """The width click formats for: $COLUMNS when it is a number above 0, else the terminal's, else 80 — at
    most MAX_WIDTH, less 2 (`shutil.get_terminal_size`'s order, without importing shutil)."""
    columns = os.environ.get("COLUMNS", "")
    if not (columns.isdigit() and int(columns) > 0):
        try:
            columns = str(os.get_terminal_size(1).columns)
        except OSError:
            columns = str(MAX_WIDTH)
    return max(min(int(columns), MAX_WIDTH) - 2, 50)


def render(columns: int | None = None) -> str:
    """The whole of `chock --help`."""
    import textwrap

    columns = columns or width()

    def paragraph(text: str) -> str:
        return textwrap.fill(text, columns, initial_indent="  ", subsequent_indent="  ")

    def definitions(rows: list[tuple[str, str]]) -> str:
        first = min(max(len(term) for term, _ in rows), COLUMN)
        lines = []
        for term, text in rows:
            wrapped = textwrap.wrap(text, max(columns - first - 4, 10)) or [""]
            if len(term) > first:
                lines.append(f"  {term}")
                lines += [" " * (first + 4) + line for line in wrapped]
            else:
                lines.append(f"  {term:<{first}}  {wrapped[0]}")
                lines += [" " * (first + 4) + line for line in wrapped[1:]]
        return "\n".join(lines)

    return "\n".join([
        "Usage: chock [OPTIONS] COMMAND [ARGS]...",
        "",
        paragraph(DESCRIPTION),
        "",
        "Options:",
        definitions(list(OPTIONS)),
        "",
        "Commands:",
        definitions(sorted(COMMANDS.items())),
        "",
        paragraph(exit_status("run")),
        "",
    ])  # fmt: skip
