"""The `chock` command line through click: the group, its global options, and every command under it.

Each family of commands is a module of its own (chock/commands/run.py, sessions.py, steer.py, workspaces.py,
machine.py, service.py), thin: each command parses, calls into the packages, and prints
(docs/architecture.md#the-packages). Imports of the heavy modules stay inside the commands, so that building the
tree costs only click and the small modules it names; `chock --help`, `chock sessions` and a socket-activated
`chock daemon` do not come here at all (chock/entry.py, docs/architecture.md#start-up).
"""

from __future__ import annotations

import click

from chock.commands import (
    approval_rules,
    configuration,
    connections,
    export,
    machine,
    mcp_servers,
    move,
    overview,
    run,
    service,
    sessions,
    steer,
    workspaces,
)
from chock.commands.root import main

# Every command of `chock`, by family. Each has its line in chock.commands.overview: `chock --help` prints those
# lines with or without click, and _register() fails here when a command has none.
COMMANDS: tuple[click.Command, ...] = (
    run.command(),
    sessions.sessions,
    sessions.usage,
    sessions.plan,
    export.export,
    steer.stop,
    steer.say,
    steer.attach,
    steer.approve,
    approval_rules.rules,
    mcp_servers.mcp,
    steer.detach,
    workspaces.workspace,
    machine.login,
    machine.logout,
    machine.credentials,
    machine.doctor,
    machine.completion,
    configuration.config,
    service.daemon,
    service.serve,
    connections.connections,
    connections.dial_stdio,
    move.move,
)

# The daemon's verbs (chock.control.daemon_protocol.VERBS) as this front end offers them: the command that sends
# each (through --daemon, or `chock run --on`), or why none does. tests/test_front_tables.py fails when a verb is in
# neither, or a command is unknown.
VERB_COMMANDS = {
    "start": "run",
    "start-with": "run",
    "find": "run",
    "sessions": "sessions",
    "adopt": "detach",
    "read": "plan",
    "list": "sessions",
    "watch": "attach",
    "answer": "approve",
    "stop": "stop",
    "say": "say",
    "remove": "sessions remove",
    "remove-with-workspace": "sessions remove",  # with --with-workspace
    "answer-with": "approve",
    "rules": "rules",
    "rule-remove": "rules remove",
    # moving a session between hosts: `chock move` sends each, to the source's daemon or the target's
    "move-check": "move",
    "move-out": "move",
    "send": "move",
    "receive": "move",
    "move-in": "move",
    "moved": "move",
    "move-drop": "move",
}
NOT_A_COMMAND = {
    "instances": "an instance is named to the daemon (`chock run --on ADDR --instance NAME`), which refuses one "
    "it does not hold naming those it does; the verb is for the page's Start over several daemons",
}


def _register() -> None:
    """Puts every command under `chock`, each with its line in `chock --help` from chock.commands.overview: one
    definition, for click and without it."""
    for each in COMMANDS:
        main.add_command(each)
    shown = {name: each for name, each in main.commands.items() if not each.hidden}
    assert set(shown) == set(overview.COMMANDS), "every command has its line in chock.commands.overview"
    for name, each in shown.items():
        each.short_help = overview.COMMANDS[name]


_register()


if __name__ == "__main__":
    main()
