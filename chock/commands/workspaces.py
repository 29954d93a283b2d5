"""`chock workspace list|show|remove`: the workspaces kept for sessions that did not complete
(chock/session/keep.py does the work)."""

from __future__ import annotations

import click

from chock.commands.base import group, pass_layout
from chock.commands.completion import session_ids
from chock.paths import Layout
from chock.terminal import shown


@group()
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
