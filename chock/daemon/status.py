"""`daemon-status.json`, `daemon-activity.jsonl`, and the daemon's records in the journal.

The status record says what the daemon is doing now: pid, protocol, listeners, the sessions it owns (its
own live children, by id), connection counters, the last error and when it started. It is rewritten
whole and atomically (a temporary file renamed over it), so a reader never sees half of one.

The activity log holds lifecycle transitions only: start, stop, a session spawned, refused or ended (by
id). Neither file ever holds message text, a project path or any other path of the person's files; an
error is recorded by kind (`start: OSError: No space left on device`), never with its text, which can
carry either.

Every transition recorded here is also a record of `chock.platform.journal` (a refusal, an error and each
connection's end too), under the same rule; that module decides where, if anywhere, they go.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading

from chock.control.daemon_protocol import PROTOCOL
from chock.errors import exit_reason
from chock.log.events import timestamp
from chock.paths import FILE_MODE, replace_file
from chock.platform import journal

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

COUNTERS = (
    "accepted",  # connections taken from a listener
    "served",  # verbs answered (ok or the verb's lines)
    "errors",  # `error …` replies sent
    "forbidden",  # refused by the peer check
    "too_many",  # refused because the connection cap was reached
    "dropped",  # closed with no verb: end of file, the idle bound, a reset
    "internal",  # the daemon's own failures (`error internal`)
)


class Status:
    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, "daemon-status.json")
        self.activity_path = os.path.join(state_dir, "daemon-activity.jsonl")
        self._lock = threading.Lock()
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._listeners: list[str] = []
        self._owned: list[str] = []
        self._active = 0
        self._watching = 0
        self._last_error: dict[str, str] | None = None
        self._state = "starting"
        self.started_at = timestamp()
        self.dirty = True

    # What changes ----------------------------------------------------------------------------------

    def count(self, name: str, n: int = 1, /, **fields: object) -> None:
        """Count a connection's outcome; `fields` (a refused peer's uid, a served verb) go in its record."""
        with self._lock:
            self._counters[name] += n
            self.dirty = True
        journal.record(f"connection.{name}", stacklevel=2, **fields)

    def gauges(self, *, active: int, watching: int, owned: list[str]) -> None:
        with self._lock:
            if (active, watching, owned) != (self._active, self._watching, self._owned):
                self._active, self._watching, self._owned = active, watching, list(owned)
                self.dirty = True

    def set_listeners(self, addresses: list[str]) -> None:
        with self._lock:
            self._listeners = list(addresses)
            self.dirty = True
        journal.record("listening", stacklevel=2, addresses=", ".join(addresses))

    def set_state(self, state: str) -> None:
        with self._lock:
            self._state = state
            self.dirty = True

    def error(self, where: str, error: BaseException) -> None:
        """Record a failure by kind only: an exception's text may hold a message or a user's path."""
        kind = journal.error_kind(error)
        with self._lock:
            self._last_error = {"at": timestamp(), "where": where, "kind": kind}
            self.dirty = True
        journal.record("error", stacklevel=2, where=where, error=kind)

    # The files -----------------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        with self._lock:
            self.dirty = False
            return {
                "pid": os.getpid(),
                "protocol": PROTOCOL,
                "state": self._state,
                "started_at": self.started_at,
                "updated_at": timestamp(),
                "listeners": list(self._listeners),
                "sessions_owned": list(self._owned),
                "connections": {"active": self._active, "watching": self._watching, **self._counters},
                "last_error": self._last_error,
            }

    def write(self) -> None:
        replace_file(self.path, (json.dumps(self.record(), indent=2) + "\n").encode())

    def activity(self, event: str, **fields: Any) -> None:
        """Append one lifecycle line. Callers pass ids, pids, codes and verbs: never text or a path."""
        line = json.dumps({"at": timestamp(), "event": event, "daemon": os.getpid(), **fields}) + "\n"
        _record_activity(event, fields)
        with contextlib.suppress(OSError):
            fd = os.open(self.activity_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)


def _record_activity(event: str, fields: dict[str, Any]) -> None:
    """An activity line as a journal record: a session's end and refusal say why in words; a stop for an
    error is an error."""
    fields = dict(fields)
    if event in ("session.ended", "session.refused"):
        code = fields.get("exit_code")
        late = code is None and event == "session.refused"
        fields["reason"] = "it did not start in time" if late else exit_reason(code)
    priority = "err" if event == "stop" and fields.get("reason") == "error" else None
    journal.record(event, priority, stacklevel=3, **fields)  # the caller of `activity`
