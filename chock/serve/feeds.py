"""One upstream `watch` per session, fanned out to every browser watching it: the fan-out's asyncio pump.

A `Feed` is one daemon `watch` connection for one session: it reads the session's events as the log grows
and publishes each one, already encoded as a Server-Sent Event, to its fan-out (`chock.log.fanout`, which
holds the rules: the recent events kept in memory, who is owed what, the bound, no gap and no repeat).
`Feeds` finds or opens the feed of a session, so a hundred tabs on one session cost the daemon one
connection. Feeds are keyed by the session id alone, the daemon's own identity of a session: the project a
browser names is checked against the one the daemon's header gave, both resolved to their real path, so
`?project=/p`, `/p/.` and a symlink to `/p` all share one upstream watch. (serve resolves only the path
strings it is given, and only for a daemon of this machine, on a unix socket: another machine's paths are
compared as normalized text, never looked up here; it never reads a log or a session directory.)

Each SSE response holds a `Stream`: its subscriber, and what wakes it. A feed wakes its streams at most
once per TICK, so a burst of events is one write per stream rather than one per event; a stream's heartbeat
is one timer, re-armed only when it fires.

Resume with no gap and no repeat ("last event id N" means the client has N; replay sends N+1 onward): a
stream that joins after N has everything the feed holds after N queued at once; when the feed's memory
does not reach back to N (`Stream.backfill`), the response first `read`s after N from the daemon, which
returns the log up to its end at that moment — at least as far as the feed had got when the stream joined.

A browser that cannot keep up is not allowed to make serve hold an unbounded backlog for it: past
PENDING_EVENTS or PENDING_BYTES its stream is closed, and the browser resumes from its Last-Event-ID by
the path above, reading what it missed from the daemon instead of from serve's memory.

Streams are capped per session and in total, and upstream watches in total, so browsers cannot take every
connection serve or the daemon has (the daemon refuses everyone past its own cap, serve's health check
included): past a cap, `TooManyStreams`, which the route answers with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from chock.control.async_client import AsyncControlClient, AsyncReplyStream
from chock.control.client import expect
from chock.control.daemon_protocol import EventLine, WatchHeader, WatchRequest
from chock.control.framing import ErrorCode, ProtocolError
from chock.log.fanout import Fanout, Fanouts, Subscriber
from chock.platform import journal

# How many recent events a feed keeps for browsers that join late or come back. A page reloaded in the
# middle of a busy session is typically a few hundred events behind; anything older is read from the
# daemon (which seeks in the log) rather than kept here. The byte bound keeps a feed of tool-output events
# (up to 1 MiB each) from holding much more than a few of them.
BUFFER_EVENTS = 2048
BUFFER_BYTES = 8 * 1024 * 1024

# What one browser may have queued and not yet written before its stream is closed so it resumes from the
# daemon instead (see above). Above BUFFER_*, so a browser catching up from the buffer is never cut.
PENDING_EVENTS = 8192
PENDING_BYTES = 32 * 1024 * 1024

# A feed with no subscribers stays open this long, so a page reload or a browser's reconnect finds the
# buffer warm and costs the daemon no new watch.
LINGER = 10.0

# A feed wakes its streams at most this often: events that arrive closer together than this go out in one
# write per stream. The first event after a quiet spell goes at once, so this adds no delay to a session
# that writes slowly, and at most this much to one that writes fast.
TICK = 0.01

# A `:` comment every this many seconds of quiet keeps proxies (nginx's proxy_read_timeout is 60 s) and
# idle-connection reapers from closing a stream while a model thinks, and tells a browser the connection
# is alive.
HEARTBEAT = 15.0

# A client that takes nothing of a write for this long is cut off: it holds a place under the caps, and a
# stream of events owes it nothing it cannot read again from its last id. (The daemon, likewise, gives up
# on a reader that stalls for 30 s, and a reply cut short must reach the client as a failure.)
WRITE_STALL = 20.0

# Open event streams, per session and in all. A browser keeps at most six connections per host, so a
# session with hundreds of streams is many people or many tabs; the caps keep serve within its descriptors
# (a user service gets 1,024) with room for its other requests.
STREAMS_PER_SESSION = 384
STREAMS = 512

# Sessions watched upstream at once: each is one daemon connection, and the daemon serves 256 in all.
# Half of them leaves the daemon room for everyone else, serve's own requests included.
SESSIONS = 128

# Statuses of the session row after which the daemon closing the watch is the end of the session, not a
# fault.
_OVER = frozenset({"ended", "handed-over", "moved", "abandoned"})


def sse_event(event: EventLine, tag: bytes = b"") -> bytes:
    """`id: <tag>N` and `data: <the log's own JSON>`: JSON never holds a raw CR or LF, so one data line. The tag
    (`<host>/<session id>/`, `Feed.tag`) names the stream, so an id is the session's on its host everywhere."""
    return b"id: %s%d\ndata: %s\n\n" % (tag, event.id, event.line.encode("utf-8"))


def sse_message(name: str, data: dict[str, Any]) -> bytes:
    """A named message with no `id:`, so the browser's last event id stays the last event's."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class TooManyStreams(Exception):
    """A cap on event streams or watched sessions is reached: what was refused and when to come back."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class Stream:
    """One SSE response's place on a feed: its subscriber, and the waits between its writes.

    Its one timer sends the heartbeat after HEARTBEAT of quiet, and cuts the connection (`abort`) when a
    write has waited WRITE_STALL for the client to take it (noticed at the latest when the longer of the
    two has passed since the write began: the timer is never re-armed for a write).
    """

    def __init__(self, feed: Feed, subscriber: Subscriber, backfill: bool, abort: Callable[[], None]) -> None:
        self.feed = feed
        self.subscriber = subscriber
        self.backfill = backfill  # read the daemon after the id first: the feed's memory does not reach it
        self._abort = abort
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._last_write = self._loop.time()
        self._writing_since: float | None = None
        self.heartbeat_due = False
        self._timer = self._loop.call_later(HEARTBEAT, self._tick)

    def wake(self) -> None:
        self._wake.set()

    def writing(self) -> None:
        """The response begins a write, which the client may be slow to take."""
        self._writing_since = self._loop.time()

    def wrote(self) -> None:
        """The write is taken: the quiet that a heartbeat fills starts again."""
        self._writing_since = None
        self._last_write = self._loop.time()
        self.heartbeat_due = False

    async def wait(self) -> None:
        """Until the feed has something for this stream, or a heartbeat is due."""
        if not (self.subscriber.ready or self.heartbeat_due):
            await self._wake.wait()
        self._wake.clear()

    def _tick(self) -> None:
        now = self._loop.time()
        if self._writing_since is not None:
            if now - self._writing_since >= WRITE_STALL:
                self._abort()
                return
            self._timer = self._loop.call_at(self._writing_since + WRITE_STALL, self._tick)
            return
        due_at = self._last_write + HEARTBEAT
        if now >= due_at:
            self.heartbeat_due = True
            self._wake.set()
            due_at = now + HEARTBEAT
        self._timer = self._loop.call_at(due_at, self._tick)

    def close(self) -> None:
        self._timer.cancel()
        self.feed.leave(self)


class Feed:
    """One open upstream `watch` of one session, shared by every stream of that session."""

    def __init__(self, session_id: str, watch: AsyncReplyStream, after: int, feeds: Feeds) -> None:
        self.session_id = session_id
        self.tag = f"{feeds.host}/{session_id}/".encode()  # each SSE id's stream: host and session
        self.row = expect(watch.header, WatchHeader).row
        self.project = str(self.row.get("project", ""))
        self._project_real = feeds.place(self.project) if self.project else ""
        self._watch = watch
        self._feeds = feeds
        self.fanout = Fanout(
            after,
            memory_lines=BUFFER_EVENTS,
            memory_bytes=BUFFER_BYTES,
            pending_lines=PENDING_EVENTS,
            pending_bytes=PENDING_BYTES,
        )
        self._streams: set[Stream] = set()
        # Whether the latest span of the session (a start or adopt up to its end) has ended.
        self._over = self.row.get("status") in _OVER
        self._loop = asyncio.get_running_loop()
        self._linger: asyncio.TimerHandle | None = None
        self._waking: asyncio.Handle | None = None
        self._woken = 0.0
        self._task = self._loop.create_task(self._pump())

    @property
    def closed(self) -> bool:
        return self.fanout.closed

    def check_project(self, project: str) -> None:
        """`not-found` unless `project` is this session's project (compared by real path), as the daemon
        answers a watch that names another project."""
        if self._feeds.place(project) != self._project_real:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"session {self.session_id} is not a session of {project}")

    def join(self, after: int, abort: Callable[[], None]) -> Stream:
        """A stream of this feed after `after`. No await happens here: from this call on the stream's
        subscriber is owed every event the feed receives, and whatever the feed holds after `after`."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        join = self.fanout.join(after)
        stream = Stream(self, join.subscriber, join.backfill, abort)
        if not self.closed:
            self._streams.add(stream)
        return stream

    def leave(self, stream: Stream) -> None:
        self._streams.discard(stream)
        self.fanout.leave(stream.subscriber)
        self._feeds.release(self.session_id)
        if self.fanout.idle and not self.closed and self._linger is None:
            self._linger = self._loop.call_later(LINGER, self._idle)

    def _idle(self) -> None:
        self._linger = None
        if self.fanout.idle:
            self.close()

    def close(self) -> None:
        """End the upstream watch; every stream ends without `end`, so browsers come back. The feed is
        forgotten at once: the next browser to ask opens a new one."""
        self._feeds.forget(self)
        if not self._task.done():
            self._task.cancel()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def _kick(self) -> None:
        """Wake the streams now, or at the next tick when they were woken less than TICK ago."""
        if self._waking is not None:
            return
        delay = self._woken + TICK - self._loop.time()
        if delay > 0:
            self._waking = self._loop.call_later(delay, self._wake)
        else:
            self._waking = self._loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._waking = None
        self._woken = self._loop.time()
        for stream in self._streams:
            if stream.subscriber.ready:
                stream.wake()

    async def _pump(self) -> None:
        final = False
        last = self.fanout.last_id
        try:
            async for line in self._watch:
                event = expect(line, EventLine)
                if event.id <= last:
                    continue  # never twice, whatever the upstream does
                if event.id != last + 1:
                    # Ids increase by exactly 1. A hole upstream ends this feed (not the session): the
                    # browsers come back and the next feed starts from the last id they have.
                    raise ProtocolError(ErrorCode.PROTOCOL, f"the daemon skipped from event {last} to {event.id}")
                last = event.id
                kind = event.event.get("type")
                if kind in ("session.start", "session.adopt"):
                    self._over = False
                elif kind == "session.end":
                    self._over = True
                self.fanout.publish(sse_event(event, self.tag), ((event.id, 0),))
                self._kick()
            # The daemon closed the watch: it does so when the session ends or is abandoned, and 30 s after
            # a handover end nobody adopted; a daemon that stopped closes it too, and then the latest span
            # is still open, so the browsers reconnect instead of being told it is over.
            final = self._over
        except ProtocolError as error:
            journal.record("watch.ended", session=self.session_id, error=str(error.code))
        except Exception as error:  # a bug here must end this feed's streams, never leave them hanging
            journal.record("error", where="a watch", session=self.session_id, error=journal.error_kind(error))
        finally:
            self._watch.close()
            self.fanout.close(final)
            for handle in (self._linger, self._waking):
                if handle is not None:
                    handle.cancel()
            self._feeds.forget(self)
            for stream in self._streams:
                stream.wake()
            self._streams.clear()


class Feeds:
    """The open feeds, by session id: found, or opened once however many browsers ask at once."""

    def __init__(self, daemon: AsyncControlClient, host: str = "local") -> None:
        self.daemon = daemon
        self.host = host  # its name in serve's routes, which each SSE id carries
        # How two project paths are compared: by real path for a daemon of this machine (a unix socket); as
        # text (normalized) for one elsewhere, whose paths name its own files — never looked up here.
        self.place: Callable[[str], str] = os.path.realpath if daemon.address.is_unix else os.path.normpath
        self._caps = (STREAMS_PER_SESSION, STREAMS, SESSIONS)
        self._table = Fanouts(per_key=STREAMS_PER_SESSION, total=STREAMS, keys=SESSIONS)
        # Feeds being opened, by session id: the project the opener named, and what waiters wait for (None:
        # the opener went away before the daemon answered, so a waiter opens the feed itself).
        self._opening: dict[str, tuple[str, asyncio.Future[Feed | None]]] = {}

    async def join(self, project: str, session_id: str, after: int, abort: Callable[[], None]) -> Stream:
        """A stream of the session after `after`, its feed opened upstream when there is none; `abort` cuts
        its connection (a client that stalls).

        `TooManyStreams` past a cap; a refusal from the daemon (`not-found`, unreachable, …) is raised as it
        came, to every caller that waited for the same opening and named the same project.
        """
        refused = self._table.admit(session_id)
        if refused == Fanouts.KEYS and self._close_idle():
            refused = self._table.admit(session_id)
        if refused is not None:
            raise TooManyStreams(self._refusal(refused, session_id))
        try:
            feed = await self._feed(project, session_id, after)
            return feed.join(after, abort)
        except BaseException:
            self._table.release(session_id)
            raise

    def _refusal(self, cap: str, session_id: str) -> str:
        per, total, keys = self._caps
        if cap == Fanouts.PER_KEY:
            text = f"session {session_id} has {per} event streams open, the most serve keeps for one session"
        elif cap == Fanouts.TOTAL:
            text = f"serve has {total} event streams open, the most it keeps"
        else:
            text = f"serve is watching {keys} sessions, the most it watches at once"
        return f"{text}; close a page or tab that shows it, or try again shortly"

    def release(self, session_id: str) -> None:
        self._table.release(session_id)

    def _close_idle(self) -> bool:
        """Close the feeds nobody watches (kept open for a while in case a browser comes back) to make room
        for a session somebody does watch; whether there were any."""
        idle = [feed for feed in self._feeds() if feed.fanout.idle]
        for feed in idle:
            feed.close()
        return bool(idle)

    def _feeds(self) -> list[Feed]:
        return [feed for feed in self._table.values() if isinstance(feed, Feed)]

    async def _feed(self, project: str, session_id: str, after: int) -> Feed:
        while True:
            feed = self._table.get(session_id)
            if isinstance(feed, Feed) and not feed.closed:
                feed.check_project(project)
                return feed
            opening = self._opening.get(session_id)
            if opening is None:
                return await self._open(project, session_id, after)
            opener, future = opening
            try:
                await asyncio.shield(future)  # then round again: the feed is open, or we open it
            except ProtocolError:
                # The daemon refused the opener's watch: that is our answer too when we named the same
                # project; when we named another, we ask it ourselves.
                if self.place(opener) == self.place(project):
                    raise

    async def _open(self, project: str, session_id: str, after: int) -> Feed:
        future: asyncio.Future[Feed | None] = asyncio.get_running_loop().create_future()
        self._opening[session_id] = (project, future)
        try:
            watch = await self.daemon.stream(WatchRequest(project, session_id, after), idle_timeout=None)
        except asyncio.CancelledError:  # the browser that asked first went away
            future.set_result(None)
            raise
        except Exception as error:
            future.set_exception(error)
            future.exception()  # retrieved: nobody else may be waiting for it
            raise
        finally:
            self._opening.pop(session_id, None)
        feed = Feed(session_id, watch, after, self)
        self._table.put(session_id, feed)
        future.set_result(feed)
        return feed

    def forget(self, feed: Feed) -> None:
        self._table.discard(feed.session_id, feed)

    async def close(self) -> None:
        feeds = self._feeds()
        for feed in feeds:
            feed.close()
        for feed in feeds:
            await feed.wait_closed()
