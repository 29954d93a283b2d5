"""`chock approve`: answer a session's questions from another terminal, on this machine or through a daemon.

With no host named, the answer travels over the session's approval.sock on this machine; the session itself logs
`approval.answer {via: socket}`, and the first answer wins (docs/architecture.md#approvals). Given `NAME:SESSION`
or `--daemon` (chock/commands/targets.py), the host's daemon does both halves: its `read` gives the session's
log, folded here by the row fold (chock/log/row.py) to the requests still waiting, and its `answer` relays each
answer to that approval.sock on the host. The log is the host's and untrusted: its requests are shown through the
safe printer, at most MOST_PENDING of them are kept, and nothing in it is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chock.control.client import SessionClient, SessionEnded
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.session_protocol import APPROVAL
from chock.errors import ChockError
from chock.paths import Layout, check_session_id

if TYPE_CHECKING:
    from chock.commands.targets import Target

# Ask(request id, tool, summary) -> yes; Say(a line for the person).
Ask = Callable[[str, str, str], bool]
Say = Callable[[str], None]

# The most waiting requests a host's log may claim: a session waits on a few at a time, and a log that claims
# more is refused rather than held (each summary may be up to an event's 1 MiB).
MOST_PENDING = 256


class ApproveFailed(ChockError):
    pass


def approve(layout: Layout, session_id: str, ask: Ask, say: Say) -> int:
    """Show each pending request, `ask(request_id, tool, summary)` for the answer, send it; return how many."""
    check_session_id(session_id)
    if not layout.log_path(session_id).exists():
        raise ApproveFailed(f"there is no session {session_id} on this machine")
    try:
        client = SessionClient(layout.session_socket(session_id, "approval"), APPROVAL)
    except ProtocolError:
        raise ApproveFailed(
            f"session {session_id} is not running on this machine, so it has nothing to approve "
            "(a session elsewhere is answered through its daemon: NAME:SESSION or --daemon ADDR SESSION)"
        ) from None
    answered = 0
    with client:
        try:
            pending = client.pending()
            if not pending:
                say(f"session {session_id} is not waiting for an answer")
            for item in pending:
                yes = ask(item.request_id, item.tool, item.summary)
                try:
                    client.answer(item.request_id, yes)
                    say(f"{item.request_id}: {'approved' if yes else 'denied'}")
                    answered += 1
                except ProtocolError as error:
                    if error.code != ErrorCode.NOT_PENDING:
                        raise
                    say(f"{item.request_id}: already answered elsewhere ({error.text})")
        except SessionEnded as ended:
            say(f"session {session_id} ended ({ended.reason})")
    return answered


def waiting(found: Target) -> list[dict[str, str]]:
    """The requests the session waits on, oldest first: its log, read through the host's daemon (`read`, each
    line within the protocol's bounds), folded by the row fold. A log claiming more than MOST_PENDING is refused."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import events_of
    from chock.log.row import RowState

    state = RowState()
    stream = found.client.stream(dp.ReadRequest(found.session_id))
    try:
        for event in events_of(stream):
            state.apply(event)
            if len(state.pending_approvals) > MOST_PENDING:
                raise ApproveFailed(
                    f"session {found.session_id} {found.where} claims more than {MOST_PENDING} requests waiting at "
                    "once; nothing was answered. Look at it with `chock attach "
                    f"{found.again}`"
                )
    finally:
        stream.close()
    return [{key: str(item.get(key, "")) for key in ("request_id", "tool", "summary")} for item in
            state.pending_approvals.values()]  # fmt: skip


def approve_through(found: Target, ask: Ask, say: Say) -> int:
    """`approve` through the session's host's daemon (see the module); return how many were answered. A request
    answered meanwhile (`error not-pending`) is said so; any other refusal is ApproveFailed, in the daemon's words."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import expect
    from chock.control.framing import request_id as request_id_field

    pending, claimed = [], waiting(found)
    for item in claimed:
        try:
            pending.append({**item, "request_id": request_id_field(item["request_id"])})
        except ProtocolError:
            say(f"{item['request_id']!r} is no request id an answer can carry; it was left unanswered")
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
    answered = 0
    for item in pending:
        request_id = item["request_id"]
        yes = ask(request_id, item["tool"], item["summary"])
        try:
            expect(
                found.client.call(dp.AnswerRequest(str(found.project), found.session_id, request_id, yes)), dp.Answered
            )
        except ProtocolError as error:
            if error.code != ErrorCode.NOT_PENDING:
                raise ApproveFailed(
                    f"{request_id} was not answered {found.where} ({error.code}): {error.text}"
                ) from None
            say(f"{request_id}: already answered elsewhere ({error.text})")
            continue
        say(f"{request_id}: {'approved' if yes else 'denied'} {found.where}")
        answered += 1
    return answered
