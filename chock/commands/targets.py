"""Which session a steering command names, on which host (`target`), and the verb it sends there (`ask`): what
`chock stop`, `say`, `attach`, `plan`, `approve` and `sessions remove` share (chock/commands/steer.py).

`target` is the one place a session is found: `NAME:SESSION` (NAME a connection of config.zon or `local`, never
an address) or `--daemon NAME|ADDR SESSION` asks that host's `find`, which names the project, so no project of
this machine is needed; a bare SESSION with several `--daemon` is looked for on each, and refused naming them when
more than one holds it; with no host named, this machine's daemon and this project's sessions (`pick`).

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from chock.control import daemon_protocol as dp
from chock.control.address import (
    CONNECTION_NAME,
    LOCAL,
    Address,
    BadAddress,
    host_address,
    named_address,
    named_hosts,
)
from chock.control.client import ControlClient, R, expect
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.message import Request
from chock.errors import ChockError, UsageError
from chock.paths import Layout, is_session_id

RUNNING = ("running", "waiting")

# A word with a session id's date-time prefix is meant as a session id, whatever follows it: such a word is
# never taken as the start of a message (docs/architecture.md#steering).
# A `NAME:` before it names the host.
SESSION_SHAPE = re.compile(r"^(?:[a-z][a-z0-9_-]{0,31}:)?[0-9]{8}-[0-9]{6}-")


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
        if error.code == ErrorCode.UNKNOWN_VERB:  # says itself which daemon needs a newer Chock (connection.py)
            raise SteerFailed(error.text) from None
        raise SteerFailed(f"the daemon did not {request.verb} it ({error.code}): {error.text}") from None


def pick(client: ControlClient, project: Path, session_id: str | None, *, running: bool) -> str:
    """The session named, exactly as the daemon lists it for `project` (else NoSession, exit 2), or, when none
    is named, the project's newest (the newest running or waiting one, with `running`)."""
    rows = [expect(line, dp.ListRow).row for line in client.collect(dp.ListRequest(str(project)), most=dp.MAX_SESSIONS)]
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


@dataclass(frozen=True)
class Target:
    """A session on a host: the client of that host's daemon, the host as a person named it (`local`, a
    connection's name, or an address as typed), the session's project there, and its id."""

    client: ControlClient
    host: str
    project: Path
    session_id: str
    row: dict[str, object] | None = None  # the session's row, when its host was found by asking (`find`)

    @property
    def named(self) -> bool:
        """Whether the host is a name (`local` or a connection's) rather than an address."""
        return self.host == LOCAL or bool(CONNECTION_NAME.fullmatch(self.host))

    @property
    def where(self) -> str:
        """Where it is, for a person: `on build`, or `through the daemon at ADDR`."""
        return f"on {self.host}" if self.named else f"through the daemon at {self.client.address}"

    @property
    def again(self) -> str:
        """The session as `chock attach` takes it back: `NAME:ID`, or `--daemon ADDR ID`."""
        return f"{self.host}:{self.session_id}" if self.named else f"--daemon {self.host} {self.session_id}"


def split_host(word: str) -> tuple[str | None, str]:
    """`NAME:SESSION` as (NAME, SESSION); a word with no colon is (None, word). NAME is `local` or a connection's
    name, never an address: anything else before the colon is refused."""
    name, colon, session = word.partition(":")
    if not colon:
        return None, word
    if name != LOCAL and not CONNECTION_NAME.fullmatch(name):
        raise BadAddress(
            f"{word!r}: before the colon goes a connection's name from config.zon or `local`, never an address; "
            "give an address as --daemon ADDR SESSION"
        )
    return name, session


def _found(name: str, address: Address, session_id: str) -> tuple[str, Address, dict[str, object]] | None:
    """The session's row from the daemon's `find`, or None when that daemon holds no such session."""
    try:
        row = expect(ControlClient(address).call(dp.FindRequest(session_id)), dp.ListRow).row
    except ProtocolError as error:
        if error.code == ErrorCode.NOT_FOUND:
            return None
        if error.code == ErrorCode.UNKNOWN_VERB:
            raise SteerFailed(error.text) from None
        raise
    return name, address, row


def target(
    layout: Layout,
    word: str | None,
    project: Path | None,
    daemon: tuple[str, ...],
    port: int | None,
    *,
    running: bool,
    acting: str,
) -> Target:
    """The session a command names, on the host it names (see the module); NoSession (exit 2) when no host named
    holds it, and nothing is sent. `acting` is the command, for its refusals."""
    from chock.commands.base import project_root

    host, session_id = split_host(word) if word is not None else (None, None)
    if session_id is not None and not is_session_id(session_id):  # refused before any daemon is asked
        raise NoSession(f"no session {session_id!r}: that is not a session id; nothing was sent")
    if host is not None and (daemon or port is not None):
        raise UsageError(f"{word} names its host; leave out --daemon and --port (or give SESSION alone)")
    hosts = (
        [host_address(host, local=Address(path=str(layout.daemon_socket)))] if host else named_hosts(daemon, port=port)
    )
    if hosts is None or (session_id is None and len(hosts) == 1):
        address = hosts[0][1] if hosts else Address(path=str(layout.daemon_socket))
        client, root = ControlClient(address), project_root(project)
        name = hosts[0][0] if hosts else LOCAL
        return Target(client, name, root, pick(client, root, session_id, running=running))
    if session_id is None:
        named_address(daemon, port=port, acting=acting)  # refuses the second --daemon, naming the command
        raise UsageError(f"{acting} acts on one session and {len(hosts)} hosts were named: name the session")
    wanted: str = session_id
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        asked = pool.map(lambda each: _found(each[0], each[1], wanted), hosts)
        held = [found for found in asked if found is not None]
    if len(held) > 1:  # a host it moved away from keeps it as history: the host it went to holds it
        held = [found for found in held if found[2].get("status") != "moved"] or held
    if not held:
        names = ", ".join(name for name, _ in hosts)
        raise NoSession(f"no session {session_id!r} on {names}; nothing was sent. `chock sessions --all` lists them")
    if len(held) > 1:
        names = ", ".join(name for name, _, _ in held)
        raise UsageError(f"session {session_id} is held by {names}: name one, as NAME:{session_id}; nothing was sent")
    name, address, row = held[0]
    project_there = row.get("project")
    if not isinstance(project_there, str) or not project_there.startswith("/"):
        raise SteerFailed(f"the daemon at {address} named no absolute project for session {session_id}")
    return Target(ControlClient(address), name, Path(project_there), wanted, row)
