"""Every daemon verb is in every table it must be in (docs/protocol.md#adding-a-verb).

A verb is its request class (chock/control/daemon_protocol.py `VERBS`), its handler (chock/daemon/verbs.py
`VERBS`), its entry in docs/protocol.md (a line of the control protocol's summary and a `### verb` section),
and, on each front end, its row — a route of serve (chock/serve/api.py `ROUTES`) and a command of the command
line (chock/commands/cli.py `VERB_COMMANDS`) — or a line in that front end's table of verbs it does not offer, saying
why. `gaps` names each table a verb is missing from; the tests below remove a row of each table and check
that `gaps` names it, so the check cannot pass by finding nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from chock.commands import cli
from chock.commands.base import on_daemon, through_daemon
from chock.control import daemon_protocol as dp
from chock.daemon import verbs
from chock.serve import api

PROTOCOL_MD = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def documented(text: str) -> tuple[set[str], set[str]]:
    """The verbs docs/protocol.md's control protocol section lists in its summary block, and those it gives a
    `### verb` section."""
    section = text.split("## The control protocol", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    summary = {line.split()[0] for line in block.splitlines() if line.strip()}
    headings = set(re.findall(r"^### (\S+)$", section, re.M))
    return summary, headings


def command(path: str) -> click.Command | None:
    """The click command `chock <path>` (`sessions remove`), or None."""
    found: click.Command | None = cli.main
    for word in path.split():
        found = found.commands.get(word) if isinstance(found, click.Group) else None
    return found


def gaps(
    requests: tuple[type, ...] = dp.VERBS,
    handlers: dict[str, object] = verbs.VERBS,
    docs: str | None = None,
    routes: tuple[api.Route, ...] = api.ROUTES,
    not_routed: dict[str, str] = api.NOT_ROUTED,
    commands: dict[str, str] = cli.VERB_COMMANDS,
    not_commands: dict[str, str] = cli.NOT_A_COMMAND,
) -> list[str]:
    """What is missing or contradictory, one line each; [] when every verb is in every table."""
    summary, headings = documented(PROTOCOL_MD.read_text() if docs is None else docs)
    classes = {request.verb for request in requests}
    routed = {route.request.verb for route in routes}
    every = classes | set(handlers) | summary | headings | routed | set(not_routed) | set(commands) | set(not_commands)
    found = []
    for verb in sorted(every):
        where = {
            "a request class in chock/control/daemon_protocol.py VERBS": verb in classes,
            "a handler in chock/daemon/verbs.py VERBS": verb in handlers,
            "a line in docs/protocol.md's control protocol summary": verb in summary,
            "a `### verb` section in docs/protocol.md": verb in headings,
            "a route in chock/serve/api.py ROUTES or a reason in NOT_ROUTED": (verb in routed) != (verb in not_routed),
            "a command in chock/commands/cli.py VERB_COMMANDS or a reason in NOT_A_COMMAND": (verb in commands)
            != (verb in not_commands),
        }
        found += [f"{verb}: needs {what}" for what, ok in where.items() if not ok]
    for verb, path in commands.items():
        named = command(path)
        if named is None:
            found.append(f"{verb}: VERB_COMMANDS names `chock {path}`, which is no command")
        elif not (through_daemon(named) or on_daemon(named)):
            found.append(f"{verb}: `chock {path}` sends it but takes no --daemon (nor --on)")
    return found


def test_every_verb_has_its_request_handler_docs_route_and_command():
    assert gaps() == []


def test_each_front_end_says_why_it_leaves_a_verb_out():
    for reason in (*api.NOT_ROUTED.values(), *cli.NOT_A_COMMAND.values()):
        assert len(reason) > 20 and "`" in reason, reason  # a reason, naming what to use instead


def without(table: dict[str, object], verb: str) -> dict[str, object]:
    return {key: value for key, value in table.items() if key != verb}


@pytest.mark.parametrize("verb", [request.verb for request in dp.VERBS])
def test_a_missing_row_is_named(verb):
    """Take the verb out of each table in turn: `gaps` names that table, and the verb."""
    text = PROTOCOL_MD.read_text()
    removed = {
        "request class": gaps(requests=tuple(r for r in dp.VERBS if r.verb != verb)),
        "handler": gaps(handlers=without(verbs.VERBS, verb)),
        "docs/protocol.md's control protocol summary": gaps(
            docs=re.sub(rf"^{verb} .*\n", "", text, count=1, flags=re.M)
        ),
        "`### verb` section": gaps(docs=text.replace(f"\n### {verb}\n", "\n", 1)),
        "route": gaps(
            routes=tuple(r for r in api.ROUTES if r.request.verb != verb), not_routed=without(api.NOT_ROUTED, verb)
        ),
        "command": gaps(commands=without(cli.VERB_COMMANDS, verb), not_commands=without(cli.NOT_A_COMMAND, verb)),
    }
    for table, found in removed.items():
        assert any(line.startswith(f"{verb}: ") and table in line for line in found), (table, found)


def test_a_verb_both_offered_and_refused_is_named():
    routed = api.ROUTES[0].request.verb
    assert gaps(not_routed={**api.NOT_ROUTED, routed: "both"}) == [
        f"{routed}: needs a route in chock/serve/api.py ROUTES or a reason in NOT_ROUTED"
    ]


def test_a_command_row_names_a_command_that_takes_a_daemon():
    assert gaps(commands={**cli.VERB_COMMANDS, "stop": "halt"}) == [
        "stop: VERB_COMMANDS names `chock halt`, which is no command"
    ]
    assert gaps(commands={**cli.VERB_COMMANDS, "stop": "login"}) == [
        "stop: `chock login` sends it but takes no --daemon (nor --on)"
    ]
