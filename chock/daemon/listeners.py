"""The daemon's listening sockets (docs/architecture.md#listening-sockets).

- The unix socket: `<state>/daemon.sock` by default, `--socket PATH` for another. Bound under
  `daemon.lock`, so a socket file with no listener at the path is a stale one of ours.
- TCP only with `--host` (`--port`, default 7890; 0 asks the system for one).
- Sockets handed over by socket activation (named `control`) are used as they are.

The rules every listener follows (0600, a stale socket replaced, anything else refused, only our own socket
removed at exit, activated sockets never touched) are `chock.platform.listening`'s, shared with serve.
"""

from __future__ import annotations

from chock.platform import listening
from chock.platform.listening import Listener

DEFAULT_PORT = 7890

# The name of the daemon's sockets in LISTEN_FDNAMES (`FileDescriptorName=control` in chock.socket).
FD_NAME = "control"

# The kernel queues this many connections nobody has accepted yet. The accept loop takes them as fast as
# they come (a thread each), so the queue only has to ride out a burst: a frontend opening a watch per
# session at once, a hundred watchers in the benchmark. Bounded, so a flood waits in the kernel, not here.
BACKLOG = 128

# Who else may hold the path, for the refusal of a live socket: another daemon of this state dir would have
# been refused its daemon.lock before it came to bind.
_OTHERS = "not a daemon of this state dir: that one would hold its daemon.lock"


def activated() -> list[Listener]:
    """The sockets the service manager handed over under the name `control` (none when started by hand)."""
    return [Listener(sock) for sock in listening.activated(FD_NAME)]  # each checked to be a listening socket


def bind_unix(path: str, *, create_parent: bool) -> Listener:
    """Bind the control socket at `path`: 0600, replacing only a stale socket, refusing anything else."""
    sock, owned = listening.bind_unix(
        path, backlog=BACKLOG, owner="the daemon", others=_OTHERS, create_parent=create_parent
    )
    return Listener(sock, owned)


def bind_tcp(host: str, port: int) -> Listener:
    """A TCP listener at host:port (port 0: the system picks). Nobody is checked on it: TCP carries no peer identity."""
    return Listener(listening.bind_tcp(host, port, backlog=BACKLOG))
