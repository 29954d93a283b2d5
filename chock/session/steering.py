"""What a person tells a running session from outside it: messages to take in, and stop (docs/architecture.md#steering).

`say` queues a message; the session takes the queue in at its next turn boundary, before its next model call,
and logs each message then, once (`user.message {via: socket}`). Nothing queued is lost once it is acknowledged:
a session holding queued messages does not complete (it takes them in as a new turn), and before any other
end it logs them, so the next owner sends them. Once the session's end has begun, a `say` is refused
(`SessionEnding`): it could only be lost. `stop` asks the session to stop now, wherever it is. No I/O: the
session's sockets call in, and the session loop reads.
"""

from __future__ import annotations

from collections.abc import Callable


class SessionEnding(Exception):
    """A message came once the session's end had begun: it would never be taken in."""


class Steering:
    def __init__(self, on_say: Callable[[], None], on_stop: Callable[[], None]) -> None:
        self._queue: list[str] = []
        self._on_say = on_say
        self._on_stop = on_stop
        self.stop_via: str | None = None  # who asked the session to stop: "socket" or "signal"
        self.closed = False  # the session's end has begun

    def say(self, text: str) -> None:
        """Queue `text` for the next turn boundary; SessionEnding once the session's end has begun."""
        if self.closed:
            raise SessionEnding("this session is ending and takes no more messages; say it again once it has ended")
        self._queue.append(text)
        self._on_say()

    def close(self) -> None:
        """The session's end has begun: what it takes in is taken, and every later `say` is refused, never
        acknowledged and lost."""
        self.closed = True

    @property
    def queued(self) -> bool:
        return bool(self._queue)

    def take(self) -> list[str]:
        """Every queued message, in order; the queue is empty afterwards."""
        taken, self._queue = self._queue, []
        return taken

    def stop(self, via: str) -> None:
        """Ask the session to stop; only the first ask counts (a second Ctrl-C is the same stop)."""
        if self.stop_via is None:
            self.stop_via = via
            self._on_stop()
