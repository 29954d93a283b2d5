"""`chock dial-stdio` (hidden): the far end of an `ssh://` connection (docs/remote.md).

ssh runs it on the host as the person who logged in; it joins its standard input and output to that user's own
daemon socket (the state directory's, or `--socket PATH`) and copies bytes both ways, closing each direction
when the other side ends it. It speaks no protocol: the client and the daemon greet each other through it, so a
daemon of another protocol number is refused by the client, naming both numbers. The daemon's peer-uid check
is the whole access rule. Every remote request pays its start, so it is read without click (chock/entry.py's
FAST) and imports nothing beyond the standard library's smallest parts. When no daemon answers at the socket it
exits EXIT_NO_DAEMON with one line saying how to enable one here; the client shows that line.
"""

from __future__ import annotations

# `_socket`, not `socket`: the wrapper's enums and selectors cost every remote request milliseconds.
import _socket
import os
import sys

from chock.argv import Option
from chock.errors import EXIT_NO_DAEMON
from chock.paths import Layout

OPTIONS = (Option("--socket", "socket_path", str, "PATH", "Join this daemon socket (default: <state>/daemon.sock)."),)

_CHUNK = 64 * 1024
ENABLE = "enable it with `systemctl --user enable --now chock.socket`, or start one with `chock daemon`"


def _one_line(text: str) -> str:
    """`text` with every character `str.isprintable` refuses (controls, newlines, bidi overrides) as its escape, as
    chock.terminal's safe printer shows one — without importing it (and `re`) into every remote request."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(ord(char)) for char in text)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _reason(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "there is no socket at that path"
    if isinstance(error, ConnectionRefusedError):
        return "nothing is listening there"
    return error.strerror or type(error).__name__


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _stdin_to(sock: _socket.socket) -> None:
    """Standard input into the socket until it ends; then the socket's writing half is closed."""
    try:
        while data := os.read(0, _CHUNK):
            sock.sendall(data)
    except OSError:
        pass
    try:  # noqa: SIM105 - contextlib.suppress would cost every remote request an import
        sock.shutdown(_socket.SHUT_WR)
    except OSError:
        pass


def run(layout: Layout, values: dict[str, object]) -> int:
    """Join standard input and output to the daemon socket until the daemon's side ends; the exit code."""
    path = str(values["socket_path"] or layout.daemon_socket_text)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as error:
        sys.stderr.write(f"no chock daemon answers at {_one_line(path)} ({_reason(error)}): {ENABLE}\n")
        return EXIT_NO_DAEMON
    import threading

    threading.Thread(target=_stdin_to, args=(sock,), daemon=True).start()
    try:
        while data := sock.recv(_CHUNK):
            _write_all(1, data)
    except OSError:
        pass  # the daemon reset the connection, or ssh went away: either way this end is over
    os.close(1)
    return 0
