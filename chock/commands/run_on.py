"""`chock run --on HOST`: a session started (or continued) on a daemon, then attached to as `chock attach` shows it.
HOST is a connection's name from config.zon, `local`, or an address (`chock.control.address.host_address`).

Nothing is checked or resolved here: no instance, credential, bwrap or repository of this machine is looked at,
since the daemon's `start` (its own `chock run` child) makes every check, and its refusal is printed, exit 3. The
project names a directory on the daemon's machine, so it is sent as typed — absolute, or refused, and never looked
at here — or, with no `--project`, as this terminal's working directory (`os.getcwd()`, not resolved). `--continue
ID` learns the session's project from the daemon's `find` and carries the session on with `say`. Attached, Ctrl-C
leaves the session running there (the hint names the host: `chock attach NAME:ID` or `--daemon ADDR ID`), and the
exit codes are `chock attach`'s (chock/commands/attach.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from chock.commands.attach import attach
from chock.commands.targets import RUNNING, SteerFailed, Target, ask
from chock.control import daemon_protocol as dp
from chock.control.address import host_address
from chock.control.client import ControlClient
from chock.errors import Refused, UsageError
from chock.terminal import shown

# The options of `chock run` that mean nothing on a daemon's session, and why: each is refused by name with --on.
NOT_WITH_ON = {
    "--yes": "the daemon's session follows the daemon's own .approvals policy; answer its requests in the view",
    "--allow-dirty": "the project is on the daemon's machine: nothing of this one is copied into its workspace",
    "--model": "the daemon's instance names its model (--instance picks one of the daemon's instances)",
    "--json": "the view is `chock attach`'s; `chock plan --daemon ADDR` prints a session's events as JSON",
    "--adopt": "a handover is taken by the daemon of the machine that holds the session (`chock detach`)",
    "--session-id": "the daemon names the sessions it starts",
    "--for-daemon": "it is the daemon's own, for the children it starts",
    "--after-reboot": "it is the daemon's own, for the children it starts",
}


def run_on(
    address_text: str,
    project: str | None,
    instance: str | None,
    message: str | None,
    continue_id: str | None,
    given: list[str],
) -> int:
    """Start (or, with `continue_id`, carry on) a session on the host `address_text` names and attach to it; the
    exit code of the view. `project` is as typed. `given` are the flags of NOT_WITH_ON that were given (each
    refused, exit 2)."""
    if given:
        raise UsageError(f"{given[0]} cannot be used with --on: {NOT_WITH_ON[given[0]]}")
    host, address = host_address(address_text)
    client = ControlClient(address)
    if project is not None and not project.startswith("/"):
        raise UsageError(
            f"--project {shown(project, one_line=True)} is not absolute: with --on it names a directory on the "
            "daemon's machine, which is never resolved here; give its absolute path"
        )
    if message is None and not sys.stdin.isatty():
        message = sys.stdin.read()  # the task (or, with --continue, the new message) from a pipe
    if continue_id is not None:
        return _continue(client, host, project, instance, continue_id, message)
    if not message or not message.strip():
        raise UsageError("chock run --on needs a MESSAGE (as an argument or on standard input): the task to start")
    root = project if project is not None else os.getcwd()
    request = dp.StartRequest(root, message) if instance is None else dp.StartWithRequest(root, instance, message)
    try:
        session_id = ask(client, request, dp.Started).session_id
    except SteerFailed as refusal:
        raise Refused(str(refusal)) from None
    started = Target(client, host, Path(root), session_id)
    print(shown(f"(started session {session_id} {started.where}; Ctrl-C leaves it running there)"))
    return _attach(started)


def _continue(
    client: ControlClient, host: str, project: str | None, instance: str | None, session_id: str, message: str | None
) -> int:
    """Carry the session on with `message` (the daemon's `say`), or attach to it as it runs when none is given."""
    if not session_id:
        raise UsageError(
            f"--continue with --on needs the session's id: `chock sessions --all --daemon {host}` lists them"
        )
    for flag, value in (("--project", project), ("--instance", instance)):
        if value is not None:
            raise UsageError(f"{flag} cannot be used with --on --continue: the session keeps its own")
    try:
        row = ask(client, dp.FindRequest(session_id), dp.ListRow).row
    except SteerFailed as refusal:
        raise Refused(str(refusal)) from None
    root = row.get("project")
    if not isinstance(root, str) or not root.startswith("/"):
        raise Refused(f"the daemon at {client.address} named no absolute project for session {session_id}")
    found = Target(client, host, Path(root), session_id)
    if message and message.strip():
        try:
            how = ask(client, dp.SayRequest(root, session_id, message), dp.Said).how
        except SteerFailed as refusal:
            raise Refused(str(refusal)) from None
        told = "it takes it at its next turn" if how == "queued" else "the daemon continues it with your message"
        print(shown(f"(said to session {session_id} {found.where}: {told})"))
    elif row.get("status") not in RUNNING:
        raise UsageError(f"session {session_id} is not running: give a MESSAGE, and the daemon continues it with it")
    return _attach(found)


def _attach(found: Target) -> int:
    from chock.session.render import terminal_renderer

    return attach(
        found.client, found.project, found.session_id, terminal_renderer(), sys.stdout, sys.stdin.fileno(),
        again=found.again,
    )  # fmt: skip
