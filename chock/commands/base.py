"""The rules every command below `chock` follows: each family's module (chock/commands/) makes its commands with
`command` and `group`, and chock/commands/cli.py puts them under the one group.

Which daemon a command acts through is `chock.control.address.named_address`'s to say; a command that cannot
act through one takes no `--daemon` and no `--port` (`--port` stays where it is a listener's own port), refuses
them by name rather than leaving click to, and its help says it ignores `$CHOCK_DAEMON`
(docs/architecture.md#steering).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from chock.argv import Option
from chock.commands.completion import host_names, instance_names, session_ids
from chock.commands.shared_options import COLOR, PROGRESS, VIEW_OPTIONS
from chock.control.address import ENVIRONMENT
from chock.errors import UsageError
from chock.paths import Layout
from chock.terminal import choose_colour, choose_progress

F = TypeVar("F", bound=Callable[..., Any])

# How many words (positional arguments) came before the end of a command's options, `--`: `chock say` reads it.
WORDS_BEFORE_DASHES = "chock.words_before_dashes"


# What completes an option's value, by its name: a host (`local` and config.zon's connection names), an instance,
# a session of this project.
COMPLETERS = {
    "daemon_address": host_names,
    "on_address": host_names,
    "instance": instance_names,
    "continue_id": session_ids,
}


def _option(option: Option, **more: Any) -> Callable[[F], F]:
    """The click option a row of a table (chock.argv.Option) makes."""
    if option.is_flag:
        return click.option(option.flag, option.name, is_flag=True, hidden=option.hidden, help=option.help)
    kind: Any = option.convert
    if option.choices is not None:
        kind = click.Choice(option.choices)
    elif issubclass(kind, Path):
        kind = click.Path(path_type=kind, file_okay=not option.directory)
    if option.flag_value is not None:
        more.update(is_flag=False, flag_value=option.flag_value)
    return click.option(
        option.flag,
        option.name,
        type=kind,
        metavar=option.metavar or None,
        help=option.help,
        default=option.default,
        show_default=option.default is not None,
        envvar=option.envvar,
        multiple=option.multiple,
        hidden=option.hidden,
        shell_complete=COMPLETERS.get(option.name),
        **more,
    )


def options(table: tuple[Option, ...]) -> Callable[[F], F]:
    """Click options made from a table of chock.argv.Option (chock.commands.shared_options holds the shared ones): one
    definition for click and for the start without it."""

    def apply(function: F) -> F:
        for option in reversed(table):
            function = _option(option)(function)
        return function

    return apply


def through_daemon(command: click.Command) -> bool:
    """Whether `command` can act through a daemon: it takes `--daemon`
    (chock.commands.shared_options.DAEMON_OPTIONS)."""
    return any(param.name == "daemon_address" for param in command.params)


def on_daemon(command: click.Command) -> bool:
    """Whether `command` starts its work on a daemon named by `--on` (chock.commands.shared_options.ON) rather
    than acting through one: `chock run`, which otherwise runs here."""
    return any(param.name == "on_address" for param in command.params)


def _scan(command: click.Command, args: list[str]) -> tuple[set[str], int]:
    """The option flags `args` give `command` before the end of its options (`--`, or a group's subcommand), and
    how many words came before that end. An option's value is never read as a flag or a word."""
    takes_value = {
        flag
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag and not param.count
        for flag in param.opts
    }
    optional = {flag for param in command.params if getattr(param, "_flag_needs_value", False) for flag in param.opts}
    given: set[str] = set()
    words = 0
    rest = iter(enumerate(args))
    for index, arg in rest:
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1:
            flag, equals, _ = arg.partition("=")
            given.add(flag)
            following = args[index + 1] if index + 1 < len(args) else ""
            if flag in takes_value and not equals and not (flag in optional and following.startswith("-")):
                next(rest, None)
            continue
        if isinstance(command, click.Group):
            break
        words += 1
    return given, words


class Command(click.Command):
    """Every command below `chock`: one that cannot act through a daemon refuses --daemon and --port by name
    (--port only where it is not the command's own listening port) and its help says it ignores $CHOCK_DAEMON
    (docs/architecture.md#steering)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given, words = _scan(self, args)
        ctx.meta[WORDS_BEFORE_DASHES] = words
        if not through_daemon(self):
            own = {param.name for param in self.params}
            refused = [flag for flag in ("--daemon", "--port") if flag in given and flag[2:] not in own]
            if refused:
                where = "this machine unless --on ADDR names a daemon" if on_daemon(self) else "this machine only"
                elsewhere = "" if on_daemon(self) else " (`ssh HOST chock …` runs it on another)"
                raise UsageError(
                    f"`chock {ctx.command_path.partition(' ')[2]}` takes no {' or '.join(refused)}: it acts on "
                    f"{where}, and ignores ${ENVIRONMENT}{elsewhere}"
                )
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        if not through_daemon(self):
            own = " (its --port is the port it listens on)" if any(p.name == "port" for p in self.params) else ""
            refused = "--daemon" if own else "--daemon or --port"
            formatter.write_paragraph()
            with formatter.indentation():
                where = "this machine unless --on names a daemon" if on_daemon(self) else "this machine only"
                formatter.write_text(f"Acts on {where}: takes no {refused}{own}, and ignores ${ENVIRONMENT}.")


class Subgroup(Command, click.Group):
    """A group below `chock` (`sessions`, `workspace`, `daemon`), under the same rules as every command."""

    command_class = Command


Subgroup.group_class = Subgroup


def command(name: str | None = None, **attrs: Any) -> Callable[[Callable[..., Any]], Command]:
    """A command below `chock`, under these rules."""
    return click.command(name, cls=Command, **attrs)


def group(name: str | None = None, **attrs: Any) -> Callable[[Callable[..., Any]], Subgroup]:
    """A group below `chock`, under these rules, as are the commands made with its `.command()`."""
    return click.group(name, cls=Subgroup, **attrs)


class Table(Protocol):
    """A command chock/entry.py also starts without click (its `FAST`): its options as a table, and what it does."""

    @property
    def OPTIONS(self) -> tuple[Option, ...]: ...

    def run(self, layout: Layout, values: dict[str, object]) -> int: ...


def table_group(name: str, table: Table, help: str, *, hidden: bool = False) -> Subgroup:
    """The click twin of a command started without click: a group whose options are the table's, and which does
    what the table's `run` does when no subcommand is given, so both ways of starting it act alike."""

    @group(name, invoke_without_command=True, help=help, hidden=hidden)
    @options(table.OPTIONS)
    @click.pass_context
    def made(ctx: click.Context, **values: object) -> None:
        if ctx.invoked_subcommand is None:
            layout = ctx.find_object(Layout)
            assert layout is not None  # the group `chock` set it
            sys.exit(table.run(layout, values))

    return made


class Words(Table, Protocol):
    """A table whose command also takes words: their names, in order, each optional (`chock run`'s MESSAGE)."""

    @property
    def WORDS(self) -> tuple[str, ...]: ...


def table_command(name: str, table: Words, help: str, *, epilog: str | None = None) -> Command:
    """The click twin of a command started without click that takes words: its options the table's, its words
    optional arguments, and what it does the table's `run`, so both ways of starting it act alike."""

    def made(ctx: click.Context, **values: object) -> None:
        layout = ctx.find_object(Layout)
        assert layout is not None  # the group `chock` set it
        sys.exit(table.run(layout, values))

    function = options(table.OPTIONS)(click.pass_context(made))
    for word in reversed(table.WORDS):
        function = click.argument(word, required=False)(function)
    return command(name, help=help, epilog=epilog)(function)


# Gives a command the state dir's layout, which the group `chock` made from --config and the environment.
pass_layout = click.make_pass_decorator(Layout)


def project_root(project: Path | None) -> Path:
    """The top of the git project holding `project` (default: the working directory)."""
    from chock.project import find_root

    return find_root(project or Path.cwd())


def view_options(function: F) -> F:
    """`--color` and `--progress` (chock.commands.shared_options.VIEW_OPTIONS), as the commands that show a session
    take them: each sets what `chock.terminal` decides from (docs/architecture.md#what-reaches-a-terminal)."""
    chosen = {COLOR.name: choose_colour, PROGRESS.name: choose_progress}
    for option in reversed(VIEW_OPTIONS):
        choose = chosen[option.name]
        made = _option(option, expose_value=False, callback=lambda ctx, param, value, choose=choose: choose(value))
        function = made(function)
    return function
