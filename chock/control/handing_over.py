"""Asking a running session to hand over (docs/architecture.md#detach), as `chock detach` and a move's source do:
ask over handover.sock, wait for `ready` at its next turn boundary (`busy N M` while background work or
subagents are recorded), confirm; the session logs `session.end {reason: handover}`, lets go of its lock and
exits 8. Every failure before the confirm leaves it running, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from chock.control.client import NoAnswer, SessionClient
from chock.control.framing import ProtocolError, Unreachable
from chock.control.session_protocol import HANDOVER, Busy, ConfirmRequest, Ended, HandoverRequest, Ready
from chock.errors import ChockError
from chock.paths import Layout


class HandoverFailed(ChockError):
    """The session was not handed over; it keeps running, unchanged."""


def hand_over(layout: Layout, session_id: str, *, wait: float, say: Callable[[str], None]) -> None:
    """Steps 2 and 3: ask the running session over handover.sock, wait for `ready` at its next turn boundary
    (`wait` bounding each answer), confirm; returns once it has logged its handover end and let go of the lock.
    A HandoverFailed before the confirm leaves it running, unchanged."""
    try:
        client = SessionClient(layout.session_socket(session_id, "handover"), HANDOVER, timeout=wait)
    except ProtocolError as error:
        raise HandoverFailed(f"session {session_id} cannot be asked: {error}") from None
    with client:
        client.ask(HandoverRequest())
        say(f"asked session {session_id} to hand over at its next turn boundary…")
        held = (0, 0)
        while not isinstance(reply := _next(client, session_id, wait, held), Ready):
            if isinstance(reply, Busy):
                held = (reply.background, reply.subagents)
                say(f"session {session_id} holds {_work(held)}; it hands over once that is recorded…")
            else:
                raise HandoverFailed(f"session {session_id} answered the handover with {reply}")
        try:
            client.call(ConfirmRequest(), timeout=wait)  # `released`: the session let go of the log's lock
        except ProtocolError as error:
            raise HandoverFailed(f"session {session_id} did not confirm the handover: {error}") from None


def _next(client: SessionClient, session_id: str, wait: float, held: tuple[int, int]) -> object:
    """The session's next answer to the ask; every way it can fail to come is a HandoverFailed that says what
    still holds (the session keeps running, unchanged)."""
    try:
        reply = client.next_reply(wait)
    except NoAnswer:
        raise HandoverFailed(_still_holding(session_id, wait, held)) from None
    except Unreachable:
        raise HandoverFailed(f"session {session_id} closed its handover socket; it was not handed over") from None
    except ProtocolError as error:
        raise HandoverFailed(f"session {session_id} cannot be asked: {error}") from None
    if isinstance(reply, Ended):
        raise HandoverFailed(f"session {session_id} ended ({reply.reason}) while it was asked")
    return reply


def _work(held: tuple[int, int]) -> str:
    background, subagents = held
    return f"{background} background command{'s' * (background != 1)} and {subagents} subagent{'s' * (subagents != 1)}"


def _still_holding(session_id: str, wait: float, held: tuple[int, int]) -> str:
    if any(held):
        what = f"it still holds {_work(held)}"
    else:
        what = "it has not reached a turn boundary"
    return (
        f"session {session_id} did not hand over within {wait:g} s: {what}. It keeps running here, unchanged; "
        "asking again costs nothing"
    )
