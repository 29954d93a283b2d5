"""serve's own listening sockets: `<state>/serve.sock`, `--socket PATH`, `--host ADDR [--port N]`, or the
ones the service manager hands over under the name `http` (LISTEN_FDS; launchd's `Sockets`) (SPEC §7, §8).

A socket serve binds it also removes at shutdown, and only while the path still holds that same socket;
a socket handed over by socket activation is never bound, unlinked or chmod-ed here (SPEC §6 hygiene, which
serve follows as the daemon does).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from chock.errors import ChockError, UsageError
from chock.paths import FILE_MODE, check_socket_path, ensure_dir

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
    path: Path | None = None  # a unix socket serve bound itself (and so removes)
    inode: tuple[int, int] | None = None
    bound_host: str | None = None  # --host as given, for the Host check

    @property
    def is_unix(self) -> bool:
        return self.sock.family == socket.AF_UNIX

    def describe(self) -> str:
        if self.is_unix:
            return f"unix:{self.sock.getsockname() or self.path}"
        host, port = self.sock.getsockname()[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    def remove(self) -> None:
        """Unlink the socket file serve made, when the path still holds it (never another's socket)."""
        if self.path is None or self.inode is None:
            return
        with contextlib.suppress(OSError):
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) == self.inode:
                os.unlink(self.path)


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
    path = Path(path)
    check_socket_path(path)
    ensure_dir(path.parent)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(info.st_mode):
            raise ChockError(f"{path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(2)
            probe.connect(os.fspath(path))
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # nobody listens: a socket left behind by a serve that died
        except OSError:
            pass  # bind will say what is wrong
        else:
            raise ChockError(f"something is already listening at {path} (another chock serve?); stop it first")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600: no moment at which another user could connect
    try:
        sock.bind(os.fspath(path))
    except OSError as error:
        sock.close()
        raise ChockError(f"cannot listen at {path}: {error.strerror or error}") from None
    finally:
        os.umask(old)
    os.chmod(path, FILE_MODE)
    sock.listen(BACKLOG)
    sock.setblocking(False)
    info = os.lstat(path)
    return Listener(sock, path=path, inode=(info.st_dev, info.st_ino))


def bind_tcp(host: str, port: int | None) -> Listener:
    port = DEFAULT_PORT if port is None else port
    bare = host.strip("[]")
    try:
        infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ChockError(f"--host {host}: {error.strerror}") from None
    family, kind, proto, _name, address = infos[0]
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
        raise ChockError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.setblocking(False)
    return Listener(sock, bound_host=bare)


def activated() -> list[Listener] | None:
    """The listeners the service manager handed over under the name `http` — systemd's LISTEN_FDS, or
    launchd's `Sockets` entry on macOS — or None when serve was started by hand (SPEC §7)."""
    if sys.platform == "darwin":
        from chock.platform import launchd

        sockets = launchd.activate_socket(FD_NAME)
    else:
        from chock.platform import systemd

        sockets = systemd.listen_fds(expected=(FD_NAME,)).get(FD_NAME, [])
    if not sockets:
        return None
    for sock in sockets:
        sock.setblocking(False)
    return [Listener(sock) for sock in sockets]
