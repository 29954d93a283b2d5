"""Steering a session: `chock stop`, `chock say`, `chock attach` through the daemon, `chock approve` over the
session's own socket or through its host's daemon, `chock detach` handing a terminal session to the daemon
(docs/architecture.md#steering).

Each names its session or refuses (chock/commands/targets.py); the work is in chock/commands/attach.py,
approve.py and detach.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from chock.commands.base import WORDS_BEFORE_DASHES, command, options, pass_layout, project_root, view_options
from chock.commands.completion import first_session_id, session_ids
from chock.commands.shared_options import EVERY_HOST, PROJECT_OPTIONS
from chock.control.address import ENVIRONMENT, LOCAL, Address, named_address, named_hosts
from chock.errors import ChockError, UsageError, exit_status
from chock.paths import Layout
from chock.terminal import drop_typed_ahead, shown


def _address(layout: Layout, daemon_address: tuple[str, ...], port: int | None) -> Address:
    """The daemon named (`named_address`), else the state directory's own."""
    return named_address(daemon_address, port=port, acting="chock detach") or Address(path=str(layout.daemon_socket))


@command()
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@pass_layout
def stop(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Stop a running session now, wherever it is (default: this project's newest running one).

    Its model call is cancelled, every process of its sandbox killed, a pending approval withdrawn; the log
    ends `interrupted`, and `chock run --continue SESSION` can take it back later."""
    from chock.commands.targets import ask, target
    from chock.control import daemon_protocol as dp

    found = target(layout, session, project, daemon_address, port, running=True, acting="chock stop")
    ask(found.client, dp.StopRequest(str(found.project), found.session_id), dp.Stopped)
    back = f"chock run --continue {found.session_id}" if found.host == LOCAL else f"chock say {found.again} MESSAGE"
    click.echo(shown(f"session {found.session_id} stopped {found.where}; `{back}` takes it back"))


@command()
@click.argument("words", nargs=-1, metavar="[SESSION] [--] MESSAGE", shell_complete=first_session_id)
@options(PROJECT_OPTIONS)
@pass_layout
def say(
    layout: Layout, words: tuple[str, ...], project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Tell a session more (default: this project's newest; MESSAGE may come on standard input instead).

    A first word shaped like a session id (20261201-073450-…) is the session, and must name one of this
    project's exactly; a message that begins with such a word goes after `--`. A running session takes the
    message at its next turn; one that ended (completed, failed or stopped) is continued by the daemon with it."""
    from chock.commands.targets import ask, piped_stdin, target, target_and_message
    from chock.control import daemon_protocol as dp

    before_dashes = click.get_current_context().meta.get(WORDS_BEFORE_DASHES, len(words))
    session, message = target_and_message(words, before_dashes, piped_stdin())
    found = target(layout, session, project, daemon_address, port, running=False, acting="chock say")
    how = ask(found.client, dp.SayRequest(str(found.project), found.session_id, message), dp.Said).how
    told = "it takes it at its next turn" if how == "queued" else "the daemon continues it with your message"
    click.echo(shown(f"said to session {found.session_id} {found.where}: {told}"))


@command(epilog=exit_status("attach"))
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@view_options
@pass_layout
def attach(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Watch a session through the daemon, as `chock run` shows it (default: this project's newest running one).

    Answer its approvals with y or n, type a line to tell it more, `/stop` to stop it; Ctrl-C leaves it
    running. Exits with the session's exit code when it ends, 1 when it is abandoned."""
    from chock.commands.attach import attach as attach_to
    from chock.commands.targets import target
    from chock.session.render import terminal_renderer

    found = target(layout, session, project, daemon_address, port, running=True, acting="chock attach")
    click.echo(shown(f"(attached to session {found.session_id} {found.where})"))
    sys.exit(
        attach_to(
            found.client, found.project, found.session_id, terminal_renderer(), sys.stdout, sys.stdin.fileno(),
            again=found.again,
        )
    )  # fmt: skip


@command()
@click.argument("session", required=False, shell_complete=session_ids)
@options((*PROJECT_OPTIONS, EVERY_HOST))
@pass_layout
def approve(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None,
    all_hosts: bool,
) -> None:  # fmt: skip
    """Answer what sessions wait on: SESSION's requests (on this machine over its own socket, or NAME:SESSION /
    --daemon NAME|ADDR SESSION through that host's daemon), else every waiting session of this project in turn,
    oldest first (--all: of every project on every host).

    Each answer is one line: y (yes, once), n [MESSAGE] (no; the message goes to the model), s [RULE] (yes, and
    always in this session), p [RULE] (yes, and always in this project); the rule proposed is shown, and a RULE
    given replaces it."""
    from chock.commands.answering import Choice, parse, question, shown_request
    from chock.commands.approve import approve as approve_session
    from chock.commands.approve import approve_through, approve_waiting

    def ask(request: dict[str, object], more: bool) -> Choice:
        # The command exactly as it will run, one line per line (docs/architecture.md#what-reaches-a-terminal).
        click.echo(shown_request(request))
        drop_typed_ahead(sys.stdin.fileno())  # what was typed before this request was shown answers nothing
        while True:
            try:
                line = click.prompt(shown(question(request, more=more), one_line=True), default="",
                                    show_default=False, prompt_suffix="")  # fmt: skip
            except click.Abort:  # end of input (or Ctrl-C) before a line: this request stays unanswered
                raise ChockError("standard input ended before an answer; nothing was answered") from None
            choice = parse(line, request, more=more)
            if isinstance(choice, Choice):
                return choice
            click.echo(shown(choice))

    def say(text: str) -> None:
        click.echo(shown(text))

    if session is None:
        if all_hosts and project is not None:
            raise UsageError("--all answers every project's sessions; leave out --project (or leave out --all)")
        from chock.commands import listing
        from chock.commands.every_host import Listed, hosts_to_list, list_every_host

        if all_hosts:
            listed = list_every_host(layout, listing.every_row, hosts_to_list(daemon_address, port))
        else:
            address = named_address(daemon_address, port=port, acting="chock approve")
            hosts = named_hosts(daemon_address, port=port)
            rows = listing.project_rows(layout, project, address)
            listed = [Listed(hosts[0][0] if hosts else LOCAL, rows, address=address)]
        approve_waiting(layout, listed, None, ask, say)
        if any(each.why is not None for each in listed):
            raise SystemExit(1)
        return
    if all_hosts or project is not None:
        raise UsageError(f"{session} names the session; leave out --all and --project")
    if named_hosts(daemon_address, port=port) is not None or ":" in session:
        from chock.commands.targets import target

        found = target(layout, session, None, daemon_address, port, running=True, acting="chock approve")
        approve_through(found, ask, say)
        return
    approve_session(layout, session, ask, say)


@command(epilog=exit_status("detach"))
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@click.option(
    "--wait",
    type=float,
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Bound on each read of the exchange.",
)
@pass_layout
def detach(
    layout: Layout,
    session: str | None,
    project: Path | None,
    daemon_address: tuple[str, ...],
    port: int | None,
    wait: float,
) -> None:
    """Hand a running session to the daemon at its next turn boundary (default: this project's newest)."""
    from chock.commands import detach as handing

    handing.refuse_remote(daemon_address[0] if daemon_address else os.environ.get(ENVIRONMENT))
    address = _address(layout, daemon_address, port)
    session_id = handing.pick_session(layout, None if session is not None else project_root(project), session)
    done = handing.detach(
        layout, session_id, address, wait=wait, say=lambda text: click.echo(shown(text, sys.stderr), err=True)
    )
    click.echo(f"session {done.session_id} now runs under the daemon at {address}")
