"""The `chock` group alone: its global options (`--config`, `--version`), its help, and how a refusal below it
ends. chock/commands/cli.py puts every command under it; chock/entry.py puts only `run` under it for `chock run`,
so a session's start imports no other command's module (docs/architecture.md#start-up).
"""

from __future__ import annotations

import sys

import click

from chock import __version__
from chock.commands import overview
from chock.commands.base import Command, Subgroup
from chock.errors import ChockError, complain
from chock.paths import Layout


class _Group(click.Group):
    """Turns a ChockError anywhere below into `chock: <message>` and its exit code; never a traceback. Its
    help is chock.commands.overview's, the text `chock --help` prints without click."""

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
