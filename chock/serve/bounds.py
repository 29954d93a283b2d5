"""A whole-request bound in front of aiohttp: a request's head must arrive within LINE_SECONDS of its first byte.

aiohttp bounds the size of a head and the time a connection idles between requests, but not the time a client
takes to send one: a client that trickles a header a byte at a time holds its connection as long as it likes.
`BoundedSite` puts a thin protocol in front of each connection's aiohttp handler that arms a timer on the first
byte of a request and aborts the connection when the head has not been parsed by then — the same rule the
daemon and a session's sockets follow (docs/protocol.md#bounds). A body is bounded by its reader
(`chock.serve.api`), and a long answer (an SSE stream) sends no bytes this way, so it is never cut.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from chock.control.framing import LINE_SECONDS


class _HeadBound(asyncio.Protocol):
    """aiohttp's protocol for one connection, with a deadline on each request's head."""

    def __init__(self, handler: asyncio.Protocol, seconds: float) -> None:
        self._handler = handler
        self._seconds = seconds
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        # aiohttp counts the requests whose head it parsed; where it does not (another version), nothing is cut.
        parsed = getattr(self._handler, "_request_count", None)
        if self._deadline is None and parsed is not None:
            self._deadline = asyncio.get_running_loop().call_later(self._seconds, self._expire)
        self._handler.data_received(data)
        if parsed is not None and getattr(self._handler, "_request_count", parsed) > parsed and self._deadline:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._transport is not None:
            self._transport.abort()

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class BoundedSite(web.SockSite):
    """A `SockSite` whose connections are `_HeadBound` around aiohttp's own protocol."""

    seconds = LINE_SECONDS

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _HeadBound(server(), self.seconds), sock=self._sock, backlog=self._backlog
        )
