"""The row fold: what a listing shows of a session, folded without building its conversation.

A session's row (status, owner, counts, last id, pending approvals, background work, how and when it
ended, tokens, a preview of its task) is all `chock sessions`, `chock usage`, `chock workspace` and the
daemon's `list` need. `RowState` folds only the events that change a row and keeps no tool output, so its
size does not grow with the log. The conversation fold (`chock.log.fold.SessionState`) extends this class:
the status rules and the row exist once, here.

Reading a log for a row does not parse every line. Only a line that holds one of the row's event types as
a JSON string (`"usage"`, `"session.…`) can be one of them, and JSON can spell those names in no other way
but with a `\\u00XX` escape of one of their characters; every other line only moves the last id, which is
taken from the last line that parses. So the row of a log equals the row of its conversation fold, line
for line, while most of the log is skipped at the speed of a byte search (and a `usage` line, the most
common of the rest, is read without a JSON parser when it is spelled exactly as the writer spells it).
"""

from __future__ import annotations

import functools
import re

from chock.log.events import EVENTS, USAGE_FIELDS, Event, decode

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

MESSAGE_PREVIEW = 200


# The fields a row fold keeps, and their JSON types as a cache stores them (`chock.log.rowcache`); a field that
# keeps an event's field as it is has that field's declared types (chock.log.events.EVENTS).
FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "project": (str,),
    "message": (str,),  # the first MESSAGE_PREVIEW characters
    "started_at": (str,),
    "last_event_id": (int,),
    "owner": (str,),  # daemon | terminal | none: as the latest session.start / session.adopt says
    "instance": (str,),  # the instance session.start named
    "approve_all": (bool,),  # --yes: as the latest session.start / session.adopt says
    "owner_pid": EVENTS["session.start"]["pid"][0],
    # Where the owner ran, as it recorded itself (chock.platform.host): what proves it gone once its lock is free.
    "owner_pid_start": EVENTS["session.start"]["pid_start"][0],  # the pid's start time, in clock ticks since boot
    "owner_machine": EVENTS["session.start"]["machine_id"][0],
    "owner_boot": EVENTS["session.start"]["boot_id"][0],
    "owner_host": EVENTS["session.start"]["host"][0],
    "ended": (bool,),
    "end_reason": (str,),
    "exit_code": EVENTS["session.end"]["exit_code"][0],
    "ended_at": (str,),
    "end_to": (str,),  # the host a handover or a move went to (session.end's `to`)
    "end_address": (str,),  # where that host was reached (session.end's `address`; "" if it names none)
    **{name: EVENTS["usage"][name][0] for name in USAGE_FIELDS},  # summed over the `usage` events
    "cost": EVENTS["usage"]["cost"][0],  # summed too; None: no call was priced
    "currency": EVENTS["session.start"]["currency"][0],  # the latest span's: its price's currency
    "budget": EVENTS["session.start"]["budget"][0],  # the latest span's budget; None: none
    "workspace": (str,),  # the directory of the latest workspace.open
    "workspace_commit": (str,),
    "workspace_admin": (str,),  # its worktree's admin dir as Chock recorded it ("" in logs older than that)
    "workspace_base": (str,),  # the session's base: the commit of its first workspace.open
    "workspace_closed": (bool,),
    "workspace_unmarked": (bool,),  # its workspace.open named no machine: forgotten once a move is in the log
    "moved": (bool,),  # a move is in the log (its adopt, handover or end): only this machine's workspace.open count
    "pending_approvals": (dict,),  # request id -> {request_id, tool, summary, call_id}
    "background": (dict,),  # handle -> {handle, command}
    "subagents": (dict,),  # handle -> {handle, task}
}
_DICTS = ("pending_approvals", "background", "subagents")


class RowState:
    """A session's row, folded from its log's events; unknown event types and unknown fields are ignored."""

    __slots__ = tuple(FIELDS)

    def __init__(self) -> None:
        self.id = ""
        self.project = ""
        self.message = ""
        self.started_at = ""
        self.last_event_id = 0
        self.owner = "none"
        self.instance = ""
        self.approve_all = False
        self.owner_pid: int | None = None
        self.owner_pid_start: int | None = None
        self.owner_machine = ""
        self.owner_boot = ""
        self.owner_host = ""
        self.ended = False
        self.end_reason = ""
        self.exit_code: int | None = None
        self.ended_at = ""
        self.end_to = ""
        self.end_address = ""
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_tokens = 0
        self.cache_write_tokens = 0
        self.cost: float | None = None
        self.currency = ""
        self.budget: float | None = None
        self.workspace = ""
        self.workspace_commit = ""
        self.workspace_admin = ""
        self.workspace_base = ""
        self.workspace_closed = False
        self.workspace_unmarked = False
        self.moved = False
        self.pending_approvals: dict[str, dict[str, Any]] = {}
        self.background: dict[str, dict[str, Any]] = {}
        self.subagents: dict[str, dict[str, Any]] = {}

    def apply(self, event: Event) -> None:
        """Fold one event in."""
        event_id = event.get("id")
        if isinstance(event_id, int):
            self.last_event_id = event_id
        handler = _ROW_HANDLERS.get(str(event.get("type", "")))
        if handler is not None:
            handler(self, event)

    def feed(self, data: bytes) -> None:
        """Fold complete log lines (`data` ends with a newline), skipping every line a row cannot need. When every
        `usage` line is spelled as the writer spells it (`_plain_usages`), they are found in one scan and added
        in order, and only the other row lines are looked for: usage only adds, so no other event's place among
        them changes what it adds."""
        usages = _plain_usages(data)
        if usages is not None:
            self._add_usages(usages)
            starts = lines_with(data, _OTHER_MARKERS, escaped=False)
        else:
            starts = lines_with(data, _MARKERS)
        usage_line = _compiled(_USAGE)
        last_line, last = data.rfind(b"\n", 0, len(data) - 1) + 1, None  # the last line's id, once decoded here
        for start in starts:
            end = data.index(b"\n", start) + 1
            usage = usage_line.match(data, start, end)
            if usage is not None:  # most of a row's lines: added as `_usage` would, with no event built
                self._add_usage(usage)
                continue
            event = decode(data[start:end])
            if event is not None:
                self.apply(event)
                if start == last_line and isinstance(event.get("id"), int):
                    last = event["id"]
        if last is None:
            last = _last_id(data)
        if last is not None:
            self.last_event_id = last

    def _add_usages(self, usages: list[tuple[bytes, ...]]) -> None:
        """`_add_usage` of each of `usages` (the groups of `_USAGE` matches, in the log's order), column by column:
        a sum is a sum in any order but the cost's, which is added in order, as the lines come."""
        if not usages:
            return
        inputs, outputs, reads, writes, costs = zip(*usages, strict=True)
        self.input_tokens += sum(map(int, inputs))
        self.output_tokens += sum(map(int, outputs))
        self.cache_read_tokens += sum(map(int, filter(None, reads)))
        self.cache_write_tokens += sum(map(int, filter(None, writes)))
        if any(costs):
            for cost in filter(None, costs):
                self.cost = (self.cost or 0.0) + (float(cost) if any(c in cost for c in b".eE") else int(cost))

    def _add_usage(self, usage: re.Match[bytes]) -> None:
        """What `apply` of the usage event a `_USAGE` match spells does (`_usage`: a JSON number with a fraction or
        an exponent is a float, any other an int), but for its id, which `feed` sets from its data's last line."""
        self.input_tokens += int(usage[1])
        self.output_tokens += int(usage[2])
        if usage[3] is not None:
            self.cache_read_tokens += int(usage[3])
            self.cache_write_tokens += int(usage[4])
        if usage[5] is not None:
            cost = usage[5]
            self.cost = (self.cost or 0.0) + (float(cost) if any(c in cost for c in b".eE") else int(cost))

    # What the fold says -------------------------------------------------------------------------------

    @property
    def workspace_kept(self) -> bool:
        return bool(self.workspace) and not self.workspace_closed

    def status(self, owner_alive: bool) -> str:
        """running | waiting | ended | handed-over | moved | abandoned: the fold, and the lock for an open span.
        `moved`: on the host a move left, the session is history there (docs/remote.md#moving-a-session)."""
        if self.ended:
            return {"handover": "handed-over", "moved": "moved"}.get(self.end_reason, "ended")
        if not owner_alive:
            return "handed-over" if self.end_to else "abandoned"
        return "waiting" if self.pending_approvals else "running"

    @property
    def moving_to(self) -> str:
        """The host a move out of here handed the session to, while nothing here says it went for good: the latest
        end is a handover to it, or a span a move's step opened after that end has none ("": neither)."""
        if self.ended:
            return self.end_to if self.end_reason == "handover" else ""
        return self.end_to

    def interrupted(self) -> str:
        """How an abandoned session's owner went, when that is provable now: `reboot` (its machine is this one
        and the boot is another), `crash` (this machine and this boot, and neither the owner — its pid with
        its start time — nor any process in its scope lives), else "" (another machine, a log older than
        these facts, or an owner that may still be there). A session that proves it is free."""
        if self.ended or self.owner_pid is None or not self.owner_machine:
            return ""
        from chock.platform import host

        if self.owner_machine != host.machine_id():
            return ""
        now = host.boot_id()
        if self.owner_boot and now and self.owner_boot != now:
            return "reboot"
        if self.owner_boot != now:
            return ""
        return "crash" if host.owner_gone(self.id, self.owner_pid, self.owner_pid_start) else ""

    def row(self, owner_alive: bool, interrupted: str | None = None) -> dict[str, Any]:
        """The session row shared by `chock sessions` and the daemon's `list`; `interrupted` is what
        `interrupted()` said, when the caller already asked (computed here otherwise)."""
        status = self.status(owner_alive)
        live = status in ("running", "waiting")
        if status != "abandoned":
            interrupted = ""
        elif interrupted is None:
            interrupted = self.interrupted()
        return {
            "id": self.id,
            "project": self.project,
            "started_at": self.started_at,
            "status": status,
            "owner": self.owner if live else "none",
            "message": self.message[:MESSAGE_PREVIEW],
            "last_event_id": self.last_event_id,
            "ended_at": self.ended_at,
            "end_reason": self.end_reason,
            "end_to": self.end_to,  # moved (or handed over) to this host
            "exit_code": self.exit_code,
            "pending_approvals": len(self.pending_approvals),
            "background": len(self.background) + len(self.subagents),
            "workspace_kept": self.workspace_kept and not live,
            "free": bool(interrupted),  # abandoned, and provably nobody's: `chock run --continue` takes it
            "interrupted_by": interrupted,  # reboot | crash | ""
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost": self.cost,
            "currency": self.currency,
            "budget": self.budget,
        }

    # Copies and the cache's form ----------------------------------------------------------------------

    def copy(self) -> RowState:
        """An independent copy of the row fields (the catalog folds into a copy, so a row being read never
        changes under its reader)."""
        other = RowState()
        for name in FIELDS:
            setattr(other, name, getattr(self, name))
        for name in _DICTS:
            setattr(other, name, dict(getattr(self, name)))
        other.message = other.message[:MESSAGE_PREVIEW]
        return other

    def values(self) -> tuple[Any, ...]:
        """The row's fields in the order of FIELDS (the task as its preview): `of_values` makes the row again."""
        found = [getattr(self, name) for name in FIELDS]
        found[_MESSAGE_AT] = self.message[:MESSAGE_PREVIEW]
        return tuple(found)

    @classmethod
    def of_values(cls, values: tuple[Any, ...]) -> RowState:
        """The row whose `values()` these are."""
        state = cls.__new__(cls)
        for name, value in zip(FIELDS, values, strict=True):
            setattr(state, name, value)
        for name in _DICTS:  # a fold changes these in place: no two rows share one
            setattr(state, name, dict(getattr(state, name)))
        return state

    def to_json(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in FIELDS}
        state["message"] = self.message[:MESSAGE_PREVIEW]
        return state

    @classmethod
    def from_json(cls, value: object) -> RowState | None:
        """The state `to_json` wrote, or None when `value` is not one (a cache written by another version)."""
        if type(value) is not dict or value.keys() != FIELDS.keys():
            return None
        state = cls.__new__(cls)
        for name, types in _CHECKS:
            item = value[name]
            if not isinstance(item, types):
                return None
            setattr(state, name, item)
        for name in _DICTS:
            if not all(type(item) is dict for item in value[name].values()):
                return None
        return state


_CHECKS = tuple(FIELDS.items())
_MESSAGE_AT = tuple(FIELDS).index("message")


# The handlers: each sets the row's fields from one event type -----------------------------------------


def count(event: Event, name: str) -> int:
    """A count from an event: a whole number as it is, anything else as 0 (a bad field never stops a fold)."""
    value = event.get(name, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text(event: Event, name: str) -> str:
    value = event.get(name, "")
    return value if isinstance(value, str) else ""


def _begin_span(state: RowState, event: Event, owner: str) -> None:
    """A session.start or session.adopt: a new owner, with no ending and none of the last owner's questions."""
    state.owner = owner
    pid = event.get("pid")
    state.owner_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    start = event.get("pid_start")
    state.owner_pid_start = start if isinstance(start, int) and not isinstance(start, bool) else None
    state.owner_machine = _text(event, "machine_id")
    state.owner_boot = _text(event, "boot_id")
    state.owner_host = _text(event, "host")
    state.currency = _text(event, "currency")
    budget = event.get("budget")
    state.budget = budget if isinstance(budget, int | float) and not isinstance(budget, bool) else None
    state.ended = False
    state.end_reason = ""
    state.exit_code = None
    state.ended_at = ""
    state.end_to = state.end_address = ""
    state.pending_approvals.clear()  # questions belonged to the process that asked them


def _session_start(state: RowState, event: Event) -> None:
    state.id = str(event.get("session", state.id))
    state.project = str(event.get("project", ""))
    state.message = str(event.get("message", ""))[:MESSAGE_PREVIEW]
    state.started_at = str(event.get("at", ""))
    state.instance = str(event.get("instance", ""))
    state.approve_all = bool(event.get("approve_all", False))
    _begin_span(state, event, str(event.get("owner", "terminal")))


def _session_adopt(state: RowState, event: Event) -> None:
    via = str(event.get("via", "terminal"))
    # A span a move's own step opens here after a handover to another host (step 3, or step 1 again) still names
    # that host until it ends: should its child die before the end, the host may hold the session
    # (docs/remote.md#moving-a-session).
    own_move = via == "move" and not _text(event, "from") and state.moving_to
    if via == "move":
        _a_move(state)
    moving = (state.end_to, state.end_address) if own_move else ("", "")
    _begin_span(state, event, "daemon" if via == "move" else via)  # a move's children are the daemon's
    state.end_to, state.end_address = moving
    # Each owner writes what holds from its span on: a --yes session stays so through handovers, and a session
    # the daemon continues for a `say` follows the daemon's policy instead.
    state.approve_all = bool(event.get("approve_all", state.approve_all))
    project = _text(event, "project")
    if project:  # a move's adopt on its target: the project there (what the index and `list` go by)
        state.project = project
    if via == "move" and _text(event, "from"):
        # A move-in: no path the source logged names anything here. Its base (a commit) is all that is kept.
        _forget_workspace(state)


def _session_end(state: RowState, event: Event) -> None:
    state.ended = True
    state.end_reason = str(event.get("reason", ""))
    code = event.get("exit_code")
    state.exit_code = code if isinstance(code, int) else None
    state.ended_at = str(event.get("at", ""))
    state.end_to = _text(event, "to")
    state.end_address = _text(event, "address")
    if state.end_reason == "moved" or (state.end_reason == "handover" and state.end_to):  # not `chock detach`'s
        _a_move(state)
    # Nothing outlives its owner's end: an owner that could not log a `background.end` (a full disk) still
    # killed the work.
    state.pending_approvals.clear()
    state.background.clear()
    state.subagents.clear()


def _workspace_open(state: RowState, event: Event) -> None:
    # Every workspace.open carries the base (a commit, wherever it was made); in a log older than that, the first
    # one's commit is the base.
    state.workspace_base = str(event.get("base") or state.workspace_base or event.get("commit", ""))
    if not this_machines(state, _text(event, "machine_id")):
        return  # another machine's worktree: nothing here is taken over or removed by it
    state.workspace = str(event.get("directory", ""))
    state.workspace_commit = str(event.get("commit", ""))
    state.workspace_admin = str(event.get("admin", ""))
    state.workspace_closed = False
    state.workspace_unmarked = not _text(event, "machine_id")


def _workspace_close(state: RowState, event: Event) -> None:
    state.workspace_closed = True


def _a_move(state: RowState) -> None:
    """A move is in the log: it may have been on another machine, so a workspace.open naming none (every Chock
    that moves names it) is no longer this machine's — the one taken is forgotten, and none is taken again."""
    state.moved = True
    if state.workspace_unmarked:
        _forget_workspace(state)


def _forget_workspace(state: RowState) -> None:
    state.workspace = state.workspace_commit = state.workspace_admin = ""
    state.workspace_closed = state.workspace_unmarked = False


def this_machines(state: RowState, machine: str) -> bool:
    """Whether a workspace.open was written on this machine: its machine id is this one's; one with none (a log
    older than machine ids) counts as this machine's only while no move is in the log (`_a_move`)."""
    if not machine:
        return not state.moved
    from chock.platform import host

    return machine == host.machine_id()


def _approval_request(state: RowState, event: Event) -> None:
    request_id = str(event.get("request_id", ""))
    state.pending_approvals[request_id] = {
        "request_id": request_id,
        "tool": str(event.get("tool", "")),
        "summary": str(event.get("summary", "")),
        "call_id": str(event.get("call_id", "")),
    }


def _approval_answer(state: RowState, event: Event) -> None:
    state.pending_approvals.pop(str(event.get("request_id", "")), None)


def _background_start(state: RowState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.background[handle] = {"handle": handle, "command": str(event.get("command", ""))}


def _background_end(state: RowState, event: Event) -> None:
    state.background.pop(str(event.get("handle", "")), None)


def _subagent_start(state: RowState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagents[handle] = {"handle": handle, "task": str(event.get("task", ""))}


def _subagent_end(state: RowState, event: Event) -> None:
    state.subagents.pop(str(event.get("handle", "")), None)


def _usage(state: RowState, event: Event) -> None:
    state.input_tokens += count(event, "input_tokens")
    state.output_tokens += count(event, "output_tokens")
    state.cache_read_tokens += count(event, "cache_read_tokens")
    state.cache_write_tokens += count(event, "cache_write_tokens")
    cost = event.get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        state.cost = (state.cost or 0.0) + cost


def moved_out_next(session_id: str, there: str) -> str:
    """What ends a session moved out to `there` whose move's answer is unknown here, or takes it back: said by every
    command that meets one (`RowState.moving_to`)."""
    return (
        f"`chock move {session_id} --to NAME` (NAME the connection that reaches {there}) ends it here once {there} "
        f"holds it, and `chock run --continue {session_id}` takes it back when it does not (it asks {there} first)"
    )


_ROW_HANDLERS = {
    "session.start": _session_start,
    "session.adopt": _session_adopt,
    "session.end": _session_end,
    "workspace.open": _workspace_open,
    "workspace.close": _workspace_close,
    "approval.request": _approval_request,
    "approval.answer": _approval_answer,
    "background.start": _background_start,
    "background.end": _background_end,
    "subagent.start": _subagent_start,
    "subagent.end": _subagent_end,
    "usage": _usage,
}


# Finding the lines a row needs -------------------------------------------------------------------------

# What a line must hold to be one of the row's events: the start of a row type as a JSON string (the
# family `"session.` covers session.start, .adopt and .end), computed from the table above.
_MARKERS = tuple(
    sorted({(f'"{name.split(".")[0]}.' if "." in name else f'"{name}"').encode() for name in _ROW_HANDLERS})
)
_USAGE_MARKER = b'"usage"'
_OTHER_MARKERS = tuple(marker for marker in _MARKERS if marker != _USAGE_MARKER)
# ...or an escape JSON could spell one of their characters with: `\u00` and the code of `.`, `_` or a-z.
_ESCAPED = rb"\\u00(?:2[eE]|5[fF]|6[1-9a-fA-F]|7[0-9aA])"
_ESCAPE_HEAD = b"\\u00"  # what every such escape begins with: data without it holds none (a byte search, not a scan)


# A `usage` line exactly as the writer writes it, whose meaning needs no JSON parser: most lines a row
# needs are these (one per model call), and a match is the same event `decode` would give (no other key,
# digits with no leading zero, a time of plain characters). Any other spelling is parsed. Its groups: the
# input, output, cache read and cache write tokens, and the cost.
_NUMBER = rb"(?:0|[1-9][0-9]*)"  # a whole number as JSON writes one
_USAGE_HEAD = rb'\{"id": <id>, "at": "[0-9A-Za-z:.+-]<width>", "type": "usage"'
_USAGE_TAIL = (
    rb', "input_tokens": (<n>), "output_tokens": (<n>)(?:, "cache_read_tokens": (<n>), "cache_write_tokens": (<n>))?'
    rb'(?:, "cost": (-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?))?(?:, "for": "[a-z_]*")?\}\n'
).replace(b"<n>", _NUMBER)
_USAGE = _USAGE_HEAD.replace(b"<id>", _NUMBER).replace(b"<width>", b"*") + _USAGE_TAIL

# The same lines found anywhere in a log at the speed of a byte search: the scan looks for `"usage"` and, at each,
# behind it for the rest of a plain line's head, back to its start (a newline, which the scan puts before the
# first line), and ahead for its tail. Where either is not there, the scan matches `"usage"` alone (with every
# group empty): a line that holds it and is not plain. Looking behind needs a width fixed in each alternative: one
# for each count of the id's digits, and a time as wide as the writer's (`events.timestamp`): a log with a usage
# line of another time is read line by line.
_TIME_WIDTH = len("2026-12-01T07:34:50.123Z")
_NOT_PLAIN = (b"",) * 5


def _usage_behind(digits: int) -> bytes:
    """What to look behind `"usage"` for: a plain usage line's head, its id of `digits` digits, from the newline."""
    number = b"[0-9]" if digits == 1 else b"[1-9][0-9]{%d}" % (digits - 1)
    return b"(?<=\\n" + _USAGE_HEAD.replace(b"<id>", number).replace(b"<width>", b"{%d}" % _TIME_WIDTH) + b")"


_USAGE_SCAN = _USAGE_MARKER + b"(?:(?:" + b"|".join(map(_usage_behind, range(1, 16))) + b")" + _USAGE_TAIL + b"|)"


@functools.cache
def _compiled(pattern: bytes) -> re.Pattern[bytes]:
    """A pattern above, compiled on the first fold rather than at import: the daemon imports this module on
    a start a client waits on (docs/architecture.md#start-up)."""
    return re.compile(pattern)


@functools.cache
def _alternation(markers: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """`markers`, any of them, as one pattern (compiled on the first fold that looks for them)."""
    return re.compile(b"|".join(re.escape(marker) for marker in markers))


# The types a row folds: a fuller fold (chock.log.fold) finds its lines with these and its own.
ROW_TYPES = frozenset(_ROW_HANDLERS)


def lines_with(data: bytes, markers: tuple[bytes, ...], *, escaped: bool = True) -> list[int]:
    """The start of every line of `data` (whole lines) that holds one of `markers` or, with `escaped`, a JSON
    escape of a character a type is spelled with (`_ESCAPED`), in order: every line whose type a marker quotes.
    One scan finds them all (the markers as one alternation: the leftmost in a line is found first, and the rest
    of that line is skipped), not one scan per marker."""
    starts = set()
    search = _alternation(markers).search
    found = search(data)
    while found is not None:
        starts.add(data.rfind(b"\n", 0, found.start()) + 1)
        found = search(data, data.index(b"\n", found.start()) + 1)
    if escaped and _ESCAPE_HEAD in data:
        for match in _compiled(_ESCAPED).finditer(data):
            starts.add(data.rfind(b"\n", 0, match.start()) + 1)
    return sorted(starts)


def _plain_usages(data: bytes) -> list[tuple[bytes, ...]] | None:
    """The groups of every `usage` line of `data` as `_USAGE` matches it, in order, found in one scan; None unless
    every line that holds `"usage"` is one (a line spelled otherwise is decoded, in its place) and no line holds
    an escape that may spell a row type (it may be a usage event too)."""
    if _ESCAPE_HEAD in data and _compiled(_ESCAPED).search(data) is not None:
        return None
    found = _compiled(_USAGE_SCAN).findall(b"\n" + data)
    return None if _NOT_PLAIN in found else found


def _last_id(data: bytes) -> int | None:
    """The id of the last line of `data` that parses as an event with a whole-number id (what
    `RowState.apply` would have left), or None when no line does."""
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        event = decode(data[start:end])
        found = None if event is None else event.get("id")
        if isinstance(found, int):
            return found
        end = start
    return None
