"""A producer of chunks run a few chunks ahead of its consumer, in a thread of its own: a relay reads one peer
while it writes the other, a receiver reads while it decodes, a sender encodes while it sends
(docs/protocol.md#moving-a-session). The bytes held are bounded by how many chunks may wait."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Iterator


def read_ahead(
    chunks: Iterator[bytes | bytearray], sock: socket.socket | None, most: int
) -> Iterator[bytes | bytearray]:
    """`chunks`, made by a thread of their own at most `most` chunks before they are taken (read from `sock`, or
    encoded: the making overlaps the caller's writing or decoding); what the making raises is raised here, in its
    turn. Closed early, `sock`'s reading side is shut, so a thread waiting on it ends (its writing side stays open
    for the caller's last line)."""
    box: queue.Queue[tuple[bool, object]] = queue.Queue(most)
    taken = threading.Event()  # the consumer is gone: the thread puts nothing more

    def put(item: tuple[bool, object]) -> None:
        while not taken.is_set():
            try:
                box.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def pull() -> None:
        try:
            for chunk in chunks:
                put((True, chunk))
                if taken.is_set():
                    return
            put((False, None))
        except BaseException as error:  # handed to the consumer, raised there
            put((False, error))

    thread = threading.Thread(target=pull, name="read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            more, item = box.get()
            if not more:
                if item is not None:
                    raise item  # type: ignore[misc]  # what the reading raised
                return
            yield item  # type: ignore[misc]  # a chunk
    finally:
        taken.set()
        if thread.is_alive() and sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)
        thread.join()
