"""The conversation fold: a session's whole state, for the process that owns it or takes it over.

`chock run` folds at its own start before appending, and keeps folding each event it appends, so the
conversation it sends a model is by construction the one a later owner rebuilds. `SessionState` is the
row fold (`chock.log.row.RowState`: status, owner, counts, tokens) plus what only an owner needs: the
conversation, the replay cursors, the proof that a kept workspace is free. Listings use the row fold.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chock.log.events import Event, decode
from chock.log.row import RowState


class SessionState(RowState):
    __slots__ = (
        "approve_all", "assistant_messages", "branch", "conversation", "ends", "error", "instance", "model",
        "span_start_id", "subagent_results", "workspace_open_id",
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.instance = ""
        self.model = ""
        self.approve_all = False
        self.span_start_id = 0  # the id of the latest session.start / session.adopt
        self.error = ""
        self.conversation: list[dict[str, Any]] = []
        self.assistant_messages = 0  # replay resumes after this many entries
        self.workspace_open_id = 0
        self.branch = ""
        self.ends: list[int] = []  # ids of every session.end, for the takeover proof
        self.subagent_results = 0  # how many subagents have ended: the replay cursor of their entries

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

    # Facts derived from the fold --------------------------------------------------------------------

    @property
    def workspace_free(self) -> bool:
        """The log proves nobody is in the workspace: its workspace.open is older than a later session.end."""
        return bool(self.workspace) and any(end > self.workspace_open_id for end in self.ends)

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
    state.instance = str(event.get("instance", ""))
    state.model = str(event.get("model", "") or "")
    state.approve_all = bool(event.get("approve_all", False))
    _begin_span(state, event)


def _session_adopt(state: SessionState, event: Event) -> None:
    _begin_span(state, event)
    state.approve_all = state.approve_all or bool(event.get("approve_all", False))  # it stays so


def _session_end(state: SessionState, event: Event) -> None:
    state.error = str(event.get("error", "") or "")
    state.ends.append(_id(event))


def _workspace_open(state: SessionState, event: Event) -> None:
    state.workspace_open_id = _id(event)


def _workspace_close(state: SessionState, event: Event) -> None:
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


def _background_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    code = event.get("exit_code")
    output = str(event.get("output", ""))
    state.conversation.append(
        {"role": "user", "text": f"[background {handle} finished, exit code {code}]\n{output}".rstrip()}
    )


def _subagent_end(state: SessionState, event: Event) -> None:
    handle = str(event.get("handle", ""))
    state.subagent_results += 1
    state.conversation.append(
        {"role": "user", "text": f"[subagent {handle} finished]\n{event.get('result', '')}".rstrip()}
    )


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
}
