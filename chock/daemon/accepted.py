"""One connection to the daemon, from accept to close (docs/protocol.md#bounds).

"One connection = the greeting + one verb." Until its request is whole, a connection lives in the main
thread's selector loop and holds no thread: its bytes go through the codec's `ServerConnection`, which owns
the deadlines (a line whole within LINE_SECONDS of its first byte, the verb within IDLE_SECONDS of the
greeting; the loop only keeps time), so a client that trickles a byte at a time holds a slot for seconds, not a
day. The short verbs (`list`, `read`) are answered from the same loop, their reply produced chunk by chunk as
the socket takes it; the others (`start`, `adopt`, `answer`, `watch`) get a thread of their own with a blocking
socket, since they wait on a child, a session socket or a growing log.

Every close says what there is to say first: a refusal or a reply is written, the daemon stops writing, and
reads (and drops) what the client still sends while the codec lingers, so closing never resets a connection
whose last line the client has not read yet.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator

from chock.control.connection import NEED_DATA, ServerConnection
from chock.control.daemon_protocol import CONTROL
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.greeting import Greeted
from chock.control.message import Request
from chock.daemon.context import Daemon
from chock.daemon.reply import ClientGone, InThread, ReplyWriter
from chock.platform.listening import Listener
from chock.platform.peer import peer_uid

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from types import ModuleType

# A connection that has not sent its verb this long after its greeting is closed.
IDLE_SECONDS = 30.0

# A client that takes nothing of its reply for this long is gone.
SEND_SECONDS = 30.0

READ_SIZE = 64 * 1024

# The phases of a connection in the selector loop.
READING = "reading"  # greeting and request
WRITING = "writing"  # an inline reply, or a refusal
LINGERING = "lingering"  # written and shut for writing; draining until the client closes
THREADED = "threaded"  # handed to a thread with its verb


def peer_refusal(sock: socket.socket) -> ProtocolError | None:
    """`forbidden` unless the kernel names the peer and it is us: an absent answer is never a permissive one."""
    uid = peer_uid(sock)
    ours = os.getuid()
    if uid == ours:
        return None
    if uid is None:
        text = f"the kernel did not name this connection's user; this daemon serves only uid {ours}"
    else:
        text = f"this daemon serves only its own user (uid {ours}); this connection is uid {uid}"
    return ProtocolError(ErrorCode.FORBIDDEN, text)


class InlineWriter(ReplyWriter):
    """The write side of a connection answered from the selector loop: bytes queue up, a producer is drained
    as the socket takes it."""

    inline = True

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self.codec = connection.codec

    def send(self, data: bytes) -> None:
        self._connection.out += data

    def stream(self, chunks: Iterator[bytes]) -> None:
        self._connection.producer = chunks

    def end(self) -> None:
        """Nothing to do: the loop ends the reply once it is written."""


class Connection:
    """One accepted socket in the selector loop: what it has read, what it owes, and its next deadline."""

    def __init__(self, daemon: Daemon, sock: socket.socket, listener: Listener, now: float) -> None:
        self.daemon = daemon
        self.sock = sock
        self.listener = listener
        self.opened = now
        self.phase = READING
        self.codec = ServerConnection(CONTROL, now=now, idle_seconds=IDLE_SECONDS)
        self.out = bytearray()
        self.producer: Iterator[bytes] | None = None
        self.request: Request | None = None
        self.watched = 0  # the events the loop's selector watches this socket for (0: not registered)
        self._send_deadline = 0.0  # while writing: the client takes some of its reply by then
        self._read_eof = False  # the client stopped writing while its reply is still being written

    @property
    def deadline(self) -> float:
        """When the loop looks at this connection again: the codec's deadline, but the write side's, timed here."""
        deadline = self._send_deadline if self.phase == WRITING else self.codec.next_deadline()
        return float("inf") if deadline is None or self.phase == THREADED else deadline

    @property
    def wants_write(self) -> bool:
        return self.phase == WRITING

    @property
    def wants_read(self) -> bool:
        """Whether the loop watches for input: not once the client has shut its side while its reply is
        written (end of file would be readable at once, for ever)."""
        return not self._read_eof

    # Events from the loop -------------------------------------------------------------------------------------

    def refuse(self, error: ProtocolError, now: float, counter: str = "errors", **fields: object) -> None:
        """Answer with one error line, then close the way every reply closes."""
        self.daemon.status.count(counter, **fields)
        self.out += self.codec.send(error, now)  # after the greeting's answer, when that is not written yet
        self.producer = None
        self._write_phase(now)

    def readable(self, now: float) -> Request | None:
        """Read what arrived; returns the request once it is whole (to be answered inline or in a thread)."""
        try:
            data = self.sock.recv(READ_SIZE)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if self.phase == LINGERING:
            self.codec.receive_data(data, now)
            if self.codec.closed:
                self.over()
            return None
        if self.phase != READING:
            # One verb per connection: what else the client sends is dropped. A client that shut its side
            # still reads its reply, which is written on.
            self._read_eof = not data
            return None
        if not data:
            self.daemon.status.count("dropped")  # end of file, perhaps mid-line: a request cut short is none
            self.over()
            return None
        self.codec.receive_data(data, now)
        while True:
            try:
                event = self.codec.next_event()
            except ProtocolError as error:
                self.refuse(error, now)
                return None
            if event is NEED_DATA:
                break
            if isinstance(event, Greeted):
                # Written with the reply when the request came with the greeting (one write, one wakeup of the
                # client), else at once: a client that waits for it before its verb must not wait for nothing.
                self.out += self.codec.greeting_reply()
                continue
            self.request = event  # type: ignore[assignment]
            return self.request
        if self.out:
            self.flush()
        return None

    def answer_inline(self) -> bool:
        """Run the verb here: its reply is queued (and produced) for the loop to write. Its deadlines count from
        when the verb is done. False when the verb needs a thread after all (`InThread`: it wrote nothing)."""
        request = self.request
        assert request is not None
        try:
            _verbs().VERBS[request.verb](self.daemon, InlineWriter(self), request)
        except InThread:
            return False
        except ProtocolError as error:
            self.refuse(error, time.monotonic())
            return True
        except Exception as error:
            self._failed(request.verb, error)
            refusal = ProtocolError(ErrorCode.INTERNAL, f"the daemon failed to serve {request.verb}")
            self.refuse(refusal, time.monotonic(), "internal")
            return True
        self.daemon.status.count("served", verb=request.verb)
        self._write_phase(time.monotonic())
        return True

    def writable(self, now: float) -> None:
        """Write what the socket takes; refill from the producer; when all is written, linger."""
        while True:
            if not self.out and self.producer is not None:
                try:
                    chunk = next(self.producer, None)
                except OSError as error:
                    # The log went away mid-read: said as an error, never a shorter log that looks whole (the
                    # producer yields whole lines, so this line starts a line of its own).
                    self.producer = None
                    cut = f"the log could not be read to its end ({error.strerror or error}); read again"
                    self.out += ProtocolError(ErrorCode.INTERNAL, cut).encode()
                    continue
                if chunk is None:
                    self.producer = None
                else:
                    self.out += chunk
            if not self.out:
                break
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                return
            except OSError:
                self.over()
                return
            if sent == 0:
                return
            del self.out[:sent]
            self._send_deadline = now + SEND_SECONDS
        if self.producer is None:
            self._linger(now)

    def expired(self, now: float) -> bool:
        """The connection's deadline passed: it is cut, told why (or, lingering, simply closed). True when closed."""
        if self.phase == THREADED or now < self.deadline:
            return False
        last = self.codec.deadline_passed(now) if self.phase != WRITING else None
        if self.phase == READING:
            self.daemon.status.count("dropped")
            self.out = bytearray(last or b"")
            self.flush()
        self.over()
        return True

    # Helpers ----------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write what the socket takes now, without waiting (a greeting, a last word before a close)."""
        try:
            sent = self.sock.send(self.out)
        except OSError:
            return
        del self.out[:sent]

    def _write_phase(self, now: float) -> None:
        self.phase = WRITING
        self._send_deadline = now + SEND_SECONDS
        self.writable(now)

    def _linger(self, now: float) -> None:
        if self.phase == LINGERING:
            return
        if self._read_eof:
            self.over()  # the client shut its side already: there is nothing left to drain
            return
        self.phase = LINGERING
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
        self.codec.linger(now)

    def _failed(self, verb: str, error: Exception) -> None:
        import traceback  # only when a verb fails (docs/architecture.md#start-up)

        self.daemon.status.error(verb, error)
        traceback.print_exc(file=sys.stderr)

    def over(self) -> None:
        """Nothing more to do here: `closed` from now on. In the selector loop the loop then stops watching the
        socket and closes it (`close`); a socket closed before it is unwatched makes that a failing call."""
        if self.phase == "closed":
            return
        self.phase = "closed"
        self.daemon.closed()

    def close(self) -> None:
        """`over`, and the socket closed."""
        self.over()
        with contextlib.suppress(OSError):
            self.sock.close()

    @property
    def closed(self) -> bool:
        return self.phase == "closed"

    def hand_to_thread(self) -> bool:
        """Answer the verb in a thread of its own; False when no thread can be had (the caller refuses)."""
        self.phase = THREADED
        self.sock.setblocking(True)
        thread = threading.Thread(target=self._serve_threaded, name=f"verb-{self.request.verb}", daemon=True)  # type: ignore[union-attr]
        try:
            thread.start()
        except RuntimeError as error:
            self.sock.setblocking(False)
            self.phase = READING
            self.daemon.status.error("thread", error)
            return False
        return True

    def _serve_threaded(self) -> None:
        request = self.request
        assert request is not None
        sock = self.sock
        try:
            sock.settimeout(SEND_SECONDS)
            try:
                if self.out:  # what the loop could not write at once (the greeting's answer)
                    sock.sendall(self.out)
                _verbs().VERBS[request.verb](self.daemon, ReplyWriter(sock, self.codec), request)
            except ProtocolError as error:
                self.daemon.status.count("errors")
                _send(sock, self.codec.send(error))
            except ClientGone:
                self.daemon.status.count("dropped")
            except Exception as error:
                self._failed(request.verb, error)
                self.daemon.status.count("internal")
                failed = ProtocolError(ErrorCode.INTERNAL, f"the daemon failed to serve {request.verb}")
                _send(sock, self.codec.send(failed))
            else:
                self.daemon.status.count("served", verb=request.verb)
            self._linger_blocking()
        except Exception as error:  # never let one connection's failure reach anything else
            self._failed(request.verb, error)
        finally:
            self.close()

    def _linger_blocking(self) -> None:
        """Stop writing, read (and drop) what the client still sends while the codec lingers; the caller closes."""
        sock, codec = self.sock, self.codec
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        codec.linger(time.monotonic())
        with contextlib.suppress(OSError):
            while (deadline := codec.next_deadline()) is not None:  # None: over
                now = time.monotonic()
                if codec.deadline_passed(now) is not None:
                    break
                sock.settimeout(deadline - now)
                codec.receive_data(sock.recv(READ_SIZE), time.monotonic())


def inline(request: Request) -> bool:
    """Whether the selector loop answers this verb itself (a short verb whose reply it can produce)."""
    return request.verb in _verbs().INLINE


def _verbs() -> ModuleType:
    """The verbs' module, imported at the first request rather than on the start a client waits on
    (docs/architecture.md#start-up)."""
    global _verbs_module
    if _verbs_module is None:
        from chock.daemon import verbs

        _verbs_module = verbs
    return _verbs_module


_verbs_module: ModuleType | None = None


def _send(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)
