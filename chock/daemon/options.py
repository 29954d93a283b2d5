"""`chock daemon`'s options, defined once (chock/argv.py), and what the command does with them."""

from __future__ import annotations

import os

from chock.argv import Option
from chock.paths import Layout

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
    Option("--socket", "socket_path", str, "PATH", "Listen on this unix socket (default: <state>/daemon.sock)."),
    Option(
        "--host", "host", str, "HOST", "Also listen on TCP at this address (no identity check: put a proxy in front)."
    ),
    Option("--port", "port", int, "PORT", "TCP port for --host (default 7890; 0 picks a free one)."),
    Option("--idle-exit", "idle_exit", float, "SECONDS", "Exit 0 after this long with no client."),
    *LOG_OPTIONS,
)


def run(layout: Layout, values: dict[str, object]) -> int:
    """What `chock daemon` does, however its options were read: its records configured, then serving until
    told to stop; the exit code."""
    from chock.daemon.server import run as serve
    from chock.platform import journal

    journal.configure(journal.DAEMON, str(values["log_target"]), str(values["log_level"]))
    return serve(
        layout,
        # Absolute, so the address it says and its children are told is the same from any directory.
        socket_path=None if values["socket_path"] is None else os.path.abspath(str(values["socket_path"])),
        host=values["host"],  # type: ignore[arg-type]
        port=values["port"],  # type: ignore[arg-type]
        idle_exit=values["idle_exit"],  # type: ignore[arg-type]
    )
