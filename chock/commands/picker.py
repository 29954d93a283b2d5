"""`chock run --continue` at a terminal, with no id and more than one session it could take: the recent sessions
(task's first line, status, age), picked with the arrow keys and Enter; Esc or Ctrl-C continues nothing
(`chock run` exits 130).

Only this module imports prompt_toolkit (Debian's python3-prompt-toolkit), and only `pick` does, so no other
command pays for it at start-up (docs/architecture.md#start-up). Every text shown is a session's row read from
this machine's state dir, and passes `chock.terminal.safe` on one line: a task is the agent's or a person's text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chock.paths import Layout
from chock.terminal import colour, safe

# What can be carried on in this terminal: a running or waiting session has an owner, which refuses a second.
_TAKEN = ("running", "waiting")
# At most this many sessions are offered, newest first: the picker is for the recent ones.
MOST = 20
TASK_WIDTH = 60


def first_line(text: str, width: int = TASK_WIDTH) -> str:
    """A task's first non-blank line, stripped and cut to `width` characters (the last one `…` when cut)."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def candidates(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sessions `chock run --continue` could take, newest first, from a project's rows (oldest first)."""
    return [row for row in reversed(rows) if row.get("status") not in _TAKEN][:MOST]


def age(started_at: str, now: datetime | None = None) -> str:
    """How long ago `started_at` (the log's `at`, UTC) was, in its largest unit: `12 s`, `5 min`, `3 h`, `2 d`."""
    try:
        moment = datetime.fromisoformat(started_at.removesuffix("Z")).replace(tzinfo=UTC)
    except ValueError:
        return "?"
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def label(row: dict[str, Any], now: datetime | None = None) -> str:
    """One session as the picker shows it: its age, status and task's first line (last: a narrow terminal cuts
    it), through the safe printer."""
    task = first_line(str(row.get("message") or "")) or "(no task)"
    status = str(row.get("status") or "-")
    when = age(str(row.get("started_at") or ""), now)
    return safe(f"{when + ' ago':>10}  {status:<9}  {task}", styled=False, one_line=True)


def pick(rows: list[dict[str, Any]]) -> str | None:
    """The id of the session chosen among `rows` (newest first) with the arrow keys and Enter, at the terminal;
    None when the person pressed Esc or Ctrl-C."""
    try:
        import prompt_toolkit  # noqa: F401  (a dependency; said plainly when an installation lacks it)
    except ImportError:
        from chock.errors import Refused

        raise Refused(
            "the picker of `chock run --continue` needs prompt_toolkit, which this installation lacks (Debian: "
            "apt install python3-prompt-toolkit; pip: pip install prompt_toolkit); or name the session: "
            "chock run --continue SESSION"
        ) from None
    from prompt_toolkit.application import Application
    from prompt_toolkit.formatted_text import FormattedText
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.layout import FormattedTextControl, HSplit, Layout, Window

    labels = [label(row) for row in rows]
    styled = colour()  # `--color never` or `NO_COLOR`: no bold, no reverse video; the `>` marks the choice
    chosen = [0]
    keys = KeyBindings()

    @keys.add("up")
    @keys.add("k")
    def _up(event: Any) -> None:
        chosen[0] = max(0, chosen[0] - 1)

    @keys.add("down")
    @keys.add("j")
    def _down(event: Any) -> None:
        chosen[0] = min(len(rows) - 1, chosen[0] + 1)

    @keys.add("enter")
    def _enter(event: Any) -> None:
        event.app.exit(result=str(rows[chosen[0]]["id"]))

    @keys.add("escape", eager=True)
    @keys.add("c-c")
    @keys.add("c-d")
    def _leave(event: Any) -> None:
        event.app.exit(result=None)

    def lines() -> FormattedText:
        shown = [("bold" if styled else "", "Continue which session? (↑/↓, Enter; Esc: none)\n")]
        for index, text in enumerate(labels):
            mark = "> " if index == chosen[0] else "  "
            shown.append(("reverse" if styled and index == chosen[0] else "", f"{mark}{text}\n"))
        return FormattedText(shown)

    body = Window(FormattedTextControl(lines, focusable=True, show_cursor=False), height=len(rows) + 1)
    app: Application[str | None] = Application(layout=Layout(HSplit([body])), key_bindings=keys, full_screen=False)
    return app.run()


def continued(layout: Layout, project: Path | None) -> str | None:
    """What a `chock run --continue` with no id takes at a terminal: the session picked (None: Esc or Ctrl-C),
    or "" (the newest, as without a terminal) when the project holding `project` (default: the working
    directory) has at most one session to offer, or is not one `chock run` would take (it says why itself)."""
    from chock.errors import ChockError
    from chock.log.catalog import rows
    from chock.project import find_root

    try:
        offered = candidates(rows(layout, find_root(project or Path.cwd())))
    except ChockError:
        return ""
    return pick(offered) if len(offered) > 1 else ""
