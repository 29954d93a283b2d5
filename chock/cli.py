"""The `chock` command line: each subcommand parses, calls into the modules, and prints.

The work lives elsewhere: this is a list of thin commands (docs/architecture.md#the-packages). Imports of the
heavy modules stay inside the commands, so that `chock sessions` and a socket-activated `chock daemon` start
fast (docs/architecture.md#start-up).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from chock import __version__, listing, overview
from chock.command import WORDS_BEFORE_DASHES, Command, Subgroup, options
from chock.completion import SHELLS, instance_names, session_ids
from chock.control.address import ENVIRONMENT, Address, named_address
from chock.daemon import options as daemon_options
from chock.errors import ChockError, Refused, UsageError, complain, exit_status
from chock.paths import Layout
from chock.shared_options import DAEMON, DAEMON_OPTIONS, JSON, PROJECT, PROJECT_OPTIONS
from chock.terminal import as_lines, colour, shown

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from chock.control.client import ControlClient


class _Group(click.Group):
    """Turns a ChockError anywhere below into `chock: <message>` and its exit code; never a traceback. Its
    help is chock.overview's, the text `chock --help` prints without click."""

    command_class = Command
    group_class = Subgroup

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write(overview.render(formatter.width))

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ChockError as error:
            sys.exit(complain(error))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, help=overview.DESCRIPTION)
@click.version_option(__version__, prog_name="chock")
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar="CHOCK_CONFIG", help=overview.CONFIG_HELP)
@click.pass_context
def main(ctx: click.Context, config: str | None) -> None:
    ctx.obj = Layout.from_env(config)


pass_layout = click.make_pass_decorator(Layout)


@main.command(epilog=exit_status("run"))
@click.argument("message", required=False)
@options((PROJECT,))
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
    help="Take a session back into this terminal (default: the newest); MESSAGE is optional.",
    shell_complete=session_ids,
)
@click.option("--adopt", "adopt_id", metavar="SESSION", help="Carry on a handed-over session (used by the daemon).")
@click.option("--session-id", metavar="ID", help="Use this id for the new session (used by the daemon).")
@click.option("--yes", is_flag=True, help="Approve every request (for scripts and CI).")
@options((JSON,))
@click.option("--for-daemon", is_flag=True, hidden=True, help="Carry an ended session on for the daemon's `say`.")
@click.option("--after-reboot", is_flag=True, hidden=True, help="Carry on a session a reboot interrupted (the daemon).")
@pass_layout
def run(
    layout: Layout,
    message: str | None,
    project: Path | None,
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
) -> None:
    """Work on MESSAGE (or standard input) in a sandboxed worktree of the project."""
    from chock.session import render
    from chock.session.start import RunRequest
    from chock.session.start import run as run_session

    if continue_id and message is None and not _looks_like_session_id(continue_id):
        continue_id, message = "", continue_id  # `--continue "new message"` continues the newest session
    interactive = sys.stdin.isatty()
    if message is None and adopt_id is None and not interactive and not after_reboot:
        message = sys.stdin.read()  # the task (or, with --continue, the new message) from a pipe
    request = RunRequest(
        message=message, project=project, instance=instance, model=model, allow_dirty=allow_dirty, yes=yes,
        continue_id=continue_id, adopt_id=adopt_id, session_id=session_id, interactive=interactive,
        for_daemon=for_daemon or after_reboot, after_reboot=after_reboot,
    )  # fmt: skip
    renderer = render.json_renderer() if as_json else render.terminal_renderer()
    from chock.platform.journal import session_records

    with session_records(session_id or adopt_id, project, "adopt" if adopt_id else "start"):
        sys.exit(run_session(layout, request, renderer))


def _looks_like_session_id(text: str) -> bool:
    from chock.paths import SESSION_ID_RE

    return bool(SESSION_ID_RE.fullmatch(text))


def _project_root(project: Path | None) -> Path:
    from chock.project import find_root

    return find_root(project or Path.cwd())


def _address(layout: Layout, daemon_address: tuple[str, ...], port: int | None) -> Address:
    """The daemon named (`named_address`), else the state directory's own."""
    return named_address(daemon_address, port=port) or Address(path=str(layout.daemon_socket))


def _steering(
    layout: Layout, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> tuple[ControlClient, Path]:
    """The daemon to steer through, and the project the session belongs to."""
    from chock.control.client import ControlClient

    return ControlClient(_address(layout, daemon_address, port)), _project_root(project)


@main.group(invoke_without_command=True)
@options(listing.OPTIONS)
@click.pass_context
def sessions(ctx: click.Context, **values: object) -> None:
    """This project's sessions, newest first: status, owner, how each ended, and its task."""
    if ctx.invoked_subcommand is None:
        layout = ctx.find_object(Layout)
        assert layout is not None  # main() set it
        sys.exit(listing.run(layout, values))


@sessions.command("remove")
@click.argument("session_ids", nargs=-1, required=True, metavar="SESSION...")
@click.option(
    "--with-workspace", is_flag=True, help="Also remove a kept workspace (its work goes to its branch first)."
)
@options(PROJECT_OPTIONS)
@pass_layout
def sessions_remove(
    layout: Layout,
    session_ids: tuple[str, ...],
    with_workspace: bool,
    project: Path | None,
    daemon_address: tuple[str, ...],
    port: int | None,
) -> None:
    """Delete ended sessions: their logs and scratchpads (their branches stay). Through the daemon named by
    --daemon, --port or $CHOCK_DAEMON; with none named, in this machine's state dir. Every id must name a
    session, or nothing is removed."""
    address = named_address(daemon_address, port=port)
    if address is not None:
        from chock import steer
        from chock.control import daemon_protocol as dp
        from chock.control.client import ControlClient

        if with_workspace:
            raise UsageError(
                f"--with-workspace works on this machine only, and the daemon at {address} was named: leave out "
                f"--daemon and --port and unset ${ENVIRONMENT}"
            )
        client, root = ControlClient(address), _project_root(project)
        for session_id in [steer.pick(client, root, session_id, running=False) for session_id in session_ids]:
            steer.ask(client, dp.RemoveRequest(str(root), session_id), dp.Removed)
            click.echo(f"removed session {session_id} through the daemon at {address}")
        return
    from chock.log import removal
    from chock.paths import SESSION_ID_RE
    from chock.session import keep

    unknown = [i for i in session_ids if not (SESSION_ID_RE.fullmatch(i) and layout.log_path(i).exists())]
    if unknown:
        raise UsageError(f"no session {unknown[0]!r} in this machine's state dir; nothing was removed")
    for session_id in session_ids:
        removal.remove_session(layout, session_id, keep.remove if with_workspace else None)
        click.echo(f"removed session {session_id} from this machine's state dir")


@sessions.command("prune")
@click.option("--ended-before", "before", required=True, metavar="DATE", help="UTC date or time, e.g. 2026-11-30.")
@click.option("--with-workspace", is_flag=True, help="Also remove kept workspaces (their work goes to their branches).")
@options((PROJECT,))
@pass_layout
def sessions_prune(layout: Layout, before: str, with_workspace: bool, project: Path | None) -> None:
    """Delete this project's sessions that ended before DATE (on this machine)."""
    from chock.log import removal
    from chock.session import keep

    removed, kept = removal.prune(
        layout, _project_root(project), removal.ended_before(before), keep.remove if with_workspace else None
    )
    for session_id in removed:
        click.echo(f"removed session {session_id}")
    for session_id, why in kept:
        click.echo(shown(f"kept session {session_id}: {why}"))
    if not removed and not kept:
        click.echo(f"no session of this project ended before {before}")


@main.command()
@options(PROJECT_OPTIONS)
@pass_layout
def usage(layout: Layout, project: Path | None, daemon_address: tuple[str, ...], port: int | None) -> None:
    """Tokens used by each session of this project (and read from or written to the prompt cache), and in
    total; with the cost when the instance has a `.price` in config.zon. Read through the daemon named, else
    the state dir's when it answers, else the state dir itself."""
    from chock.listing import project_rows
    from chock.log.events import USAGE_FIELDS

    rows = project_rows(layout, project, named_address(daemon_address, port=port))
    priced = any(row["cost"] is not None for row in rows)
    total = dict.fromkeys(USAGE_FIELDS, 0)
    for row in rows:
        counts = {name: row[name] for name in USAGE_FIELDS}
        line = f"{row['id']}  {_usage_columns(counts, row['cost'], priced)}  {listing.preview(row['message'])}"
        click.echo(shown(line, one_line=True))
        total = {name: total[name] + counts[name] for name in USAGE_FIELDS}
    cost = sum(row["cost"] for row in rows if row["cost"] is not None)
    click.echo(f"{'total':<22}  {_usage_columns(total, cost, priced)}")


def _usage_columns(counts: dict[str, int], cost: float | None, priced: bool) -> str:
    text = (
        f"in {counts['input_tokens']:>9}  out {counts['output_tokens']:>9}  "
        f"cache read {counts['cache_read_tokens']:>9}  write {counts['cache_write_tokens']:>9}"
    )
    if priced:
        text += f"  cost {cost:>9.4f}" if cost is not None else f"  cost {'-':>9}"
    return text


@main.command()
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@pass_layout
def plan(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """The plan a session keeps (its latest `plan` tool call); default: this project's newest session. Read
    through the daemon named, else from the state dir."""
    from chock.log.fold import fold
    from chock.session.render import plan_lines

    address = named_address(daemon_address, port=port)
    if address is not None:
        from chock import steer
        from chock.control import daemon_protocol as dp
        from chock.control.client import ControlClient, events_of

        client = ControlClient(address)
        session = steer.pick(client, _project_root(project), session, running=False)
        state = fold(events_of(client.stream(dp.ReadRequest(session))))
    else:
        from chock.log import catalog
        from chock.log.reader import read_events
        from chock.paths import check_session_id

        if session is None:
            session = catalog.newest(layout, _project_root(project))
            if session is None:
                raise Refused('no sessions in this project yet: start one with `chock run "…"`')
        if not layout.log_path(check_session_id(session)).exists():
            raise Refused(f"there is no session {session}")
        state = fold(read_events(layout.log_path(session)))  # the plan is the conversation fold's
    if not state.plan:
        click.echo(shown(f"session {session} has no plan (the agent has not called its plan tool)", one_line=True))
        return
    for line in plan_lines(state.plan):
        click.echo(shown(line, one_line=True))


@main.group()
def workspace() -> None:
    """Kept workspaces: those of sessions that did not complete."""


@workspace.command("list")
@pass_layout
def workspace_list(layout: Layout) -> None:
    """Every kept workspace, with its session's status."""
    from chock.session import keep

    kept = keep.kept(layout)
    for state, status in kept:
        click.echo(shown(f"{state.id}  {status:<11}  {state.workspace}", one_line=True))
    if not kept:
        click.echo("no kept workspaces")


@workspace.command("show")
@click.argument("session", shell_complete=session_ids)
@pass_layout
def workspace_show(layout: Layout, session: str) -> None:
    """What a kept workspace holds: its directory, its start commit and its uncommitted changes."""
    from chock.session import keep

    click.echo(shown(keep.describe(layout, session)))


@workspace.command("remove")
@click.argument("session", shell_complete=session_ids)
@pass_layout
def workspace_remove(layout: Layout, session: str) -> None:
    """Commit a kept workspace's work to its branch chock/<id>, then remove the checkout."""
    from chock.session import keep

    click.echo(shown(keep.remove(layout, session)))


@main.command()
@click.option(
    "--provider",
    "provider_text",
    required=True,
    metavar="KIND[=URL]",
    help="anthropic, aiand, or openai-compat=URL (anthropic=URL / aiand=URL for another address).",
)
@click.option("--name", help="The instance's name (default: the kind).")
@click.option("--model", help="The model this instance asks by default.")
@click.option(
    "--password-method",
    metavar="prompt|stdin|file=PATH",
    help="Where the credential comes from (default: a hidden prompt at a terminal, else stdin).",
)
@click.option("--replace", is_flag=True, help="Replace a credential of the same name without asking.")
@pass_layout
def login(
    layout: Layout, provider_text: str, name: str | None, model: str | None, password_method: str | None, replace: bool
) -> None:
    """Check a provider credential and store it in the configured store (never an argument or variable)."""
    from chock.config import load_config
    from chock.credentials.login import login as store_login

    result = store_login(
        layout,
        load_config(layout.config),
        provider_text,
        name=name,
        model=model,
        password_method=password_method,
        replace=replace,
        say=lambda text: click.echo(text, err=True),
    )
    if result.stored:
        click.echo(f"stored the credential of {result.name!r} ({result.kind} at {result.address}) in {result.store}")
    else:
        click.echo("nothing was stored")


@main.command()
@click.argument("name", shell_complete=instance_names)
@pass_layout
def logout(layout: Layout, name: str) -> None:
    """Remove an instance's stored credential and its index entry."""
    from chock.config import load_config
    from chock.credentials.login import logout as remove_login

    entry = remove_login(layout, load_config(layout.config), name)
    click.echo(f"removed {name!r} ({entry.kind}) from {entry.stored}")


@main.command()
@pass_layout
def credentials(layout: Layout) -> None:
    """Every instance with its kind, address and the source its credential comes from (never a value)."""
    from chock.config import load_config
    from chock.credentials.lookup import sources

    found = sources(layout, load_config(layout.config))
    for source in found:
        line = (
            f"{source.name:<16} {source.kind or '?':<14} {source.address or '-':<40} "
            f"{source.source or 'none (no credential is sent)'}"
        )
        click.echo(shown(line, one_line=True))
    if not found:
        click.echo("no instances: `chock login --provider KIND` stores one")


@main.group(invoke_without_command=True)
@options(daemon_options.OPTIONS)
@click.pass_context
def daemon(ctx: click.Context, **values: object) -> None:
    """Own sessions so they outlive terminals, and serve their logs over the control protocol."""
    if ctx.invoked_subcommand is None:
        sys.exit(daemon_options.run(ctx.obj, values))


@daemon.command("install")
@pass_layout
def daemon_install(layout: Layout) -> None:
    """Write the user units (LaunchAgents on macOS) for this installation's chock."""
    from chock.platform import install

    for path in install.install(layout):
        click.echo(f"wrote {path}")
    click.echo("start listening with: chock daemon start  (systemctl --user enable --now chock.socket)")


@daemon.command("uninstall")
def daemon_uninstall() -> None:
    """Stop the service and remove the units `chock daemon install` wrote."""
    from chock.platform import install

    for path in install.uninstall():
        click.echo(f"removed {path}")


@daemon.command("start")
def daemon_start() -> None:
    """Listen on the daemon's and serve's sockets; the first connection starts each."""
    from chock.platform import install

    install.start()
    click.echo("listening: the first connection starts the daemon")


@daemon.command("stop")
def daemon_stop() -> None:
    """Stop the daemon and serve and their sockets; running sessions keep running."""
    from chock.platform import install

    install.stop()
    click.echo("stopped; running sessions keep running in their own scopes")


@daemon.command("wake")
@pass_layout
def daemon_wake(layout: Layout) -> None:
    """Connect to the daemon once, so it starts (chock-resume.service runs this at boot)."""
    from chock.control.client import ControlClient

    ControlClient(f"unix:{layout.daemon_socket}").ping()
    click.echo("the daemon answered")


@daemon.command("status")
@pass_layout
def daemon_status(layout: Layout) -> None:
    """The units as the service manager sees them, and the daemon's own status record."""
    from chock.platform import install

    for what, state in install.status(layout):
        click.echo(f"{what:<22} {state}")


@main.command()
@options((DAEMON,))
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path),
    help="Serve the browser on this unix socket (default: <state>/serve.sock).",
)
@click.option("--host", help="Serve on TCP at this address instead (no identity check).")
@click.option("--port", type=int, help="TCP port for --host (default 7891; 0 picks a free one).")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host header to accept on TCP (repeatable).",
)
@click.option("--idle-exit", type=float, metavar="SECONDS", help="Exit 0 after this long with no client.")
@options(daemon_options.LOG_OPTIONS)
@pass_layout
def serve(
    layout: Layout,
    daemon_address: tuple[str, ...],
    socket_path: Path | None,
    host: str | None,
    port: int | None,
    allow_hosts: tuple[str, ...],
    idle_exit: float | None,
    log_target: str,
    log_level: str,
) -> None:
    """A browser front end: purely a client of the daemon (--daemon, else $CHOCK_DAEMON, else the state dir's;
    its --port is the port it listens on)."""
    from chock.platform import journal
    from chock.serve.app import run as run_serve

    journal.configure(journal.SERVE, log_target, log_level)

    sys.exit(
        run_serve(
            layout,
            daemon=daemon_address,
            socket_path=socket_path,
            host=host,
            port=port,
            allow_hosts=list(allow_hosts),
            idle_exit=idle_exit,
        )
    )


@main.command(epilog=exit_status("detach"))
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
    from chock import detach as handing

    address = _address(layout, daemon_address, port)
    session_id = handing.pick_session(layout, None if session else _project_root(project), session)
    done = handing.detach(
        layout, session_id, address, wait=wait, say=lambda text: click.echo(shown(text, sys.stderr), err=True)
    )
    click.echo(f"session {done.session_id} now runs under the daemon at {address}")


@main.command()
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@pass_layout
def stop(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Stop a running session now, wherever it is (default: this project's newest running one).

    Its model call is cancelled, every process of its sandbox killed, a pending approval withdrawn; the log
    ends `interrupted`, and `chock run --continue SESSION` can take it back later."""
    from chock import steer
    from chock.control import daemon_protocol as dp

    client, root = _steering(layout, project, daemon_address, port)
    session_id = steer.pick(client, root, session, running=True)
    steer.ask(client, dp.StopRequest(str(root), session_id), dp.Stopped)
    click.echo(
        shown(
            f"session {session_id} stopped through the daemon at {client.address}; "
            f"`chock run --continue {session_id}` takes it back"
        )
    )


@main.command()
@click.argument("words", nargs=-1, metavar="[SESSION] [--] MESSAGE")
@options(PROJECT_OPTIONS)
@pass_layout
def say(
    layout: Layout, words: tuple[str, ...], project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Tell a session more (default: this project's newest; MESSAGE may come on standard input instead).

    A first word shaped like a session id (20261201-073450-…) is the session, and must name one of this
    project's exactly; a message that begins with such a word goes after `--`. A running session takes the
    message at its next turn; one that ended (completed, failed or stopped) is continued by the daemon with it."""
    from chock import steer
    from chock.control import daemon_protocol as dp

    before_dashes = click.get_current_context().meta.get(WORDS_BEFORE_DASHES, len(words))
    session, message = steer.target_and_message(words, before_dashes, steer.piped_stdin())
    client, root = _steering(layout, project, daemon_address, port)
    session_id = steer.pick(client, root, session, running=False)
    how = steer.ask(client, dp.SayRequest(str(root), session_id, message), dp.Said).how
    told = "it takes it at its next turn" if how == "queued" else "the daemon continues it with your message"
    click.echo(shown(f"said to session {session_id} through the daemon at {client.address}: {told}"))


@main.command(epilog=exit_status("attach"))
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@pass_layout
def attach(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Watch a session through the daemon, as `chock run` shows it (default: this project's newest running one).

    Answer its approvals with y or n, type a line to tell it more, `/stop` to stop it; Ctrl-C leaves it
    running. Exits with the session's exit code when it ends, 1 when it is abandoned."""
    from chock import steer
    from chock.attach import attach as attach_to
    from chock.session.render import terminal_renderer

    client, root = _steering(layout, project, daemon_address, port)
    session_id = steer.pick(client, root, session, running=True)
    click.echo(f"(attached to session {session_id} through the daemon at {client.address})")
    sys.exit(attach_to(client, root, session_id, terminal_renderer(), sys.stdout, sys.stdin.fileno()))


@main.command()
@click.argument("session", shell_complete=session_ids)
@pass_layout
def approve(layout: Layout, session: str) -> None:
    """Answer the requests a session on this machine is waiting on."""
    from chock.approve import approve as approve_session

    def ask(request_id: str, tool: str, summary: str) -> bool:
        # The command exactly as it will run, one line per line (docs/architecture.md#what-reaches-a-terminal).
        click.echo(shown(f"{request_id}  {tool}:", one_line=True) + as_lines(summary, styled=colour()).rstrip("\n"))
        return click.confirm("Approve?", default=False)

    approve_session(layout, session, ask, lambda text: click.echo(shown(text)))


@main.command()
@options(DAEMON_OPTIONS)
@pass_layout
def doctor(layout: Layout, daemon_address: tuple[str, ...], port: int | None) -> None:
    """Whether each piece works here (bwrap, git, systemd, the journal, the credential store, daemon, serve),
    with fixes, and how to read Chock's records. The daemon checked is the one named, else the state dir's."""
    from chock.doctor import examine

    findings = examine(layout, named_address(daemon_address, port=port))
    for finding in findings:
        mark = (
            click.style("ok ", fg="green")
            if finding.ok
            else click.style("no ", fg="red" if finding.essential else "yellow")
        )
        click.echo(f"{mark} {finding.name:<17} {finding.detail}")
        if not finding.ok and finding.fix:
            click.echo(f"    {'':<17} fix: {finding.fix}")
        for note in finding.notes:
            click.echo(f"    {'':<17} {note}")
    sys.exit(0 if all(f.ok or not f.essential for f in findings) else 1)


@main.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL; commands, options, session ids and instance names complete.

    \b
    bash:  eval "$(chock completion bash)"     (in ~/.bashrc)
    zsh:   eval "$(chock completion zsh)"      (in ~/.zshrc)
    fish:  chock completion fish > ~/.config/fish/completions/chock.fish
    """
    from chock.completion import script

    click.echo(script(main, shell), nl=False)


# The daemon's verbs (chock.control.daemon_protocol.VERBS) as this front end offers them: the command that sends
# each, or why none does. tests/test_front_tables.py fails when a verb is in neither, or a command is unknown.
VERB_COMMANDS = {
    "adopt": "detach",
    "read": "plan",
    "list": "sessions",
    "watch": "attach",
    "answer": "attach",
    "stop": "stop",
    "say": "say",
    "remove": "sessions remove",
}
NOT_A_COMMAND = {
    "start": "a session started here runs in its terminal (`chock run`); `chock detach` hands it to the daemon",
}


if __name__ == "__main__":
    main()


def _summaries() -> None:
    """Each command's line in `chock --help` is chock.overview's: one definition, for click and without it."""
    assert set(main.commands) == set(overview.COMMANDS), "every command has its line in chock.overview"
    for name, command in main.commands.items():
        command.short_help = overview.COMMANDS[name]


_summaries()
