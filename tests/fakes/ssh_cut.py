"""`ssh` for a client that cuts one kind of connection after its Nth frame: what a network does to a move over
OpenSSH, made deterministic (never by sleeping). Installed as `ssh` in a directory first on the client's PATH
(`install`); it runs the real ssh with the same arguments and relays its standard input and output.

`$CHOCK_TEST_CUT` says what it cuts: `VERB PART N` — the connection whose request line is `<verb> <id>\\t<part>…`
(`-` for any part) is passed on with its request line and the first N lines of its body (a log's events, a
bundle's base64 lines), then both ends are closed and the real ssh ended; N = -1 cuts it before its request line
reaches the host. Each cut connection leaves a line in `$CHOCK_TEST_CUT_LOG`. Any other connection, and every
`ssh` when `$CHOCK_TEST_CUT` is unset, passes byte for byte.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

REAL_SSH = "/usr/bin/ssh"


def install(directory: Path) -> Path:
    """`directory/ssh`, this script as a command every user can run; the directory, for a PATH."""
    directory.mkdir(mode=0o755, exist_ok=True)
    script = directory / "ssh_cut.py"
    script.write_bytes(Path(__file__).read_bytes())
    script.chmod(0o644)
    wrapper = directory / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/python3 -S {script} "$@"\n')
    wrapper.chmod(0o755)
    return directory


def _copy(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _line(sock: socket.socket, held: bytearray) -> bytes | None:
    """The next whole line from `sock` (kept past it in `held`); None at the end of the stream."""
    while b"\n" not in held:
        data = sock.recv(65536)
        if not data:
            return None
        held += data
    end = held.index(b"\n") + 1
    line = bytes(held[:end])
    del held[:end]
    return line


def _cuts(line: bytes, verb: str, part: str) -> bool:
    said, _, fields = line.decode("utf-8", "replace").rstrip("\n").partition(" ")
    named = fields.split("\t")
    return said == verb and (part == "-" or (len(named) > 1 and named[1] == part))


def main(argv: list[str]) -> int:
    rule = os.environ.get("CHOCK_TEST_CUT", "")
    if not rule or "-O" in argv:
        os.execv(REAL_SSH, [REAL_SSH, *argv])
    verb, part, count = rule.split()
    frames = int(count)
    client = socket.socket(fileno=os.dup(0))
    ours, theirs = socket.socketpair()
    ssh = subprocess.Popen([REAL_SSH, *argv], stdin=theirs.fileno(), stdout=theirs.fileno(), close_fds=True)
    theirs.close()
    threading.Thread(target=_copy, args=(ours, client), daemon=True).start()
    held = bytearray()
    greeting = _line(client, held)
    if greeting is not None:  # passed on at once: its answer comes before the request is sent
        ours.sendall(greeting)
    request = _line(client, held) if greeting is not None else None
    if request is None or not _cuts(request, verb, part):
        if request is not None:
            ours.sendall(request + held)
        _copy(client, ours)
        return ssh.wait()
    if frames >= 0:
        ours.sendall(request)
        for _ in range(frames):
            line = _line(client, held)
            if line is None:
                break
            ours.sendall(line)
    with open(os.environ["CHOCK_TEST_CUT_LOG"], "a") as log:
        log.write(f"cut {request.decode('utf-8', 'replace').split(chr(9))[0]} after {frames} frames\n")
    for end in (client, ours):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
    ssh.terminate()
    ssh.wait()
    return 255  # as ssh ends when its connection is lost


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
