"""`chock daemon`: the lifecycle (docs/architecture.md#the-daemon).

`run()` checks the options, takes `daemon.lock` (one daemon per state dir), opens the listeners under it, says
READY=1 once every one of them serves, and serves until SIGINT or SIGTERM (or `--idle-exit`): then it stops
accepting, says STOPPING=1, closes the listeners (removing only a socket it bound itself) and exits 0.
Sessions keep running: they are `chock run` children in their own process groups (or scope units), and the
next daemon finds them in the state dir.

The main thread runs one selector loop: it accepts, reads every connection's greeting and request under the
bounds of `chock.daemon.accepted`, answers the short verbs itself, hands the long ones to a thread each, and
does the housekeeping (reaping children on SIGCHLD, watchdog pings, the status record, the idle clock).
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import socket
import time

from chock.control.daemon_protocol import PROTOCOL
from chock.control.framing import ErrorCode, ProtocolError
from chock.daemon import listeners, resume
from chock.daemon.accepted import READING, Connection, inline, peer_refusal
from chock.daemon.children import Children
from chock.daemon.context import Daemon
from chock.daemon.lock import DaemonLock
from chock.daemon.status import Status
from chock.errors import UsageError
from chock.paths import Layout, ensure_dir
from chock.platform import manager
from chock.platform.listening import Listener
from chock.platform.peer import peer_uid

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from pathlib import Path

# Connections still sending their request, each holding at most one bounded line and no thread. At the cap,
# the one that has waited longest is cut to make room, so clients that have not finished a request cannot
# hold the daemon's slots for long (each is cut at its own deadline anyway).
MAX_WAITING = 256

# Connections answered in a thread (start, adopt, answer, watch): past this a verb is told to come back.
MAX_THREADED = 256

# The main loop's longest sleep: how late a reaped child, an idle exit or a status update may be.
TICK = 0.5

# The status record is rewritten at most this often (and at start and stop).
STATUS_EVERY = 0.5

# At shutdown, verbs already being answered (a `start` waiting for its child) get this long to finish.
SHUTDOWN_GRACE = 5.0


def run(
    layout: Layout,
    *,
    socket_path: str | Path | None = None,
    host: str | None = None,
    port: int | None = None,
    idle_exit: float | None = None,
) -> int:
    """Serve until told to stop; returns the exit code (0)."""
    if port is not None and host is None:
        # Refused by name rather than obeyed: obeying it would open a listener nobody asked for.
        raise UsageError(
            "--port needs --host: the daemon listens on TCP only at an address you name "
            "(e.g. --host 127.0.0.1 --port 7890)"
        )
    if port is not None and not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a port (0 to 65535; 0 lets the system choose)")
    if idle_exit is not None and not idle_exit > 0:
        raise UsageError("--idle-exit takes a number of seconds greater than 0")
    ensure_dir(layout.state_dir)
    lock = DaemonLock.acquire(os.path.join(layout.state_dir, "daemon.lock"))
    try:
        server = Server(layout, idle_exit=idle_exit)
        server.listen(socket_path, host, port)
        return server.serve()
    finally:
        lock.release()


class Server:
    def __init__(self, layout: Layout, *, idle_exit: float | None = None) -> None:
        self.layout = layout
        self.idle_exit = idle_exit
        status = Status(layout.state_dir)
        children = Children(
            layout, status, under_manager=manager.under_user_manager, move_to_scope=manager.move_to_scope
        )
        self.daemon = Daemon(layout, status, children)
        self.listeners: list[Listener] = []
        self._connections: set[Connection] = set()  # those the selector loop owns (not handed to a thread)
        self._stopping: str | None = None

    # Listeners ------------------------------------------------------------------------------------------

    def listen(self, socket_path: str | Path | None, host: str | None, port: int | None) -> None:
        """Open every listener; on any failure close those already open and raise."""
        try:
            self.listeners = listeners.activated()
            # Under socket activation the default socket is the unit's, handed over above; a --socket named
            # explicitly is bound as well, unless it is that very socket.
            if socket_path is not None or not self.listeners:
                path = os.fspath(socket_path if socket_path is not None else self.layout.daemon_socket)
                if f"unix:{path}" not in {listener.address for listener in self.listeners}:
                    self.listeners.append(listeners.bind_unix(path, create_parent=True))
            if host is not None:
                tcp = listeners.bind_tcp(host, listeners.DEFAULT_PORT if port is None else port)
                self.listeners.append(tcp)
                print(f"listening on {tcp.address}", flush=True)
        except BaseException:
            self._close_listeners()
            raise

    def _close_listeners(self) -> None:
        for listener in self.listeners:
            listener.close()

    # The loop ---------------------------------------------------------------------------------------

    def serve(self) -> int:
        status = self.daemon.status
        selector = selectors.DefaultSelector()
        wake_r, wake_w = socket.socketpair()
        for sock in (wake_r, wake_w):
            sock.setblocking(False)
        previous = self._install_signals(wake_w)
        try:
            for listener in self.listeners:
                listener.sock.setblocking(False)
                selector.register(listener.sock, selectors.EVENT_READ, listener)
            selector.register(wake_r, selectors.EVENT_READ, None)
            addresses = [listener.address for listener in self.listeners]
            status.set_listeners(addresses)
            status.set_state("serving")
            status.write()
            status.activity("start", protocol=PROTOCOL, listeners=len(addresses))
            manager.notify("READY=1", f"STATUS=serving {', '.join(addresses)} (chock-control {PROTOCOL})")
            resume.after_start(self.daemon)  # what a reboot interrupted, carried on when config.zon says so
            self._loop(selector, wake_r)
        finally:
            reason = self._stopping or "error"
            with contextlib.suppress(Exception):
                manager.notify("STOPPING=1")
            self._finish_replies(selector)
            selector.close()
            self._wait_for_verbs()
            status.activity("stop", reason=reason)
            status.set_state("stopped")
            self._update_status(force=True)
            self._restore_signals(previous)
            wake_r.close()
            wake_w.close()
        return 0

    def _loop(self, selector: selectors.BaseSelector, wake_r: socket.socket) -> None:
        watchdog = manager.watchdog_interval()
        tick = TICK if not watchdog else min(TICK, watchdog / 2)
        next_ping = time.monotonic()
        last_status = 0.0
        while self._stopping is None:
            now = time.monotonic()
            soonest = min((c.deadline for c in self._connections), default=now + tick)
            for key, events in selector.select(max(0.0, min(tick, soonest - now))):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        while wake_r.recv(4096):
                            pass
                elif isinstance(key.data, Connection):
                    self._serve(selector, key.data, events)
                else:
                    self._accept(selector, key.data)
            if self._stopping is not None:
                return
            now = time.monotonic()
            for connection in [c for c in self._connections if c.deadline <= now]:
                if connection.expired(now):
                    self._forget(selector, connection)
            self.daemon.children.reap()
            if watchdog and now >= next_ping:
                manager.notify("WATCHDOG=1")
                next_ping = now + watchdog / 2
            if self.idle_exit is not None and self.daemon.idle_for() >= self.idle_exit:
                self._stopping = "idle"
                return
            if now - last_status >= STATUS_EVERY:
                self._update_status()
                last_status = now

    def _accept(self, selector: selectors.BaseSelector, listener: Listener) -> None:
        """Take one connection from `listener`. One a turn: the selector is level-triggered, so a listener with
        more waiting is ready again at the next turn (a burst is taken whole, a turn each), and the usual lone
        client costs no second accept that finds nothing."""
        daemon, status = self.daemon, self.daemon.status
        try:
            sock, _ = listener.sock.accept()
        except BlockingIOError:
            return  # taken by another process sharing the listener, or gone before it was taken
        except OSError as error:
            status.error("accept", error)
            if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                time.sleep(0.05)  # out of descriptors: let connections finish instead of spinning
            return
        status.count("accepted")
        sock.setblocking(False)
        now = time.monotonic()
        daemon.opened()
        connection = Connection(daemon, sock, listener, now)
        self._connections.add(connection)
        self._watch(selector, connection)
        refusal = peer_refusal(sock) if listener.checks_peer else None
        if refusal is not None:
            connection.refuse(refusal, now, "forbidden", peer_uid=peer_uid(sock))
        elif len(self._waiting()) > MAX_WAITING:
            oldest = min(self._waiting(), key=lambda c: c.opened)
            oldest.refuse(ProtocolError(ErrorCode.REFUSED, "too many connections; try again shortly"), now, "too_many")
            self._settle(selector, oldest)
        if connection.phase == READING:
            # A client sends its greeting and request as soon as it connects, so they are usually here
            # already: read them now rather than a turn of the loop later (nothing yet is no error).
            self._serve(selector, connection, selectors.EVENT_READ)
        else:
            self._settle(selector, connection)

    def _waiting(self) -> list[Connection]:
        return [c for c in self._connections if c.phase == READING]

    def _serve(self, selector: selectors.BaseSelector, connection: Connection, events: int) -> None:
        now = time.monotonic()
        if events & selectors.EVENT_WRITE and connection.wants_write:
            connection.writable(now)
        if events & selectors.EVENT_READ and not connection.closed:
            request = connection.readable(now)
            if request is not None:
                if inline(request) and connection.answer_inline():
                    pass
                elif self.daemon.active - len(self._connections) >= MAX_THREADED:
                    refusal = ProtocolError(ErrorCode.REFUSED, "too many connections; try again shortly")
                    connection.refuse(refusal, now, "too_many")
                else:
                    selector.unregister(connection.sock)
                    connection.watched = 0
                    self._connections.discard(connection)
                    if not connection.hand_to_thread():
                        self._connections.add(connection)
                        self._watch(selector, connection)
                        refusal = ProtocolError(ErrorCode.REFUSED, "the daemon cannot take more connections now")
                        connection.refuse(refusal, now, "too_many")
                    else:
                        return
        self._settle(selector, connection)

    def _settle(self, selector: selectors.BaseSelector, connection: Connection) -> None:
        """After an event: forget a closed connection, or watch for what it waits on now."""
        if connection.closed:
            self._forget(selector, connection)
            return
        mask = (selectors.EVENT_READ if connection.wants_read else 0) | (
            selectors.EVENT_WRITE if connection.wants_write else 0
        )
        if connection.watched and connection.watched != mask:
            with contextlib.suppress(KeyError, ValueError):
                selector.modify(connection.sock, mask, connection)
                connection.watched = mask

    def _watch(self, selector: selectors.BaseSelector, connection: Connection) -> None:
        selector.register(connection.sock, selectors.EVENT_READ, connection)
        connection.watched = selectors.EVENT_READ

    def _forget(self, selector: selectors.BaseSelector, connection: Connection) -> None:
        """Stop watching a connection, then close it (its socket still open, so unwatching it is one call)."""
        self._connections.discard(connection)
        if connection.watched:
            with contextlib.suppress(KeyError, ValueError, OSError):
                selector.unregister(connection.sock)
            connection.watched = 0
        connection.close()

    def _finish_replies(self, selector: selectors.BaseSelector) -> None:
        """Stopping: the replies the loop is writing (a `read`, a `list`) get SHUTDOWN_GRACE to finish, so a
        restart does not cut a client's read short; every other connection of the loop is closed now, and so are
        the listeners, so a client that connects meanwhile is refused at once (and finds the next daemon)."""
        for key in list(selector.get_map().values()):
            selector.unregister(key.fileobj)
        self._close_listeners()
        writing = set()
        for connection in self._connections:
            if connection.wants_write:
                selector.register(connection.sock, selectors.EVENT_WRITE, connection)
                writing.add(connection)
            else:
                connection.close()
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while writing and (now := time.monotonic()) < deadline:
            for key, _ in selector.select(min(TICK, deadline - now)):
                connection = key.data
                connection.writable(time.monotonic())
                if not connection.wants_write:  # written whole (or gone): the close needs no lingering now
                    selector.unregister(connection.sock)
                    connection.close()
                    writing.discard(connection)
        for connection in writing:
            connection.close()  # still writing at the deadline: cut (a client sees the reply end mid-line)
        self._connections.clear()

    def _wait_for_verbs(self) -> None:
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while self.daemon.active > self.daemon.watching and time.monotonic() < deadline:
            time.sleep(0.05)

    def _update_status(self, *, force: bool = False) -> None:
        daemon = self.daemon
        daemon.status.gauges(active=daemon.active, watching=daemon.watching, owned=daemon.children.owned())
        if force or daemon.status.dirty:
            daemon.status.write()

    # Signals --------------------------------------------------------------------------------------------

    def _install_signals(self, wake_w: socket.socket) -> dict[int, object]:
        previous: dict[int, object] = {}

        def stop(signum: int, _frame: object) -> None:
            self._stopping = signal.Signals(signum).name

        # SIGHUP too: a daemon started from a terminal that closes stops cleanly instead of leaving its socket.
        handlers = ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, stop), (signal.SIGCHLD, _nothing))
        for signum, handler in handlers:
            previous[signum] = signal.signal(signum, handler)
        previous[-1] = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        return previous

    def _restore_signals(self, previous: dict[int, object]) -> None:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(previous.pop(-1))  # type: ignore[arg-type]
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler)  # type: ignore[arg-type]


def _nothing(_signum: int, _frame: object) -> None:
    """SIGCHLD's handler: its only job is to wake the loop (through the wakeup fd) to reap."""
