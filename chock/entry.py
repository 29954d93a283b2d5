"""The `chock` executable: the commands that must start fast are read without click; every other command goes
through the command line in chock/commands/cli.py.

A socket-activated `chock daemon` is a start a client waits on (systemd holds the first connection after every
idle exit until the daemon answers it), and `chock sessions` is what a person types all day: their options are
tables (chock/argv.py) that this reads without importing click, and nothing on their way imports what they do
not use (docs/architecture.md#start-up); so are a move's steps on its source (`chock run --move-out`, `--moved`),
which a move waits on. `chock run`, a session's start, goes through click with its own command
alone under the group (chock/commands/root.py). Anything those tables do not take plainly goes to click, and so does
a `$CHOCK_CONFIG` click would refuse. `chock --help` is chock.commands.overview's text, the same click prints. Whichever
way a command ran, it ends as click ends one: a refusal is `chock: <message>` and its code, Ctrl-C is
`Aborted!` and 1, and a reader that stops reading (`| head`) ends it quietly with 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# The commands read without click: the module that holds each one's `OPTIONS` and its `run(layout, values)`
# (chock.commands.base.Table; its click twin is made from the same module by `table_group`).
FAST = {"daemon": "chock.daemon.options", "sessions": "chock.commands.listing", "dial-stdio": "chock.commands.dial"}


def main() -> None:
    # Text that the terminal's encoding cannot hold is replaced, not a crash (click's echo did the same).
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]):
        sys.exit(_ended(_help))
    config = os.environ.get("CHOCK_CONFIG")
    if args and args[0] in FAST and not (config and os.path.isdir(config)):
        from importlib import import_module

        from chock.argv import parse

        command = import_module(FAST[args[0]])
        values = parse(args[1:], command.OPTIONS)
        if values is not None:
            from chock.paths import Layout

            sys.exit(_ended(lambda: command.run(Layout.from_env(), values)))
    if args[:1] == ["run"] and args[1:2] in (["--move-out"], ["--moved"]) and not (config and os.path.isdir(config)):
        # A move's step on its source, which the move waits on: read without click when its options are plain.
        from chock.commands.move_steps import fast

        code = _ended(lambda: fast(args[1:]))
        if code is not None:  # None: not plainly its options, click reads them
            sys.exit(code)
    if args[:1] == ["run"] and "_CHOCK_COMPLETE" not in os.environ:
        # A session's start: the group with `run` alone under it, so no other command's module is imported.
        from chock.commands.root import main as root
        from chock.commands.run import run

        root.add_command(run)
        root(prog_name="chock")  # click's main exits
    else:
        from chock.commands.cli import main as cli

        cli(prog_name="chock")


def _help() -> int:
    from chock.commands.overview import render

    sys.stdout.write(render())
    return 0


def _ended(run: Callable[[], int | None]) -> int | None:
    """The exit code of `run()`, ended the way click ends a command."""
    from chock.errors import ChockError, complain

    try:
        code = run()
        sys.stdout.flush()
        return code
    except ChockError as error:
        return complain(error)
    except KeyboardInterrupt:
        print("\nAborted!", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Whoever read our output stopped: say nothing more, and let no flush at exit complain about it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
