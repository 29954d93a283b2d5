"""One fold of the log, used by everything that needs a session's state (docs/log.md, "The fold").

`chock run` folds at its own start before appending, and keeps folding each event it appends, so the
conversation it sends a model is by construction the one a later owner rebuilds. `chock sessions`,
`chock usage`, `chock plan` and the daemon's `list` use the same fold plus a lock probe for the status.

A `compaction` restarts the conversation: its summary, then what came after the last event it covers, with
the tool outputs and notes of that kept part cut to the size it names. Nothing else ever changes a message
once it is in the conversation, so between two compactions each request's prefix is the one before it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chock.log.events import Event

MESSAGE_PREVIEW = 200
# What a compacted conversation starts with: the task, and the model's own summary of the work so far.
SUMMARY_HEADER = (
    "This conversation was compacted to fit the model's context window: what came before is summarized "
    "below. The task was:\n{task}\n\nThe summary of the work so far:\n{summary}"
)


@dataclass
class SessionState:
    id: str = ""
    project: str = ""
    message: str = ""
    instance: str = ""
    model: str = ""
    approve_all: bool = False
    started_at: str = ""
    last_event_id: int = 0

    # Ownership spans: the latest session.start / session.adopt, and the end after it (if any).
    owner: str = "none"  # daemon | terminal, as the latest start/adopt says
    owner_pid: int | None = None
    span_start_id: int = 0
    ended: bool = False
    end_reason: str = ""
    exit_code: int | None = None
    ended_at: str = ""
    error: str = ""

    instructions: str = ""  # the project's AGENTS.md, as session.start logged it
    conversation: list[dict[str, Any]] = field(default_factory=list)
    conversation_ids: list[int] = field(default_factory=list)  # the event each message came from, ascending
    assistant_messages: int = 0  # replay resumes after this many entries
    compactions: int = 0  # and its compaction entries after this many
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None  # None: no call was priced
    # The last turn call's size as the provider reported it (input + output tokens), and how many messages the
    # conversation had then: the next request is that plus what came after (chock.session.compaction).
    context_tokens: int = 0
    context_items: int = 0
    plan: list[dict[str, str]] = field(default_factory=list)  # the latest `plan` event's steps

    workspace: str = ""  # the directory of the latest workspace.open
    workspace_commit: str = ""
    workspace_admin: str = ""  # its worktree's admin dir as Chock recorded it ("" in logs older than that)
    workspace_open_id: int = 0
    workspace_closed: bool = False
    branch: str = ""
    ends: list[int] = field(default_factory=list)  # ids of every session.end, for the takeover proof

    pending_approvals: dict[str, dict[str, Any]] = field(default_factory=dict)
    background: dict[str, dict[str, Any]] = field(default_factory=dict)
    subagents: dict[str, dict[str, Any]] = field(default_factory=dict)
    subagent_results: int = 0  # how many subagents have ended: the replay cursor of their entries

    def apply(self, event: Event) -> None:
        """Fold one event in; unknown types and fields are ignored."""
        event_id = event.get("id")
        if isinstance(event_id, int):
            self.last_event_id = event_id
        handler = _HANDLERS.get(str(event.get("type", "")))
        if handler is not None:
            handler(self, event)

    # Facts derived from the fold --------------------------------------------------------------------

    @property
    def workspace_free(self) -> bool:
        """The log proves nobody is in the workspace: its workspace.open is older than a later session.end."""
        return bool(self.workspace) and any(end > self.workspace_open_id for end in self.ends)

    @property
    def workspace_kept(self) -> bool:
        return bool(self.workspace) and not self.workspace_closed

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

    def status(self, owner_alive: bool) -> str:
        """running | waiting | ended | handed-over | abandoned (SPEC §4, "Status comes from the fold")."""
        if self.ended:
            return "handed-over" if self.end_reason == "handover" else "ended"
        if not owner_alive:
            return "abandoned"
        return "waiting" if self.pending_approvals else "running"

    def row(self, owner_alive: bool) -> dict[str, Any]:
        """The session row of SPEC §6, shared by `chock sessions` and the daemon's `list`."""
        status = self.status(owner_alive)
        return {
            "id": self.id,
            "project": self.project,
            "started_at": self.started_at,
            "status": status,
            "owner": self.owner if status in ("running", "waiting") else "none",
            "message": self.message[:MESSAGE_PREVIEW],
            "last_event_id": self.last_event_id,
            "ended_at": self.ended_at,
            "end_reason": self.end_reason,
            "exit_code": self.exit_code,
            "pending_approvals": len(self.pending_approvals),
            "background": len(self.background) + len(self.subagents),
            "workspace_kept": self.workspace_kept and status not in ("running", "waiting"),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost": self.cost,
        }


def fold(events: Iterable[Event]) -> SessionState:
    state = SessionState()
    for event in events:
        state.apply(event)
    return state


def _begin_span(state: SessionState, event: Event, owner: str) -> None:
    state.span_start_id = int(event.get("id", 0))
    state.owner = owner
    pid = event.get("pid")
    state.owner_pid = pid if isinstance(pid, int) else None
    state.ended = False
    state.end_reason = ""
    state.exit_code = None
    state.ended_at = ""
    state.error = ""
    # Questions and background work belonged to the process that asked them; a new owner starts clean.
    state.pending_approvals.clear()


def _session_start(state: SessionState, event: Event) -> None:
    state.id = str(event.get("session", state.id))
    state.project = str(event.get("project", ""))
    state.message = str(event.get("message", ""))
    state.instance = str(event.get("instance", ""))
    state.model = str(event.get("model", "") or "")
    state.approve_all = bool(event.get("approve_all", False))
    state.started_at = str(event.get("at", ""))
    state.instructions = str(event.get("instructions", "") or "")
    _begin_span(state, event, str(event.get("owner", "terminal")))


def _session_adopt(state: SessionState, event: Event) -> None:
    _begin_span(state, event, str(event.get("via", "terminal")))
    # Each owner writes what holds from its span on: a --yes session stays so through handovers, and a session
    # the daemon continues for a `say` follows the daemon's policy instead.
    state.approve_all = bool(event.get("approve_all", state.approve_all))


def _session_end(state: SessionState, event: Event) -> None:
    state.ended = True
    state.end_reason = str(event.get("reason", ""))
    code = event.get("exit_code")
    state.exit_code = code if isinstance(code, int) else None
    state.ended_at = str(event.get("at", ""))
    state.error = str(event.get("error", "") or "")
    state.ends.append(int(event.get("id", 0)))
    state.pending_approvals.clear()


def _workspace_open(state: SessionState, event: Event) -> None:
    state.workspace = str(event.get("directory", ""))
    state.workspace_commit = str(event.get("commit", ""))
    state.workspace_admin = str(event.get("admin", ""))
    state.workspace_open_id = int(event.get("id", 0))
    state.workspace_closed = False


def _workspace_close(state: SessionState, event: Event) -> None:
    state.workspace_closed = True
    state.branch = str(event.get("branch", state.branch))


def _say(state: SessionState, event: Event, message: dict[str, Any]) -> None:
    state.conversation.append(message)
    state.conversation_ids.append(int(event.get("id", 0) or 0))


def _user_message(state: SessionState, event: Event) -> None:
    _say(state, event, {"role": "user", "text": str(event.get("text", ""))})


def _assistant_message(state: SessionState, event: Event) -> None:
    state.assistant_messages += 1
    calls = [
        {"call_id": str(c.get("call_id", "")), "name": str(c.get("name", "")), "args": c.get("args") or {}}
        for c in event.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    _say(state, event, {"role": "assistant", "text": str(event.get("text", "")), "tool_calls": calls})


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


def _approval_request(state: SessionState, event: Event) -> None:
    request_id = str(event.get("request_id", ""))
    state.pending_approvals[request_id] = {
        "request_id": request_id,
        "tool": str(event.get("tool", "")),
        "summary": str(event.get("summary", "")),
        "call_id": str(event.get("call_id", "")),
    }


def _approval_answer(state: SessionState, event: Event) -> None:
    state.pending_approvals.pop(str(event.get("request_id", "")), None)


def _background_start(state: SessionState, event: Event) -> None:
    state.background[str(event.get("handle", ""))] = {
        "handle": str(event.get("handle", "")),
        "command": str(event.get("command", "")),
    }


def _background_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.background.pop(handle, None)
    code = event.get("exit_code")
    output = str(event.get("output", ""))
    text = f"[background {handle} finished, exit code {code}]\n{output}".rstrip()
    _say(state, event, {"role": "user", "text": text, "note": True})


def _subagent_start(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagents[handle] = {"handle": handle, "task": str(event.get("task", ""))}


def _subagent_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagents.pop(handle, None)
    state.subagent_results += 1
    text = f"[subagent {handle} finished]\n{event.get('result', '')}".rstrip()
    _say(state, event, {"role": "user", "text": text, "note": True})


def _count(event: Event, name: str) -> int:
    value = event.get(name, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(state: SessionState, event: Event) -> None:
    state.input_tokens += _count(event, "input_tokens")
    state.output_tokens += _count(event, "output_tokens")
    state.cache_read_tokens += _count(event, "cache_read_tokens")
    state.cache_write_tokens += _count(event, "cache_write_tokens")
    cost = event.get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        state.cost = (state.cost or 0.0) + cost
    if not event.get("for"):  # a turn's call: the size of what the model was last sent
        state.context_tokens = _count(event, "input_tokens") + _count(event, "output_tokens")
        state.context_items = len(state.conversation)


def _compaction(state: SessionState, event: Event) -> None:
    through = _count(event, "through")
    limit = _count(event, "cut")
    start = bisect.bisect_right(state.conversation_ids, through)
    kept = [cut_message(message, limit) for message in state.conversation[start:]]
    summary = SUMMARY_HEADER.format(task=state.message, summary=str(event.get("summary", "")))
    state.conversation = [{"role": "user", "text": summary}, *kept]
    state.conversation_ids = [through, *state.conversation_ids[start:]]
    state.compactions += 1
    state.context_tokens = state.context_items = 0


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
    "approval.request": _approval_request,
    "approval.answer": _approval_answer,
    "background.start": _background_start,
    "background.end": _background_end,
    "subagent.start": _subagent_start,
    "subagent.end": _subagent_end,
    "usage": _usage,
    "compaction": _compaction,
    "plan": _plan,
}
