"""serve's listening sockets, and the site that serves them with a bound on each request's head.

The sockets: `<state>/serve.sock`, `--socket PATH`, `--host ADDR [--port N]`, or the ones the service manager
hands over under the name `http` (LISTEN_FDS; launchd's `Sockets`). They follow the daemon's rules, in
`chock.platform.listening`: 0600, a stale socket replaced and anything else refused, only the socket serve bound
removed at shutdown, a socket handed over by socket activation never bound, unlinked or chmod-ed here. What is
serve's own: the `http` name, the port, and non-blocking sockets for the event loop.

The bounds (docs/architecture.md#serve): aiohttp bounds the size of a request's head and, with
`keepalive_timeout`, the time a connection idles between requests, but not the time a client takes to send a
head, nor the time before a connection's first request: a client that trickles a header a byte at a time, or
opens a connection and says nothing, would hold it as long as it liked. `BoundedSite` puts a thin protocol in
front of each connection's aiohttp handler that gives a head HEAD_SECONDS: from the connection's opening to the
end of its first request's head, and from the first byte of each later request to the end of its head; a head
not parsed by then aborts the connection — the rule the daemon and a session's sockets follow
(docs/protocol.md#bounds). Nothing is armed while a request is handled: its body is bounded by its reader
(`chock.serve.api`), and a long answer (an SSE stream) is never cut.

And at most MAX_CONNECTIONS at once, each an open file: at the cap, a new connection closes the one that has
waited longest for a request's head (idle between requests, or yet to send one), as the daemon cuts its longest
waiting connection; when every one is busy answering, the new one is closed instead. So idle connections, however
many a local process opens, never take the descriptors serve needs to answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web, web_protocol

from chock.control.framing import LINE_SECONDS
from chock.errors import UsageError
from chock.platform import listening
from chock.platform.listening import Listener
from chock.serve import headers
from chock.serve.feeds import STREAMS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The daemon's TCP default is 7890.
DEFAULT_PORT = 7891

# Connections waiting to be accepted. A browser opens a handful at a time (six per host in Chromium), and
# a page of many sessions at most a few dozen; more than this queued means serve is stuck, not busy.
BACKLOG = 128

# The name of serve's sockets in LISTEN_FDNAMES (`FileDescriptorName=http` in chock-serve.socket).
FD_NAME = "http"

# A request's head, from its first byte (a connection's first request: from the opening) to the end of its
# headers: the daemon's bound on a request line, for the same reason — a browser writes a head in one go.
HEAD_SECONDS = LINE_SECONDS

# A connection idle between requests (aiohttp's `keepalive_timeout`, set on the runner so that it is the same on
# every aiohttp: an AppRunner's own default is 75 s on Debian 12's 3.8 and an hour on 3.14). nginx's default, and
# `web.run_app`'s: long enough that the page's next click reuses its connection, short enough that connections
# a browser forgot do not pile up. The page's event stream is an answer being sent, never idle.
KEEPALIVE_SECONDS = 75.0

# Connections open at once: every event stream serve keeps (feeds.STREAMS) and 128 more for requests. With a
# daemon connection behind each request and each session watched (feeds.SESSIONS), that stays inside the 1,024
# descriptors a user service gets.
MAX_CONNECTIONS = STREAMS + 128


def check_options(socket_path: Path | None, host: str | None, port: int | None) -> None:
    """`--port` without `--host` is refused by name (it would open a listener nobody asked for); a unix socket
    and TCP are one choice."""
    if port is not None and host is None:
        raise UsageError(
            "--port needs --host: serve listens on TCP only where --host names an address "
            "(for example --host 127.0.0.1 --port 7891); without --host it serves <state>/serve.sock"
        )
    if host is not None and socket_path is not None:
        raise UsageError("--socket and --host each name serve's listener; give one of them")
    if port is not None and not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port (0 to 65535; 0 picks a free one)")
    if host is not None and not host.strip():
        raise UsageError("--host needs an address, such as 127.0.0.1")


def bind_unix(path: Path) -> Listener:
    """A unix listener at `path`, 0600 from the moment it exists; a stale socket is replaced, a live one or
    a file that is not a socket is refused by name."""
    sock, owned = listening.bind_unix(path, backlog=BACKLOG, owner="chock serve", others="another chock serve?")
    sock.setblocking(False)
    return Listener(sock, owned=owned)


def bind_tcp(host: str, port: int | None) -> Listener:
    bare = host.strip("[]")
    sock = listening.bind_tcp(bare, DEFAULT_PORT if port is None else port, backlog=BACKLOG)
    sock.setblocking(False)
    return Listener(sock)


def activated() -> list[Listener] | None:
    """The listeners the service manager handed over under the name `http` — systemd's LISTEN_FDS, or
    launchd's `Sockets` entry on macOS — or None when serve was started by hand."""
    sockets = listening.activated(FD_NAME)
    if not sockets:
        return None
    for sock in sockets:
        sock.setblocking(False)
    return [Listener(sock) for sock in sockets]


class _HeadBound(asyncio.Protocol):
    """aiohttp's protocol for one connection, with a deadline on each request's head and on nothing else.

    aiohttp counts the requests whose head it parsed (`_request_count`) and, while it waits for the next one,
    holds a pending `_waiter`; where a version has neither, nothing is cut. A byte that arrives while a request
    is handled is its body (or a pipelined request, bounded once the connection idles), never a new head."""

    def __init__(self, handler: asyncio.Protocol, seconds: float, open_now: dict[_HeadBound, None]) -> None:
        self._handler = handler
        self._seconds = seconds
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._bounded = hasattr(handler, "_request_count") and hasattr(handler, "_waiter")
        self._open_now = open_now  # the site's connections, oldest first
        self._closing = False  # closed to make room: gone once the loop says so, no longer counted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        staying = [other for other in self._open_now if not other._closing]
        if len(staying) >= MAX_CONNECTIONS:
            waiting = next((other for other in staying if other.waits_for_a_head()), None)
            if waiting is None:  # every one is answering: this one waits for none of them
                self._expire()
                return
            waiting._closing = True
            waiting._expire()
        self._open_now[self] = None
        self._handler.connection_made(transport)
        if self._bounded:
            self._arm()  # the first request's head is due from the opening, as the daemon's first line is

    def waits_for_a_head(self) -> bool:
        """Whether this connection is answering nothing: idle between requests, or yet to send one."""
        return self._bounded and self._awaiting_head()

    def data_received(self, data: bytes) -> None:
        if not self._bounded:
            self._handler.data_received(data)
            return
        parsed = self._handler._request_count  # type: ignore[attr-defined]
        if self._deadline is None and self._awaiting_head():
            self._arm()
        self._handler.data_received(data)
        if self._handler._request_count > parsed:  # type: ignore[attr-defined]
            self._disarm()

    def _awaiting_head(self) -> bool:
        """Whether aiohttp waits for the next request: it handles none, and has none queued."""
        waiter = self._handler._waiter  # type: ignore[attr-defined]
        return waiter is not None and not waiter.done()

    def _arm(self) -> None:
        self._deadline = asyncio.get_running_loop().call_later(self._seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._transport is not None:
            self._transport.abort()

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._open_now.pop(self, False) is not False:  # a connection refused at the cap was never handed on
            self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class BoundedSite(web.SockSite):
    """A `SockSite` whose connections are `_HeadBound` around aiohttp's own protocol."""

    seconds = HEAD_SECONDS

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        open_now: dict[_HeadBound, None] = {}
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _HeadBound(_secure_errors(server()), self.seconds, open_now), sock=self._sock, backlog=self._backlog
        )


class _SecureErrors(web_protocol.RequestHandler):
    """aiohttp's protocol for one connection, whose own error responses carry the security headers too.

    A request its parser refuses (a bad request line, a header past its limit or with a byte HTTP forbids) is
    answered by `RequestHandler.handle_error` without the application, so `on_response_prepare` never sees that
    400; aiohttp 3.8 (Debian 12) and later versions alike build every such response (and a handler's 500 or
    504) in that one method."""

    __slots__ = ()

    def handle_error(self, *args: Any, **kwargs: Any) -> web.StreamResponse:
        response: web.StreamResponse = super().handle_error(*args, **kwargs)
        headers.secure(response)
        return response


def _secure_errors(handler: web_protocol.RequestHandler) -> web_protocol.RequestHandler:
    """The handler `web.Server` made, as a `_SecureErrors` (it adds no state: the same object, one more method);
    made by the server, so every argument it gives its handlers is kept on every aiohttp."""
    handler.__class__ = _SecureErrors
    return handler
