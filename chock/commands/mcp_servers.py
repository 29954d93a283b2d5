"""`chock mcp list` and `chock mcp trust`: the MCP servers a session here would start, and trusting a project's
`.chock/mcp.zon` (docs/mcp.md; chock/mcp/ does the work).

Both act on this machine only: a declaration is trusted per project on the host that runs its sessions, and a
server is tried in a sandbox here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from chock.commands.base import group, options, pass_layout
from chock.commands.shared_options import PROJECT
from chock.errors import ChockError, Refused
from chock.paths import Layout
from chock.terminal import shown

if TYPE_CHECKING:
    from chock.session.workspace import Project


@group()
def mcp() -> None:
    """The MCP servers this project's sessions start, and trusting the project's own (docs/mcp.md)."""


@mcp.command("list")
@options((PROJECT,))
@pass_layout
def mcp_list(layout: Layout, project: Path | None) -> None:
    """Each configured server, where it came from and its tools: each started in its sandbox over an empty
    directory, never the project; a project's server not trusted here is shown without being started. Exit 1
    when one failed to start."""
    from chock.config import load_config
    from chock.mcp.probing import FAILED, STARTED, reports

    config = load_config(layout.config)
    found = reports(layout, config, current_project(project))
    for report in found:
        name = report.name or "(all)"
        click.echo(shown(f"{name:<16} {report.origin:<8} {report.state:<12} {report.what}", one_line=True))
        if report.reason:
            click.echo("    " + shown(report.reason, one_line=True))
        for tool, description in report.tools:
            click.echo("    " + shown(f"{tool}  {description}", one_line=True))
        if report.state == STARTED and not report.tools:
            click.echo("    no tools")
    if not found:
        click.echo("no MCP servers: config.zon's .mcp.servers and the project's .chock/mcp.zon declare none")
    sys.exit(1 if any(report.state == FAILED for report in found) else 0)


@mcp.command("trust")
@options((PROJECT,))
@click.option("--yes", is_flag=True, help="Trust the declaration without asking (it is still shown).")
@pass_layout
def mcp_trust(layout: Layout, project: Path | None, yes: bool) -> None:
    """Show the project's .chock/mcp.zon as its HEAD commits it (or what changed since the one trusted) and
    trust it on this host once you say yes: a session here starts its servers from then on."""
    from chock.mcp import trust
    from chock.mcp.session_specs import ask_at_terminal, read_declaration, trust_question
    from chock.session.workspace import open_project

    found = open_project(project or Path.cwd())
    declaration = read_declaration(found.repo, found.head)
    if declaration.problem:
        raise Refused(declaration.problem)
    if declaration.data is None:
        raise Refused(f"{found.root} has no .chock/mcp.zon in its HEAD commit ({found.head[:12]}): nothing to trust")
    if trust.trusted(layout, found.root, declaration.data):
        click.echo(shown(f"{declaration.source} is trusted here already"))
        return
    question = trust_question(declaration, trust.last_trusted(layout, found.root))
    if yes:
        click.echo(question.rsplit("\n", 1)[0], err=True)
    elif not sys.stdin.isatty():
        raise Refused(
            "nobody to ask (standard input is not a terminal), and a declaration is trusted only when you say so: "
            "read it (`git show HEAD:.chock/mcp.zon`), then run `chock mcp trust --yes`"
        )
    elif not ask_at_terminal(question):
        click.echo("not trusted: its servers will not start here")
        return
    trust.trust(layout, found.root, declaration.data)
    click.echo(shown(f"trusted {declaration.source} of {found.root}"))


def current_project(given: Path | None) -> Project | None:
    """The project named (which must be one), else the one holding this directory, else None (outside one)."""
    from chock.session.workspace import open_project

    try:
        return open_project(given or Path.cwd())
    except ChockError:
        if given is not None:
            raise
        return None
