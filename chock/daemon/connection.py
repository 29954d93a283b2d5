"""One connection to the daemon: the peer check, the greeting, one verb, and a clean close (SPEC §6).

"One connection = the greeting + one verb." Everything read goes through the codec's framer, so a line
is bounded (256 KiB for `start`, 8 KiB for anything else) before more than the bound is held; a line
that is not UTF-8, or holds a NUL, is `bad-request`; a client that sends half a line and goes away is
simply dropped. Nothing a client does on its connection reaches any other connection: each runs on its own
thread with its own buffer, and every failure ends there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import traceback

from chock.control.protocol import ErrorCode, Greeted, ProtocolError, ServerConnection
from chock.daemon.context import Daemon
from chock.daemon.listeners import Listener
from chock.daemon.verbs import VERBS, ClientGone, Reply
from chock.platform.peer import peer_uid

# SPEC §6: "Idle read timeout 30 s before a verb." A client that greets and then says nothing, or trickles
# half a line, holds its thread this long at most.
IDLE_TIMEOUT = 30.0

# After the reply, the daemon stops writing and reads what the client still sends (for at most this long,
# and this much), so closing never resets a connection whose last reply the client has not read yet.
LINGER_SECONDS = 1.0
LINGER_BYTES = 256 * 1024

READ_SIZE = 64 * 1024


def serve(daemon: Daemon, sock: socket.socket, listener: Listener) -> None:
    """Serve one accepted connection to its end; the caller has counted it open."""
    try:
        _serve(daemon, sock, listener)
    except Exception as error:  # never let one connection's failure reach the accept loop
        daemon.status.error("connection", error)
        daemon.status.count("internal")
        traceback.print_exc(file=sys.stderr)
    finally:
        _close(sock)
        daemon.closed()


def _serve(daemon: Daemon, sock: socket.socket, listener: Listener) -> None:
    status = daemon.status
    sock.settimeout(IDLE_TIMEOUT)
    if listener.checks_peer:
        refusal = _peer_refusal(sock)
        if refusal is not None:
            status.count("forbidden", peer_uid=peer_uid(sock))
            _send(sock, refusal.encode())
            return
    connection = ServerConnection()
    try:
        request = _read_request(sock, connection)
    except ProtocolError as error:
        status.count("errors")
        _send(sock, error.encode())
        return
    if request is None:
        status.count("dropped")
        return
    try:
        VERBS[request.verb](daemon, Reply(sock), request)
    except ProtocolError as error:
        status.count("errors")
        _send(sock, error.encode())
    except ClientGone:
        status.count("dropped")
    except Exception as error:
        status.error(request.verb, error)
        status.count("internal")
        traceback.print_exc(file=sys.stderr)
        _send(sock, ProtocolError(ErrorCode.INTERNAL, f"the daemon failed to serve {request.verb}").encode())
    else:
        status.count("served", verb=request.verb)


def _peer_refusal(sock: socket.socket) -> ProtocolError | None:
    """`forbidden` unless the kernel names the peer and it is us (seed: "an absent answer is never a
    permissive answer")."""
    uid = peer_uid(sock)
    ours = os.getuid()
    if uid == ours:
        return None
    if uid is None:
        text = f"the kernel did not name this connection's user; this daemon serves only uid {ours}"
    else:
        text = f"this daemon serves only its own user (uid {ours}); this connection is uid {uid}"
    return ProtocolError(ErrorCode.FORBIDDEN, text)


def _read_request(sock: socket.socket, connection: ServerConnection):
    """The greeting, answered, then the one request; None when the client went away or stayed idle.

    Raises the ProtocolError the client is to be told (a greeting refused, a line too large, malformed).
    """
    while True:
        event = connection.next_event()
        if event is None:
            try:
                data = sock.recv(READ_SIZE)
            except (TimeoutError, OSError):
                return None
            if not data:
                return None  # end of file, perhaps mid-line: a request cut short is no request
            connection.receive_data(data)
            continue
        if isinstance(event, Greeted):
            if not _send(sock, connection.greeting_reply()):
                return None
            continue
        return event


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _close(sock: socket.socket) -> None:
    """Stop writing, read (and drop) what the client still sends for a moment, then close."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + LINGER_SECONDS
    drained = 0
    with contextlib.suppress(OSError):
        while drained < LINGER_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            data = sock.recv(READ_SIZE)
            if not data:
                break
            drained += len(data)
    sock.close()
