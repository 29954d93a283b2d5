"""A session's own sockets: `approval.sock` and `handover.sock` (docs/protocol.md#session-sockets).

The same line and escaping rules and the same greeting as the control protocol (`hello chock-session 1` ->
`ok chock-session 1`), several requests on one connection. They carry questions and answers, never a log
write: the session writes its own log.

    approval.sock   pending                       -> request <request id>\\t<tool>\\t<summary> (each), then end
                    answer <request id>\\t<yes|no> -> ok answered | error not-pending <text>
                    answer-with <request id>\\t<yes|no>\\t<once|session|project>\\t<rule>\\t<note>
                                                  -> ok answered | error not-pending <text> | error bad-request
    handover.sock   handover                      -> busy <background> <subagents> (zero or more), then ready
                    confirm                       -> released; the session closes and exits 8
                    stop                          -> ended interrupted; the session stops now and exits 130
                    say <message>                 -> ok queued; taken in at the next turn boundary
                                                     | error unreachable <text> once the session's end has begun
    either          (a session that ends while a client waits) ended <reason>, then close
"""

from __future__ import annotations

from chock.control import framing as f
from chock.control.daemon_protocol import ANSWER_WITH_LINE, check_answer
from chock.control.daemon_protocol import Answered as Answered  # the session answers an approval as the daemon does
from chock.control.message import Bare, LineProtocol, ReplyLine, Request

SESSION_NAME = "chock-session"
SESSION_PROTOCOL = 1

# --------------------------------------------------------------------------------------------------------
# Replies


class PendingItem(ReplyLine):
    """`request <request id>\\t<tool>\\t<summary>`: one approval request waiting for an answer."""

    __slots__ = ("request_id", "summary", "tool")
    WHAT = "request <request id>\\t<tool>\\t<summary>"

    def __init__(self, request_id: str, tool: str, summary: str) -> None:
        self.request_id = request_id
        self.tool = tool
        self.summary = summary

    def encode(self) -> bytes:
        fields = (self.request_id, self.tool, self.summary)
        return f.reply_line("request " + "\t".join(f.reply_field(field) for field in fields))

    @classmethod
    def decode(cls, line: str) -> PendingItem | None:
        if not line.startswith("request "):
            return None
        try:
            fields = [f.unescape(field) for field in line[len("request ") :].split("\t")]
            return cls(f.request_id(fields[0]), *fields[1:]) if len(fields) == 3 else None
        except f.ProtocolError:
            return None


class PendingEnd(Bare):
    """`end`: the last line of the reply to `pending`."""

    __slots__ = ()
    LINE = "end"
    WHAT = "`end`"


class Busy(ReplyLine):
    """`busy <background> <subagents>`: the session holds that much work; sent each time the counts change."""

    __slots__ = ("background", "subagents")
    WHAT = "busy <background> <subagents>"

    def __init__(self, background: int, subagents: int) -> None:
        self.background = background
        self.subagents = subagents

    def encode(self) -> bytes:
        return f"busy {self.background} {self.subagents}\n".encode()

    @classmethod
    def decode(cls, line: str) -> Busy | None:
        counts = line[len("busy ") :].split(" ") if line.startswith("busy ") else []
        try:
            return (
                cls(f.number("background", counts[0]), f.number("subagents", counts[1])) if len(counts) == 2 else None
            )
        except f.ProtocolError:
            return None


class Ready(Bare):
    """`ready`: at a turn boundary with nothing held; the session waits a while for `confirm`."""

    __slots__ = ()
    LINE = "ready"
    WHAT = "`ready`"


class Released(Bare):
    """`released`: the session logged its handover end and let go of the log's lock."""

    __slots__ = ()
    LINE = "released"
    WHAT = "`released`"


class Queued(Bare):
    """`ok queued`: the message waits for the session's next turn boundary, and nothing loses it now."""

    __slots__ = ()
    LINE = "ok queued"
    WHAT = "`ok queued`"


class Ended(ReplyLine):
    """`ended <reason>`: the session ended while the client waited; it closes next."""

    __slots__ = ("reason",)
    WHAT = "ended <reason>"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def encode(self) -> bytes:
        return f.reply_line(f"ended {f.reply_field(self.reason)}")

    @classmethod
    def decode(cls, line: str) -> Ended | None:
        if not line.startswith("ended "):
            return None
        try:
            return cls(f.unescape(line[len("ended ") :]))
        except f.ProtocolError:
            return None


# --------------------------------------------------------------------------------------------------------
# Requests


class PendingRequest(Request):
    """`pending`: list the approval requests waiting for an answer."""

    __slots__ = ()
    verb = "pending"
    ITEM = PendingItem
    END = PendingEnd


class SessionAnswerRequest(Request):
    """`answer <request id>\\t<yes|no>` on approval.sock: the first answer wins."""

    __slots__ = ("request_id", "yes")
    ATTRS = ("request_id", "yes")
    verb = "answer"
    FIELDS = ("request id", "yes|no")
    REPLY = Answered

    def __init__(self, request_id: str, yes: bool) -> None:
        self.request_id = f.request_id(request_id)
        if not isinstance(yes, bool):
            raise f.bad_request("the answer must be yes or no")
        self.yes = yes

    @classmethod
    def from_fields(cls, fields: list[str]) -> SessionAnswerRequest:
        return cls(fields[0], f.yes_no(fields[1]))

    def fields(self) -> tuple[str, ...]:
        return (self.request_id, "yes" if self.yes else "no")


class SessionAnswerWithRequest(Request):
    """`answer-with <request id>\\t<yes|no>\\t<once|session|project>\\t<rule>\\t<note>` on approval.sock:
    an answer that may become a rule of the session or of the project, or a no with a note for the model."""

    __slots__ = ("note", "request_id", "rule", "scope", "yes")
    ATTRS = ("request_id", "yes", "scope", "rule", "note")
    verb = "answer-with"
    FIELDS = ("request id", "yes|no", "once|session|project", "rule", "note")
    LIMIT = ANSWER_WITH_LINE
    REPLY = Answered

    def __init__(self, request_id: str, yes: bool, scope: str = "once", rule: str = "", note: str = "") -> None:
        self.request_id = f.request_id(request_id)
        self.yes, self.scope, self.rule, self.note = check_answer(yes, scope, rule, note)

    @classmethod
    def from_fields(cls, fields: list[str]) -> SessionAnswerWithRequest:
        return cls(fields[0], f.yes_no(fields[1]), *fields[2:])

    def fields(self) -> tuple[str, ...]:
        return (self.request_id, "yes" if self.yes else "no", self.scope, self.rule, self.note)


class HandoverRequest(Request):
    """`handover`: ask the session to let go at its next turn boundary (`busy` lines, then `ready`)."""

    __slots__ = ()
    verb = "handover"
    ITEM = Busy
    END = Ready


class ConfirmRequest(Request):
    """`confirm`, after `ready`: the session logs `session.end {reason: handover}` and releases its lock."""

    __slots__ = ()
    verb = "confirm"
    REPLY = Released


class SessionStopRequest(Request):
    """`stop`: stop now, wherever the session is; every client then hears `ended interrupted`."""

    __slots__ = ()
    verb = "stop"
    REPLY = Ended


class SessionSayRequest(Request):
    """`say <message>` -> `ok queued`: a message for the agent, logged and sent at the next turn boundary."""

    __slots__ = ("message",)
    ATTRS = ("message",)
    verb = "say"
    FIELDS = ("message",)
    LIMIT = f.MAX_MESSAGE_LINE
    REPLY = Queued

    def __init__(self, message: str) -> None:
        self.message = f.text("message", message)


def request_line_limit(head: bytes) -> int:
    """The bound of a request line, from its first bytes: a `say` line carries a whole message, an `answer-with`
    line a rule and a note."""
    if head.startswith(b"say "):
        return f.MAX_MESSAGE_LINE
    return ANSWER_WITH_LINE if head.startswith(b"answer-with ") else f.MAX_LINE


def _session_protocol(*requests: type[Request]) -> LineProtocol:
    return LineProtocol(
        SESSION_NAME,
        SESSION_PROTOCOL,
        server="session",
        requests=requests,
        one_verb=False,
        anytime=(Ended,),
        line_limit=request_line_limit,
        limit_note=(
            f"{f.size(f.MAX_MESSAGE_LINE)} for say, {f.size(ANSWER_WITH_LINE)} for answer-with, "
            f"{f.size(f.MAX_LINE)} for any other request"
        ),
    )


APPROVAL = _session_protocol(PendingRequest, SessionAnswerRequest, SessionAnswerWithRequest)
HANDOVER = _session_protocol(HandoverRequest, ConfirmRequest, SessionStopRequest, SessionSayRequest)
