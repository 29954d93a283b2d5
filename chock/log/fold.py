"""The conversation fold: a session's whole state, for the process that owns it or takes it over
(docs/log.md, "The fold").

`chock run` folds at its own start before appending, and keeps folding each event it appends, so the
conversation it sends a model is by construction the one a later owner rebuilds. `SessionState` is the
row fold (`chock.log.row.RowState`: status, owner, counts, tokens) plus what only an owner, `chock plan`
or a compaction needs: the conversation, the replay cursors, the plan, the proof that a kept workspace is
free. Listings use the row fold.

A `compaction` restarts the conversation: its summary, then what came after the last event it covers, with
the tool outputs and notes of that kept part cut to the size it names. One whose window a provider's refusal
taught (`window_from: "refusal"`) also sets the window the rest of the session fits (`learned_window`).
Nothing else ever changes a message once it is in the conversation, so between two compactions each request's
prefix is the one before it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

from chock.log.events import PAUSED_STOP, REFUSED_STOPS, Event, decode, value
from chock.log.row import ROW_TYPES, RowState, count, lines_with, this_machines

# What a compacted conversation starts with: the task, and the model's own summary of the work so far.
SUMMARY_HEADER = (
    "This conversation was compacted to fit the model's context window: what came before is summarized "
    "below. The task was:\n{task}\n\nThe summary of the work so far:\n{summary}"
)


class SessionState(RowState):
    __slots__ = (
        "assistant_messages", "branch", "compactions", "context_items", "context_tokens",
        "conversation", "conversation_ids", "ends", "error", "instructions", "learned_window", "model",
        "plan", "session_rules", "span_start_id", "subagent_results", "workspace_open_id",
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.model = ""
        self.span_start_id = 0  # the id of the latest session.start / session.adopt
        self.error = ""
        self.instructions = ""  # the project's AGENTS.md, as session.start logged it
        self.conversation: list[dict[str, Any]] = []
        self.conversation_ids: list[int] = []  # the event each message came from, ascending
        self.assistant_messages = 0  # replay resumes after this many entries
        self.compactions = 0  # and its compaction entries after this many
        # The smallest window a provider's refusal taught (`compaction` with `window_from: "refusal"`), in tokens;
        # 0: none. It holds for the rest of the session, whoever owns it.
        self.learned_window = 0
        # The last turn call's size as the provider reported it (input + output tokens), and how many messages
        # the conversation had then: the next request is that plus what came after (chock.session.compaction).
        self.context_tokens = 0
        self.context_items = 0
        self.plan: list[dict[str, str]] = []  # the latest `plan` event's steps
        self.workspace_open_id = 0
        self.branch = ""
        self.ends: list[int] = []  # ids of every session.end, for the takeover proof
        self.subagent_results = 0  # how many subagents have ended: the replay cursor of their entries
        # What "always in this session" answers saved, oldest first: `{pattern, origin}` (docs/approvals.md).
        self.session_rules: list[dict[str, str]] = []

    def apply(self, event: Event) -> None:
        """Fold one event in: its row fields, then the rest; unknown types and fields are ignored."""
        super().apply(event)
        handler = _HANDLERS.get(str(event.get("type", "")))
        if handler is not None:
            handler(self, event)

    def feed(self, data: bytes) -> None:
        """Fold complete log lines: every one of them (the conversation needs them all)."""
        for line in data.splitlines(keepends=True):
            event = decode(line)
            if event is not None:
                self.apply(event)

    def feed_folded(self, data: bytes) -> Iterator[Event]:
        """Fold the whole lines `data` holds as `feed` does, parsing only the lines `apply` does anything with
        (`folded_lines`), and yield each event folded; `last_event_id` is then the id of `data`'s last line.
        For lines already checked (a log this host holds): the rest are skipped unread."""
        for start in folded_lines(data):
            event = decode(data[start : data.index(b"\n", start) + 1])
            if event is not None:
                self.apply(event)
                yield event
        last = decode(data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]) if data else None
        if last is not None and isinstance(last.get("id"), int):
            self.last_event_id = last["id"]

    # Facts derived from the fold --------------------------------------------------------------------

    @property
    def workspace_free(self) -> bool:
        """The log proves nobody is in the workspace: its workspace.open is older than a later session.end."""
        return bool(self.workspace) and any(end > self.workspace_open_id for end in self.ends)

    @property
    def answered(self) -> bool:
        """Whether the conversation ends with the model's answer: its message with no tool call to run, and not
        paused mid-turn (`pause_turn`). A continued session with nothing new to say calls no model then."""
        last = self.conversation[-1] if self.conversation else None
        return bool(
            last
            and last["role"] == "assistant"
            and not last.get("tool_calls")
            and last.get("stop_reason") != PAUSED_STOP
        )

    @property
    def open_tool_calls(self) -> list[dict[str, Any]]:
        """Calls of the last assistant message that have no result (the owner died mid-call)."""
        answered: set[str] = set()
        for message in reversed(self.conversation):
            if message["role"] == "assistant":
                return [call for call in message.get("tool_calls", []) if call["call_id"] not in answered]
            if message["role"] == "tool":
                answered.add(message["call_id"])
        return []


def folded_lines(data: bytes) -> list[int]:
    """The start of every line of `data` (whole lines) whose event `SessionState.apply` may fold: each holds
    one of the folded types as a JSON string, or an escape that could spell one."""
    return lines_with(data, _FOLDED_MARKERS)


def fold(events: Iterable[Event]) -> SessionState:
    state = SessionState()
    for event in events:
        state.apply(event)
    return state


def _id(event: Event) -> int:
    event_id = event.get("id")
    return event_id if isinstance(event_id, int) else 0


# What each event adds beyond the row (RowState has already folded the row's part) ------------------------


def _begin_span(state: SessionState, event: Event) -> None:
    state.span_start_id = _id(event)
    state.error = ""


def _session_start(state: SessionState, event: Event) -> None:
    state.message = str(event.get("message", ""))  # whole: the row keeps a preview
    state.model = str(event.get("model", "") or "")
    state.instructions = str(event.get("instructions", "") or "")
    _begin_span(state, event)


def _session_adopt(state: SessionState, event: Event) -> None:
    _begin_span(state, event)
    if value(event, "via") == "move" and value(event, "from"):
        # A move-in: session-scoped approval rules stay on the host that saved them (docs/remote.md).
        state.session_rules.clear()
        state.workspace_open_id = 0


def _session_end(state: SessionState, event: Event) -> None:
    state.error = str(event.get("error", "") or "")
    state.ends.append(_id(event))


def _workspace_open(state: SessionState, event: Event) -> None:
    if this_machines(state, value(event, "machine_id")):  # as the row took it (chock.log.row)
        state.workspace_open_id = _id(event)


def _workspace_close(state: SessionState, event: Event) -> None:
    branch = event.get("branch", state.branch)
    state.branch = branch if isinstance(branch, str) else ""  # null: no changes, no branch


def _say(state: SessionState, event: Event, message: dict[str, Any]) -> None:
    state.conversation.append(message)
    state.conversation_ids.append(_id(event))


def _user_message(state: SessionState, event: Event) -> None:
    _say(state, event, {"role": "user", "text": str(event.get("text", ""))})


def _assistant_message(state: SessionState, event: Event) -> None:
    """The model's answer, into the conversation with its stop reason when it had one; a refused answer is
    counted (a replay's cursor) but left out: the session ended there, and a refused turn sent again is refused
    again (docs/log.md#stop-reasons)."""
    state.assistant_messages += 1
    stop_reason = value(event, "stop_reason")
    if stop_reason in REFUSED_STOPS:
        return
    calls = [
        {"call_id": str(c.get("call_id", "")), "name": str(c.get("name", "")), "args": _object(c.get("args"))}
        for c in value(event, "tool_calls")
        if isinstance(c, dict)
    ]
    message = {"role": "assistant", "text": str(event.get("text", "")), "tool_calls": calls}
    _say(state, event, {**message, "stop_reason": stop_reason} if stop_reason else message)


def _object(found: Any) -> dict[str, Any]:
    """A tool call's arguments: an object, or none."""
    return found if isinstance(found, dict) else {}


def _tool_result(state: SessionState, event: Event) -> None:
    _say(
        state,
        event,
        {
            "role": "tool",
            "call_id": str(event.get("call_id", "")),
            "name": str(event.get("name", "")),
            "output": str(event.get("output", "")),
            "is_error": bool(event.get("is_error", False)),
        },
    )


def _background_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    code = event.get("exit_code")
    output = str(event.get("output", ""))
    text = f"[background {handle} finished, exit code {code}]\n{output}".rstrip()
    _say(state, event, {"role": "user", "text": text, "note": True})


def _subagent_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagent_results += 1
    text = f"[subagent {handle} finished]\n{event.get('result', '')}".rstrip()
    _say(state, event, {"role": "user", "text": text, "note": True})


def _usage(state: SessionState, event: Event) -> None:
    if not event.get("for"):  # a turn's call: the size of what the model was last sent
        state.context_tokens = count(event, "input_tokens") + count(event, "output_tokens")
        state.context_items = len(state.conversation)


def _compaction(state: SessionState, event: Event) -> None:
    through = count(event, "through")
    limit = count(event, "cut")
    start = bisect.bisect_right(state.conversation_ids, through)
    kept = [cut_message(message, limit) for message in state.conversation[start:]]
    summary = SUMMARY_HEADER.format(task=state.message, summary=str(event.get("summary", "")))
    state.conversation = [{"role": "user", "text": summary}, *kept]
    state.conversation_ids = [through, *state.conversation_ids[start:]]
    state.compactions += 1
    state.context_tokens = state.context_items = 0
    window = count(event, "window")
    if event.get("window_from") == "refusal" and window:
        state.learned_window = min(state.learned_window or window, window)


def cut_message(message: dict[str, Any], limit: int) -> dict[str, Any]:
    """`message` with its tool output or note cut to `limit` bytes of UTF-8 (0: as it is), saying so."""
    key = "output" if message["role"] == "tool" else "text" if message.get("note") else None
    if not limit or key is None:
        return message
    data = str(message.get(key, "")).encode("utf-8")
    if len(data) <= limit:
        return message
    kept = data[:limit].decode("utf-8", "ignore")
    return {**message, key: f"{kept}\n[… cut when the conversation was compacted: {len(data)} bytes in all]"}


def saved_rule(session_id: str, event: Event) -> dict[str, str] | None:
    """What an `approval.answer` saved for its session, `{pattern, origin}`: a person's yes for the session that
    names a rule; None for any other event."""
    if event.get("type") != "approval.answer" or value(event, "via") == "rule":
        return None
    if value(event, "answer") != "yes" or value(event, "scope") != "session" or not value(event, "rule"):
        return None
    at = value(event, "at")[:16].replace("T", " ")
    origin = f"session {session_id}, answer {value(event, 'request_id')}, {at} UTC"
    return {"pattern": value(event, "rule"), "origin": origin}


def _approval_answer(state: SessionState, event: Event) -> None:
    saved = saved_rule(state.id, event)
    if saved is not None:
        state.session_rules.append(saved)


def _plan(state: SessionState, event: Event) -> None:
    steps = event.get("steps")
    if isinstance(steps, list):
        state.plan = [
            {"step": str(step.get("step", "")), "status": str(step.get("status", ""))}
            for step in steps
            if isinstance(step, dict)
        ]


_HANDLERS = {
    "session.start": _session_start,
    "session.adopt": _session_adopt,
    "session.end": _session_end,
    "workspace.open": _workspace_open,
    "workspace.close": _workspace_close,
    "user.message": _user_message,
    "assistant.message": _assistant_message,
    "tool.result": _tool_result,
    "background.end": _background_end,
    "subagent.end": _subagent_end,
    "usage": _usage,
    "compaction": _compaction,
    "plan": _plan,
    "approval.answer": _approval_answer,
}

# The types of the events the fold reads: any other event changes nothing in it but `last_event_id`.
FOLDED_TYPES = frozenset({*_HANDLERS, *ROW_TYPES})
# What a line must hold to be one of them: its type, quoted as JSON spells it.
_FOLDED_MARKERS = tuple(sorted(f'"{name}"'.encode() for name in FOLDED_TYPES))
