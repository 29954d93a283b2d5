"""The `chock` executable: a socket-activated `chock daemon` goes straight to the daemon, every other command
through the command line in chock/cli.py.

The daemon's start is the one a client waits on (systemd holds the first connection after every idle exit
until the daemon answers it), so its options are read by chock.daemon.options without importing click, and
nothing on its way imports what it does not use (docs/architecture.md#start-up).
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["daemon"]:
        from chock.daemon import options

        values = options.parse(args[1:])
        if values is not None:
            from chock.errors import ChockError, complain
            from chock.paths import Layout

            try:
                code = options.run(Layout.from_env(), values)
            except ChockError as error:
                code = complain(error)
            sys.exit(code)
    from chock.cli import main as cli

    cli(prog_name="chock")
