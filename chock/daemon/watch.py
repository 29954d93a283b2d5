"""`watch`: one follower per watched session, fanned out to every watcher of it.

A `Follower` reads its session's log as it grows (woken by inotify on Linux, else a short poll), folds
each new event into the session's row, and publishes each batch of new lines to its fan-out
(`chock.log.fanout`, which holds the rules: who is owed what, the bound, no gap and no repeat): the log is
read and parsed once per session, however many watch it. This module is the fan-out's pump on threads.
A `Subscription` sends without waiting when the watcher's socket has room, so a hundred watchers of a busy
session cost the follower a hundred non-blocking sends per batch and no thread switch; what does not fit
waits in the subscriber for the watcher's own connection thread, which sends it with a bound. A watcher
that falls too far behind, or stops reading, is closed, and resumes by reconnecting with the last id it
has.

The fan-out keeps nothing in memory: a new subscription is taken under the follower's lock, gets the lines
after its id up to where the follower has read (streamed from the file, never held whole), then every
batch after that.

A watch ends when the session ends (a `session.end` whose reason is not `handover`: a handover
is not an end, the log goes on under the new owner), when it is abandoned (the lock is free with no end
after the latest start or adopt), and 30 s after a handover end that nobody adopted. Every line the log
held when that became true is sent first.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from pathlib import Path

from chock.control.daemon_protocol import WatchHeader
from chock.control.framing import ErrorCode, ProtocolError
from chock.log.events import MAX_EVENT_BYTES, decode
from chock.log.fanout import Fanout, Fanouts, Subscriber
from chock.log.reader import offset_after, owner_alive
from chock.log.row import RowState
from chock.paths import Layout

# A watch closes this long after a handover end that nobody adopted (the next owner may yet adopt it).
HANDOVER_WAIT = 30.0

# How often a follower probes the lock of a session with no end, to notice one that was killed. Linux also
# wakes it when a writer closes the log (the owner's death closes its descriptor), so this is the bound,
# not the usual delay.
PROBE_INTERVAL = 0.25

# Without inotify the log is polled this often: the latency of delivery, and 40 fstat calls a second per
# watched session (not per watcher) when it is quiet.
POLL_INTERVAL = 0.025

# A log that exists with no event yet is a session being created (`SessionLog.create` opens, then locks):
# it is not called abandoned until it stays so for this long.
EMPTY_GRACE = 5.0

# What one watcher may fall behind before it is closed, in bytes (its count of lines is not bounded
# apart): far more than a live session writes while a watcher catches up on a backlog, small enough that a
# stuck client costs little. It reconnects with the last id it has and loses nothing.
MAX_PENDING = 32 * 1024 * 1024

# A watcher whose socket takes nothing for this long is gone (the control protocol's idle bound).
SEND_TIMEOUT = 30.0

# An idle watcher's connection is checked this often for its client having gone away.
PEER_CHECK = 1.0

# The backlog is streamed from the file in pieces of this size.
CHUNK = 256 * 1024

# What one send takes from a watcher's queue (whole batches, so at least one): a watcher far behind is sent
# its queue piece by piece rather than joined into one more copy of it.
PIECE = 1024 * 1024


class Subscription:
    """One watcher's connection: its subscriber on the follower's fan-out, and the thread that writes to it.

    The follower's thread sends what fits without waiting when this thread is not sending (`kick`); the rest
    waits in the subscriber for this thread, which sends it with a bound. Both sides run under the
    follower's lock, which the condition shares.
    """

    def __init__(
        self, follower: Follower, sock: socket.socket, header: bytes, backlog: tuple[int, int], subscriber: Subscriber
    ) -> None:
        self.follower = follower
        self.sock = sock
        self.subscriber = subscriber
        self._header = header
        self._backlog = backlog  # byte range of the log to stream first
        self._cond = threading.Condition(follower.lock)
        self._sending = True  # the header and backlog go first, from the watcher's thread

    # The follower's side (under the follower's lock) ----------------------------------------------------

    def kick(self) -> None:
        """After a batch, or at the end: send what fits now, or wake the watcher's thread for the rest."""
        subscriber = self.subscriber
        if not subscriber.ready:
            return
        if self._sending or subscriber.done or subscriber.final is not None:
            self._cond.notify()
            return
        data = subscriber.take(PIECE)
        if not data:
            return
        try:
            sent = self.sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError:
            subscriber.cut_off()
            sent = len(data)
        if sent < len(data):
            subscriber.give_back(memoryview(data)[sent:])
        if subscriber.ready:
            self._cond.notify()

    # The watcher's side (its connection's thread) -------------------------------------------------------

    def serve(self) -> None:
        """Send the header, the backlog, then everything delivered, until the watch ends or the client goes."""
        ok = _send_all(self.sock, self._header) and self._stream_backlog()
        subscriber = self.subscriber
        with self._cond:
            self._sending = False
            if not ok:
                subscriber.cut_off()
        while True:
            with self._cond:
                if not subscriber.ready:
                    self._cond.wait(PEER_CHECK)
                if subscriber.done:
                    return
                data = subscriber.take(PIECE)
                self._sending = bool(data)
            if not data:
                if _peer_gone(self.sock):
                    return
                continue
            ok = _send_all(self.sock, data)
            with self._cond:
                self._sending = False
                if not ok:
                    subscriber.cut_off()
                    return

    def _stream_backlog(self) -> bool:
        start, end = self._backlog
        if start >= end:
            return True
        try:
            with open(self.follower.path, "rb") as handle:
                handle.seek(start)
                while start < end:
                    data = handle.read(min(CHUNK, end - start))
                    if not data:
                        return True  # the file shrank under us (cut by hand): nothing more to send
                    start += len(data)
                    if not _send_all(self.sock, data):
                        return False
        except OSError:
            return False
        return True


class Follower:
    """Reads one session's log as it grows and publishes each new batch to the fan-out of its watchers."""

    def __init__(self, hub: Hub, session_id: str, path: Path) -> None:
        self.hub = hub
        self.session_id = session_id
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.state = RowState()  # the row fold: a watch never builds the conversation, however long the log
        self.state.id = session_id
        self.last_id = 0
        self._offset = 0  # end of the last complete line read
        self.lock = threading.Lock()
        self._subs: list[Subscription] = []
        self._handover_deadline: float | None = None
        self._next_probe = 0.0
        self._empty_since = time.monotonic()
        self._waker = _Waker(path)
        while self._read() is not None:  # the fold of everything already there; nobody to deliver it to
            pass
        # No memory: a watcher behind the follower reads the log itself, from the file.
        self.fanout = Fanout(self.last_id, pending_lines=MAX_PENDING, pending_bytes=MAX_PENDING)
        self._thread = threading.Thread(target=self._run, name=f"watch-{session_id}", daemon=True)

    @property
    def closed(self) -> bool:
        return self.fanout.closed

    def of_project(self, project: str) -> bool:
        """Whether `project` is this session's project, both resolved to their real path."""
        return bool(self.state.project) and os.path.realpath(self.state.project) == os.path.realpath(project)

    def discard(self) -> None:
        """Let go of a follower that was never started (it was asked about another project)."""
        self._waker.close()
        os.close(self._fd)

    def start(self) -> None:
        if not self._thread.is_alive() and self._thread.ident is None:
            self._thread.start()

    def subscribe(self, sock: socket.socket, after: int) -> Subscription | None:
        """A new watcher from `after`; None when this follower has just closed (the hub makes another)."""
        with self.lock:
            if self.closed:
                return None
            alive = False if self.state.ended else owner_alive(self.path)
            header = WatchHeader(self.state.row(alive)).encode()
            join = self.fanout.join(after)
            backlog = (self._offset, self._offset)
            if join.backfill:
                with open(self.path, "rb") as handle:
                    backlog = (offset_after(handle, after), self._offset)
            join.subscriber.backfilled(self.last_id)  # the backlog ends exactly there
            sub = Subscription(self, sock, header, backlog, join.subscriber)
            self._subs.append(sub)
            self._check_end(probe=True)
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self.lock:
            self.fanout.leave(sub.subscriber)
            if sub in self._subs:
                self._subs.remove(sub)
            if not self._subs and not self.closed:
                self._close()

    # The follower's thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.closed:
                writer_closed = self._waker.wait(PROBE_INTERVAL)
                with self.lock:
                    if self.closed:
                        break
                    self._pump()
                    self._check_end(probe=writer_closed)
        finally:
            self._waker.close()
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self.hub.forget(self)

    def _pump(self) -> None:
        while (batch := self._read()) is not None:
            if self.fanout.publish(*batch) is not None:
                for sub in self._subs:
                    sub.kick()

    def _read(self) -> tuple[bytes, tuple[tuple[int, int], ...]] | None:
        """The next complete lines appended since the last read (a few MiB at most), folded into the row:
        their bytes, and where each starts with its id (a line that is no event takes the id before it)."""
        size = os.fstat(self._fd).st_size
        if size <= self._offset:
            return None
        # Read from the end of the last complete line each time: a torn tail is never kept, so a next
        # owner cutting it and appending cannot splice two lines together here.
        data = os.pread(self._fd, min(size - self._offset, 4 * MAX_EVENT_BYTES + CHUNK), self._offset)
        end = data.rfind(b"\n") + 1
        if end == 0:
            return None
        data = data[:end]
        self._offset += end
        marks = []
        start = 0
        while start < end:
            stop = data.index(b"\n", start) + 1
            event = decode(data[start:stop])
            if event is not None:
                event_id = event.get("id")
                if isinstance(event_id, int) and event_id > self.last_id:
                    self.last_id = event_id
                self.state.apply(event)
            marks.append((self.last_id, start))
            start = stop
        return data, tuple(marks)

    def _check_end(self, *, probe: bool = False) -> None:
        now = time.monotonic()
        state = self.state
        if state.ended:
            if state.end_reason != "handover":
                self._close()
                return
            if self._handover_deadline is None:
                self._handover_deadline = now + max(0.0, HANDOVER_WAIT - _age(state.ended_at))
            if now >= self._handover_deadline:
                self._close()
            return
        self._handover_deadline = None
        if not (probe or now >= self._next_probe):
            return
        self._next_probe = now + PROBE_INTERVAL
        if owner_alive(self.path):
            return
        # The lock is free: every line its owner wrote is in the file now. Send them, then decide.
        self._pump()
        if state.ended:
            self._check_end()
            return
        if self.last_id == 0 and now - self._empty_since < EMPTY_GRACE:
            return  # a log just created, not locked yet
        self._close()  # abandoned

    def _close(self) -> None:
        self.fanout.close(True)
        for sub in self._subs:
            sub.kick()
        self._subs.clear()
        self._waker.interrupt()


class Hub:
    """The followers of every watched session, by id: at most one per session."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._followers = Fanouts()

    def subscribe(self, project: str, session_id: str, sock: socket.socket, after: int) -> Subscription:
        """A watcher of the session `session_id` of `project` (compared by real path) from `after`; a
        `not-found` ProtocolError, before anything is sent, when there is no such session.

        The follower's own fold answers that, so a watch reads the log once, however long it is.
        """
        path = self.layout.log_path(session_id)
        with self._lock:
            while True:
                follower = self._followers.get(session_id)
                if not isinstance(follower, Follower) or follower.closed:
                    try:
                        follower = Follower(self, session_id, path)
                    except FileNotFoundError:
                        raise ProtocolError(ErrorCode.NOT_FOUND, f"there is no session {session_id}") from None
                    if not follower.of_project(project):
                        follower.discard()
                    else:
                        self._followers.put(session_id, follower)
                if not follower.of_project(project):
                    raise ProtocolError(
                        ErrorCode.NOT_FOUND,
                        f"session {session_id} is not a session of {project} (it works in {follower.state.project})",
                    )
                sub = follower.subscribe(sock, after)
                follower.start()  # only now: a follower never closes before its first watcher is in
                if sub is not None:
                    return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.follower.unsubscribe(sub)

    def forget(self, follower: Follower) -> None:
        with self._lock:
            self._followers.discard(follower.session_id, follower)


# --------------------------------------------------------------------------------------------------------
# Sockets


def _send_all(sock: socket.socket, data: bytes, timeout: float = SEND_TIMEOUT) -> bool:
    """Send everything, waiting at most `timeout` for the socket to take more; False when it never does."""
    view = memoryview(data)
    deadline = time.monotonic() + timeout
    while view:
        try:
            sent = sock.send(view, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError:
            return False
        view = view[sent:]
        if view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            _wait(sock.fileno(), min(remaining, 1.0), write=True)
    return True


def _wait(fds: int | list[int], timeout: float, *, write: bool = False) -> set[int]:
    """The descriptors among `fds` that are ready within `timeout` (poll: no FD_SETSIZE limit)."""
    fds = [fds] if isinstance(fds, int) else fds
    if hasattr(select, "poll"):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLOUT if write else select.POLLIN)
        return {fd for fd, _ in poller.poll(timeout * 1000)}
    ready = select.select([], fds, [], timeout)[1] if write else select.select(fds, [], [], timeout)[0]
    return set(ready)


def _peer_gone(sock: socket.socket) -> bool:
    """Whether the watcher closed its connection; whatever it sent after its one verb is read and dropped.

    On a unix socket, end of file alone is not gone: a client may shut only its sending side (`nc -N`, socat)
    and go on reading, and a peer that closed polls as hung up. TCP cannot tell the two apart (a close and a
    half-close are both a FIN), and a quiet session writes nothing that would fail, so there end of file is
    gone (docs/protocol.md#bounds)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    for _, events in poller.poll(0):
        if events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
            return True
        try:
            data = sock.recv(64 * 1024, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return not data and sock.family != socket.AF_UNIX
    return False


def _age(at: str) -> float:
    """Seconds since an event's `at` (0 when it cannot be read)."""
    from datetime import datetime  # not on the daemon's start-up path (docs/architecture.md#start-up)

    try:
        return max(0.0, time.time() - datetime.fromisoformat(at).timestamp())
    except (TypeError, ValueError):
        return 0.0


# --------------------------------------------------------------------------------------------------------
# Waking up when the log changes


class _Waker:
    """inotify on the log where there is one (IN_MODIFY: lines appended; IN_CLOSE_WRITE: a writer let go,
    maybe by dying), else a sleep of POLL_INTERVAL; `interrupt()` ends a wait at once."""

    def __init__(self, path: Path) -> None:
        from chock.platform import inotify  # lazily: a daemon that has not been asked to watch never loads it

        self._inotify = inotify.open_inotify()
        self._writer_closed = inotify.IN_CLOSE_WRITE
        if self._inotify is not None and self._inotify.add(path, inotify.IN_MODIFY | inotify.IN_CLOSE_WRITE) < 0:
            self._inotify.close()
            self._inotify = None
        self._interrupt_r, self._interrupt_w = os.pipe()
        os.set_blocking(self._interrupt_w, False)

    def wait(self, timeout: float) -> bool:
        """Wait for a change or `timeout`; True when a writer closed the log."""
        if self._inotify is None:
            _wait(self._interrupt_r, min(timeout, POLL_INTERVAL))
            return False
        ready = _wait([self._inotify.fileno(), self._interrupt_r], timeout)
        if self._inotify.fileno() not in ready:
            return False
        return any(mask & self._writer_closed for _, mask, _ in self._inotify.read())

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._interrupt_w, b"x")

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        for fd in (self._interrupt_r, self._interrupt_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._interrupt_r = self._interrupt_w = -1
