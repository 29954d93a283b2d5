"""`chock detach`: hand a running terminal session to the daemon at its next turn boundary.

Ownership is the log's lock, so a handover is the lock changing hands (docs/architecture.md#detach): the
session lets go, the daemon's child (`chock run --adopt`) takes it. The order is what makes every failure safe:

1. prove the daemon is there (a greeting on a connection that then closes) — the ask cannot be taken back;
2. ask over handover.sock; the session answers at its next turn boundary: `ready`, or `busy N M` first;
3. confirm; the session logs `session.end {reason: handover}`, releases the lock, sends `released`, exits 8;
4. `adopt` on a new connection; the daemon replies once its child holds the lock.

A client that goes away before `confirm` leaves the session running unchanged: nothing was taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chock.commands.shared_options import DEFAULT_WAIT_SECONDS
from chock.control import daemon_protocol as dp
from chock.control.address import CONNECTION_NAME, LOCAL, Address
from chock.control.client import ControlClient, expect
from chock.control.framing import ProtocolError
from chock.control.handing_over import HandoverFailed, hand_over
from chock.control.ssh import SCHEME
from chock.errors import UsageError
from chock.log import catalog
from chock.paths import Layout, check_session_id


@dataclass(frozen=True)
class Detached:
    session_id: str
    log_path: str


def refuse_remote(named: str | None) -> None:
    """detach hands a session to this machine's daemon: an `ssh://` address or a connection's name (`named`, as
    --daemon or $CHOCK_DAEMON gave it) is refused before the session is asked anything."""
    if named and (named.startswith(SCHEME) or (named != LOCAL and CONNECTION_NAME.fullmatch(named))):
        raise UsageError(
            f"detach hands a session to this machine's daemon, and {named} is another machine's: a session "
            "started in a terminal here stays here (run one there with `chock run --on`); leave out --daemon, "
            "or name a daemon on this machine"
        )


def pick_session(layout: Layout, project: Path | None, session_id: str | None) -> str:
    """The session to detach: the one named, else the newest running session of the project."""
    if session_id is not None or project is None:  # "" names no session: it is refused, never the newest
        return check_session_id(session_id or "")
    found = catalog.newest(layout, project, running=True)
    if found is None:
        raise HandoverFailed(f"no session of {project} is running here; name one: chock detach <session id>")
    return found


def _check_detachable(layout: Layout, session_id: str) -> str:
    """Refuse what cannot be handed over; return the session's project."""
    loaded = catalog.load(layout, session_id)
    if loaded is None:
        raise HandoverFailed(f"there is no session {session_id} on this machine")
    state, alive = loaded
    status = state.status(alive)
    if status == "abandoned":
        raise HandoverFailed(
            f"session {session_id} ended abnormally; its workspace {state.workspace} is kept: look at it with "
            f"`chock workspace show {session_id}` (or remove it with `chock workspace remove {session_id}`)"
        )
    from chock.session.moving import moved_refusal

    went = moved_refusal(state, "detaching")
    if went is not None:
        raise HandoverFailed(str(went))
    if status not in ("running", "waiting"):
        raise HandoverFailed(
            f"session {session_id} is not running ({status}); `chock run --continue {session_id}` "
            "takes it back into a terminal"
        )
    if state.owner == "daemon":
        raise HandoverFailed(f"session {session_id} is already owned by the daemon")
    return state.project


def detach(
    layout: Layout,
    session_id: str,
    address: Address,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    say: Callable[[str], None] = lambda text: None,
) -> Detached:
    project = _check_detachable(layout, session_id)
    daemon = ControlClient(address, timeout=min(wait, 10.0))
    try:
        daemon.ping()
    except ProtocolError:
        raise HandoverFailed(
            f"no daemon answers at {address}; the session keeps running here, unchanged. Start one with "
            "`chock daemon` (or `systemctl --user start chock.socket`) and detach again"
        ) from None

    hand_over(layout, session_id, wait=wait, say=say)
    say(f"session {session_id} let go; the daemon is taking it…")
    try:
        adopt = dp.AdoptRequest(str(project), session_id)
        started = expect(ControlClient(address, timeout=wait).call(adopt), dp.Started)
    except ProtocolError as error:
        raise HandoverFailed(
            f"session {session_id} handed over, but the daemon at {address} did not take it ({error}); "
            f"take it back with `chock run --continue {session_id}`"
        ) from None
    return Detached(started.session_id, started.log_path)
