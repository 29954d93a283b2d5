"""The one blocking client of the daemon, and of a session's approval and handover sockets.

Sockets live here and nowhere else in `chock.control`; every line is made and read by `protocol`. SPEC §6:
"One connection = the greeting + one verb", so a `ControlConnection` is single-use: `connect()` greets and
checks the number, one verb method sends its request and reads its reply, and the connection is done.
`ControlClient` is the form commands use: each of its methods opens its own connection.

Every failure is a `ControlError` carrying a SPEC §6 code: the daemon's own `error <code> <text>`, or
`unreachable` when nothing answers at the address, or `protocol` when the two ends do not speak the same
protocol number or a reply cannot be read.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from chock.control import protocol as p
from chock.errors import UsageError

# Connect, greeting and the reply to a quick verb (list, read, answer). The daemon's own idle bound before
# a verb is 30 s (SPEC §6), so a client that waits as long has given a slow machine every chance.
DEFAULT_TIMEOUT = 30.0

# `start` and `adopt` reply "once the child holds the lock and has logged session.start" (SPEC §6); before
# that the child checks its instance, its credential (a keystore call may take its full 30 s bound, §10)
# and bwrap, and may be placed in a scope over D-Bus. Twice the slowest of those, so the daemon's answer,
# even `error refused …`, arrives before this client gives up.
SPAWN_TIMEOUT = 120.0

_CHUNK = 64 * 1024
# The next step for a person when no daemon answers; serve's upstream says the same.
START_DAEMON = "start one with `chock daemon`, or `systemctl --user start chock.socket` where its units are installed"
_HOST_RE = re.compile(r"[A-Za-z0-9._-]+")


class ControlError(p.ProtocolError):
    """A daemon's (or a session socket's) refusal, or a failure to reach it, with the SPEC §6 code."""

    @classmethod
    def of(cls, error: p.ProtocolError) -> ControlError:
        return error if isinstance(error, ControlError) else cls(error.code, error.text)


class SessionEnded(ControlError):
    """The session sent `ended <reason>` while this client waited (SPEC §5)."""

    def __init__(self, reason: str) -> None:
        super().__init__(p.ErrorCode.UNREACHABLE, f"the session ended ({reason}) while this client waited")
        self.reason = reason


class BadAddress(UsageError):
    pass


# --------------------------------------------------------------------------------------------------------
# Addresses (SPEC §8: `--daemon unix:/path | host:port`; SPEC §9 adds the `--port N` shorthand)


@dataclass(frozen=True)
class Address:
    """Where a daemon listens: a unix socket `path`, or a TCP `host` and `port`."""

    path: str | None = None
    host: str | None = None
    port: int | None = None

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in (self.host or "") else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """`unix:/path`, `/abs/path`, `host:port` or `[ipv6]:port` as an Address; anything else is BadAddress."""
    if text.startswith("unix:") or text.startswith("/"):
        path = text[len("unix:") :] if text.startswith("unix:") else text
        if path.startswith("/") and "\0" not in path:
            return Address(path=path)
        raise BadAddress(f"{text!r}: a unix socket address needs an absolute path, as in unix:/run/d.sock")
    host, port = "", ""
    if text.startswith("["):
        match = re.fullmatch(r"\[([0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?)\]:([0-9]{1,5})", text)
        if match:
            host, port = match.groups()
    else:
        head, colon, tail = text.rpartition(":")
        if colon and ":" in head:
            raise BadAddress(f"{text!r}: an IPv6 address goes in brackets, as in [::1]:7890")
        if colon and _HOST_RE.fullmatch(head) and re.fullmatch(r"[0-9]{1,5}", tail):
            host, port = head, tail
    if host and port and 0 < int(port) < 65536:
        return Address(host=host, port=int(port))
    raise BadAddress(
        f"{text!r} is not a daemon address: write unix:/path/to/daemon.sock, /path/to/daemon.sock, "
        f"host:port or [ipv6]:port"
    )


def resolve_address(
    daemon: str | None = None,
    *,
    port: int | None = None,
    environ: Mapping[str, str] | None = None,
    state_socket: Path | None = None,
) -> Address:
    """The daemon a command talks to (SPEC §8, §9): `--daemon ADDR`, or `--port N` meaning 127.0.0.1:N (both
    together refused), else `$CHOCK_DAEMON`, else the state directory's `daemon.sock`."""
    if daemon is not None and port is not None:
        raise BadAddress("--daemon and --port both name the daemon; give one of them")
    if daemon is not None:
        return parse_address(daemon)
    if port is not None:
        return parse_address(f"127.0.0.1:{port}")
    environ = os.environ if environ is None else environ
    if environ.get("CHOCK_DAEMON"):
        return parse_address(environ["CHOCK_DAEMON"])
    if state_socket is None:
        from chock.paths import Layout

        state_socket = Layout.from_env().daemon_socket
    return Address(path=str(state_socket))


# --------------------------------------------------------------------------------------------------------
# Lines over a socket


class _Wire:
    """A connected socket read as lines through the codec's reply reader; `peer` names the other end."""

    def __init__(self, sock: socket.socket, peer: str, limit: int = p.MAX_REPLY_LINE) -> None:
        self.sock = sock
        self.peer = peer
        self.replies = p.ReplyReader(peer, limit=limit)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as error:
            raise ControlError(
                p.ErrorCode.UNREACHABLE, f"the {self.peer} closed the connection ({_reason(error)})"
            ) from None

    def read_line(self, timeout: float | None) -> str | None:
        """The next line, or None at end of file; raises TimeoutError when `timeout` passes with no line."""
        self.sock.settimeout(timeout)
        while (line := checked(self.replies.next_line)) is p.NEED_DATA:
            try:
                data = self.sock.recv(_CHUNK)
            except TimeoutError:
                raise  # the caller's bound passed; the socket stays usable
            except OSError:
                data = b""  # a reset is the peer going away, like end of file
            self.replies.feed(data)
        return line

    def line(self, timeout: float | None, what: str) -> str | None:
        """The next line, or None at end of file; no line within `timeout` is `unreachable`, naming `what`."""
        try:
            return self.read_line(timeout)
        except TimeoutError:
            raise ControlError(
                p.ErrorCode.UNREACHABLE, f"the {self.peer} did not answer {what} within {timeout:g} s"
            ) from None

    def first_line(self, timeout: float | None, what: str) -> str:
        """The next line, which must come: end of file before it is `unreachable` too."""
        line = self.line(timeout, what)
        if line is None:
            raise ControlError(
                p.ErrorCode.UNREACHABLE, f"the {self.peer} closed the connection before answering {what}"
            )
        return line

    def close(self) -> None:
        self.sock.close()


class _OverWire:
    """A client over one `_Wire`: a context manager that closes it."""

    _wire: _Wire

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._wire.close()


def _reason(error: OSError) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return error.strerror or type(error).__name__


def checked(function: Any, *args: Any) -> Any:
    """A codec decoder's (or request constructor's) result, its ProtocolError (the peer's `error …` line
    among them) raised as a ControlError. serve's asyncio upstream decodes through this too."""
    try:
        return function(*args)
    except p.ProtocolError as error:
        raise ControlError.of(error) from None


# --------------------------------------------------------------------------------------------------------
# The control client


def _open(address: Address, timeout: float) -> socket.socket:
    try:
        if address.is_unix:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(address.path)
            except BaseException:
                sock.close()
                raise
            return sock
        return socket.create_connection((address.host, address.port), timeout=timeout)
    except FileNotFoundError:
        why = "there is no socket at that path"
    except ConnectionRefusedError:
        why = "nothing is listening there"
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except OSError as error:
        why = _reason(error)
    raise ControlError(p.ErrorCode.UNREACHABLE, f"no chock daemon answers at {address} ({why}); {START_DAEMON}")


def connect(address: Address | str, *, timeout: float = DEFAULT_TIMEOUT) -> ControlConnection:
    """A connection to the daemon that has greeted it and found the same protocol number.

    Seed: "Nothing below the greeting is read or written until they are [equal], so a daemon this client
    cannot speak to is never asked to do anything."
    """
    address = parse_address(address) if isinstance(address, str) else address
    connection = ControlConnection(_open(address, timeout), address, timeout)
    try:
        connection._greet()
    except BaseException:
        connection.close()
        raise
    return connection


class ControlConnection(_OverWire):
    """One connection to the daemon: the greeting (done by `connect`), then exactly one verb.

    Each verb method may be called once per connection; a second call is a RuntimeError (open another
    connection with `connect`). `read`, `list` and `watch` leave the connection open while their iterator
    runs and close it when the daemon does, or when the iterator is closed; the others close it at once.
    """

    def __init__(self, sock: socket.socket, address: Address, timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self.number = 0  # the daemon's protocol number, once the greeting is done
        self._wire = _Wire(sock, f"daemon at {address}")
        self._used: str | None = None

    # The exchange ---------------------------------------------------------------------------------------

    def _closing(self, function: Any, *args: Any) -> Any:
        """`function(*args)`; when it raises, the connection is closed first (one failure ends the verb)."""
        try:
            return function(*args)
        except BaseException:
            self.close()
            raise

    def _greet(self) -> None:
        self._wire.send(p.encode_greeting(p.CONTROL_NAME))
        line = self._first_line(self.timeout, "the greeting")
        self.number = checked(p.check_greeting_reply, line, p.CONTROL_NAME)

    def _send(self, cls: type[p.ControlRequest], *fields: Any) -> str:
        """Build and send one request; a field this client refuses, or a second verb, sends nothing."""
        if self._used is not None:
            raise RuntimeError(
                f"this connection already carried {self._used}: one connection = the greeting + one verb; "
                f"open another with connect()"
            )
        self._used = cls.verb
        request = self._closing(checked, lambda: cls(*fields).encode())
        self._closing(self._wire.send, request)
        return cls.verb

    def _line(self, timeout: float | None, what: str) -> str | None:
        return self._closing(self._wire.line, timeout, what)

    def _first_line(self, timeout: float | None, what: str) -> str:
        return self._closing(self._wire.first_line, timeout, what)

    def _decode(self, decoder: Any, line: str) -> Any:
        """A reply line through a codec decoder; the connection closes when the line is a refusal."""
        return self._closing(checked, decoder, line)

    def _one_reply(self, decoder: Any, timeout: float | None, cls: type[p.ControlRequest], *fields: Any) -> Any:
        """A verb answered by one line (`start`, `adopt`, `answer`): send, read it, close, then decode it."""
        verb = self._send(cls, *fields)
        line = self._first_line(timeout, verb)
        self.close()
        return checked(decoder, line)

    def _events(self, first: list[dict[str, Any]], timeout: float | None, what: str) -> Iterator[dict[str, Any]]:
        try:
            yield from first
            while (line := self._line(timeout, what)) is not None:
                yield self._decode(p.parse_event_line, line)
        finally:
            self.close()

    # The verbs (SPEC §6) -------------------------------------------------------------------------------

    def start(
        self, project: str | os.PathLike[str], message: str, *, timeout: float = SPAWN_TIMEOUT
    ) -> tuple[str, str]:
        """`start`: a new session; returns (session id, log path) once its child holds the log's lock."""
        return self._one_reply(p.parse_started, timeout, p.StartRequest, _absolute(project), message)

    def adopt(
        self, project: str | os.PathLike[str], session_id: str, *, timeout: float = SPAWN_TIMEOUT
    ) -> tuple[str, str]:
        """`adopt`: the daemon carries a handed-over session on; returns (session id, log path)."""
        return self._one_reply(p.parse_started, timeout, p.AdoptRequest, _absolute(project), session_id)

    def read(self, session_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """`read`: the session's events after `after` (the last one the caller has), then the end.

        The first line is read before this returns, so a refusal (`not-found`, …) is raised here.
        """
        verb = self._send(p.ReadRequest, session_id, after)
        first = self._line(self.timeout, verb)
        # Decoding the first line raises the daemon's `error …` here, if that is what came.
        events = [] if first is None else [self._decode(p.parse_event_line, first)]
        return self._events(events, self.timeout, verb)

    def watch(
        self,
        project: str | os.PathLike[str],
        session_id: str,
        after: int = 0,
        *,
        idle_timeout: float | None = None,
    ) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
        """`watch`: (the session's row, its events after `after` as the log grows).

        The iterator ends when the daemon closes: the session ended or was abandoned. It waits as long as
        the session is quiet (a model call may take minutes) unless `idle_timeout` bounds each wait.
        """
        verb = self._send(p.WatchRequest, _absolute(project), session_id, after)
        row = self._decode(p.parse_watch_header, self._first_line(self.timeout, verb))
        return row, self._events([], idle_timeout, verb)

    def answer(self, project: str | os.PathLike[str], session_id: str, request_id: str, yes: bool) -> None:
        """`answer`: relay yes or no to the session's approval socket; `ok answered` or a ControlError.

        Seed: "an approval nobody could deliver must not read as one that was given."
        """
        fields = (_absolute(project), session_id, request_id, yes)
        self._one_reply(p.parse_answered, self.timeout, p.AnswerRequest, *fields)

    def list(self, project: str | os.PathLike[str]) -> list[tuple[str, dict[str, Any]]]:
        """`list`: (started at, row) per session of the project, oldest first; none for an unknown project."""
        verb = self._send(p.ListRequest, _absolute(project))
        rows = []
        try:
            while (line := self._line(self.timeout, verb)) is not None:
                rows.append(checked(p.parse_list_row, line))
        finally:
            self.close()
        return rows


def _request(cls: type, *fields: Any) -> Any:
    """A request built here, refused here (as the daemon would) when a field is wrong."""
    return checked(cls, *fields)


def _absolute(project: str | os.PathLike[str]) -> str:
    # A relative project means the caller's directory; the daemon resolves it further (SPEC §3).
    return os.path.abspath(os.fspath(project))


class ControlClient:
    """How commands talk to the daemon: every method opens its own connection, greets, sends one verb."""

    def __init__(self, address: Address | str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = parse_address(address) if isinstance(address, str) else address
        self.timeout = timeout

    def connect(self) -> ControlConnection:
        return connect(self.address, timeout=self.timeout)

    def ping(self) -> int:
        """Greet and close: proves a daemon speaking our number is there (SPEC §9); returns its number."""
        with self.connect() as connection:
            return connection.number

    def start(self, project: str | os.PathLike[str], message: str) -> tuple[str, str]:
        return self.connect().start(project, message)

    def adopt(self, project: str | os.PathLike[str], session_id: str) -> tuple[str, str]:
        return self.connect().adopt(project, session_id)

    def read(self, session_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        return self.connect().read(session_id, after)

    def watch(
        self,
        project: str | os.PathLike[str],
        session_id: str,
        after: int = 0,
        *,
        idle_timeout: float | None = None,
    ) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
        return self.connect().watch(project, session_id, after, idle_timeout=idle_timeout)

    def answer(self, project: str | os.PathLike[str], session_id: str, request_id: str, yes: bool) -> None:
        self.connect().answer(project, session_id, request_id, yes)

    def list(self, project: str | os.PathLike[str]) -> list[tuple[str, dict[str, Any]]]:
        return self.connect().list(project)


# --------------------------------------------------------------------------------------------------------
# A session's own sockets (SPEC §5): approval.sock and handover.sock, several requests per connection


class SessionSocketClient(_OverWire):
    """A blocking client of a session's approval.sock or handover.sock, greeted with `chock-session`.

    `path` comes from `Layout.session_socket(id, "approval" | "handover")`, the rule both ends share.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(self.path)
        except OSError as error:
            sock.close()
            if isinstance(error, FileNotFoundError):
                why = "there is no socket there"
            elif isinstance(error, ConnectionRefusedError):
                why = "nobody is listening"
            else:
                why = _reason(error)
            raise ControlError(
                p.ErrorCode.UNREACHABLE,
                f"no session answers at {self.path} ({why}): the session is not running on this machine, "
                f"or it has ended",
            ) from None
        self._wire = _Wire(sock, f"session at {self.path}", p.MAX_LINE)
        try:
            self._wire.send(p.encode_greeting(p.SESSION_NAME))
            line = self._wire.first_line(timeout, "the greeting")
            self.number: int = checked(p.check_greeting_reply, line, p.SESSION_NAME)
        except BaseException:
            self.close()
            raise

    def _expect(self, what: str) -> p.SessionReply:
        reply = checked(p.parse_session_reply, self._wire.first_line(self.timeout, what))
        if isinstance(reply, p.Ended):
            raise SessionEnded(reply.reason)
        return reply

    # approval.sock ---------------------------------------------------------------------------------------

    def pending(self) -> list[p.PendingItem]:
        """The approval requests waiting for an answer (`pending` -> `request …` lines, then `end`)."""
        self._wire.send(p.PendingRequest().encode())
        items = []
        while not isinstance(reply := self._expect("pending"), p.PendingEnd):
            if not isinstance(reply, p.PendingItem):
                raise ControlError(p.ErrorCode.PROTOCOL, f"the session answered pending with {reply}")
            items.append(reply)
        return items

    def answer(self, request_id: str, yes: bool) -> None:
        """Answer one request; `error not-pending …` (not waiting, or already answered) is a ControlError."""
        self._wire.send(_request(p.SessionAnswerRequest, request_id, yes).encode())
        reply = self._expect("answer")
        if not isinstance(reply, p.Answered):
            raise ControlError(p.ErrorCode.PROTOCOL, f"the session answered answer with {reply}")

    # handover.sock: the primitives of SPEC §9's exchange --------------------------------------------------

    def ask_handover(self) -> None:
        """Send `handover`; the session answers at its next turn boundary (read it with `read_line`)."""
        self._wire.send(p.HandoverRequest().encode())

    def read_line(self, timeout: float | None) -> p.SessionReply | None:
        """The session's next line (`Busy`, `Ready`, `Ended`, …), or None when it closed the socket.

        Raises TimeoutError when `timeout` passes first: the session keeps running unchanged (SPEC §9:
        "--wait bounds each read of the exchange"), and the caller says what it was still holding.
        """
        line = self._wire.read_line(timeout)
        return None if line is None else checked(p.parse_session_reply, line)

    def confirm(self, timeout: float | None = None) -> None:
        """Send `confirm` after `ready` and wait for `released`: the session logged its handover end and let
        go of the log's lock. Anything else (end of file, `ended`, an error) is a ControlError."""
        self._wire.send(p.ConfirmRequest().encode())
        reply = checked(
            p.parse_session_reply, self._wire.first_line(self.timeout if timeout is None else timeout, "confirm")
        )
        if isinstance(reply, p.Ended):
            raise SessionEnded(reply.reason)
        if not isinstance(reply, p.Released):
            raise ControlError(p.ErrorCode.PROTOCOL, f"the session answered confirm with {reply}")
