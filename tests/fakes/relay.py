"""A relay between a client and a daemon that cuts one kind of connection at a byte it is told: what a network
does to a move, made deterministic (never by sleeping). Every other connection passes byte for byte.

    with CuttingRelay(daemon.socket, verb="receive", part="bundle", after=1000) as relay:
        home.chock("move", …, "--to", relay.address)

A connection whose request line is `<verb> <session id>\\t<part>…` (any part when `part` is None) is passed on up
to `after` bytes past its request line, then both its ends are closed; `after=None` closes it before its request
reaches the daemon. With `hold`, the cut connection stalls instead (`holding` is set) until the client closes it.
With `drop_reply`, the request passes whole and it is the daemon's answer that is lost: the first line back (the
greeting's answer) passes, what comes after it is kept in `dropped`, and both ends are closed — a reply lost on the
way, counted by lines (the daemon did what it was asked). `cut` counts the connections it cut. Run as a script, it
relays until killed (for a host of tests/fakes/hosts.py, as that host's user, so the daemon behind it takes its
connections).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path


class CuttingRelay:
    def __init__(
        self,
        target: Path,
        *,
        verb: str,
        part: str | None = None,
        after: int | None = None,
        hold: bool = False,
        drop_reply: bool = False,
        path: Path | None = None,
    ) -> None:
        self.target = str(target)
        self.verb, self.part, self.after, self.hold, self.drop_reply = verb, part, after, hold, drop_reply
        self.dropped: list[bytes] = []
        self.holding = threading.Event()
        if path is None:
            from tests.fakes.daemon import short_dir

            path = short_dir() / "relay.sock"
        self.path = path
        self.cut = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"unix:{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with client, daemon:
            daemon.connect(self.target)
            dropping = threading.Event()
            back = threading.Thread(target=_copy, args=(daemon, client, dropping, self.dropped), daemon=True)
            back.start()
            # The greeting, passed on at once (its answer comes before the request is sent), then the request line.
            held, greeted = b"", False
            while not (greeted and b"\n" in held):
                try:
                    data = client.recv(65536)
                except OSError:  # a client gone without a verb (a connection it dialed ahead) may reset it
                    return
                if not data:
                    return
                held += data
                if not greeted and b"\n" in held:
                    greeting, _, held = held.partition(b"\n")
                    daemon.sendall(greeting + b"\n")
                    greeted = True
            line, _, rest = held.partition(b"\n")
            if self._cuts(line.decode("utf-8", "replace")):
                self.cut += 1
                if self.drop_reply:  # the request passes; its answer, once it comes, goes nowhere
                    dropping.set()
                    daemon.sendall(held)
                    back.join(600)
                elif self.after is not None:
                    daemon.sendall(line + b"\n" + rest[: self.after])
                    sent = min(len(rest), self.after)
                    while sent < self.after and (data := client.recv(min(65536, self.after - sent))):
                        daemon.sendall(data)
                        sent += len(data)
                if self.hold:  # nothing more passes until the client goes away (a network that stalls)
                    self.holding.set()
                    with contextlib.suppress(OSError):
                        while client.recv(65536):
                            pass
                for end in (client, daemon):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)
                back.join(30)
                return
            daemon.sendall(held)
            _copy(client, daemon)
            back.join(600)

    def _cuts(self, line: str) -> bool:
        verb, _, fields = line.partition(" ")
        parts = fields.split("\t")
        return verb == self.verb and (self.part is None or (len(parts) > 1 and parts[1] == self.part))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def __enter__(self) -> CuttingRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _copy(
    source: socket.socket,
    sink: socket.socket,
    dropping: threading.Event | None = None,
    dropped: list[bytes] | None = None,
) -> None:
    """Bytes from one end to the other until the first closes its side; then the other's sending side is shut. Once
    `dropping` is set, nothing past the first line passes: the first bytes after it go to `dropped`, and it stops."""
    lines = 0
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            if dropping is not None and dropping.is_set():
                if not lines:  # the greeting's answer, should it not have passed yet
                    end = data.find(b"\n") + 1
                    sink.sendall(data[: end or len(data)])
                    lines, data = (1, data[end:]) if end else (0, b"")
                if data:
                    if dropped is not None:
                        dropped.append(data)
                    break
                continue
            lines += data.count(b"\n")
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


if __name__ == "__main__":  # run as a host's user (tests/test_move_ssh.py): TARGET LISTEN VERB PART AFTER
    import sys

    target, listen, verb, part, after = sys.argv[1:]
    CuttingRelay(Path(target), verb=verb, part=part or None, after=int(after), path=Path(listen))
    threading.Event().wait()
