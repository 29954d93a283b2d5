"""Operational records of the daemon, serve and a daemon-spawned session: in the journal, or on stderr.

One record per step a person operating the service asks about: listening (addresses), a connection refused
and why, a session spawned, adopted, refused or ended (id, reason, exit code), the idle exit, an error with
its cause. In the journal each is sent through python-systemd's `journal.send` with `SYSLOG_IDENTIFIER`
(`chock-daemon`, `chock-serve`, `chock-session`), a `PRIORITY` that fits (errors err, refusals warning,
lifecycle info, details debug), the code that made the record (`CODE_FILE`, `CODE_LINE`, `CODE_FUNC`: the
caller of `record`, or further up by `stacklevel` for a helper that records for its caller) and structured
fields: `CHOCK_SESSION`, `CHOCK_PROJECT_KEY`, `CHOCK_VERB`, `CHOCK_PEER_UID`, … With no journal the same
records go to stderr, one line each.

A record is an event of `EVENTS` with fields of `FIELDS`, a closed vocabulary of ids, digests, numbers,
kinds and our own listening addresses, so no caller can put a message's text (or its length), a tool's
output, a credential or a path of the person's files in one: a project is named by its key, a digest.

Where records go: `--log-target journal`, `stderr`, or `auto`: the journal when stderr is the stream systemd
connected to it (JOURNAL_STREAM names that stream's device and inode), else stderr (a terminal, macOS). They
are handed to a writer thread: python-systemd is imported there, a moment after the listeners serve (a
socket-activated start does not wait for it), and a slow journal never holds a connection up. A session
child records only when the daemon that spawned it records to the journal, which the daemon says in
CHOCK_LOG_TARGET, so a terminal `chock run` prints none.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator

from chock.errors import EXIT_FAILED, EXIT_INTERRUPTED, ChockError, UsageError, exit_reason
from chock.paths import project_key

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

TARGETS = ("auto", "journal", "stderr")
# syslog(3) priorities, as the journal keeps them in PRIORITY=; `--log-level` names the least urgent kept.
LEVELS = {"err": 3, "warning": 4, "info": 6, "debug": 7}
DEFAULT_LEVEL = "info"

DAEMON, SERVE, SESSION = "chock-daemon", "chock-serve", "chock-session"

# journald's native socket, where python-systemd sends: its presence says the journal is running.
JOURNAL_SOCKET = "/run/systemd/journal/socket"

# Set by the daemon for the session children it spawns while its own records go to the journal.
CHILD_VARIABLE = "CHOCK_LOG_TARGET"

# Records waiting for the writer. A journal that falls this far behind loses the newest ones (counted, and
# said in a record once it catches up) rather than make a connection thread wait for it.
QUEUE_LIMIT = 1024
# At exit, the last records (the stop, a session's end) get this long to reach the journal.
FLUSH_SECONDS = 2.0
# Importing python-systemd takes some 10 ms of CPU (it loads logging, uuid, datetime). The writer waits this
# long before it does, so a socket-activated daemon answers the client that started it first; the records
# of that moment wait in the queue.
IMPORT_DELAY = 0.2

# The field every record carries: which event of EVENTS it is.
EVENT_FIELD = "CHOCK_EVENT"
# Keyword -> journal field. Values are ids, digests, numbers, error kinds and our listening addresses.
FIELDS = {
    "session": "CHOCK_SESSION",
    "project_key": "CHOCK_PROJECT_KEY",
    "verb": "CHOCK_VERB",
    "peer_uid": "CHOCK_PEER_UID",
    "pid": "CHOCK_CHILD_PID",
    "exit_code": "CHOCK_EXIT_CODE",
    "reason": "CHOCK_REASON",
    "protocol": "CHOCK_PROTOCOL",
    "listeners": "CHOCK_LISTENERS",
    "addresses": "CHOCK_ADDRESSES",
    "where": "CHOCK_WHERE",
    "error": "CHOCK_ERROR",
    "status": "CHOCK_HTTP_STATUS",
    "dropped": "CHOCK_DROPPED",
}

# Event -> (priority, the message it says). A field a record lacks reads as `-`.
EVENTS = {
    "listening": ("info", "listening on {addresses}"),
    "start": ("info", "serving (chock-control {protocol})"),
    "stop": ("info", "stopped: {reason}"),
    "error": ("err", "{where} failed: {error}"),
    "records.dropped": ("warning", "{dropped} records were dropped: the journal did not keep up"),
    # The daemon's connections: each refusal, and each one's end as a detail.
    "connection.forbidden": ("warning", "refused a connection from uid {peer_uid}: the daemon serves only its user"),
    "connection.too_many": ("warning", "refused a connection: too many are open"),
    "connection.accepted": ("debug", "accepted a connection"),
    "connection.served": ("debug", "served {verb}"),
    "connection.errors": ("debug", "answered a request with an error"),
    "connection.dropped": ("debug", "a connection closed with no verb answered"),
    "connection.internal": ("debug", "a connection failed inside the daemon"),
    # Sessions, as the daemon sees its children and as a child sees itself.
    "session.spawned": ("info", "session {session} spawned to {verb} it (pid {pid})"),
    "session.refused": ("warning", "session {session} did not start ({verb}): {reason}"),
    "session.ended": ("info", "session {session} ended: {reason} (exit code {exit_code})"),
    "session.running": ("info", "session {session} running ({verb})"),
    "session.removed": ("info", "session {session} removed (its log and scratchpad; its branch stays)"),
    "session.workspace_removed": (
        "info",
        "session {session}: chock workspace remove exited {exit_code} (its kept work goes to its branch)",
    ),
    # serve's requests and upstream watches.
    "request.forbidden": ("warning", "refused a request from uid {peer_uid}: serve answers only its own user"),
    "request.refused": ("warning", "refused a request ({status}): {reason}"),
    "watch.ended": ("warning", "the daemon ended the watch of session {session}: {error}"),
}


class _Fields(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "-"


def _clean(value: object) -> str:
    """One line of UTF-8: control characters (a newline would start a forged record on stderr) and surrogates (a
    path's undecodable bytes, which the journal's UTF-8 cannot carry) become `?`."""
    return "".join(
        "?" if ord(char) < 0x20 or ord(char) == 0x7F or 0xD800 <= ord(char) <= 0xDFFF else char for char in str(value)
    )


class Sink:
    """Where this process's records go, and the writer thread that sends them in order."""

    def __init__(self, identifier: str, target: str, level: str = DEFAULT_LEVEL) -> None:
        self.identifier = identifier
        self.target = target  # "journal" | "stderr", resolved
        self.threshold = LEVELS[level]
        # Records (and flush markers) for the writer, oldest first; a deque under a condition, not
        # queue.Queue, whose import a socket-activated start would pay for.
        self._pending: deque[Any] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._dropped = 0

    def record(
        self, event: str, priority: str | None, fields: dict[str, object], code: tuple[str, int, str] | None = None
    ) -> None:
        """Hand one record to the writer; `code` is where it was made (file, line, function) for the journal."""
        level = self.kept(event, priority, fields)
        if level is not None:
            self.hand(event, level, fields, code)

    def hand(self, event: str, level: str, fields: dict[str, object], code: tuple[str, int, str] | None) -> None:
        """Hand a record `kept` said goes at `level` to the writer."""
        template = EVENTS[event][1]
        values = {key: _clean(value) for key, value in fields.items() if value is not None}
        self._hand_over((event, level, template.format_map(_Fields(values)), values, code))

    def kept(self, event: str, priority: str | None, fields: dict[str, object]) -> str | None:
        """The level a record of `event` goes at, or None when it is below this sink's (dropped). A field not of
        FIELDS is refused either way, so a record kept only at `debug` cannot carry one unnoticed."""
        level = EVENTS[event][0]  # an event not of EVENTS is a KeyError, whatever its priority
        level = priority or level
        if not fields.keys() <= FIELDS.keys():
            raise ValueError(f"not a record field: {', '.join(sorted(fields.keys() - FIELDS.keys()))}")
        return level if LEVELS[level] <= self.threshold else None

    def flush(self, timeout: float = FLUSH_SECONDS) -> None:
        """Wait (at most `timeout`) until every record handed over so far has been written."""
        if self._thread is None:
            return
        done = threading.Event()
        self._hand_over(done)
        done.wait(timeout)

    def _hand_over(self, entry: Any) -> None:
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_all, name="records", daemon=True)
                self._thread.start()
            if len(self._pending) >= QUEUE_LIMIT and not isinstance(entry, threading.Event):
                self._dropped += 1
                return
            self._pending.append(entry)
            self._ready.notify()

    def _next(self) -> tuple[Any, int]:
        """The oldest entry, once there is one, and how many records were dropped since the last look."""
        with self._ready:
            while not self._pending:
                self._ready.wait()
            dropped, self._dropped = self._dropped, 0
            return self._pending.popleft(), dropped

    def _write_all(self) -> None:
        send = None
        if self.target == "journal":
            time.sleep(IMPORT_DELAY)
            send = _journal_send()
        while True:
            entry, dropped = self._next()
            if dropped:
                _, template = EVENTS["records.dropped"]
                self._write(
                    send, "records.dropped", "warning", template.format(dropped=dropped), {"dropped": str(dropped)}
                )
            if isinstance(entry, threading.Event):
                entry.set()
            else:
                self._write(send, *entry)

    def _write(
        self,
        send: Any,
        event: str,
        level: str,
        message: str,
        values: dict[str, str],
        code: tuple[str, int, str] | None = None,
    ) -> None:
        fields = {FIELDS[key]: value for key, value in values.items()}
        if send is not None:
            # Unless given its caller, python-systemd names the frame that called send(): this method.
            where = {"CODE_FILE": code[0], "CODE_LINE": code[1], "CODE_FUNC": code[2]} if code else {}
            try:
                priority = str(LEVELS[level])
                send(
                    message,
                    PRIORITY=priority,
                    SYSLOG_IDENTIFIER=self.identifier,
                    **where,
                    **{EVENT_FIELD: event},
                    **fields,
                )
                return
            except (OSError, ValueError):
                pass  # the journal went away (or refused the record): it still goes somewhere a person can read it
        extra = " ".join(f"{name}={value}" for name, value in fields.items())
        line = f"{self.identifier}[{os.getpid()}] {level}: {message}" + (f" ({extra})" if extra else "")
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def _journal_send() -> Any:
    from systemd import journal

    return journal.send


# --- the process's one sink -----------------------------------------------------------------------------

_sink: Sink | None = None


def record(event: str, priority: str | None = None, /, *, stacklevel: int = 1, **fields: object) -> None:
    """Record `event` with `fields` (keywords of FIELDS); nothing until `configure()` said where records go.

    The record names the code that made it: the caller, or (`stacklevel` 2, 3, …) the caller's callers, as
    `logging` counts them, for a helper that records on behalf of whoever called it.
    """
    sink = _sink
    level = None if sink is None else sink.kept(event, priority, fields)
    if level is not None:  # a connection's record, most often not: no frame looked up for it
        assert sink is not None
        frame = sys._getframe(stacklevel)
        sink.hand(event, level, fields, (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))


def flush(timeout: float = FLUSH_SECONDS) -> None:
    if _sink is not None:
        _sink.flush(timeout)


def configure(identifier: str, target: str = "auto", level: str = DEFAULT_LEVEL) -> Sink:
    """Send this process's records as `identifier` to `target` (auto, journal or stderr) from `level` up."""
    global _sink
    if level not in LEVELS:
        raise UsageError(f"--log-level {level!r}: choose one of {', '.join(LEVELS)}")
    _sink = Sink(identifier, resolve_target(target), level)
    atexit.register(flush)
    return _sink


def resolve_target(target: str) -> str:
    """`journal` or `stderr`; `auto` is the journal when stderr is systemd's journal stream and it listens."""
    if target not in TARGETS:
        raise UsageError(f"--log-target {target!r}: choose one of {', '.join(TARGETS)}")
    if target == "auto":
        return "journal" if stderr_is_journal() and journal_problem() is None else "stderr"
    if target == "journal":
        problem = journal_problem()
        if problem is not None:
            raise UsageError(f"--log-target journal: {problem}; use --log-target stderr")
    return target


def stderr_is_journal() -> bool:
    """JOURNAL_STREAM (`<device>:<inode>`) names the stream systemd connected stderr to (systemd.exec(5))."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        info = os.fstat(2)
        return (info.st_dev, info.st_ino) == (int(device), int(inode))
    except (OSError, ValueError):
        return False


def journal_problem() -> str | None:
    """Why records cannot go to the journal here, or None when they can (its socket listens, python-systemd is in)."""
    import importlib.util

    try:
        listening = stat.S_ISSOCK(os.stat(JOURNAL_SOCKET).st_mode)
    except OSError:
        listening = False
    if not listening:
        return f"no journal is running here (there is no {JOURNAL_SOCKET})"
    if importlib.util.find_spec("systemd") is None:
        return "python-systemd is not installed (Debian's python3-systemd, or pip's systemd-python)"
    return None


def target() -> str | None:
    """Where this process's records go ("journal" or "stderr"), or None when it records nothing."""
    return None if _sink is None else _sink.target


def child_environment() -> dict[str, str]:
    """What a session child needs to record its own lifecycle: set only while ours go to the journal."""
    return {CHILD_VARIABLE: "journal"} if target() == "journal" else {}


def error_kind(error: BaseException) -> str:
    """An error as a record names its cause: its type, and an OSError's strerror; never its text, which can
    carry a message or a path."""
    kind = type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        kind = f"{kind}: {error.strerror}"
    return kind


@contextlib.contextmanager
def session_records(session_id: str | None, project: Path | None, verb: str) -> Iterator[None]:
    """A daemon-spawned `chock run`: `session.running`, then `session.ended` with its exit status.

    Nothing unless the daemon asked for it in CHOCK_LOG_TARGET: a terminal `chock run` records nothing.
    """
    wanted = os.environ.pop(CHILD_VARIABLE, None) == "journal"
    if not wanted or session_id is None or journal_problem() is not None:
        yield
        return
    configure(SESSION, "journal")
    fields: dict[str, object] = {"session": session_id, "verb": verb}
    with contextlib.suppress(OSError):
        fields["project_key"] = project_key(project or os.getcwd())
    # Each record names the `with` that holds the session (past this generator and contextlib's frame).
    record("session.running", stacklevel=3, **fields)
    code: int = EXIT_FAILED
    try:
        yield
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else EXIT_FAILED)
        raise
    except ChockError as error:
        code = error.exit_code
        raise
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
        raise
    except BaseException as error:
        record("error", stacklevel=3, where="chock run", error=error_kind(error))
        raise
    finally:
        record("session.ended", stacklevel=3, reason=exit_reason(code), exit_code=code, **fields)
        flush()
