"""The `chock` executable: the commands that must start fast are read without click; every other command goes
through the command line in chock/cli.py.

A socket-activated `chock daemon` is a start a client waits on (systemd holds the first connection after every
idle exit until the daemon answers it), and `chock sessions` is what a person types all day: their options are
tables (chock/argv.py) that this reads without importing click, and nothing on their way imports what they do
not use (docs/architecture.md#start-up). Anything those tables do not take plainly goes to click. `chock
--help` is chock.overview's text, the same click prints.
"""

from __future__ import annotations

import sys

# The commands read without click: the module that holds each one's `OPTIONS` and its `run(layout, values)`.
FAST = {"daemon": "chock.daemon.options", "sessions": "chock.listing"}


def main() -> None:
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]):
        from chock.overview import render

        sys.stdout.write(render())
        sys.exit(0)
    if args and args[0] in FAST:
        from importlib import import_module

        from chock.argv import parse

        command = import_module(FAST[args[0]])
        values = parse(args[1:], command.OPTIONS)
        if values is not None:
            from chock.errors import ChockError, complain
            from chock.paths import Layout

            try:
                code = command.run(Layout.from_env(), values)
            except ChockError as error:
                code = complain(error)
            sys.exit(code)
    from chock.cli import main as cli

    cli(prog_name="chock")
