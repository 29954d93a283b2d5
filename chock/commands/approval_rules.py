"""`chock rules` and `chock rules remove ID`: the approval rules in force for a project's sessions, and taking a
project rule back (docs/approvals.md).

Both go through the daemon (`rules`, `rule-remove`), so they work from another machine with `--daemon NAME`;
with none named, through this machine's daemon when it answers, else in this machine's state dir (the same code
the daemon's child runs). The daemon never writes a rule: for `rule-remove` it runs `chock rules remove ID --here`
in the project, which writes the project's rules file under its lock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import click

from chock.commands.base import group, options, pass_layout
from chock.commands.shared_options import PROJECT_OPTIONS
from chock.control.address import Address, named_address
from chock.errors import Refused
from chock.paths import Layout
from chock.terminal import shown


def _root(project: Path | None, daemon: Address | None) -> str:
    """The project as the host knows it: an absolute --project given with a daemon named is a path there, sent
    as typed; else the top of the git project holding it here."""
    if daemon is not None and project is not None and project.is_absolute():
        return str(project)
    from chock.project import find_root

    return str(find_root(project or Path.cwd()))


def _running(layout: Layout, root: str) -> list[str]:
    """The project's sessions that run now on this machine (their session rules are in force)."""
    from chock.log.catalog import rows

    return [str(row["id"]) for row in rows(layout, root) if row.get("status") in ("running", "waiting")]


# The most rule lines a host's reply may hold: config.zon's, a project's 1,000 and its sessions'.
MOST_RULES = 100_000


@contextlib.contextmanager
def _here_unless(named: Address | None) -> Iterator[None]:
    """Around a verb sent to a daemon: this machine's own daemon that does not answer, or is too old to know the
    verb, leaves the work to be done here; a daemon a person named must answer, and its refusal is an error in
    its own words."""
    from chock.control.framing import ErrorCode, ProtocolError

    try:
        yield
    except ProtocolError as error:
        if named is None and error.code in (ErrorCode.UNREACHABLE, ErrorCode.UNKNOWN_VERB):
            return
        raise Refused(f"the daemon at {named or 'this machine'} refused ({error.code}): {error.text}") from None


def _daemon(layout: Layout, daemon: Address | None) -> Address | None:
    """The daemon to ask: the one named, else this machine's when its socket is there, else None (here)."""
    if daemon is not None:
        return daemon
    return Address(path=str(layout.daemon_socket)) if os.path.exists(layout.daemon_socket) else None


@group("rules", invoke_without_command=True)
@options(PROJECT_OPTIONS)
@pass_layout
@click.pass_context
def rules(
    ctx: click.Context, layout: Layout, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """The approval rules this project's sessions decide by, each with its id and where it came from: config.zon
    (file and line), the project (which session saved it, and when) or a running session. Through the daemon
    named by --daemon, --port or $CHOCK_DAEMON, else this machine's."""
    if ctx.invoked_subcommand is not None:  # `chock rules --daemon X remove ID`: the options hold for `remove` too
        ctx.meta[GROUP_OPTIONS] = (project, daemon_address, port)
        return
    from chock.control import daemon_protocol as dp
    from chock.control.client import ControlClient, expect

    named = named_address(daemon_address, port=port, acting="chock rules")
    root = _root(project, named)
    found: list[tuple[str, str, str, str]] | None = None
    address = _daemon(layout, named)
    if address is not None:
        with _here_unless(named):
            lines = ControlClient(address).collect(dp.RulesRequest(root), most=MOST_RULES)
            found = [(r.id, r.verdict, r.pattern, r.origin) for r in (expect(line, dp.RuleRow) for line in lines)]
    if found is None:
        from chock.session.rule_sources import rules_in_force

        found = [(r.id, r.verdict, r.pattern, r.origin) for r in rules_in_force(layout, root, _running(layout, root))]
    if not found:
        click.echo(
            shown(f"no rules: every call of {root} is decided by .approvals.shell (docs/approvals.md)", one_line=True)
        )
        return
    width = max(len(pattern) for _, _, pattern, _ in found)
    for rule_id, verdict, pattern, origin in found:
        click.echo(shown(f"{rule_id:<10} {verdict:<5} {pattern:<{width}}  {origin}", one_line=True))


GROUP_OPTIONS = "chock.rules.options"


@rules.command("remove")
@click.argument("rule_id", metavar="ID")
@click.option("--here", is_flag=True, hidden=True, help="Remove it in this machine's state dir (the daemon's child).")
@options(PROJECT_OPTIONS)
@pass_layout
def rules_remove(
    layout: Layout, rule_id: str, here: bool, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """Remove a project rule by its id (as `chock rules` lists it): every session of the project asks again.
    A rule of config.zon is refused naming its file and line; a running session's own rule holds until it ends."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import ControlClient, expect

    given = click.get_current_context().meta.get(GROUP_OPTIONS)
    if given is not None:
        project, daemon_address = project or given[0], daemon_address or given[1]
        port = port if port is not None else given[2]
    checked = dp.rule_id(rule_id)
    named = None if here else named_address(daemon_address, port=port, acting="chock rules remove")
    root = _root(project, named)
    address = None if here else _daemon(layout, named)
    if address is not None:
        with _here_unless(named):
            expect(ControlClient(address).call(dp.RuleRemoveRequest(root, checked)), dp.RuleRemoved)
            click.echo(shown(f"removed rule {checked} of {root}", one_line=True))
            return
    from chock.session.rule_sources import remove_rule_here

    removed = remove_rule_here(layout, root, checked, _running(layout, root))
    click.echo(shown(f"removed rule {checked} (allow `{removed.pattern}`) of {root}", one_line=True))
