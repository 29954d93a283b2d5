"""One upstream `watch` per session, fanned out to every browser watching it (SPEC §8).

A `Feed` is one daemon `watch` connection for one (project, session): it reads the session's events as the
log grows, keeps the most recent ones in a bounded buffer, and hands each one, already encoded as a
Server-Sent Event, to every `Subscriber` (one per open SSE response). The `Hub` finds or opens the feed for
a session, so a hundred tabs on one session cost the daemon one connection.

Resume with no gap and no repeat (SPEC §4: "'Last event id N' means the client has N; replay sends N+1
onward"). A subscriber that has event N joins in one step with no await in it: it is registered for every
event the feed receives from then on, and it takes a snapshot of the buffer. When the buffer reaches back
past N (it holds every event after its `floor`, and `floor <= N`), the snapshot is all it needs; when it
does not, the subscriber first asks the daemon to `read` after N, which returns the log up to its end at
that moment — at least as far as the feed had got when the subscriber joined. The three sources (read,
snapshot, live) overlap but leave no hole between them, and every response writes an event only when its
id is above the last one it wrote, so each event goes out exactly once and in order.

A browser that cannot keep up is not allowed to make serve hold an unbounded backlog for it: past
PENDING_EVENTS or PENDING_BYTES its stream is closed, and the browser resumes from its Last-Event-ID by
the path above, reading what it missed from the daemon instead of from serve's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable
from typing import Any

from chock.control import protocol as p
from chock.control.client import ControlError
from chock.platform import journal
from chock.serve.upstream import Daemon, DaemonUnreachable, Event, Watch

# How many recent events a feed keeps for browsers that join late or come back. A page reloaded in the
# middle of a busy session is typically a few hundred events behind; anything older is read from the
# daemon (which seeks in the log, SPEC §4) rather than kept here. The byte bound keeps a feed of
# tool-output events (up to 1 MiB each, SPEC §4) from holding much more than a few of them.
BUFFER_EVENTS = 2048
BUFFER_BYTES = 8 * 1024 * 1024

# What one browser may have queued and not yet written before its stream is closed so it resumes from the
# daemon instead (see above). Above BUFFER_*, so a browser catching up from the buffer is never cut.
PENDING_EVENTS = 8192
PENDING_BYTES = 32 * 1024 * 1024

# A feed with no subscribers stays open this long, so a page reload or a browser's reconnect finds the
# buffer warm and costs the daemon no new watch.
LINGER = 10.0

# Statuses (SPEC §6 row) after which the daemon closing the watch is the end of the session, not a fault.
_OVER = frozenset({"ended", "handed-over", "abandoned"})


def sse_event(event: Event) -> bytes:
    """`id: N` and `data: <the log's own JSON>`: JSON never holds a raw CR or LF, so one data line."""
    return b"id: %d\ndata: %s\n\n" % (event.id, event.line.encode("utf-8"))


def sse_message(name: str, data: dict[str, Any]) -> bytes:
    """A named message with no `id:`, so the browser's last event id stays the last event's."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class Subscriber:
    """One SSE response's view of a feed: what arrived and is not written yet, and whether the feed ended."""

    def __init__(self) -> None:
        self._items: list[tuple[int, bytes]] = []
        self._bytes = 0
        self.wake = asyncio.Event()
        self.final: bool | None = None  # set when the feed ends: True when the session is over
        self.overflowed = False

    def push(self, number: int, chunk: bytes) -> None:
        if self.overflowed:
            return
        self._items.append((number, chunk))
        self._bytes += len(chunk)
        if len(self._items) > PENDING_EVENTS or self._bytes > PENDING_BYTES:
            self.overflowed = True
            self._items, self._bytes = [], 0
        self.wake.set()

    def finish(self, final: bool) -> None:
        if self.final is None:
            self.final = final
        self.wake.set()

    def take(self) -> list[tuple[int, bytes]]:
        items, self._items, self._bytes = self._items, [], 0
        self.wake.clear()
        return items

    @property
    def pending(self) -> int:
        return len(self._items)


class Feed:
    """One open upstream `watch` of one session, shared by every subscriber of that session."""

    def __init__(self, key: tuple[str, str], watch: Watch, after: int, forget: Callable[[Feed], None]) -> None:
        self.key = key
        self.row = watch.row
        self._watch = watch
        self._forget = forget
        self._buffer: deque[tuple[int, bytes]] = deque()
        self._buffer_bytes = 0
        self.floor = after  # the buffer holds every event with an id above this
        self.last = after
        self._subscribers: set[Subscriber] = set()
        # Whether the latest span of the session (SPEC §4: a start or adopt up to its end) has ended.
        self._over = watch.row.get("status") in _OVER
        self.closed = False
        self._linger: asyncio.TimerHandle | None = None
        self._task = asyncio.get_running_loop().create_task(self._pump())

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self, after: int) -> tuple[Subscriber, list[tuple[int, bytes]], bool]:
        """(the subscriber, the buffered events after `after`, whether the daemon must be read first).

        No await happens here: from this call on, the subscriber gets every event the feed receives, and the
        snapshot holds every buffered one, so together with a `read` (when the third value is True) they
        cover every event after `after`.
        """
        subscriber = Subscriber()
        if self.closed:
            subscriber.finish(self._over)
        else:
            self._subscribers.add(subscriber)
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        snapshot = [item for item in self._buffer if item[0] > after]
        return subscriber, snapshot, after < self.floor

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)
        if not self._subscribers and not self.closed and self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(LINGER, self._idle)

    def _idle(self) -> None:
        self._linger = None
        if not self._subscribers:
            self.close()

    def close(self) -> None:
        """End the upstream watch; every subscriber's stream ends without `end`, so browsers come back."""
        if not self._task.done():
            self._task.cancel()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _pump(self) -> None:
        final = False
        try:
            async for event in self._watch.events():
                if event.id <= self.last:
                    continue  # never twice, whatever the upstream does
                if event.id != self.last + 1:
                    # SPEC §4: ids increase by exactly 1. A hole upstream ends this feed (not the session):
                    # the browsers come back and the next feed starts from the last id they have.
                    raise ControlError(p.ErrorCode.PROTOCOL, f"the daemon skipped from event {self.last} to {event.id}")
                self.last = event.id
                kind = event.event.get("type")
                if kind in ("session.start", "session.adopt"):
                    self._over = False
                elif kind == "session.end":
                    self._over = True
                chunk = sse_event(event)
                self._buffer.append((event.id, chunk))
                self._buffer_bytes += len(chunk)
                while len(self._buffer) > BUFFER_EVENTS or self._buffer_bytes > BUFFER_BYTES:
                    number, old = self._buffer.popleft()
                    self._buffer_bytes -= len(old)
                    self.floor = number
                for subscriber in self._subscribers:
                    subscriber.push(event.id, chunk)
            # The daemon closed the watch. SPEC §6: it does so when the session ends or is abandoned, and
            # 30 s after a handover end nobody adopted; a daemon that stopped closes it too, and then the
            # latest span is still open, so the browsers reconnect instead of being told it is over.
            final = self._over
        except ControlError as error:
            journal.record("watch.ended", session=self.key[1], error=str(error.code))
        except Exception as error:  # a bug here must end this feed's streams, never leave them hanging
            journal.record("error", where="a watch", session=self.key[1], error=journal.error_kind(error))
        finally:
            self._watch.close()
            self.closed = True
            if self._linger is not None:
                self._linger.cancel()
            self._forget(self)
            for subscriber in self._subscribers:
                subscriber.finish(final)
            self._subscribers.clear()


class Hub:
    """The open feeds, by (project, session id): found, or opened once however many browsers ask at once."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._feeds: dict[tuple[str, str], Feed] = {}
        self._opening: dict[tuple[str, str], asyncio.Future[Feed]] = {}

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    async def feed(self, project: str, session_id: str, after: int) -> Feed:
        """The feed for this session, opened upstream from `after` when there is none; a refusal from the
        daemon (`not-found`, unreachable, …) is raised to every caller that waited for it."""
        key = (project, session_id)
        feed = self._feeds.get(key)
        if feed is not None and not feed.closed:
            return feed
        opening = self._opening.get(key)
        if opening is None:
            opening = asyncio.get_running_loop().create_future()
            self._opening[key] = opening
            try:
                watch = await self.daemon.watch(project, session_id, after)
            except (Exception, asyncio.CancelledError) as error:
                if isinstance(error, asyncio.CancelledError):  # the browser that asked first went away
                    error = DaemonUnreachable(f"the watch of {session_id} was dropped before the daemon answered")
                opening.set_exception(error)
                opening.exception()  # retrieved: nobody else may be waiting for it
                raise
            finally:
                self._opening.pop(key, None)
            feed = Feed(key, watch, after, self._forget)
            self._feeds[key] = feed
            opening.set_result(feed)
            return feed
        return await asyncio.shield(opening)

    def _forget(self, feed: Feed) -> None:
        if self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]

    async def close(self) -> None:
        feeds = list(self._feeds.values())
        for feed in feeds:
            feed.close()
        for feed in feeds:
            await feed.wait_closed()
