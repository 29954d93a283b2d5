"""The control protocol `chock daemon` serves: its verbs, each a request and its reply (docs/protocol.md).

`VERBS` (at the end) is every verb; each request's docstring gives its line and its reply, as in

    hello chock-control 1                        -> ok chock-control 1
    list <project>                               -> <started at>\\t<row JSON> per session, oldest first, then close

One connection carries the greeting and one verb. `<last event id>` (of `read`) means "I already have this one": the
reply starts after it. Text fields are escaped; JSON (a row, an event) goes on the line as it is — JSON never
holds a raw TAB or LF, and it comes last on its line, so no TAB inside it can be mistaken for a separator.

Every verb is declared here and nowhere else — a request and its reply each, nothing more — which is why this one
table runs past the ~600 lines a module usually stays under; the verbs that move a session between hosts are
declared in chock.control.move_protocol, and are in `VERBS` here like every other.
"""

from __future__ import annotations

import json

from chock.control import framing as f
from chock.control.message import Bare, LineProtocol, ReplyLine, Request
from chock.control.move_protocol import MOVE_VERBS
from chock.control.rows import encode_row, full_row, rows_of

CONTROL_NAME = "chock-control"
PROTOCOL = 1

# `start` and `adopt` reply once the child holds the log's lock and has logged its first event; before that
# the child checks its instance, its credential (a keystore call may take 30 s) and bwrap, and may be placed in
# a scope over D-Bus. A client waits twice the slowest of those, so the daemon's answer — even `error refused`
# — arrives before the client gives up.
SPAWN_SECONDS = 120.0

# A "no" may carry a message for the model, at most this many bytes of UTF-8 (docs/approvals.md).
NOTE_LIMIT = 4 * 1024
# A rule an answer saves: a command's first words, or a whole command line a person approves whole.
RULE_LIMIT = 4 * 1024
SCOPES = ("once", "session", "project")
# An `answer-with` line: its note and rule, each escaped (twice its size at worst), and the rest.
ANSWER_WITH_LINE = 2 * (NOTE_LIMIT + RULE_LIMIT) + f.MAX_LINE


def _answer_text(name: str, value: str, limit: int) -> str:
    if not isinstance(value, str) or "\0" in value:
        raise f.bad_request(f"the {name} holds a NUL character, which no line may carry")
    size = len(value.encode("utf-8", "replace"))
    if size > limit:
        raise f.bad_request(f"the {name} is {size:,} bytes; at most {f.size(limit)} is taken: say it shorter")
    return value


def check_answer(yes: bool, scope: str, rule: str, note: str) -> tuple[bool, str, str, str]:
    """What `answer-with` carries beyond the ids, checked as the request is built (by the daemon and the session
    alike): yes or no; the scope, `once`, `session` or `project`; the rule to save (its pattern is the session's
    to check, as the session saves it), needed past `once`; the note a no gives the model. Each text is at most
    4 KiB of UTF-8."""
    if not isinstance(yes, bool):
        raise f.bad_request("the answer must be yes or no")
    if scope not in SCOPES:
        raise f.bad_request(f"the scope must be once, session or project (got {f.show(str(scope))})")
    rule = _answer_text("rule", rule, RULE_LIMIT)
    note = _answer_text("note", note, NOTE_LIMIT)
    if scope != "once" and not rule.strip():
        raise f.bad_request(f"an answer for the {scope} names the rule it saves, and the rule is empty")
    if scope != "once" and not yes:
        raise f.bad_request(f"only a yes is saved as a rule for the {scope}; a no holds once")
    if yes and note:
        raise f.bad_request("a note goes with a no (it is what the model is told); a yes carries none")
    return yes, scope, rule, note


# --------------------------------------------------------------------------------------------------------
# Replies


def _dumps(value: dict[str, object]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# The scanner behind `json.loads` (its C one): a value at an offset and where it ends, with no whitespace skipped.
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _json_object(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class Started(ReplyLine):
    """`ok <session id>\\t<log path>`: the reply to `start` and `adopt`, once the child holds the log."""

    __slots__ = ("log_path", "session_id")
    WHAT = "ok <session id>\\t<log path>"

    def __init__(self, session_id: str, log_path: str) -> None:
        self.session_id = session_id
        self.log_path = log_path

    def encode(self) -> bytes:
        return f.reply_line(f"ok {f.reply_field(self.session_id)}\t{f.reply_field(self.log_path)}")

    @classmethod
    def decode(cls, line: str) -> Started | None:
        if not line.startswith("ok "):
            return None
        session_id, tab, path = line[3:].partition("\t")
        try:
            path = f.unescape(path)
            return cls(f.session_id(session_id), path) if tab and path else None
        except f.ProtocolError:
            return None


class EventLine(ReplyLine):
    """One event of `read` or `watch`: the log's own line, passed through byte for byte.

    `line` is the JSON text (without its `\\n`), `event` the parsed object, `id` its event id. The daemon
    builds one from a log line it never parses (`raw`); a client decodes and checks it.
    """

    __slots__ = ("event", "id", "line")
    WHAT = "an event (a JSON object with an id)"

    def __init__(self, line: str, event: dict[str, object], event_id: int) -> None:
        self.line = line
        self.event = event
        self.id = event_id

    @staticmethod
    def raw(line: bytes) -> bytes:
        """A log line as a reply line, unchanged (its `\\n` added if missing)."""
        return line if line.endswith(b"\n") else line + b"\n"

    def encode(self) -> bytes:
        return self.line.encode("utf-8") + b"\n"

    @classmethod
    def decode(cls, line: str) -> EventLine | None:
        event = _json_object(line)
        if event is None:
            return None
        event_id = event.get("id")
        if type(event_id) is not int or event_id < 1:
            return None
        return cls(line, event, event_id)


class ListRow(ReplyLine):
    """`<started at>\\t<row JSON>`: one session of `list`."""

    __slots__ = ("row", "started_at")
    WHAT = "<started at>\\t<row JSON>"

    def __init__(self, started_at: str, row: dict[str, object]) -> None:
        self.started_at = started_at
        self.row = row

    def encode(self) -> bytes:
        return self.line(self.started_at, encode_row(self.row))

    @staticmethod
    def line(started_at: str, row_json: str) -> bytes:
        """The reply line for a row already in JSON (the daemon encodes each row once and keeps it)."""
        return f.reply_line(f"{f.reply_field(started_at)}\t{row_json}")

    @classmethod
    def decode(cls, line: str) -> ListRow | None:
        started_at, tab, text = line.partition("\t")
        row = _json_object(text) if tab else None
        if row is None:
            return None
        try:
            return cls(f.unescape(started_at), full_row(row))
        except f.ProtocolError:
            return None

    @classmethod
    def decode_many(cls, lines: list[str]) -> list[ReplyLine] | None:
        """`decode` of each line in one pass, each row's JSON read by the C scanner `json.loads` itself uses,
        without its per-call wrapping; None unless every line is a row as `decode` reads it (a line with
        anything else, an escaped time, or a space around its JSON is then read alone, by `decode`)."""
        decoded: list[ReplyLine] = []
        for line in lines:
            started_at, tab, text = line.partition("\t")
            if not tab or "\\" in started_at:
                return None
            try:
                row, end = _scan(text, 0)
            except (StopIteration, ValueError, RecursionError):
                return None
            if end != len(text) or not isinstance(row, dict):
                return None
            decoded.append(cls(started_at, full_row(row)))
        return decoded

    @classmethod
    def decode_block(cls, data: bytes) -> list[ReplyLine] | None:
        """`decode` of every line of `data` (whole lines) with one JSON parse of the whole (`rows.rows_of`); None
        unless every line is a row as `decode` reads it."""
        return rows_of(data, cls)


class InstanceRow(ReplyLine):
    """`<instance JSON>`: one instance of `instances`, `{"name": …, "kind": …, "default": true|false}` and
    nothing else — never an address, a path, a model secret or a credential."""

    __slots__ = ("default", "kind", "name")
    WHAT = '{"name": …, "kind": …, "default": …}'

    def __init__(self, name: str, kind: str, default: bool) -> None:
        self.name = name
        self.kind = kind
        self.default = default

    def encode(self) -> bytes:
        return f.reply_line(_dumps({"name": self.name, "kind": self.kind, "default": self.default}))

    @classmethod
    def decode(cls, line: str) -> InstanceRow | None:
        value = _json_object(line)
        if value is None:
            return None
        name, kind, default = value.get("name"), value.get("kind"), value.get("default")
        if not isinstance(name, str) or not isinstance(kind, str) or not isinstance(default, bool):
            return None
        return cls(name, kind, default)


class WatchHeader(ReplyLine):
    """`ok <row JSON>`: the first line of `watch`, the session's row as the watch began."""

    __slots__ = ("row",)
    WHAT = "ok <row JSON>"

    def __init__(self, row: dict[str, object]) -> None:
        self.row = row

    def encode(self) -> bytes:
        return f.reply_line(f"ok {_dumps(self.row)}")

    @classmethod
    def decode(cls, line: str) -> WatchHeader | None:
        row = _json_object(line[3:]) if line.startswith("ok ") else None
        return None if row is None else cls(row)


class Stopped(Bare):
    """`ok stopped`: the session's log holds its end."""

    __slots__ = ()
    LINE = "ok stopped"
    WHAT = "`ok stopped`"


class Removed(Bare):
    """`ok removed`: the session's directory and scratchpad are gone (its branch stays)."""

    __slots__ = ()
    LINE = "ok removed"
    WHAT = "`ok removed`"


class Said(ReplyLine):
    """`ok queued <id>` (a running session took the message) or `ok continued <id>` (an ended one was carried
    on under the daemon, the message its first)."""

    __slots__ = ("how", "session_id")
    WHAT = "ok queued <session id> or ok continued <session id>"
    HOWS = ("queued", "continued")

    def __init__(self, how: str, session_id: str) -> None:
        self.how = how
        self.session_id = session_id

    def encode(self) -> bytes:
        return f"ok {self.how} {self.session_id}\n".encode()

    @classmethod
    def decode(cls, line: str) -> Said | None:
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "ok" or parts[1] not in cls.HOWS:
            return None
        try:
            return cls(parts[1], f.session_id(parts[2]))
        except f.ProtocolError:
            return None


class Answered(Bare):
    """`ok answered`: the session took the answer (the daemon's `answer` and a session's approval socket)."""

    __slots__ = ()
    LINE = "ok answered"
    WHAT = "`ok answered`"


class RuleRow(ReplyLine):
    """`rule <id>\\t<verdict>\\t<pattern>\\t<origin>`: one rule of `rules`, the origin a line a person reads
    (docs/approvals.md#where-rules-live)."""

    __slots__ = ("id", "origin", "pattern", "verdict")
    WHAT = "rule <id>\\t<verdict>\\t<pattern>\\t<origin>"

    def __init__(self, id: str, verdict: str, pattern: str, origin: str) -> None:
        self.id = id
        self.verdict = verdict
        self.pattern = pattern
        self.origin = origin

    def encode(self) -> bytes:
        fields = (self.id, self.verdict, self.pattern, self.origin)
        return f.reply_line("rule " + "\t".join(f.reply_field(field) for field in fields))

    @classmethod
    def decode(cls, line: str) -> RuleRow | None:
        if not line.startswith("rule "):
            return None
        try:
            fields = [f.unescape(field) for field in line[len("rule ") :].split("\t")]
            if len(fields) != 4 or fields[1] not in VERDICTS:
                return None
            return cls(rule_id(fields[0]), *fields[1:])
        except f.ProtocolError:
            return None


class RuleRemoved(Bare):
    """`ok removed`: the rule is gone; the next approval of every session of the project is decided without it."""

    __slots__ = ()
    LINE = "ok removed"
    WHAT = "`ok removed`"


VERDICTS = ("allow", "ask", "deny")
_RULE_ID = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def rule_id(value: str) -> str:
    """A rule's id as `rules` lists it: `c3` (config.zon's third rule), `p<8 hex>` (project), `s<8 hex>`
    (session): a lower-case letter, then 1 to 31 lower-case letters or digits."""
    if isinstance(value, str) and 2 <= len(value) <= 32 and value[0].isalpha() and _RULE_ID.issuperset(value):
        return value
    raise f.bad_request(f"{f.show(str(value))} is not a rule id (as `chock rules` lists them: c3, p1a2b3c4d, …)")


# --------------------------------------------------------------------------------------------------------
# Requests


class StartRequest(Request):
    """`start <project>\\t<message>` -> `ok <session id>\\t<log path>`."""

    __slots__ = ("message", "project")
    ATTRS = ("project", "message")
    verb = "start"
    FIELDS = ("project", "message")
    LIMIT = f.MAX_MESSAGE_LINE
    REPLY = Started
    WAIT = SPAWN_SECONDS

    def __init__(self, project: str, message: str) -> None:
        self.project = f.absolute_project(project)
        self.message = f.text("message", message)


class StartWithRequest(Request):
    """`start-with <project>\\t<instance>\\t<message>` -> `ok <session id>\\t<log path>`: `start` with the
    instance named (`start` uses the daemon's default). The child (`chock run --instance`) refuses a name the
    daemon's config and logins do not hold, in its own words."""

    __slots__ = ("instance", "message", "project")
    ATTRS = ("project", "instance", "message")
    verb = "start-with"
    FIELDS = ("project", "instance", "message")
    LIMIT = f.MAX_MESSAGE_LINE
    REPLY = Started
    WAIT = SPAWN_SECONDS

    def __init__(self, project: str, instance: str, message: str) -> None:
        self.project = f.absolute_project(project)
        self.instance = f.instance_name(instance)
        self.message = f.text("message", message)


class _SessionRequest(Request):
    """A verb about one session of a project: `<verb> <project>\t<session id>`."""

    __slots__ = ("project", "session_id")
    ATTRS = ("project", "session_id")
    FIELDS = ("project", "session id")

    def __init__(self, project: str, session_id: str) -> None:
        self.project = f.absolute_project(project)
        self.session_id = f.session_id(session_id)


class AdoptRequest(_SessionRequest):
    """`adopt <project>\t<session id>` -> `ok <session id>\t<log path>`: carry a handed-over session on."""

    __slots__ = ()
    verb = "adopt"
    REPLY = Started
    WAIT = SPAWN_SECONDS


class ReadRequest(Request):
    """`read <session id> <last event id>` -> the log's lines after that id, then close.

    The one request whose fields are separated by a space (neither can hold one).
    """

    __slots__ = ("after", "session_id")
    ATTRS = ("session_id", "after")
    verb = "read"
    FIELDS = ("session id", "last event id")
    SEPARATOR = " "
    ITEM = EventLine

    def __init__(self, session_id: str, after: int = 0) -> None:
        self.session_id = f.session_id(session_id)
        self.after = f.event_id("the last event id", after)

    @classmethod
    def from_fields(cls, fields: list[str]) -> ReadRequest:
        return cls(fields[0], f.number("the last event id", fields[1]))


class ListRequest(Request):
    """`list <project>` -> `<started at>\\t<row JSON>` per session, oldest first, then close.

    An unknown project is not an error: it has no sessions.
    """

    __slots__ = ("project",)
    ATTRS = ("project",)
    verb = "list"
    FIELDS = ("project",)
    ITEM = ListRow

    def __init__(self, project: str) -> None:
        self.project = f.absolute_project(project)


class WatchRequest(Request):
    """`watch <project>\\t<session id>\\t<last id>` -> `ok <row JSON>`, then event lines as the log grows."""

    __slots__ = ("after", "project", "session_id")
    ATTRS = ("project", "session_id", "after")
    verb = "watch"
    FIELDS = ("project", "session id", "last id")
    REPLY = WatchHeader
    ITEM = EventLine

    def __init__(self, project: str, session_id: str, after: int = 0) -> None:
        self.project = f.absolute_project(project)
        self.session_id = f.session_id(session_id)
        self.after = f.event_id("the last id", after)

    @classmethod
    def from_fields(cls, fields: list[str]) -> WatchRequest:
        return cls(fields[0], fields[1], f.number("the last id", fields[2]))


class AnswerRequest(Request):
    """`answer <project>\\t<session id>\\t<request id>\\t<yes|no>` -> `ok answered`.

    Reaches the session only through its approval socket: a connect that failed is `error unreachable`, never
    `ok answered` (an approval nobody could deliver must not read as one that was given).
    """

    __slots__ = ("project", "request_id", "session_id", "yes")
    ATTRS = ("project", "session_id", "request_id", "yes")
    verb = "answer"
    FIELDS = ("project", "session id", "request id", "yes|no")
    REPLY = Answered

    def __init__(self, project: str, session_id: str, request_id: str, yes: bool) -> None:
        self.project = f.absolute_project(project)
        self.session_id = f.session_id(session_id)
        self.request_id = f.request_id(request_id)
        if not isinstance(yes, bool):
            raise f.bad_request("the answer must be yes or no")
        self.yes = yes

    @classmethod
    def from_fields(cls, fields: list[str]) -> AnswerRequest:
        return cls(fields[0], fields[1], fields[2], f.yes_no(fields[3]))

    def fields(self) -> tuple[str, ...]:
        return (self.project, self.session_id, self.request_id, "yes" if self.yes else "no")


class AnswerWithRequest(Request):
    """`answer-with <project>\\t<session id>\\t<request id>\\t<yes|no>\\t<once|session|project>\\t<rule>\\t<note>`
    -> `ok answered`: `answer` that may save a rule for the session or the project, or give the model a note with
    a no. Relayed to the session's approval.sock as `answer-with`; an older session refuses it (`unknown-verb`),
    and the client then offers yes or no only, saying why."""

    __slots__ = ("note", "project", "request_id", "rule", "scope", "session_id", "yes")
    ATTRS = ("project", "session_id", "request_id", "yes", "scope", "rule", "note")
    verb = "answer-with"
    FIELDS = ("project", "session id", "request id", "yes|no", "once|session|project", "rule", "note")
    LIMIT = ANSWER_WITH_LINE
    REPLY = Answered

    def __init__(
        self, project: str, session_id: str, request_id: str, yes: bool, scope: str = "once", rule: str = "",
        note: str = "",
    ) -> None:  # fmt: skip
        self.project = f.absolute_project(project)
        self.session_id = f.session_id(session_id)
        self.request_id = f.request_id(request_id)
        self.yes, self.scope, self.rule, self.note = check_answer(yes, scope, rule, note)

    @classmethod
    def from_fields(cls, fields: list[str]) -> AnswerWithRequest:
        return cls(fields[0], fields[1], fields[2], f.yes_no(fields[3]), *fields[4:])

    def fields(self) -> tuple[str, ...]:
        yes = "yes" if self.yes else "no"
        return (self.project, self.session_id, self.request_id, yes, self.scope, self.rule, self.note)


class RulesRequest(Request):
    """`rules <project>` -> `rule <id>\\t<verdict>\\t<pattern>\\t<origin>` per rule in force for the project's
    sessions on this host (config.zon's, the project's, and each running session's), then close."""

    __slots__ = ("project",)
    ATTRS = ("project",)
    verb = "rules"
    FIELDS = ("project",)
    ITEM = RuleRow

    def __init__(self, project: str) -> None:
        self.project = f.absolute_project(project)


class RuleRemoveRequest(Request):
    """`rule-remove <project>\\t<rule id>` -> `ok removed`; a rule of config.zon is `error refused` naming its
    file and line (a person's file, which Chock never writes)."""

    __slots__ = ("project", "rule_id")
    ATTRS = ("project", "rule_id")
    verb = "rule-remove"
    FIELDS = ("project", "rule id")
    REPLY = RuleRemoved
    WAIT = SPAWN_SECONDS

    def __init__(self, project: str, rule_id_: str) -> None:
        self.project = f.absolute_project(project)
        self.rule_id = rule_id(rule_id_)


class StopRequest(_SessionRequest):
    """`stop <project>\t<session id>` -> `ok stopped`, once the session's log holds its end.

    Relayed to the session's handover.sock; the daemon never signals a process itself. A session whose socket
    does not answer is `error unreachable`, never `ok`.
    """

    __slots__ = ()
    verb = "stop"
    REPLY = Stopped
    WAIT = SPAWN_SECONDS


class SayRequest(Request):
    """`say <project>\t<session id>\t<message>` -> `ok queued <id>` for a running session, or `ok continued
    <id>` for one that ended (completed, error or interrupted), which the daemon carries on with the message."""

    __slots__ = ("message", "project", "session_id")
    ATTRS = ("project", "session_id", "message")
    verb = "say"
    FIELDS = ("project", "session id", "message")
    LIMIT = f.MAX_MESSAGE_LINE
    REPLY = Said
    WAIT = SPAWN_SECONDS

    def __init__(self, project: str, session_id: str, message: str) -> None:
        self.project = f.absolute_project(project)
        self.session_id = f.session_id(session_id)
        self.message = f.text("message", message)


class RemoveRequest(_SessionRequest):
    """`remove <project>\t<session id>` -> `ok removed`, or `error busy` while another process holds the log."""

    __slots__ = ()
    verb = "remove"
    REPLY = Removed


class RemoveWithWorkspaceRequest(_SessionRequest):
    """`remove-with-workspace <project>\t<session id>` -> `ok removed`: a kept workspace is removed first (its work
    committed to its branch, by `chock workspace remove` run as a child of the daemon), then the session."""

    __slots__ = ()
    verb = "remove-with-workspace"
    REPLY = Removed
    WAIT = SPAWN_SECONDS  # the child commits what the workspace holds, however much the agent left


class SessionsRequest(Request):
    """`sessions` -> `<started at>\\t<row JSON>` per session of every project, newest first, at most
    MAX_SESSIONS of them (the oldest are left out), then close. The rows are `list`'s."""

    __slots__ = ()
    verb = "sessions"
    ITEM = ListRow


# At most this many rows answer `sessions`: a client keeps at most this many per daemon.
MAX_SESSIONS = 10_000


class FindRequest(Request):
    """`find <session id>` -> `<started at>\\t<row JSON>`, that session's row (of whichever project), or
    `error not-found`: what a client that has only the id sends to learn its project."""

    __slots__ = ("session_id",)
    ATTRS = ("session_id",)
    verb = "find"
    FIELDS = ("session id",)
    REPLY = ListRow

    def __init__(self, session_id: str) -> None:
        self.session_id = f.session_id(session_id)


class InstancesRequest(Request):
    """`instances` -> `{"name": …, "kind": …, "default": …}` per instance of the daemon's config and logins,
    by name, then close; a config.zon the daemon cannot read is `error refused <why>`."""

    __slots__ = ()
    verb = "instances"
    ITEM = InstanceRow


_MESSAGE_VERBS = (b"start ", b"start-with ", b"say ")


def request_line_limit(head: bytes) -> int:
    """The bound of a request line, from its first bytes: a `start` or `say` line carries a whole message, an
    `answer-with` line a rule and a note."""
    if head.startswith(_MESSAGE_VERBS):
        return f.MAX_MESSAGE_LINE
    return ANSWER_WITH_LINE if head.startswith(b"answer-with ") else f.MAX_LINE


# The verbs, in the order `unknown-verb` names them.
VERBS = (
    StartRequest, AdoptRequest, ReadRequest, ListRequest, WatchRequest, AnswerRequest, StopRequest, SayRequest,
    RemoveRequest, SessionsRequest, FindRequest, InstancesRequest, StartWithRequest, RemoveWithWorkspaceRequest,
    AnswerWithRequest, RulesRequest, RuleRemoveRequest, *MOVE_VERBS,
)  # fmt: skip

CONTROL = LineProtocol(
    CONTROL_NAME,
    PROTOCOL,
    server="daemon",
    requests=VERBS,
    one_verb=True,
    line_limit=request_line_limit,
    limit_note=(
        f"{f.size(f.MAX_MESSAGE_LINE)} for start, start-with and say, {f.size(ANSWER_WITH_LINE)} for answer-with, "
        f"{f.size(f.MAX_LINE)} for any other request"
    ),
)
