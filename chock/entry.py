"""The `chock` executable: the commands that must start fast are read without click; every other command goes
through the command line in chock/commands/cli.py.

A socket-activated `chock daemon` is a start a client waits on (systemd holds the first connection after every
idle exit until the daemon answers it), `chock sessions` is what a person types all day, and `chock run` is a
session's start: their options are tables (chock/argv.py) that this reads without importing click, and nothing
on their way imports what they do not use (docs/architecture.md#start-up). Anything those tables do not take
plainly goes to click (for `chock run`, with its own command alone under the group, chock/commands/root.py), and
so does a `$CHOCK_CONFIG` click would refuse. `chock --help` is chock.commands.overview's text, the same click
prints. Whichever way a command ran, it ends as click ends one: a refusal is `chock: <message>` and its code, Ctrl-C is
`Aborted!` and 1, and a reader that stops reading (`| head`) ends it quietly with 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# The commands read without click: the module that holds each one's `OPTIONS` (and `WORDS`, if it takes any) and
# its `run(layout, values)` (chock.commands.base.Table; its click twin is made from the same module by
# `table_group`, or `table_command` for one that takes words).
FAST = {
    "daemon": "chock.daemon.options",
    "sessions": "chock.commands.listing",
    "dial-stdio": "chock.commands.dial",
    "run": "chock.commands.run",
}


def main() -> None:
    _open_closed_streams()
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
        values = parse(args[1:], command.OPTIONS, getattr(command, "WORDS", ()))
        if values is not None:
            from chock.paths import Layout

            sys.exit(_ended(lambda: command.run(Layout.from_env(), values)))
    if args[:1] == ["run"] and "_CHOCK_COMPLETE" not in os.environ:
        # What `chock run`'s table did not take plainly: the group with `run` alone under it, so no other
        # command's module is imported.
        from chock.commands import run
        from chock.commands.root import main as root

        root.add_command(run.command())
        root(prog_name="chock")  # click's main exits
    else:
        from chock.commands.cli import main as cli

        cli(prog_name="chock")


def _open_closed_streams() -> None:
    """A standard stream the caller closed (`chock … <&-`, `>&-`, `2>&-`; Python made it None) is /dev/null from
    here on, on its own descriptor: no file opened later takes 0, 1 or 2 and has a command's output or an error
    written into it, a refusal still goes to standard error (never into standard output's data), and a command
    sees no terminal there. Input then ends at once (a command that needs an answer says none came), and output
    goes nowhere, as with `</dev/null` and `>/dev/null`."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is not None:
            continue
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.fstat(fd)  # taken already (by nothing of ours): leave it be, and use the new descriptor
        except OSError:
            os.dup2(null, fd)
            os.close(null)
            null = fd
        stream = open(null, "r" if fd == 0 else "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        setattr(sys, name, stream)


def _help() -> int:
    from chock.commands.overview import render

    sys.stdout.write(render())
    return 0


def _ended(run: Callable[[], int]) -> int:
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
