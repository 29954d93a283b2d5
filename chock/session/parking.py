"""Parking: a session waiting on a person becomes a lean waiter, and is rebuilt from its log once it is needed
(docs/architecture.md#parking).

A daemon's or a terminal-less session whose only work in flight is the tool call waiting for an answer parks
after PARK_SECONDS: it execs chock.session.parked (same pid, so the daemon's child, its systemd scope and its
journal fields stay), which holds nothing but the log's lock and its two listening sockets. When an answer, a
stop, a handover or a signal comes, the waiter execs `chock run --unpark`, which folds the log and carries the
turn on exactly where it stopped: the log holds every fact the rebuilt session needs, and parking itself writes
nothing to it. Whenever anything else is in flight, or in doubt, the session waits in process as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import chock
from chock.session import parked
from chock.value import Value

# How long a request waits in process before the session parks.
PARK_SECONDS = 2.0
# `never`: no session parks (to compare what a wait holds: bench/waiting_memory.py).
PARKING_VARIABLE = "CHOCK_PARKING"


class Carried(Value):
    """A connection the waiter held, with the greeting it already answered and the bytes it left unserved."""

    __slots__ = ("fd", "greeting", "kind", "owed", "unserved")

    def __init__(self, kind: str, fd: int, greeting: bytes, unserved: bytes, owed: bytes = b"") -> None:
        self.kind = kind  # approval | handover
        self.fd = fd
        self.greeting = greeting
        self.unserved = unserved
        self.owed = owed  # replies the waiter gave that the client had not yet taken: sent first


class Unparked(Value):
    """What a rebuilt session is handed: the descriptors it inherited, and what happened while it was parked."""

    __slots__ = ("clients", "listening", "log_fd", "pending", "said", "session_id", "stop")

    def __init__(
        self,
        session_id: str,
        log_fd: int,
        listening: dict[str, int],
        pending: list[dict[str, str]],
        said: list[str] | None = None,
        stop: str | None = None,
        clients: list[Carried] | None = None,
    ) -> None:
        self.session_id = session_id
        self.log_fd = log_fd
        self.listening = listening
        self.pending = pending  # request_id, tool, summary, call_id
        self.said = [] if said is None else said
        self.stop = stop  # "signal" when one came while parked
        self.clients = [] if clients is None else clients

    @classmethod
    def read(cls, fd: int) -> Unparked:
        record = parked.read_record(fd)
        clients = [
            Carried(c["kind"], c["fd"], *(c.get(k, "").encode("latin-1") for k in ("greeting", "unserved", "owed")))
            for c in record.get("clients", [])
        ]
        for fd_ in [record["log"], *record["listen"].values(), *(c.fd for c in clients)]:
            os.set_inheritable(fd_, False)
        return cls(record["session"], record["log"], record["listen"], record["pending"], record.get("said", []),
                   record.get("stop"), clients)  # fmt: skip


def tell_ended(clients: list[Carried], reason: str) -> None:
    """Tell each carried client the session ended (`ended <reason>`, as a session's close does) and close it:
    for a session that could not be rebuilt, so that whoever answered it reads why nothing came of it."""
    from chock.control import session_protocol as sp
    from chock.control.connection import ServerConnection
    from chock.control.framing import LINGER_SECONDS

    protocols = {"approval": sp.APPROVAL, "handover": sp.HANDOVER}
    for client in clients:
        with socket.socket(fileno=client.fd) as sock:
            if not client.greeting:  # before its greeting is answered, a client reads no reply
                continue
            connection = ServerConnection(protocols[client.kind])
            connection.receive_data(client.greeting)
            connection.next_event()
            with contextlib.suppress(OSError):
                sock.settimeout(LINGER_SECONDS)  # a client that reads nothing does not hold the end up
                sock.sendall(connection.send(sp.Ended(reason)))


def unpark_argv(session_id: str, as_json: bool) -> list[str]:
    """The arguments after the interpreter that rebuild the session (the record's descriptor is appended)."""
    return [*chock.module_argv("chock")[1:], "run", "--session-id", session_id, *(["--json"] if as_json else []),
            "--unpark"]  # fmt: skip


def allowed() -> bool:
    """Whether parking is on (`CHOCK_PARKING=never` turns it off)."""
    return os.environ.get(PARKING_VARIABLE) != "never"


def park(session_id: str, log_fd: int, listening: dict[str, int], pending: list[dict[str, Any]],
         as_json: bool) -> None:  # fmt: skip
    """Exec the waiter in this process; returns only if the exec failed (the session then waits in process).
    The rebuilt session records its own lifecycle in the journal when this one does."""
    from chock.platform.journal import child_environment, flush

    record = {
        "session": session_id,
        "log": log_fd,
        "listen": listening,
        "pending": pending,
        "python": sys.executable,
        "path": str(Path(chock.__file__).parent.parent),
        "unpark": unpark_argv(session_id, as_json),
    }
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    flush()
    os.environ.update(child_environment())
    parked.inherit([log_fd, *listening.values()])
    memo = parked.write_record(record)
    signal.pthread_sigmask(signal.SIG_BLOCK, parked.STOPPING)
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", parked.__file__, str(memo)])
    finally:  # only reached when the exec failed
        signal.pthread_sigmask(signal.SIG_UNBLOCK, parked.STOPPING)
        os.close(memo)
        for fd in [log_fd, *listening.values()]:
            os.set_inheritable(fd, False)
