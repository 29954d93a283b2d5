"""The daemon's listening sockets (SPEC §6 "Listeners", "Daemon hygiene"; SPEC §7 socket activation).

- The unix socket: `<state>/daemon.sock` by default, `--socket PATH` for another. Bound under
  `daemon.lock`, so a socket file with no listener at the path is a stale one of ours and is removed; a
  path that is not a socket is refused, never replaced; the socket is born 0600 in a 0700 directory.
- TCP only with `--host` (`--port`, default 7890; 0 asks the system for one).
- Sockets handed over by socket activation are used as they are: never bound, never unlinked by us.

Only a socket this process bound is removed at shutdown, and only while the path still holds that very
socket (a later daemon may have replaced it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

from chock.errors import ChockError
from chock.paths import check_socket_path, ensure_dir

DEFAULT_PORT = 7890

# The kernel queues this many connections nobody has accepted yet. The accept loop takes them as fast as
# they come (a thread each), so the queue only has to ride out a burst: a frontend opening a watch per
# session at once, a hundred watchers in the benchmark. Bounded, so a flood waits in the kernel, not here.
BACKLOG = 128


class ListenError(ChockError):
    pass


class Listener:
    def __init__(
        self,
        sock: socket.socket,
        kind: str,
        address: str,
        *,
        activated: bool = False,
        owned: tuple[str, int, int] | None = None,
    ) -> None:
        self.sock = sock
        self.kind = kind  # "unix" | "tcp"
        self.address = address  # as a client writes it: unix:/path or host:port
        self.activated = activated
        # The path, device and inode of a unix socket this process bound: the only file it may remove.
        self.owned = owned

    @property
    def checks_peer(self) -> bool:
        """Unix sockets carry the peer's credential and are checked; TCP carries none (SPEC §6)."""
        return self.kind == "unix"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.owned is None:
            return
        path, device, inode = self.owned
        try:
            info = os.lstat(path)
        except OSError:
            return
        if stat.S_ISSOCK(info.st_mode) and (info.st_dev, info.st_ino) == (device, inode):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def describe(sock: socket.socket) -> tuple[str, str]:
    """(kind, address) of a listening socket, from the socket itself."""
    if sock.family == socket.AF_UNIX:
        name = sock.getsockname()
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        return "unix", f"unix:{name or '(unnamed)'}"
    host, port = sock.getsockname()[:2]
    return "tcp", (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def adopt(sock: socket.socket) -> Listener:
    """A socket passed by socket activation (already checked to be a listening stream socket)."""
    kind, address = describe(sock)
    return Listener(sock, kind, address, activated=True)


def bind_unix(path: Path, *, create_parent: bool) -> Listener:
    """Bind the control socket at `path`: 0600, replacing only a stale socket, refusing anything else."""
    check_socket_path(path)
    if create_parent:
        ensure_dir(path.parent)
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Born 0600: no moment exists when another user could connect. The daemon has no threads yet.
        previous = os.umask(0o177)
        try:
            sock.bind(os.fspath(path))
        finally:
            os.umask(previous)
        os.chmod(path, 0o600)
        sock.listen(BACKLOG)
        info = os.lstat(path)
    except OSError as error:
        sock.close()
        raise ListenError(f"cannot listen on {path}: {error.strerror}") from None
    return Listener(sock, "unix", f"unix:{path}", owned=(os.fspath(path), info.st_dev, info.st_ino))


def _clear_stale(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ListenError(
            f"{path} exists and is not a socket; the daemon will not replace it: move it away, or choose "
            f"another path with --socket"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket file nobody listens on: a daemon before us died without cleaning up
        return
    except OSError as error:
        if error.errno not in (errno.EAGAIN, errno.ETIMEDOUT) and not isinstance(error, TimeoutError):
            raise ListenError(f"cannot check the socket at {path}: {error.strerror}") from None
    finally:
        probe.close()
    raise ListenError(
        f"something already listens on {path} (not a daemon of this state dir: that one would hold its "
        f"daemon.lock); stop it, or choose another path with --socket"
    )


def bind_tcp(host: str, port: int) -> Listener:
    """A TCP listener at host:port (port 0: the system picks). Nobody is checked on it (SPEC §6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenError(f"--host {host}: {error.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    _, shown = describe(sock)
    return Listener(sock, "tcp", shown)
