"""Options as data, read with click or without it.

A command that must start fast — a socket-activated `chock daemon`, which a client waits on after every idle
exit, `chock sessions`, which a person types all day, and `chock run`, a session's start — defines its options
as a table of `Option`s (and names its words, `chock run`'s MESSAGE). The
click command (chock/commands/) is built from the table, and chock/entry.py reads the same table with `parse`,
without importing click (docs/architecture.md#start-up). `parse` takes only plain uses of the options;
anything else (`--help`, a subcommand, an unknown option, a value that is not a number) is left to click,
which explains it the way it explains every command's.
"""

from __future__ import annotations

import os


class Option:
    """One option: its flag, its parameter's name, how its text becomes a value (str, int, float, a path
    class; bool for a flag that takes no value), its help, its default, the variable that gives one, whether
    its value must name a directory when it names anything (`directory`; a path class is then one click checks,
    any other is checked where it is used), whether it may be given again (`multiple`: its value is then the
    tuple of those given, in order), the only values it takes (`choices`), the value it has when given bare
    (`flag_value`: its value is then optional), and whether `--help` leaves it out (`hidden`)."""

    __slots__ = (
        "choices", "convert", "default", "directory", "envvar", "flag", "flag_value", "help", "hidden", "metavar",
        "multiple", "name",
    )  # fmt: skip

    def __init__(
        self,
        flag: str,
        name: str,
        convert: type,
        metavar: str,
        help: str,
        *,
        default: object = None,
        envvar: str | None = None,
        directory: bool = False,
        multiple: bool = False,
        choices: tuple[str, ...] | None = None,
        flag_value: str | None = None,
        hidden: bool = False,
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
        self.choices = choices
        self.flag_value = flag_value
        self.hidden = hidden

    @property
    def is_flag(self) -> bool:
        return self.convert is bool


def parse(args: list[str], options: tuple[Option, ...], words: tuple[str, ...] = ()) -> dict[str, object] | None:
    """The values `args` give (`--flag VALUE`, `--flag=VALUE`, a bare `--flag` for a flag or an option with a
    `flag_value`; each one of `options`) and, by the names in `words`, the words among them in order (None for
    those not given), or None when `args` holds anything else."""
    flags = {option.flag: option for option in options}
    values: dict[str, object] = dict.fromkeys(words)
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
    taken = 0
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith("-"):
            if taken == len(words):
                return None  # a word too many: click says which
            values[words[taken]] = arg
            taken += 1
            continue
        flag, equals, text = arg.partition("=")
        found = flags.get(flag)
        if found is None or (found.is_flag and equals):
            return None
        option = found
        if option.is_flag:
            values[option.name] = True
            continue
        if not equals:
            text = args[index] if index < len(args) else ""
            if option.flag_value is not None and (not text or text.startswith("-")):
                values[option.name] = option.flag_value  # bare, as click reads an option whose value is optional
                continue
            index += 1
            if not text or text.startswith("-"):
                return None  # no value, or what may be another option: click says which
        if option.directory and os.path.exists(text) and not (os.path.isdir(text) and os.access(text, os.R_OK)):
            return None  # click says it is a file, or not readable
        if option.choices is not None and text not in option.choices:
            return None  # click names the choices
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
