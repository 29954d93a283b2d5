"""Opening the byte stream to a daemon, whatever its address: the one function both clients use.

A unix or TCP address is a connected socket. An `ssh://` address is ssh run from an argv (chock/control/ssh.py)
with one end of a `socket.socketpair()` as its stdin and stdout; the client keeps the other end, so
`chock.control.client.Pump` and serve's asyncio client stay byte pumps over a socket, with their deadlines
unchanged. The ssh process is reaped when that socket closes (a bounded wait, then a kill), and what it said on
stderr (the last STDERR_LIMIT bytes) is kept to explain a connection that ended before the greeting.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

from chock.control.endpoint import Address
from chock.control.framing import Unreachable
from chock.control.ssh import STDERR_LIMIT, SshTarget, explain, ssh_argv

# How long a closed connection's ssh gets to end by itself before it is killed.
REAP_WAIT = 5.0


# A master's socket is `%C` (40 hex digits) in the control directory, bound first under a name 17 bytes longer.
_CONTROL_NAME = "0" * 40 + ".XXXXXXXXXXXXXXXX"


def control_dir() -> Path:
    """`$XDG_RUNTIME_DIR/chock/ssh` (or the runtime directory's fallback), 0700: where the masters' sockets are;
    refused when a socket there would be too long for the kernel."""
    from chock.paths import check_socket_path, ensure_dir, runtime_socket_dir

    directory = runtime_socket_dir() / "ssh"
    check_socket_path(directory / _CONTROL_NAME, "set XDG_RUNTIME_DIR to a shorter directory")
    return ensure_dir(directory)


_DRAINING = threading.Lock()


class SshSocket(socket.socket):
    """This end of the socket pair whose other end is ssh's stdin and stdout; closing it reaps the ssh."""

    process: subprocess.Popen[bytes] | None = None
    target: SshTarget | None = None
    # True: close() waits for the ssh (bounded) before returning; False (an event loop): a thread reaps it.
    wait_on_close = True
    said: bytes | None = None  # what ssh wrote on stderr, once read and its pipe closed

    def close(self) -> None:
        """Close the socket, reap the ssh and close its stderr pipe: no descriptor of the connection outlives it
        (one left to the garbage collector is closed whenever that runs — in a forked child, another's)."""
        super().close()
        process = self.process
        if process is None:
            return
        if self.wait_on_close or process.poll() is not None:
            self._ended(process)
        else:
            threading.Thread(target=self._ended, args=(process,), name="chock-ssh-reaper", daemon=True).start()

    def _ended(self, process: subprocess.Popen[bytes]) -> bytes:
        _reap(process)
        with _DRAINING:  # the reaper thread and failure() may both get here
            if self.said is None:
                self.said = _drain(process)
            return self.said

    def failure(self) -> str | None:
        """Why ssh ended the connection, in one line with what to do (chock.control.ssh.explain); None when it
        said nothing that explains it. Waits for the ssh to end (bounded): call it once the connection ended."""
        process, target = self.process, self.target
        if process is None or target is None:
            return None
        said = self._ended(process)
        return explain(target, process.returncode, said)


def _reap(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(REAP_WAIT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _drain(process: subprocess.Popen[bytes]) -> bytes:
    """What ssh wrote on stderr, its last STDERR_LIMIT bytes; reads only what is there (a master it left in the
    background may hold the pipe open)."""
    stream = process.stderr
    if stream is None:
        return b""
    kept = b""
    os.set_blocking(stream.fileno(), False)
    try:
        while chunk := stream.read(65536):
            kept = (kept + chunk)[-STDERR_LIMIT:]
    except (BlockingIOError, OSError, ValueError):
        pass
    finally:
        stream.close()
    return kept


def connect(target: str | tuple[str, int], timeout: float) -> socket.socket:
    """A socket connected to a unix path or a TCP (host, port); OSError when nothing answers."""
    if isinstance(target, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(target)
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection(target, timeout=timeout)


def dial_ssh(target: SshTarget) -> SshSocket:
    """A socket whose peer is `ssh … HOST chock dial-stdio`: the remote daemon's byte stream."""
    argv = ssh_argv(target, str(control_dir()))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sock = SshSocket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=ours.detach())
    try:
        sock.target = target
        sock.process = subprocess.Popen(
            argv, stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=subprocess.PIPE, close_fds=True
        )
    except FileNotFoundError:
        sock.close()
        raise Unreachable(
            f"cannot reach {target}: there is no `ssh` here; install OpenSSH's client (openssh-client)"
        ) from None
    except BaseException:
        sock.close()
        raise
    finally:
        theirs.close()
    return sock


def open_transport(address: Address, timeout: float) -> socket.socket:
    """A socket whose peer is the daemon at `address`: connected (unix or TCP), or ssh's (an SshSocket).
    OSError when nothing answers at a unix or TCP address; ssh's failures show at the greeting (`failure`)."""
    if address.ssh is not None:
        return dial_ssh(address.ssh)
    return connect(address.path if address.path is not None else (address.host or "", address.port or 0), timeout)


def ended_why(sock: socket.socket, error: Unreachable) -> Unreachable:
    """The error to raise for a connection that ended before the greeting: ssh's or dial-stdio's reason when
    `sock` is ssh's and it said one, else `error` itself."""
    why = sock.failure() if isinstance(sock, SshSocket) else None
    return Unreachable(why) if why else error
