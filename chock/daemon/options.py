"""The options of `chock daemon`, defined once, and read without click on the way the service starts.

The click command (chock/cli.py) is built from `OPTIONS`. A socket-activated start — systemd holds the first
connection after every idle exit while the daemon starts — reads them with `parse` instead, so the client
waits for no command-line machinery (docs/architecture.md#start-up). `parse` takes only plain uses of these
options; anything else (`--help`, a subcommand, an unknown option, a value that is not a number) is left to
click, which explains it the way it explains every command's.
"""

from __future__ import annotations

from pathlib import Path

from chock.paths import Layout


class Option:
    """One `--flag VALUE` option: its parameter name, how its text becomes a value, and its help."""

    __slots__ = ("convert", "default", "flag", "help", "metavar", "name")

    def __init__(
        self, flag: str, name: str, convert: type, metavar: str, help: str, default: str | None = None
    ) -> None:
        self.flag = flag
        self.name = name
        self.convert = convert  # str, int, float or Path
        self.metavar = metavar
        self.help = help
        self.default = default


# Where `chock daemon`'s and `chock serve`'s records go (chock.platform.journal checks the values).
LOG_OPTIONS = (
    Option(
        "--log-target",
        "log_target",
        str,
        "auto|journal|stderr",
        "Where its records go: the journal, stderr, or auto (the journal when systemd started it, else stderr).",
        default="auto",
    ),
    Option("--log-level", "log_level", str, "err|warning|info|debug", "The least urgent record kept.", default="info"),
)

OPTIONS = (
    Option("--socket", "socket_path", Path, "PATH", "Listen on this unix socket (default: <state>/daemon.sock)."),
    Option(
        "--host", "host", str, "HOST", "Also listen on TCP at this address (no identity check: put a proxy in front)."
    ),
    Option("--port", "port", int, "PORT", "TCP port for --host (default 7890; 0 picks a free one)."),
    Option("--idle-exit", "idle_exit", float, "SECONDS", "Exit 0 after this long with no client."),
    *LOG_OPTIONS,
)


def parse(args: list[str]) -> dict[str, object] | None:
    """The option values `args` give (`--flag VALUE` or `--flag=VALUE`, each one of OPTIONS), or None when
    `args` holds anything else."""
    flags = {option.flag: option for option in OPTIONS}
    values: dict[str, object] = {option.name: option.default for option in OPTIONS}
    rest = iter(args)
    for arg in rest:
        flag, equals, text = arg.partition("=")
        option = flags.get(flag)
        if option is None:
            return None
        if not equals:
            text = next(rest, "")
            if not text or text.startswith("-"):
                return None  # no value, or what may be another option: click says which
        try:
            values[option.name] = option.convert(text)
        except ValueError:
            return None
    return values


def run(layout: Layout, values: dict[str, object]) -> int:
    """What `chock daemon` does, however its options were read: its records configured, then serving until
    told to stop; the exit code."""
    from chock.daemon.server import run as serve
    from chock.platform import journal

    journal.configure(journal.DAEMON, str(values["log_target"]), str(values["log_level"]))
    return serve(
        layout,
        socket_path=values["socket_path"],  # type: ignore[arg-type]
        host=values["host"],  # type: ignore[arg-type]
        port=values["port"],  # type: ignore[arg-type]
        idle_exit=values["idle_exit"],  # type: ignore[arg-type]
    )
