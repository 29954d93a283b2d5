"""One fold of the log, used by everything that needs a session's state (SPEC §4).

`chock run` folds at its own start before appending, and keeps folding each event it appends, so the
conversation it sends a model is by construction the one a later owner rebuilds. `chock sessions`,
`chock usage` and the daemon's `list` use the same fold plus a lock probe for the status.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chock.log.events import Event

MESSAGE_PREVIEW = 200


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

    conversation: list[dict[str, Any]] = field(default_factory=list)
    assistant_messages: int = 0  # replay resumes after this many entries
    input_tokens: int = 0
    output_tokens: int = 0

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


def _user_message(state: SessionState, event: Event) -> None:
    state.conversation.append({"role": "user", "text": str(event.get("text", ""))})


def _assistant_message(state: SessionState, event: Event) -> None:
    state.assistant_messages += 1
    calls = [
        {"call_id": str(c.get("call_id", "")), "name": str(c.get("name", "")), "args": c.get("args") or {}}
        for c in event.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    state.conversation.append({"role": "assistant", "text": str(event.get("text", "")), "tool_calls": calls})


def _tool_result(state: SessionState, event: Event) -> None:
    state.conversation.append(
        {
            "role": "tool",
            "call_id": str(event.get("call_id", "")),
            "name": str(event.get("name", "")),
            "output": str(event.get("output", "")),
            "is_error": bool(event.get("is_error", False)),
        }
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
    state.conversation.append(
        {"role": "user", "text": f"[background {handle} finished, exit code {code}]\n{output}".rstrip()}
    )


def _subagent_start(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagents[handle] = {"handle": handle, "task": str(event.get("task", ""))}


def _subagent_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagents.pop(handle, None)
    state.subagent_results += 1
    state.conversation.append(
        {"role": "user", "text": f"[subagent {handle} finished]\n{event.get('result', '')}".rstrip()}
    )


def _usage(state: SessionState, event: Event) -> None:
    state.input_tokens += int(event.get("input_tokens", 0) or 0)
    state.output_tokens += int(event.get("output_tokens", 0) or 0)


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
}
