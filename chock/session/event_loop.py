"""The session's event loop: one thread, whatever it waits for (docs/architecture.md#chock-run)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys


class SingleThreadedLoop(asyncio.SelectorEventLoop):
    """An event loop that never starts a thread: name lookups run inline (a loopback or numeric address
    resolves at once; a real name costs one blocking lookup per connection, which a model call dwarfs)."""

    async def getaddrinfo(
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int] | tuple[str, int, int, int]]]:
        # socket's stub also allows an (int, bytes) address, what getaddrinfo gives for a family it cannot decode.
        return socket.getaddrinfo(host, port, family, type, proto, flags)  # type: ignore[return-value]


def single_threaded_loop() -> asyncio.AbstractEventLoop:
    loop = SingleThreadedLoop()
    asyncio.set_event_loop(loop)
    if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):
        # 3.11's default child watcher starts a thread per process; the pidfd watcher uses the loop itself.
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(loop)
        asyncio.set_child_watcher(watcher)
    return loop
