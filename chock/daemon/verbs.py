"""The daemon's verbs (docs/protocol.md#the-control-protocol), one small function each, looked up by name in `VERBS`.

Each takes the shared `Daemon`, the connection's `ReplyWriter` and its typed request (the codec has already checked
every field: a session id matches its pattern before it touches a path, a project is absolute, a number is a
number). A verb refuses by raising a `ProtocolError`, which the connection sends as its one `error <code>
<text>` line; a verb that has begun its reply never raises one. The verbs in `INLINE` are answered from the
selector loop without a thread, so they must not block: their reply is bytes, or a producer of them; one that
would (a `list` that must read files) raises `InThread` before it writes, and is answered in a thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

from chock.control import daemon_protocol as dp
from chock.control.framing import ErrorCode, ProtocolError, Unreachable
from chock.control.message import ReplyLine, Request
from chock.control.session_protocol import SessionStopRequest
from chock.daemon import move_relay
from chock.daemon.context import Daemon
from chock.daemon.reply import InThread, ReplyWriter
from chock.log.catalog import Entry
from chock.log.reader import offset_after

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any, BinaryIO

# A `read` takes the log in pieces of this size, so a long log never sits whole in the daemon.
READ_CHUNK = 256 * 1024

# How long a relay waits for a session's own socket: a session answers between two steps of its own loop,
# which it serves whenever it waits.
RELAY_TIMEOUT = 10.0

# How long `stop` waits for the session's log to hold its end after the session took the stop.
STOP_WAIT = 10.0

# How long a `say` waits for another `say` to the same session to be done: one that carries an ended session
# on is done within a few seconds; one still waiting past this (a child slow to start) is said to be busy
# rather than queued behind it, where the client's own bound (dp.SPAWN_SECONDS) would run out first.
SAY_WAIT = 15.0


def _not_found(text: str) -> ProtocolError:
    return ProtocolError(ErrorCode.NOT_FOUND, text)


def _session(daemon: Daemon, project: str, session_id: str) -> Entry:
    """The session `session_id` of `project` (compared by resolved real path), or `not-found`."""
    entry = daemon.catalog.entry(session_id)
    if entry is None:
        raise _not_found(f"there is no session {session_id}")
    if entry.project_real != os.path.realpath(project):
        raise _not_found(f"session {session_id} is not a session of {project}")
    return entry


def _list_line(started_at: str, row: dict[str, Any]) -> bytes:
    return dp.ListRow(started_at, row).encode()


# --------------------------------------------------------------------------------------------------------
# The verbs


def start(daemon: Daemon, reply: ReplyWriter, request: dp.StartRequest) -> None:
    """`start <project>\\t<message>` -> `ok <session id>\\t<log path>`, once the child has logged its start."""
    session_id = daemon.children.start(request.project, request.message)
    reply.answer(dp.Started(session_id, str(daemon.layout.log_path(session_id))))


def start_with(daemon: Daemon, reply: ReplyWriter, request: dp.StartWithRequest) -> None:
    """`start-with <project>\\t<instance>\\t<message>` -> as `start`, the child given `--instance`; a name the
    daemon's config and logins do not hold is the child's refusal, `error refused <its words>`."""
    session_id = daemon.children.start(request.project, request.message, request.instance)
    reply.answer(dp.Started(session_id, str(daemon.layout.log_path(session_id))))


def adopt(daemon: Daemon, reply: ReplyWriter, request: dp.AdoptRequest) -> None:
    """`adopt <project>\\t<session id>` -> `ok <session id>\\t<log path>`, once the child holds the log."""
    entry = _session(daemon, request.project, request.session_id)
    daemon.children.adopt(request.session_id, request.project, entry.state.last_event_id)
    reply.answer(dp.Started(request.session_id, str(daemon.layout.log_path(request.session_id))))


def read(daemon: Daemon, reply: ReplyWriter, request: dp.ReadRequest) -> None:
    """`read <session id> <last event id>` -> the log's own lines after that id, then close."""
    try:
        handle = open(daemon.layout.log_path(request.session_id), "rb")  # noqa: SIM115 - the producer closes it
    except FileNotFoundError:
        raise _not_found(f"there is no session {request.session_id}") from None
    try:
        start = offset_after(handle, request.after)
    except BaseException:
        handle.close()
        raise
    reply.stream(_complete_lines(handle, start))


def _complete_lines(handle: BinaryIO, start: int) -> Iterator[bytes]:
    """The log from `start` in chunks of whole lines, up to the last `\n` (a torn tail is never sent)."""
    with handle:
        handle.seek(start)
        held = b""
        while data := handle.read(READ_CHUNK):
            data = held + data
            end = data.rfind(b"\n") + 1
            held = data[end:]
            if end:
                yield data[:end]


def list_(daemon: Daemon, reply: ReplyWriter, request: dp.ListRequest) -> None:
    """`list <project>` -> `<started at>\\t<row JSON>` per session, oldest first; none for an unknown project.
    Answered in the selector loop when the catalog holds the rows in memory (warm), else in a thread: the first
    `list` folds logs and reads the cache, and the loop never waits on a file. Threaded lists take turns, so a
    page's polls during a cold start fold each log once."""
    catalog = daemon.catalog
    if reply.inline:
        data = catalog.warm_reply(request.project, _list_line)
        if data is None:
            raise InThread
        reply.send(data)
        return
    with _COLD_LIST:
        data, save = catalog.reply_then_save(request.project, _list_line)
    reply.send(data)
    reply.end()  # the client has its whole reply: the cache is written after, not while it waits
    with _COLD_LIST:
        save()


_COLD_LIST = threading.Lock()


def sessions(daemon: Daemon, reply: ReplyWriter, request: dp.SessionsRequest) -> None:
    """`sessions` -> `list`'s row of every session of every project, newest first, at most dp.MAX_SESSIONS.
    Answered in a thread (it folds logs a `list` never asked for), taking turns with the cold lists."""
    catalog = daemon.catalog
    with _COLD_LIST:
        entries = catalog.every()[::-1][: dp.MAX_SESSIONS]  # newest first
    reply.stream(entry.line(catalog.alive(entry), _list_line) for entry in entries)


def find(daemon: Daemon, reply: ReplyWriter, request: dp.FindRequest) -> None:
    """`find <session id>` -> that session's row, of whichever project, or `not-found`."""
    catalog = daemon.catalog
    entry = catalog.entry(request.session_id)
    if entry is None:
        raise _not_found(f"there is no session {request.session_id}")
    reply.send(entry.line(catalog.alive(entry), _list_line))


def instances(daemon: Daemon, reply: ReplyWriter, request: dp.InstancesRequest) -> None:
    """`instances` -> each instance's name, kind and whether it is the default, read from the daemon's config
    and logins as `chock run` reads them; a config the daemon cannot read is `refused`, in the config reader's
    words (which never quote a `.token`)."""
    from chock.config import load_config
    from chock.errors import ChockError
    from chock.instances import listed

    try:
        found = listed(daemon.layout, load_config(daemon.layout.config))
    except ChockError as refusal:
        raise ProtocolError(ErrorCode.REFUSED, str(refusal)) from None
    reply.send(b"".join(dp.InstanceRow(name, kind, default).encode() for name, kind, default in found))


def watch(daemon: Daemon, reply: ReplyWriter, request: dp.WatchRequest) -> None:
    """`watch <project>\\t<session id>\\t<last id>` -> `ok <row JSON>`, then event lines as the log grows."""
    subscription = daemon.hub.subscribe(request.project, request.session_id, reply.sock, request.after)
    reply.sock.settimeout(None)  # the subscription sends with its own bounds
    daemon.watch_opened()
    try:
        subscription.serve()
    finally:
        daemon.hub.unsubscribe(subscription)
        daemon.watch_closed()


def answer(daemon: Daemon, reply: ReplyWriter, request: dp.AnswerRequest) -> None:
    """`answer <project>\t<session id>\t<request id>\t<yes|no>` -> `ok answered`, through approval.sock only.

    A connect that failed is reported as a failure and never as `ok answered`.
    """
    from chock.control.session_protocol import SessionAnswerRequest

    _session(daemon, request.project, request.session_id)
    _relay(daemon, request.session_id, "approval", SessionAnswerRequest(request.request_id, request.yes))
    reply.answer(dp.Answered())


def answer_with(daemon: Daemon, reply: ReplyWriter, request: dp.AnswerWithRequest) -> None:
    """`answer-with <project>\t<session id>\t<request id>\t<yes|no>\t<scope>\t<rule>\t<note>` -> `ok answered`,
    relayed as `answer-with` to approval.sock; the session checks and saves the rule (the daemon writes nothing).
    An older session's `unknown-verb` is passed on as it came, so the client can fall back to yes or no."""
    from chock.control.session_protocol import SessionAnswerWithRequest

    _session(daemon, request.project, request.session_id)
    relayed = SessionAnswerWithRequest(request.request_id, request.yes, request.scope, request.rule, request.note)
    _relay(daemon, request.session_id, "approval", relayed)
    reply.answer(dp.Answered())


def rules(daemon: Daemon, reply: ReplyWriter, request: dp.RulesRequest) -> None:
    """`rules <project>` -> `rule <id>\t<verdict>\t<pattern>\t<origin>` per rule in force for the project's
    sessions on this host: config.zon's, the project's and each running session's (chock.session.rule_sources)."""
    from chock.errors import ChockError
    from chock.session.rule_sources import rules_in_force

    catalog = daemon.catalog
    with _COLD_LIST:
        entries = catalog.of_project(request.project)
    running = [e.session_id for e in entries if e.state.status(catalog.alive(e)) in ("running", "waiting")]
    try:
        found = rules_in_force(daemon.layout, request.project, running)
    except ChockError as refusal:
        raise ProtocolError(ErrorCode.REFUSED, str(refusal)) from None
    reply.send(b"".join(dp.RuleRow(rule.id, rule.verdict, rule.pattern, rule.origin).encode() for rule in found))


def rule_remove(daemon: Daemon, reply: ReplyWriter, request: dp.RuleRemoveRequest) -> None:
    """`rule-remove <project>\t<rule id>` -> `ok removed`. The daemon writes no rule itself: a project rule is
    removed by a `chock rules remove --here` child, under the rules file's lock; a config rule is refused naming its
    file and line, a session rule as docs/approvals.md says."""
    daemon.children.remove_rule(request.project, request.rule_id)
    reply.answer(dp.RuleRemoved())


def stop(daemon: Daemon, reply: ReplyWriter, request: dp.StopRequest) -> None:
    """`stop <project>\t<session id>` -> `ok stopped` once the session's log holds its end and its owner has let go
    of it (STOP_WAIT at most), so a `remove` or `--continue` right after finds the session free.

    The session stops itself, asked over its handover.sock; the daemon never signals a process."""
    entry = _session(daemon, request.project, request.session_id)
    from chock.session.moving import moved_refusal

    went = moved_refusal(entry.state, "stopping")
    if went is not None:
        raise ProtocolError(ErrorCode.REFUSED, str(went))
    if entry.state.ended:
        raise ProtocolError(ErrorCode.REFUSED, f"session {request.session_id} is not running: it ended already")
    _relay(daemon, request.session_id, "handover", SessionStopRequest())
    deadline = time.monotonic() + STOP_WAIT
    while not _let_go(daemon, request.session_id):
        if time.monotonic() >= deadline:
            raise ProtocolError(ErrorCode.UNREACHABLE, f"the session did not end within {STOP_WAIT:g} s")
        time.sleep(0.05)
    reply.answer(dp.Stopped())


def say(daemon: Daemon, reply: ReplyWriter, request: dp.SayRequest) -> None:
    """`say <project>\t<session id>\t<message>` -> `ok queued <id>` (relayed to a running session) or
    `ok continued <id>` (an ended session carried on by a child of the daemon, the message on its stdin)."""
    from chock.control.session_protocol import SessionSayRequest

    session_id = request.session_id
    turn = daemon.steering(session_id)
    if not turn.acquire(timeout=SAY_WAIT):
        busy = f"another say is carrying session {session_id} on; say it again once it runs"
        raise ProtocolError(ErrorCode.BUSY, busy)
    try:
        entry = _session(daemon, request.project, session_id)
        status = entry.state.status(daemon.catalog.alive(entry))
        if status in ("running", "waiting"):
            _relay(daemon, session_id, "handover", SessionSayRequest(request.message))
            reply.answer(dp.Said("queued", session_id))
            return
        if status == "handed-over":
            refusal = f"session {session_id} is being handed over; say it again once it runs"
            raise ProtocolError(ErrorCode.REFUSED, refusal)
        from chock.session.moving import moved_refusal

        went = moved_refusal(entry.state, "saying more to")
        if went is not None:
            raise ProtocolError(ErrorCode.REFUSED, str(went))
        if status == "abandoned":
            raise ProtocolError(
                ErrorCode.REFUSED,
                f"session {session_id} ended abnormally and its workspace may be in use; look at it with "
                f"`chock workspace show {session_id}`",
            )
        daemon.children.continue_(session_id, request.project, entry.state.last_event_id, request.message)
    finally:
        turn.release()
    reply.answer(dp.Said("continued", session_id))


def remove(daemon: Daemon, reply: ReplyWriter, request: dp.RemoveRequest) -> None:
    """`remove <project>\t<session id>` -> `ok removed`; `error busy` while another process holds its log."""
    _session(daemon, request.project, request.session_id)
    _remove(daemon, reply, request)


def remove_with_workspace(daemon: Daemon, reply: ReplyWriter, request: dp.RemoveWithWorkspaceRequest) -> None:
    """`remove-with-workspace <project>\t<session id>` -> `ok removed`: an ended session's kept workspace is removed
    by `chock workspace remove ID`, a child of the daemon (which writes that log itself: the daemon writes none),
    then the session is removed as `remove` does."""
    entry = _session(daemon, request.project, request.session_id)
    state = entry.state
    if state.ended and state.end_reason != "handover" and state.workspace_kept:
        daemon.children.remove_workspace(request.session_id, str(entry.state.project))
    _remove(daemon, reply, request)


def _remove(daemon: Daemon, reply: ReplyWriter, request: dp.RemoveRequest | dp.RemoveWithWorkspaceRequest) -> None:
    from chock.errors import ChockError
    from chock.log.removal import SessionBusy, remove_session

    try:
        remove_session(daemon.layout, request.session_id)
    except SessionBusy as busy:
        raise ProtocolError(ErrorCode.BUSY, str(busy)) from None
    except ChockError as refusal:
        raise ProtocolError(ErrorCode.REFUSED, str(refusal)) from None
    daemon.status.activity("session.removed", session=request.session_id)
    reply.answer(dp.Removed())


def _relay(daemon: Daemon, session_id: str, kind: str, request: Request) -> ReplyLine:
    """One request to the session's own socket; a session that does not answer is `unreachable`, and its own
    refusal (`not-pending`) is passed on."""
    from chock.control.client import SessionClient
    from chock.control.session_protocol import APPROVAL, HANDOVER
    from chock.errors import ChockError

    path = daemon.layout.session_socket(session_id, kind)
    try:
        with SessionClient(path, APPROVAL if kind == "approval" else HANDOVER, timeout=RELAY_TIMEOUT) as client:
            if isinstance(request, SessionStopRequest):
                client.ask(request)  # its answer is the session's `ended`, which comes once it has stopped
                return client.next_reply(RELAY_TIMEOUT)
            return client.call(request)
    except Unreachable:
        raise ProtocolError(
            ErrorCode.UNREACHABLE,
            f"session {session_id} does not answer on its {kind} socket: it is not running on this machine, or it "
            "has just ended",
        ) from None
    except ProtocolError as error:  # the session's own refusal (`not-pending`), or a reply it could not read
        passed_on = (ErrorCode.NOT_PENDING, ErrorCode.UNKNOWN_VERB, ErrorCode.BAD_REQUEST)  # an older session, a rule
        code = error.code if error.code in passed_on else ErrorCode.UNREACHABLE
        raise ProtocolError(code, error.text) from None
    except (ChockError, OSError) as error:
        raise ProtocolError(ErrorCode.UNREACHABLE, f"session {session_id}'s {kind} socket failed: {error}") from None


def _let_go(daemon: Daemon, session_id: str) -> bool:
    """Whether the session's log holds its end and nobody holds the log's lock any more."""
    from chock.log.reader import owner_alive

    entry = daemon.catalog.entry(session_id)
    return entry is None or (entry.state.ended and not owner_alive(daemon.layout.log_path(session_id)))


VERBS: dict[str, Callable[[Daemon, ReplyWriter, Any], None]] = {
    "start": start,
    "adopt": adopt,
    "read": read,
    "list": list_,
    "watch": watch,
    "answer": answer,
    "stop": stop,
    "say": say,
    "remove": remove,
    "sessions": sessions,
    "find": find,
    "instances": instances,
    "start-with": start_with,
    "remove-with-workspace": remove_with_workspace,
    "answer-with": answer_with,
    "rules": rules,
    "rule-remove": rule_remove,
}

VERBS.update(move_relay.VERBS)  # moving a session between hosts (chock/daemon/move_relay.py)

assert set(VERBS) == set(dp.CONTROL.requests), "every verb the codec parses has its handler here"

# Answered from the selector loop: their reply is produced from memory or the log, never waited for.
INLINE = frozenset({"list", "read"})
