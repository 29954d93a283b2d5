"""`chock run`: a session in this terminal, from a task, a `--continue`, or a session the daemon hands it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from chock.commands import move_steps
from chock.commands.base import command, options, pass_layout, view_options
from chock.commands.completion import instance_names, session_ids
from chock.commands.shared_options import JSON, ON, PROJECT_AS_TYPED
from chock.errors import EXIT_INTERRUPTED, exit_status
from chock.paths import Layout, is_session_id


@command(epilog=exit_status("run"))
@click.argument("message", required=False)
@options((ON, PROJECT_AS_TYPED))
@click.option("--instance", shell_complete=instance_names, help="Which configured or logged-in instance to use.")
@click.option("--model", help="The model to ask (default: the instance's).")
@click.option("--allow-dirty", is_flag=True, help="Copy uncommitted files into the new workspace.")
@click.option(
    "--continue",
    "continue_id",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[SESSION]",
    help="Take a session back into this terminal (default: the newest; at a terminal, picked from the recent "
    "ones); MESSAGE is optional.",
    shell_complete=session_ids,
)
@click.option("--adopt", "adopt_id", metavar="SESSION", help="Carry on a handed-over session (used by the daemon).")
@click.option("--session-id", metavar="ID", help="Use this id for the new session (used by the daemon).")
@click.option("--yes", is_flag=True, help="Approve every request (for scripts and CI).")
@options((JSON,))
@view_options
@click.option("--for-daemon", is_flag=True, hidden=True, help="Carry an ended session on for the daemon's `say`.")
@click.option("--after-reboot", is_flag=True, hidden=True, help="Carry on a session a reboot interrupted (the daemon).")
@click.option("--unpark", type=int, hidden=True, help="Rebuild a parked session from the record on this descriptor.")
@click.option(
    "--force",
    is_flag=True,
    help="With --continue: take back a session moved out to a host that cannot say it does not hold it.",
)
@move_steps.move_options
@pass_layout
def run(
    layout: Layout,
    message: str | None,
    on_address: str | None,
    project: str | None,
    instance: str | None,
    model: str | None,
    allow_dirty: bool,
    continue_id: str | None,
    adopt_id: str | None,
    session_id: str | None,
    yes: bool,
    as_json: bool,
    for_daemon: bool,
    after_reboot: bool,
    unpark: int | None,
    force: bool,
    move: dict[str, Any],
) -> None:
    """Work on MESSAGE (or standard input) in a sandboxed worktree of the project."""
    from chock.session import render
    from chock.session.start import MoveIn, RunRequest, exit_now
    from chock.session.start import run as run_session

    if unpark is not None:
        _unpark(layout, unpark, session_id, as_json)
    step = move_steps.step(move)
    if step in ("move_out", "moved"):
        sys.exit(move_steps.run_source_step(layout, move, step))
    move_in = None if step is None else MoveIn(move["move_in"], move["move_from"], move["move_running"])
    if continue_id and message is None and not _looks_like_session_id(continue_id):
        continue_id, message = "", continue_id  # `--continue "new message"` continues the newest session
    if on_address is not None:
        from chock.commands.run_on import run_on

        flags = {"--yes": yes, "--allow-dirty": allow_dirty, "--model": model is not None, "--json": as_json,
                 "--adopt": adopt_id is not None, "--session-id": session_id is not None,
                 "--for-daemon": for_daemon, "--after-reboot": after_reboot}  # fmt: skip
        given = [flag for flag, value in flags.items() if value]
        sys.exit(run_on(on_address, project, instance, message, continue_id, given))
    interactive = sys.stdin.isatty()
    ctx = click.get_current_context()
    checked = next(param for param in ctx.command.params if param.name == "project")
    directory = click.Path(path_type=Path, file_okay=False)  # as PROJECT is checked, only when it is here
    project_dir = None if project is None else directory.convert(project, checked, ctx)
    if continue_id == "" and adopt_id is None and interactive and sys.stdout.isatty() and not for_daemon:
        from chock.commands.picker import continued

        continue_id = continued(layout, project_dir)
        if continue_id is None:
            click.echo("nothing continued: no session was picked", err=True)
            sys.exit(EXIT_INTERRUPTED)
    if message is None and adopt_id is None and move_in is None and not interactive and not after_reboot:
        message = sys.stdin.read()  # the task (or, with --continue, the new message) from a pipe
    request = RunRequest(
        message=message, project=project_dir, instance=instance, model=model, allow_dirty=allow_dirty, yes=yes,
        continue_id=continue_id, adopt_id=adopt_id, session_id=session_id, interactive=interactive,
        for_daemon=for_daemon or after_reboot, after_reboot=after_reboot, force=force,
        move_in=move_in,
    )  # fmt: skip
    renderer = render.json_renderer() if as_json else render.terminal_renderer()
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


def _looks_like_session_id(text: str) -> bool:
    return bool(is_session_id(text))
