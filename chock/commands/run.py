"""`chock run`: a session in this terminal, from a task, a `--continue`, or a session the daemon hands it.

A session's start is waited on at every task, so `chock run` is read without click (chock/entry.py's FAST): its
options are `OPTIONS` (chock/argv.py), its word `MESSAGE`, and `run` does what it does whichever way it was
started; its click twin (chock/commands/cli.py) is made from the same table (docs/architecture.md#start-up).
"""

from __future__ import annotations

import os
import sys

from chock.argv import Option
from chock.commands import move_steps
from chock.commands.shared_options import JSON, ON, PROJECT_AS_TYPED, VIEW_OPTIONS
from chock.errors import EXIT_INTERRUPTED, exit_status
from chock.paths import Layout, is_session_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from chock.commands.base import Command

HELP = "Work on MESSAGE (or standard input) in a sandboxed worktree of the project."
EPILOG = exit_status("run")

WORDS = ("message",)
OPTIONS = (
    ON,
    PROJECT_AS_TYPED,
    Option("--instance", "instance", str, "", "Which configured or logged-in instance to use."),
    Option("--model", "model", str, "", "The model to ask (default: the instance's)."),
    Option("--allow-dirty", "allow_dirty", bool, "", "Copy uncommitted files into the new workspace."),
    Option(
        "--continue",
        "continue_id",
        str,
        "[SESSION]",
        "Take a session back into this terminal (default: the newest; at a terminal, picked from the recent "
        "ones); MESSAGE is optional.",
        flag_value="",
    ),
    Option("--adopt", "adopt_id", str, "SESSION", "Carry on a handed-over session (used by the daemon)."),
    Option("--session-id", "session_id", str, "ID", "Use this id for the new session (used by the daemon)."),
    Option("--yes", "yes", bool, "", "Approve every request (for scripts and CI)."),
    JSON,
    *VIEW_OPTIONS,
    Option("--for-daemon", "for_daemon", bool, "", "Carry an ended session on for the daemon's `say`.", hidden=True),
    Option(
        "--after-reboot", "after_reboot", bool, "", "Carry on a session a reboot interrupted (the daemon).", hidden=True
    ),
    Option(
        "--unpark", "unpark", int, "FD", "Rebuild a parked session from the record on this descriptor.", hidden=True
    ),
    Option(
        "--force", "force", bool, "", "With --continue: take back a session moved out to a host that cannot say it "
        "does not hold it."
    ),
    *move_steps.OPTIONS,
)  # fmt: skip


def run(layout: Layout, values: dict[str, object]) -> int:
    """`chock run`: work on MESSAGE (or standard input) in a sandboxed worktree of the project; the exit code."""
    from chock.terminal import choose_colour, choose_progress

    choose_colour(str(values["color"]))
    choose_progress(str(values["progress"]))
    step = move_steps.step(values)
    if step in ("move_out", "moved"):
        return move_steps.run_source_step(layout, values, step)
    from chock.session import render
    from chock.session.run_request import MoveIn, RunRequest
    from chock.session.start import exit_now
    from chock.session.start import run as run_session

    unpark: int | None = values["unpark"]  # type: ignore[assignment]
    if unpark is not None:
        _unpark(layout, unpark, values["session_id"], bool(values["as_json"]))  # type: ignore[arg-type]
    message: str | None = values["message"]  # type: ignore[assignment]
    continue_id: str | None = values["continue_id"]  # type: ignore[assignment]
    project: str | None = values["project"]  # type: ignore[assignment]
    move_in = (
        None if step is None else MoveIn(str(values["move_in"]), str(values["move_from"]), bool(values["move_running"]))
    )
    if continue_id and message is None and not is_session_id(continue_id):
        continue_id, message = "", continue_id  # `--continue "new message"` continues the newest session
    if values["on_address"] is not None:
        from chock.commands.run_on import run_on

        flags = {"--yes": values["yes"], "--allow-dirty": values["allow_dirty"], "--model": values["model"] is not None,
                 "--json": values["as_json"], "--adopt": values["adopt_id"] is not None,
                 "--session-id": values["session_id"] is not None, "--for-daemon": values["for_daemon"],
                 "--after-reboot": values["after_reboot"]}  # fmt: skip
        given = [flag for flag, value in flags.items() if value]
        return run_on(str(values["on_address"]), project, values["instance"], message, continue_id, given)  # type: ignore[arg-type]
    interactive = sys.stdin.isatty()  # closed (`<&-`), it is /dev/null here (chock/entry.py): no terminal
    project_dir = None if project is None else _directory(project)
    for_daemon, after_reboot = bool(values["for_daemon"]), bool(values["after_reboot"])
    adopt_id: str | None = values["adopt_id"]  # type: ignore[assignment]
    if continue_id == "" and adopt_id is None and interactive and sys.stdout.isatty() and not for_daemon:
        from chock.commands.picker import continued

        continue_id = continued(layout, project_dir)
        if continue_id is None:
            print("nothing continued: no session was picked", file=sys.stderr)
            return EXIT_INTERRUPTED
    if message is None and adopt_id is None and move_in is None and not interactive and not after_reboot:
        # The task (or, with --continue, the new message) from a pipe; standard input closed gives none.
        message = _piped_text()
    if message is not None and not _is_text(message):
        raise _not_text()
    session_id: str | None = values["session_id"]  # type: ignore[assignment]
    request = RunRequest(
        message=message, project=project_dir, instance=values["instance"], model=values["model"],  # type: ignore[arg-type]
        allow_dirty=bool(values["allow_dirty"]), yes=bool(values["yes"]), continue_id=continue_id, adopt_id=adopt_id,
        session_id=session_id, interactive=interactive, for_daemon=for_daemon or after_reboot,
        after_reboot=after_reboot, force=bool(values["force"]), move_in=move_in,
    )  # fmt: skip
    renderer = render.json_renderer() if values["as_json"] else render.terminal_renderer()
    from chock.platform.journal import session_records

    try:
        records = session_id or adopt_id or (move_in.session_id if move_in is not None else None)
        with session_records(records, project_dir, "adopt" if adopt_id or move_in else "start"):
            try:
                if move_in is not None:
                    from chock.session.move_in import run as run_session
                code = run_session(layout, request, renderer)
            finally:
                if isinstance(renderer, render.TerminalView):
                    renderer.close()  # the spinner's line cleared before anything else is printed
            sys.exit(code)
    except SystemExit as ended:  # the log is released: what is left is the interpreter's teardown, skipped
        exit_now(ended.code)


def _unpark(layout: Layout, record: int, session_id: str | None, as_json: bool) -> None:
    """The parked session's waiter exec'd this: rebuild the session and carry it on (docs/architecture.md#parking)."""
    from chock.platform.journal import session_records
    from chock.session import render
    from chock.session.start import exit_now, unpark

    renderer = render.json_renderer() if as_json else render.terminal_renderer()
    if isinstance(renderer, render.TerminalView) and session_id:
        renderer.session_id = session_id  # for the `chock approve` hint of its next question
    try:
        with session_records(session_id, None, "unpark"):
            try:
                code = unpark(layout, record, renderer)
            finally:
                if isinstance(renderer, render.TerminalView):
                    renderer.close()
            sys.exit(code)
    except SystemExit as ended:
        exit_now(ended.code)


def _directory(project: str) -> Path:
    """`--project` as a directory. A value naming what is not a readable directory reaches here only through
    click (chock.argv.parse leaves it to click), which refuses it as it refuses PROJECT."""
    from pathlib import Path

    if not os.path.exists(project) or (os.path.isdir(project) and os.access(project, os.R_OK)):
        return Path(project)
    import click

    ctx = click.get_current_context()
    checked = next(param for param in ctx.command.params if param.name == "project")
    return click.Path(path_type=Path, file_okay=False).convert(project, checked, ctx)


def command() -> Command:
    """`chock run` under click (chock/commands/cli.py, and chock/entry.py for what the table does not take
    plainly): made from this table."""
    from chock.commands.base import table_command

    return table_command("run", sys.modules[__name__], HELP, epilog=EPILOG)


def _piped_text() -> str:
    """Standard input read to its end, as UTF-8."""
    try:
        return sys.stdin.buffer.read().decode()
    except UnicodeDecodeError:
        raise _not_text() from None


def _not_text() -> Exception:
    from chock.errors import UsageError

    return UsageError("the task is not UTF-8 text (a byte no character is made of); nothing was started")


def _is_text(message: str) -> bool:
    """Whether `message` is text: an argument whose bytes are not UTF-8 arrives holding lone surrogates, which no
    provider takes and the log could only change."""
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
