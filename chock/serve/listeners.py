"""serve's own listening sockets: `<state>/serve.sock`, `--socket PATH`, `--host ADDR [--port N]`, or the
ones the service manager hands over under the name `http` (LISTEN_FDS; launchd's `Sockets`) (SPEC §7, §8).

They follow the daemon's rules (SPEC §6 hygiene), in `chock.platform.listening`: 0600, a stale socket
replaced and anything else refused, only the socket serve bound removed at shutdown, a socket handed over
by socket activation never bound, unlinked or chmod-ed here. What is serve's own: the `http` name, the
port, the Host check's address, and non-blocking sockets for the event loop.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from chock.errors import UsageError
from chock.platform import listening

# SPEC §8: "default port 7891" (the daemon's TCP default is 7890).
DEFAULT_PORT = 7891

# Connections waiting to be accepted. A browser opens a handful at a time (six per host in Chromium), and
# a page of many sessions at most a few dozen; more than this queued means serve is stuck, not busy.
BACKLOG = 128

# The name of serve's sockets in LISTEN_FDNAMES (`FileDescriptorName=http` in chock-serve.socket).
FD_NAME = "http"


@dataclass
class Listener:
    sock: socket.socket
    owned: listening.Owned | None = None  # a unix socket serve bound itself (and so removes)
    bound_host: str | None = None  # --host as given, for the Host check

    @property
    def is_unix(self) -> bool:
        return self.sock.family == socket.AF_UNIX

    def describe(self) -> str:
        address = listening.address_of(self.sock)
        return address if self.is_unix else f"http://{address}/"

    def remove(self) -> None:
        """Unlink the socket file serve made, when the path still holds it (never another's socket)."""
        if self.owned is not None:
            self.owned.remove()


def check_options(socket_path: Path | None, host: str | None, port: int | None) -> None:
    """SPEC §8: "`--port` without `--host` refused by name"; a unix socket and TCP are one choice."""
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
    return Listener(sock, bound_host=bare)


def activated() -> list[Listener] | None:
    """The listeners the service manager handed over under the name `http` — systemd's LISTEN_FDS, or
    launchd's `Sockets` entry on macOS — or None when serve was started by hand (SPEC §7)."""
    sockets = listening.activated(FD_NAME)
    if not sockets:
        return None
    for sock in sockets:
        sock.setblocking(False)
    return [Listener(sock) for sock in sockets]
