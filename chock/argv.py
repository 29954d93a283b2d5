"""Options as data, read with click or without it.

A command that must start fast — a socket-activated `chock daemon`, which a client waits on after every idle
exit, and `chock sessions`, which a person types all day — defines its options as a table of `Option`s. The
click command (chock/commands/) is built from the table, and chock/entry.py reads the same table with `parse`,
without importing click (docs/architecture.md#start-up). `parse` takes only plain uses of the options;
anything else (`--help`, a subcommand, an unknown option, a value that is not a number) is left to click,
which explains it the way it explains every command's.
"""

from __future__ import annotations

import os


class Option:
    """One option: its flag, its parameter's name, how its text becomes a value (str, int, float, a path
    class; bool for a flag that takes no value), its help, its default, the variable that gives one, for a
    path whether it must be a directory when it exists, and whether it may be given again (`multiple`: its
    value is then the tuple of those given, in order)."""

    __slots__ = ("convert", "default", "directory", "envvar", "flag", "help", "metavar", "multiple", "name")

    def __init__(
        self,
        flag: str,
        name: str,
        convert: type,
        metavar: str,
        help: str,
        *,
        default: str | None = None,
        envvar: str | None = None,
        directory: bool = False,
        multiple: bool = False,
    ) -> None:
        self.flag = flag
        self.name = name
        self.convert = convert
        self.metavar = metavar
        self.help = help
        self.default = default
        self.envvar = envvar
        self.directory = directory
        self.multiple = multiple

    @property
    def is_flag(self) -> bool:
        return self.convert is bool


def parse(args: list[str], options: tuple[Option, ...]) -> dict[str, object] | None:
    """The values `args` give (`--flag VALUE`, `--flag=VALUE`, a bare `--flag` for a flag; each one of
    `options`), or None when `args` holds anything else."""
    flags = {option.flag: option for option in options}
    values: dict[str, object] = {}
    for option in options:
        given = os.environ.get(option.envvar) if option.envvar else None
        if option.is_flag:
            values[option.name] = False
        elif option.multiple:
            values[option.name] = ()  # as click gives a repeatable option nobody gave
        elif given:
            try:
                values[option.name] = option.convert(given)  # as click converts a value from the environment
            except ValueError:
                return None
        else:
            values[option.name] = option.default
    rest = iter(args)
    for arg in rest:
        flag, equals, text = arg.partition("=")
        found = flags.get(flag)
        if found is None or (found.is_flag and equals):
            return None
        option = found
        if option.is_flag:
            values[option.name] = True
            continue
        if not equals:
            text = next(rest, "")
            if not text or text.startswith("-"):
                return None  # no value, or what may be another option: click says which
        if option.directory and os.path.exists(text) and not os.path.isdir(text):
            return None  # click says it is a file
        try:
            value = option.convert(text)
        except ValueError:
            return None
        if option.multiple:
            given_before = values[option.name]
            assert isinstance(given_before, tuple)
            value = (*given_before, value)
        values[option.name] = value
    return values
