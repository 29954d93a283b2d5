"""A session's side of a handover, as a state machine with no I/O (docs/architecture.md#detach).

    idle --ask--> asked --boundary with work held--> busy --boundary with nothing held--> ready
    ready --confirm--> confirmed --released--> (the session logs its handover end and exits 8)
    asked | busy | ready --drop (the asker went away, or CONFIRM_SECONDS passed after ready)--> idle

A handover is answered only at a turn boundary: there the session says `busy <background> <subagents>` (again
each time the counts change) while work that lives in this process would be lost, and `ready` once nothing is
held. After `ready` it waits for `confirm` at most CONFIRM_SECONDS; a dropped ask leaves the session running
unchanged, and nothing of it reaches the log. One ask is open at a time.

The machine only decides; `chock.session.sockets` sends what it says to send, and the session loop waits at
the boundary until `settle()` says it may go on. The clock is injectable so every transition is tested in microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chock.control.session_protocol import Busy, Ready

# After `ready` the session waits this long for `confirm`; then the ask is dropped and it carries on.
CONFIRM_SECONDS = 30.0

IDLE = "idle"
ASKED = "asked"
BUSY = "busy"
READY = "ready"
CONFIRMED = "confirmed"
RELEASED = "released"


class HandoverRefused(Exception):
    """A request the machine cannot take in its state; the message is the refusal's text."""


class Handover:
    def __init__(self, clock: Callable[[], float] = time.monotonic, confirm_seconds: float = CONFIRM_SECONDS) -> None:
        self._clock = clock
        self._confirm_seconds = confirm_seconds
        self.state = IDLE
        self.asker: object = None  # whoever asked (the socket's connection): only it may confirm or drop
        self._counts: tuple[int, int] | None = None
        self._deadline = 0.0

    @property
    def open(self) -> bool:
        return self.state in (ASKED, BUSY, READY, CONFIRMED)

    def ask(self, asker: object) -> None:
        if self.state != IDLE:
            raise HandoverRefused("another handover ask is already open")
        self.state, self.asker, self._counts = ASKED, asker, None

    def at_boundary(self, background: int, subagents: int) -> Busy | Ready | None:
        """The session reached a turn boundary holding that much work: what to tell the asker, if anything."""
        if self.state not in (ASKED, BUSY):
            return None
        counts = (background, subagents)
        if any(counts):
            self.state = BUSY
            if counts == self._counts:
                return None
            self._counts = counts
            return Busy(*counts)
        self.state = READY
        self._deadline = self._clock() + self._confirm_seconds
        return Ready()

    def confirm(self, asker: object) -> None:
        if self.state != READY or asker is not self.asker:
            raise HandoverRefused("confirm comes after the session said ready, on the connection that asked")
        if self.expired():
            raise HandoverRefused(f"confirm came more than {self._confirm_seconds:g} s after ready; ask again")
        self.state = CONFIRMED

    def drop(self, asker: object | None = None) -> None:
        """The asker went away (or, with no asker named, the wait for confirm ran out): back to idle."""
        if self.state in (ASKED, BUSY, READY) and (asker is None or asker is self.asker):
            self.state, self.asker, self._counts = IDLE, None, None

    def expired(self) -> bool:
        return self.state == READY and self._clock() >= self._deadline

    def seconds_left(self) -> float:
        """How long the session still waits for `confirm` after `ready`."""
        return max(0.0, self._deadline - self._clock()) if self.state == READY else 0.0

    def settle(self) -> bool:
        """Drop an ask whose wait for confirm ran out; True when the session may leave the boundary (the ask
        was confirmed, dropped, or never made)."""
        if self.expired():
            self.drop()
        return self.state in (IDLE, CONFIRMED)

    def released(self) -> None:
        """The session logged its handover end and let go of the log's lock."""
        if self.state != CONFIRMED:
            raise HandoverRefused("only a confirmed handover is released")
        self.state = RELEASED
