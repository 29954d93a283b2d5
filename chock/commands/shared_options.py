"""The options several commands share, declared once (chock/argv.py's `Option`): click builds each command's
from these rows (chock/commands/), and the commands started without click (chock/entry.py) parse the same rows.

A row says what the option means everywhere it appears; a command that means something else by the same flag
(`chock serve --port`, the port it listens on) declares its own. Which daemon `--daemon` and `--port` name is
`chock.control.address`'s to say. `--daemon` is repeatable in the table: `chock sessions --all` and a command
given a session take several (`named_hosts`); every other use acts through one, and `named_address` refuses a
second naming the command (exit 2).
"""

from __future__ import annotations

from pathlib import Path

from chock.argv import Option
from chock.terminal import COLOR_CHOICES, PROGRESS_CHOICES

PROJECT = Option("--project", "project", Path, "DIRECTORY", "The git project (default: here).", directory=True)

# `chock run`'s: with --on it names a directory on the daemon's machine, sent as typed and never looked at here;
# without, `chock run` checks it as PROJECT is checked (`directory`: the start without click leaves to click a
# value naming what is not a readable directory, with or without --on).
PROJECT_AS_TYPED = Option("--project", "project", str, "DIRECTORY", "The git project (default: here).", directory=True)

DAEMON = Option(
    "--daemon",
    "daemon_address",
    str,
    "ADDR",
    "Act through this daemon: unix:/path, host:port, ssh://[user@]host[:port] or a connection's name "
    "(default: $CHOCK_DAEMON).",
    multiple=True,
)

ON = Option(
    "--on",
    "on_address",
    str,
    "ADDR",
    "Start the session on this host (a connection's name, local, or an address) and attach to it; nothing is "
    "checked here.",
)

PORT = Option("--port", "port", int, "PORT", "Shorthand for --daemon 127.0.0.1:PORT.")

JSON = Option("--json", "as_json", bool, "", "Print JSON lines, one object each.")

# `chock usage --all` and `chock approve --all`: the sessions of every project, on every host or those named.
EVERY_HOST = Option(
    "--all",
    "all_hosts",
    bool,
    "",
    "Every project's sessions on every host (this machine and each connection; each --daemon given, if any).",
)

# What the commands that show a session take (chock.terminal decides from their values: `choose_colour`,
# `choose_progress`).
COLOR = Option(
    "--color",
    "color",
    str,
    "",
    "Colour and styles; beats $NO_COLOR (auto: none with $NO_COLOR, else at a terminal).",
    default="auto",
    choices=COLOR_CHOICES,
)
PROGRESS = Option(
    "--progress",
    "progress",
    str,
    "",
    "A spinner with the elapsed time while a model call or a tool runs (auto: at a terminal).",
    default="auto",
    choices=PROGRESS_CHOICES,
)
VIEW_OPTIONS = (COLOR, PROGRESS)

# How long a handover or a move waits for each answer (`chock detach --wait`, a move's steps).
DEFAULT_WAIT_SECONDS = 300.0

# The options naming a daemon, as every command that can act through one takes them.
DAEMON_OPTIONS = (DAEMON, PORT)

# A command that acts on one project's sessions, through a daemon or in the state dir.
PROJECT_OPTIONS = (PROJECT, *DAEMON_OPTIONS)
