"""`chock approve`: answer a session's questions from another terminal on the same machine.

The answer travels over the session's approval.sock; the session itself logs `approval.answer {via:
socket}`, and the first answer wins (docs/architecture.md#approvals). That socket is a unix socket, so this
works only where the session runs; a client elsewhere uses the daemon's `answer` verb.
"""

from __future__ import annotations

from collections.abc import Callable

from chock.control.client import SessionClient, SessionEnded
from chock.control.framing import ProtocolError
from chock.control.session_protocol import APPROVAL
from chock.errors import ChockError
from chock.paths import Layout, check_session_id


class ApproveFailed(ChockError):
    pass


def approve(layout: Layout, session_id: str, ask: Callable[[str, str, str], bool], say: Callable[[str], None]) -> int:
    """Show each pending request, `ask(request_id, tool, summary)` for the answer, send it; return how many."""
    check_session_id(session_id)
    if not layout.log_path(session_id).exists():
        raise ApproveFailed(f"there is no session {session_id} on this machine")
    try:
        client = SessionClient(layout.session_socket(session_id, "approval"), APPROVAL)
    except ProtocolError:
        raise ApproveFailed(
            f"session {session_id} is not running on this machine, so it has nothing to approve "
            "(a session elsewhere is answered through its daemon)"
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
                    if error.code != "not-pending":
                        raise
                    say(f"{item.request_id}: already answered elsewhere ({error.text})")
        except SessionEnded as ended:
            say(f"session {session_id} ended ({ended.reason})")
    return answered
