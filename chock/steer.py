"""Steering a session through the daemon: `chock stop`, `chock say`, `chock sessions remove`.

Each is a daemon verb, so a session is steered the same way from this machine or from another (a daemon on
TCP). The daemon relays to the session's own socket or carries an ended session on; it never signals a process
and never writes a log (docs/architecture.md#steering).
"""

from __future__ import annotations

from pathlib import Path

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, expect
from chock.control.framing import ProtocolError
from chock.control.message import Request
from chock.errors import ChockError
from chock.paths import check_session_id

RUNNING = ("running", "waiting")


class SteerFailed(ChockError):
    pass


def _call(client: ControlClient, request: Request) -> object:
    try:
        return client.call(request)
    except ProtocolError as error:  # an older daemon's `unknown-verb` says so itself (chock.control.connection)
        raise SteerFailed(f"the daemon did not {request.verb} it ({error.code}): {error.text}") from None


def pick(client: ControlClient, project: Path, session_id: str | None, *, running: bool) -> str:
    """The session named, else this project's newest (the newest running or waiting one, with `running`)."""
    if session_id:
        return check_session_id(session_id)
    rows = [row for _, row in client.list(project) if not running or row.get("status") in RUNNING]
    if not rows:
        which = "running session" if running else "session"
        raise SteerFailed(f"no {which} of {project} is known to the daemon at {client.address}; name one")
    return str(rows[-1]["id"])


def stop(client: ControlClient, project: Path, session_id: str) -> None:
    """Stop a running session now; returns once its log holds its end."""
    expect(_call(client, dp.StopRequest(str(project), session_id)), dp.Stopped)


def say(client: ControlClient, project: Path, session_id: str, message: str) -> str:
    """Tell a session more: queued for a running one, or carried on under the daemon for an ended one.
    Returns how (`queued` or `continued`)."""
    return expect(_call(client, dp.SayRequest(str(project), session_id, message)), dp.Said).how


def remove(client: ControlClient, project: Path, session_id: str) -> None:
    """Remove an ended session's log and scratchpad through the daemon (its branch stays)."""
    expect(_call(client, dp.RemoveRequest(str(project), session_id)), dp.Removed)
