"""How a verb writes its reply: whole (`send`) or as a producer makes it (`stream`), onto a connection's socket.

Apart from the verbs (chock/daemon/verbs.py) so that the connection code can hold a writer without importing
them: the daemon imports its verbs at its first request, not on the start a client waits on
(docs/architecture.md#start-up).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from chock.control.connection import ServerConnection
    from chock.control.message import ReplyLine

# Lines are gathered into sends of about this size: a `read` of a long log is a few large writes, not one
# per event.
SEND_BATCH = 64 * 1024


class ClientGone(Exception):
    """The client closed its end while we were replying: nothing to do but stop."""


class InThread(Exception):
    """Raised by a verb answered in the selector loop, before it writes anything, when its answer needs files
    read (a `list` that is not warm): the connection hands it to a thread instead."""


class ReplyWriter:
    """The write side of one connection: a reply line the connection allows (`answer`), a reply's bytes whole
    (`send`: rows a catalog encoded once), or as a producer makes them (`stream`: a log's lines)."""

    inline = False  # answering from the selector loop, where nothing may block

    def __init__(self, sock: socket.socket, codec: ServerConnection) -> None:
        self.sock = sock
        self.codec = codec

    def answer(self, line: ReplyLine) -> None:
        """Send one reply line, checked by the connection against the request it answers."""
        self.send(self.codec.send(line))

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            raise ClientGone from None

    def end(self) -> None:
        """The reply is whole: the client reads its end now (the connection lingers and closes as it always does);
        what the verb does after this, the client does not wait for."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            raise ClientGone from None

    def stream(self, chunks: Iterator[bytes]) -> None:
        """Send what `chunks` produces, as the client takes it, gathered into sends of about SEND_BATCH bytes."""
        batch: list[bytes] = []
        size = 0
        for chunk in chunks:
            batch.append(chunk)
            size += len(chunk)
            if size >= SEND_BATCH:
                self.send(b"".join(batch))
                batch.clear()
                size = 0
        if batch:
            self.send(b"".join(batch))
