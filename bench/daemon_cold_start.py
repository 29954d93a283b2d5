"""Cold start from socket activation to the `ok chock-control 1` reply, against `python3 -c pass`.

The socket is bound and listening before the daemon exists, as a .socket unit holds it; the client connects
and greets at once (its connection waits in the socket's backlog), and the clock stops at the daemon's
reply. The daemon gets the socket as systemd passes it (fd 3, LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES), so
what is measured is interpreter start, the daemon's imports, its lock, and the greeting. The baseline,
measured in the same run, is an interpreter that starts and exits. The daemon imports its verbs and catalog
at the first request that needs them, so the start to a first `list` reply (of an empty project) is printed
too: what a `chock sessions` that starts the daemon waits for.

    python bench/daemon_cold_start.py           # prints the figures
    python bench/daemon_cold_start.py --quick   # a few rounds, under a minute: asserts the reply only
    python bench/daemon_cold_start.py --log-target journal   # with a journal running: records sent there

The daemon's records go to its stderr by default (auto, with no journal stream): three lines a start.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import _common

# fd 3 is where socket activation puts the first socket (sd_listen_fds(3)); LISTEN_PID must be the daemon's
# own pid, which a shell knows as $$ before it execs the interpreter in its place.
ACTIVATE = (
    'if [ "$FD" != 3 ]; then eval "exec 3<&$FD $FD<&-"; fi; '
    'LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=control exec "$0" "$@"'
)


def cold_start(root: Path, listener: socket.socket, log_target: str, *, listing: bool = False) -> float:
    """Seconds from starting the daemon on `listener` to its answer: the greeting's, or with `listing` the
    whole reply to a `list` after it."""
    fd = listener.fileno()
    assert fd < 10, "a shell redirection names a single-digit descriptor"
    env = {**_common.environment(root), "FD": str(fd)}
    request = b"hello chock-control 1\n" + (f"list {root}\n".encode() if listing else b"")
    started = time.perf_counter()
    daemon = subprocess.Popen(
        ["sh", "-c", ACTIVATE, *_common.chock("daemon", "--log-target", log_target)],
        pass_fds=(fd,), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(30)
            client.connect(listener.getsockname())
            client.sendall(request)
            reply = b""
            while listing or not reply.endswith(b"\n"):
                chunk = client.recv(100)
                if not chunk and listing:
                    break  # the list of an empty project is no line, then the close
                assert chunk, "the daemon closed before it answered"
                reply += chunk
        elapsed = time.perf_counter() - started
        assert reply == b"ok chock-control 1\n", reply
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
    return elapsed


# What the daemon imports on its way to the greeting, less what every interpreter has at its start.
WHAT_IT_IMPORTS = (
    "import sys\nbefore = set(sys.modules)\n"
    "import chock.argv, chock.daemon.options, chock.daemon.server, chock.platform.journal, chock.platform.systemd\n"
    "print(' '.join(sorted(name for name in set(sys.modules) - before if not name.startswith('chock'))))\n"
)


def standard_library_floor(root: Path) -> Callable[[], None]:
    """A start that imports the standard library modules the daemon imports, and nothing of chock: how fast the
    daemon could start if its own modules cost nothing."""
    env = _common.environment(root)
    names = subprocess.run(
        [_common.python(), "-c", WHAT_IT_IMPORTS], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    code = f"import {', '.join(names)}"
    return lambda: subprocess.run([_common.python(), "-c", code], env=env, check=True)


def main() -> None:
    parser = _common.arguments(__doc__, "a few rounds; assert the reply only", installed=True)
    parser.add_argument("--log-target", default="auto", help="the daemon's --log-target (default auto)")
    options = _common.parse(parser)
    rounds = 3 if options.quick else 30
    with _common.scratch() as root:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(root / "d.sock"))
        listener.listen(16)
        cold_start(root, listener, options.log_target)  # compiles what the later starts run
        medians = _common.interleaved(
            {
                "greeting": lambda: cold_start(root, listener, options.log_target),
                "first list": lambda: cold_start(root, listener, options.log_target, listing=True),
                "pass": _common.stopwatch(_common.bare_interpreter),
                "floor": _common.stopwatch(standard_library_floor(root)),
            },
            rounds,
        )
        assert (root / "d.sock").exists(), "the daemon never unlinks a socket activation handed it"
        listener.close()
    if options.quick:
        print(f"daemon_cold_start: quick mode: {rounds} activated starts answered the greeting")
        return
    cold, listed, bare, least = (medians[name] for name in ("greeting", "first list", "pass", "floor"))
    print(f"{'installed ' + _common.INSTALLED_CHOCK if options.installed else 'the checkout'}, {_common.python()}")
    print(f"socket activation to `ok chock-control 1`: median {cold * 1e3:.1f} ms, ratio {cold / bare:.1f}")
    print(f"socket activation to a first `list` reply: median {listed * 1e3:.1f} ms, ratio {listed / bare:.1f}")
    print(f"python3 -c pass: median {bare * 1e3:.1f} ms")
    print(f"the standard library the daemon imports, alone: median {least * 1e3:.1f} ms, ratio {least / bare:.1f}")


if __name__ == "__main__":
    main()
