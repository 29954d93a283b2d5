"""Listening sockets under one set of rules, for the daemon and serve alike.

- A unix socket is born 0600 (bound under umask 0177, then chmod-ed) in a 0700 directory: no moment exists
  when another user could connect.
- A socket file nobody listens on is a stale one (a process before us died without cleaning up) and is
  removed; a live socket is refused, and a path that is not a socket is refused, never replaced.
- Only a socket this process bound is removed at shutdown, and only while the path still holds that very
  socket (`Owned`): a later process may have replaced it.
- Sockets handed over by socket activation (`activated`) are used as they are: never bound, chmod-ed or
  unlinked here.

docs/architecture.md#listening-sockets says why. What differs between the daemon and serve (their names in
LISTEN_FDNAMES, what they print, the sentence that says who else may hold a path) stays in
`chock.daemon.listeners` and `chock.serve.sites`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import sys

from chock.errors import ChockError
from chock.paths import FILE_MODE, check_socket_path, ensure_dir

# How long a connect to an existing socket file may take before it counts as live. A listener answers a
# local connect at once (the kernel completes it from the backlog); one that does not within a second has a
# full backlog, which is a live process too, so a stale socket is never mistaken for it.
PROBE_TIMEOUT = 1.0


class ListenError(ChockError):
    pass


class Owned:
    """The unix socket file this process bound: its path, device and inode, the only file it may remove."""

    __slots__ = ("device", "inode", "path")

    def __init__(self, path: str, device: int, inode: int) -> None:
        self.path = path
        self.device = device
        self.inode = inode

    def remove(self) -> None:
        """Unlink the socket file, when the path still holds that very socket (never another's)."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return
        if stat.S_ISSOCK(info.st_mode) and (info.st_dev, info.st_ino) == (self.device, self.inode):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


class Listener:
    """A listening socket, and — for a unix socket this process bound itself — the only file it may remove."""

    __slots__ = ("owned", "sock")

    def __init__(self, sock: socket.socket, owned: Owned | None = None) -> None:
        self.sock = sock
        self.owned = owned

    @property
    def is_unix(self) -> bool:
        return self.sock.family == socket.AF_UNIX

    @property
    def address(self) -> str:
        """As a client writes it: `unix:/path`, `host:port` or `[v6]:port`."""
        return address_of(self.sock)

    @property
    def checks_peer(self) -> bool:
        """A unix socket carries the peer's credential and is checked; TCP carries none."""
        return self.is_unix

    def url(self) -> str:
        """For a browser: the address, or `http://host:port/`."""
        return self.address if self.is_unix else f"http://{self.address}/"

    def remove(self) -> None:
        """Unlink the socket file this process made, when the path still holds it (never another's)."""
        if self.owned is not None:
            self.owned.remove()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.remove()


def bind_unix(
    path: str | os.PathLike[str], *, backlog: int, owner: str, others: str, create_parent: bool = True
) -> tuple[socket.socket, Owned]:
    """A listening unix socket at `path`, 0600, replacing only a stale socket; a blocking socket.

    `owner` names who refuses in an error ("the daemon"); `others` says who else a live listener may be.
    """
    path = os.fspath(path)
    check_socket_path(path)
    try:
        if create_parent:
            ensure_dir(os.path.dirname(path))
        _clear_stale(path, owner, others)
    except OSError as error:  # a parent that is a file, or not ours to enter
        said = f"cannot listen on {path}: {error.strerror or error}; choose another path with --socket"
        raise ListenError(said) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # umask is per process: both callers bind before they start a thread or an event loop.
        previous = os.umask(0o177)
        try:
            sock.bind(os.fspath(path))
        finally:
            os.umask(previous)
        os.chmod(path, FILE_MODE)
        sock.listen(backlog)
        info = os.lstat(path)
    except OSError as error:
        sock.close()
        raise ListenError(f"cannot listen on {path}: {error.strerror or error}") from None
    return sock, Owned(path, info.st_dev, info.st_ino)


def _clear_stale(path: str, owner: str, others: str) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ListenError(
            f"{path} exists and is not a socket; {owner} will not replace it: move it away, or choose another "
            f"path with --socket"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket file nobody listens on: its process died without cleaning up
        return
    except OSError as error:
        if error.errno not in (errno.EAGAIN, errno.ETIMEDOUT) and not isinstance(error, TimeoutError):
            raise ListenError(f"cannot check the socket at {path}: {error.strerror or error}") from None
    finally:
        probe.close()
    raise ListenError(f"something already listens on {path} ({others}); stop it, or choose another path with --socket")


def bind_tcp(host: str, port: int, *, backlog: int) -> socket.socket:
    """A listening TCP socket at host:port (port 0: the system picks); a blocking socket."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenError(f"--host {host}: {error.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as error:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return sock


def address_of(sock: socket.socket) -> str:
    """A listening socket's address as a client writes it: `unix:/path`, `host:port` or `[v6]:port`."""
    if sock.family == socket.AF_UNIX:
        name = sock.getsockname()
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        return f"unix:{name or '(unnamed)'}"
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def activated(name: str) -> list[socket.socket]:
    """The listening sockets the service manager handed over under `name`: systemd's LISTEN_FDS (any other
    name there is refused), or launchd's `Sockets` entry on macOS; none when started by hand.

    Imports are lazy: a socket-activated start pays only for the platform it runs on.
    """
    if sys.platform == "darwin":
        try:
            from chock.platform import launchd
        except ImportError:
            return []
        return list(launchd.activate_socket(name))
    if not sys.platform.startswith("linux"):
        return []
    try:
        from chock.platform import systemd
    except ImportError:
        return []
    return list(systemd.listen_fds((name,)).get(name, []))
