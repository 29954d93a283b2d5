"""Which session a steering command names (`pick`), and the verb it sends there (`ask`): what `chock stop`,
`say`, `attach`, `plan` and `sessions remove` share when they act through the daemon (chock/commands/steer.py).

Each is a daemon verb, sent with `ask` (one function for every verb), so a session is steered the same way from
this machine or from another (a daemon on TCP). The daemon relays to the session's own socket or carries an
ended session on; it never signals a process and never writes a log (docs/architecture.md#steering). A steering
command names its target or refuses: a session id given is one the daemon lists for the project, exactly, or
nothing is sent (`pick`).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, R, expect
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.message import Request
from chock.errors import ChockError, UsageError
from chock.paths import is_session_id

RUNNING = ("running", "waiting")

# A word with a session id's date-time prefix is meant as a session id, whatever follows it: such a word is
# never taken as the start of a message (docs/architecture.md#steering).
SESSION_SHAPE = re.compile(r"^[0-9]{8}-[0-9]{6}-")


def looks_like_session(word: str) -> bool:
    """Whether `word` has a session id's shape (its date-time prefix), so it names a session or nothing."""
    return bool(SESSION_SHAPE.match(word))


class NoSession(UsageError):
    """A session id that names no session of the project at the daemon asked: nothing was sent."""


def target_and_message(words: tuple[str, ...], before_dashes: int, piped: str) -> tuple[str | None, str]:
    """`chock say`'s session (None: the newest) and message, from its words and what standard input held.

    A first word with a session id's shape that came before `--` is the session; the rest is the message. A
    message given both as words and on standard input is refused, naming both: neither is dropped."""
    session = words[0] if words and before_dashes and looks_like_session(words[0]) else None
    given = " ".join(words[1:] if session is not None else words)
    if given.strip() and piped.strip():
        raise UsageError(
            "chock say got a message both as arguments and on standard input: give it one way (`</dev/null` "
            "keeps standard input out)"
        )
    message = (given if given.strip() else piped).strip()
    if not message:
        raise UsageError("chock say needs a message: give it as arguments or on standard input")
    return session, message


def piped_stdin() -> str:
    """What standard input holds when it is a pipe, a file or a socket (read to its end); "" for a terminal,
    a device such as /dev/null, or none."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return ""
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
        return ""
    try:
        return sys.stdin.buffer.read().decode()
    except UnicodeDecodeError:
        raise UsageError("standard input is not UTF-8 text; chock say takes a message as text") from None


class SteerFailed(ChockError):
    pass


def ask(client: ControlClient, request: Request, reply: type[R]) -> R:
    """One verb through the daemon: its reply, of the type the request declares; a refusal is SteerFailed,
    naming the verb and the daemon's own words."""
    try:
        return expect(client.call(request), reply)
    except ProtocolError as error:
        if (
            error.code == ErrorCode.UNKNOWN_VERB
        ):  # says itself which daemon needs a newer Chock (chock.control.connection)
            raise SteerFailed(error.text) from None
        raise SteerFailed(f"the daemon did not {request.verb} it ({error.code}): {error.text}") from None


def pick(client: ControlClient, project: Path, session_id: str | None, *, running: bool) -> str:
    """The session named, exactly as the daemon lists it for `project` (else NoSession, exit 2), or, when none
    is named, the project's newest (the newest running or waiting one, with `running`)."""
    rows = [expect(line, dp.ListRow).row for line in client.collect(dp.ListRequest(str(project)))]
    if session_id is not None:
        if is_session_id(session_id) and any(row.get("id") == session_id for row in rows):
            return session_id
        raise NoSession(
            f"no session {session_id!r} of {project} at the daemon at {client.address}; nothing was sent. "
            f"`chock sessions` lists them (--project DIR for another project's)"
        )
    rows = [row for row in rows if not running or row.get("status") in RUNNING]
    if not rows:
        which = "running session" if running else "session"
        raise SteerFailed(f"no {which} of {project} is known to the daemon at {client.address}; name one")
    return str(rows[-1]["id"])
