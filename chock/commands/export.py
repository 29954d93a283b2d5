"""`chock export`: a session's transcript, read through its host's daemon (docs/architecture.md#export). The work
is chock/transcript/."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from chock.commands.base import command, options, pass_layout
from chock.commands.completion import session_ids
from chock.commands.shared_options import PROJECT_OPTIONS
from chock.errors import UsageError
from chock.paths import Layout
from chock.terminal import shown

FORMATS = ("markdown", "html", "jsonl")  # chock.transcript.stream.FORMATS, without importing it to build the tree


@command()
@click.argument("session", required=False, shell_complete=session_ids)
@click.option(
    "--format",
    "form",
    type=click.Choice(FORMATS),
    default="markdown",
    show_default=True,
    help="markdown or html: a transcript to read; jsonl: the log's own lines, exactly.",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    help="Write it to FILE (made whole or not at all; a FIFO or a device is written straight into) instead of "
    "standard output.",
)
@options(PROJECT_OPTIONS)
@pass_layout
def export(
    layout: Layout,
    session: str | None,
    form: str,
    output: str | None,
    project: Path | None,
    daemon_address: tuple[str, ...],
    port: int | None,
) -> None:
    """A session's transcript (default: this project's newest): its task, messages, each tool call with its
    arguments, result and diff, the approvals and who answered them, and its end.

    Read through the daemon (NAME:SESSION or --daemon for another host's) and written as it is read. The HTML
    page is self-contained: it loads nothing and runs nothing. Written to a terminal, every text passes the safe
    printer; jsonl is the log's lines exactly as the log has them."""
    from chock.commands.targets import target
    from chock.terminal import colour
    from chock.transcript.stream import Destination, export, written_to

    if output == "":
        raise UsageError("-o/--output names no file (it is empty); name the file to write, or leave -o out")
    found = target(layout, session, project, daemon_address, port, running=False, acting="chock export")
    if output is None:
        terminal = sys.stdout.isatty()
        sys.stdout.flush()
        sink = Destination(sys.stdout.buffer, terminal=terminal, styled=terminal and colour())
        count = export(found.client, found.session_id, form, sink)
        sys.stdout.buffer.flush()
        click.echo(shown(f"session {found.session_id} {found.where}: {count} events ({form})", sys.stderr), err=True)
        return
    with written_to(output) as handle:
        count = export(found.client, found.session_id, form, Destination(handle, terminal=False, styled=False))
    click.echo(
        shown(f"session {found.session_id} {found.where}: {count} events written to {output!s} ({form})"), err=True
    )
