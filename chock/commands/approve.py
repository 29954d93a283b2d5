"""`chock approve`: answer what sessions wait on from another terminal, on this machine or through a daemon.

With no host named, the answer travels over the session's approval.sock on this machine; the session itself logs
`approval.answer {via: socket}`, and the first answer wins (docs/architecture.md#approvals). Given `NAME:SESSION`
or `--daemon` (chock/commands/targets.py), the host's daemon does both halves: its `read` gives the session's
log, folded here (chock/commands/answering.py) to the requests still waiting, and its `answer` or `answer-with`
relays each answer to that approval.sock on the host. With no session named (`approve_waiting`), every waiting
session of the project (`--all`: of every project on every host) is answered in turn, oldest first. The log is
the host's and untrusted: its requests are shown through the safe printer, at most MOST_PENDING of them are kept,
and nothing in it is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chock.commands.answering import MOST_PENDING, Choice, fold_pending, older_why
from chock.control.client import SessionClient, SessionEnded
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.session_protocol import APPROVAL
from chock.errors import ChockError
from chock.paths import Layout, check_session_id

if TYPE_CHECKING:
    from chock.commands.targets import Target

# Ask(the request's event, whether more than yes or no is offered) -> the answer; Say(a line for the person).
Ask = Callable[[dict[str, Any], bool], Choice]
Say = Callable[[str], None]
Send = Callable[[str, Choice], None]


class ApproveFailed(ChockError):
    pass


class Answering:
    """One person answering requests in turn: `ask` for each answer, `send` it; an `answer-with` a host refuses as
    an unknown verb is said (why) and the request asked again with yes or no only, as is every later one there; an
    answer refused as a bad request (a rule that is none) is said and asked again."""

    def __init__(self, ask: Ask, say: Say) -> None:
        self.ask = ask
        self.say = say
        self.older: set[str] = set()  # where `answer-with` was refused as unknown

    def one(self, request: dict[str, Any], send: Send, where: str) -> bool:
        """Ask for and send the answer to one request; whether it was answered here (not elsewhere first)."""
        request_id = str(request.get("request_id", ""))
        while True:
            choice = self.ask(request, where not in self.older)
            try:
                send(request_id, choice)
            except ProtocolError as error:
                if error.code == ErrorCode.UNKNOWN_VERB and not choice.plain:
                    self.say(older_why(where))
                    self.older.add(where)
                    continue
                if error.code == ErrorCode.BAD_REQUEST:  # a rule that is none, a note too long: asked again
                    self.say(f"{request_id}: not answered: {error.text}")
                    continue
                if error.code != ErrorCode.NOT_PENDING:
                    raise ApproveFailed(f"{request_id} was not answered {where} ({error.code}): {error.text}") from None
                self.say(f"{request_id}: already answered elsewhere ({error.text})")
                return False
            self.say(f"{request_id}: {choice.said()} {where}")
            return True


def _local_requests(layout: Layout, session_id: str) -> dict[str, dict[str, Any]]:
    """The requests this machine's log of the session holds open, with what their events say ("always"'s
    proposal); {} when the log cannot be read."""
    from chock.log.reader import read_events

    try:
        return fold_pending(read_events(layout.log_path(session_id)))
    except (OSError, ValueError):
        return {}


def approve(layout: Layout, session_id: str, ask: Ask, say: Say, answering: Answering | None = None) -> int:
    """Show each pending request of a session of this machine, `ask` for the answer, send it over its
    approval.sock; return how many were answered."""
    check_session_id(session_id)
    if not layout.log_path(session_id).exists():
        raise ApproveFailed(f"there is no session {session_id} on this machine")
    try:
        client = SessionClient(layout.session_socket(session_id, "approval"), APPROVAL)
    except ProtocolError:
        from chock.log import catalog
        from chock.session.moving import moved_refusal

        loaded = catalog.load(layout, session_id)
        went = None if loaded is None else moved_refusal(loaded[0], "approving for")
        if went is not None:
            raise ApproveFailed(str(went)) from None
        raise ApproveFailed(
            f"session {session_id} is not running on this machine, so it has nothing to approve "
            "(a session elsewhere is answered through its daemon: NAME:SESSION or --daemon ADDR SESSION)"
        ) from None
    from chock.control import session_protocol as sp

    def send(request_id: str, choice: Choice) -> None:
        if choice.plain:
            client.answer(request_id, choice.yes)
        else:
            client.call(sp.SessionAnswerWithRequest(request_id, choice.yes, choice.scope, choice.rule, choice.note))

    answering = answering or Answering(ask, say)
    answered = 0
    with client:
        try:
            pending = client.pending()
            if not pending:
                say(f"session {session_id} is not waiting for an answer")
            logged = _local_requests(layout, session_id) if pending else {}
            for item in pending:
                request = {**logged.get(item.request_id, {}), "request_id": item.request_id, "tool": item.tool,
                           "summary": item.summary}  # fmt: skip
                answered += answering.one(request, send, f"in session {session_id}")
        except SessionEnded as ended:
            say(f"session {session_id} ended ({ended.reason})")
    return answered


def waiting(found: Target) -> list[dict[str, Any]]:
    """The requests the session waits on, oldest first, each its `approval.request` event: its log, read through
    the host's daemon (`read`, each line within the protocol's bounds), folded. A log claiming more than
    MOST_PENDING is refused."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import events_of

    stream = found.client.stream(dp.ReadRequest(found.session_id))
    try:
        pending = fold_pending(events_of(stream))
    finally:
        stream.close()
    if len(pending) > MOST_PENDING:
        raise ApproveFailed(
            f"session {found.session_id} {found.where} claims more than {MOST_PENDING} requests waiting at once; "
            f"nothing was answered. Look at it with `chock attach {found.again}`"
        )
    return list(pending.values())


def approve_through(found: Target, ask: Ask, say: Say, answering: Answering | None = None) -> int:
    """`approve` through the session's host's daemon (see the module); return how many were answered. A request
    answered meanwhile (`error not-pending`) is said so; any other refusal is ApproveFailed, in the daemon's words."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import expect
    from chock.control.framing import request_id as request_id_field

    pending, claimed = [], waiting(found)
    for item in claimed:
        try:
            pending.append({**item, "request_id": request_id_field(str(item.get("request_id", "")))})
        except ProtocolError:
            say(f"{item.get('request_id')!r} is no request id an answer can carry; it was left unanswered")
    if not claimed:
        say(f"session {found.session_id} {found.where} is not waiting for an answer")
    if not pending:
        return 0
    # The log says what was asked; only the host knows whether anyone is still there to take an answer.
    status = expect(found.client.call(dp.FindRequest(found.session_id)), dp.ListRow).row.get("status")
    if status not in ("running", "waiting"):
        raise ApproveFailed(
            f"session {found.session_id} {found.where} is {status!s}: nobody there can take an answer; nothing was "
            f"asked. `chock run --on {found.host} --continue {found.session_id}` carries it on"
        )
    project = str(found.project)

    def send(request_id: str, choice: Choice) -> None:
        if choice.plain:
            verb: Any = dp.AnswerRequest(project, found.session_id, request_id, choice.yes)
        else:
            verb = dp.AnswerWithRequest(
                project, found.session_id, request_id, choice.yes, choice.scope, choice.rule, choice.note
            )
        expect(found.client.call(verb), dp.Answered)

    answering = answering or Answering(ask, say)
    return sum(answering.one(item, send, found.where) for item in pending)


def approve_waiting(layout: Layout, listed: list[Any], project: Path | None, ask: Ask, say: Say) -> int:
    """Every waiting session of the hosts' rows (`listed`: chock.commands.every_host.Listed, each host's rows),
    of `project` only when one is given, oldest first, answered in turn: a session of this machine's state
    directory over its approval.sock, any other through its host's daemon. Returns how many were answered."""
    from chock.commands.listing import preview
    from chock.commands.targets import Target
    from chock.control.client import ControlClient

    rows = [(each, row) for each in listed for row in each.rows if row.get("status") == "waiting"]
    if project is not None:
        rows = [(each, row) for each, row in rows if row.get("project") == str(project)]
    rows.sort(key=lambda pair: (str(pair[1].get("started_at") or ""), str(pair[1].get("id") or "")))
    for each in listed:
        if each.why is not None:
            say(f"{each.host}: not asked: {each.why}")
    if not rows:
        say(f"no session {'of ' + str(project) + ' ' if project else ''}is waiting for an answer")
        return 0
    answering, answered = Answering(ask, say), 0
    for each, row in rows:
        session_id = str(row.get("id", ""))
        say(f"session {session_id} on {each.host}: {preview(str(row.get('message') or '(no task)'), 80)}")
        try:
            if each.address is None:
                answered += approve(layout, session_id, ask, say, answering)
            else:
                found = Target(ControlClient(each.address), each.host, Path(str(row.get("project"))), session_id)
                answered += approve_through(found, ask, say, answering)
        except (ApproveFailed, ProtocolError) as error:
            say(f"session {session_id} on {each.host}: {error}")
    return answered
