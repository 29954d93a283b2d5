"""One event as a reader of a transcript sees it: an `EventView` (docs/architecture.md#export).

The rule: what an entry's `kind`, `css` and labels say is Chock's own words; every other text (names, facts,
blocks, times) is the log's, written by the agent as often as not, and a writer escapes it. Fields are read with
`events.value`, so a field of the wrong type is its default, never a crash (docs/log.md#reading-rules); an event
type not known here is shown generically with its fields as JSON; a field of a known type that its function does
not show (READS: a newer Chock's, a rule, a whole diff) is shown after the ones it does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from chock.log.events import COMMON, CUT_STOPS, PAUSED_STOP, REFUSED_STOPS, Event, value


@dataclass(frozen=True, slots=True)
class Block:
    """A text shown whole: `label` is ours, `text` the log's, `lang` the kind of text (text, json, diff)."""

    label: str
    text: str
    lang: str = "text"


@dataclass(frozen=True, slots=True)
class EventView:
    """What a transcript shows of one event."""

    event_id: int
    kind: str  # ours: "Tool call"
    css: str  # ours: a class name, [a-z-]
    name: str = ""  # the log's: a tool's name, a session id
    at: str = ""
    facts: tuple[tuple[str, str], ...] = ()  # (our label, the log's value), each shown on one line
    blocks: tuple[Block, ...] = ()


def as_json(data: object) -> str:
    """A value as indented JSON, as it reads best; non-ASCII kept as it is."""
    return json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _facts(*pairs: tuple[str, object]) -> tuple[tuple[str, str], ...]:
    """The pairs whose value says something (not "", None or False), each value as text."""
    return tuple(
        (label, "yes" if found is True else str(found)) for label, found in pairs if found not in ("", None, False)
    )


def _blocks(*blocks: Block) -> tuple[Block, ...]:
    return tuple(block for block in blocks if block.text)


def _cut(event: Event) -> tuple[str, object]:
    return ("cut", f"it had {value(event, 'bytes')} bytes" if value(event, "truncated") else "")


WHO = {
    "terminal": "a person at the terminal",
    "socket": "a person, through chock approve, attach or the page",
    "config": "config.zon",
}


def _session_start(e: Event) -> EventView:
    return EventView(
        e["id"], "Session started", "session-start", value(e, "session"), value(e, "at"),
        _facts(("project", value(e, "project")), ("instance", value(e, "instance")), ("model", value(e, "model")),
               ("owner", value(e, "owner")), ("host", value(e, "host")),
               ("approves everything", value(e, "approve_all")), ("instructions", value(e, "instructions_note"))),
        _blocks(Block("Task", value(e, "message")),
                Block("Project instructions (AGENTS.md)", value(e, "instructions"))),
    )  # fmt: skip


def _session_adopt(e: Event) -> EventView:
    return EventView(
        e["id"], "Session continued", "session-adopt", value(e, "session"), value(e, "at"),
        _facts(("by", value(e, "via")), ("after", value(e, "after")), ("host", value(e, "host")),
               ("approves everything", value(e, "approve_all"))),
    )  # fmt: skip


def _workspace_open(e: Event) -> EventView:
    facts = _facts(("directory", value(e, "directory")), ("commit", value(e, "commit")))
    return EventView(e["id"], "Workspace opened", "workspace-open", at=value(e, "at"), facts=facts)


def _workspace_close(e: Event) -> EventView:
    skipped = "\n".join(str(item) for item in value(e, "skipped"))
    left = value(e, "left_out")
    return EventView(
        e["id"], "Workspace closed", "workspace-close", at=value(e, "at"),
        facts=_facts(("branch", value(e, "branch") or ("" if "branch" not in e else "none: no changes")),
                     ("commit", value(e, "commit")), ("removed", value(e, "removed"))),
        blocks=_blocks(Block("Left out of the commit" + (f" ({left} more not listed)" if left else ""), skipped)),
    )  # fmt: skip


def _user_message(e: Event) -> EventView:
    kind = "Message said while it ran" if value(e, "via") == "socket" else "Message"
    return EventView(e["id"], kind, "user-message", at=value(e, "at"), blocks=_blocks(Block("Text", value(e, "text"))))


def _assistant_message(e: Event) -> EventView | None:
    text, stop_reason = value(e, "text"), value(e, "stop_reason")
    if not text and stop_reason not in (*REFUSED_STOPS, *CUT_STOPS, PAUSED_STOP):
        return None  # its tool calls are shown by their own `tool.call` events
    return EventView(
        e["id"], "Assistant", "assistant", at=value(e, "at"), facts=_facts(("stop reason", stop_reason)),
        blocks=_blocks(Block("Text", text)),
    )  # fmt: skip


def _tool_call(e: Event) -> EventView:
    return EventView(
        e["id"],
        "Tool call",
        "tool-call",
        value(e, "name"),
        value(e, "at"),
        _facts(("call", value(e, "call_id")), ("MCP server", value(e, "server")), ("its tool", value(e, "tool"))),
        (Block("Arguments", as_json(value(e, "args")), "json"),),
    )


def _tool_result(e: Event) -> EventView:
    error = value(e, "is_error")
    return EventView(
        e["id"], "Tool error" if error else "Tool result", "tool-error" if error else "tool-result", value(e, "name"),
        value(e, "at"), _facts(("call", value(e, "call_id")), _cut(e)),
        _blocks(Block("Output", value(e, "output")), Block("Diff", value(e, "diff"), "diff")),
    )  # fmt: skip


def _approval_request(e: Event) -> EventView:
    return EventView(
        e["id"], "Approval asked", "approval-request", value(e, "tool"), value(e, "at"),
        _facts(("request", value(e, "request_id")), ("call", value(e, "call_id")),
               ("decided by config.zon", value(e, "by_config"))),
        _blocks(Block("What it asks to run", value(e, "summary"))),
    )  # fmt: skip


def _approval_answer(e: Event) -> EventView:
    answer = {"yes": "approved", "no": "denied"}.get(value(e, "answer"), value(e, "answer"))
    via = value(e, "via")
    return EventView(
        e["id"],
        "Approval answered",
        "approval-answer",
        answer,
        value(e, "at"),
        _facts(("request", value(e, "request_id")), ("by", WHO.get(via, via))),
    )


def _background(e: Event) -> EventView:
    ended = e.get("type") == "background.end"
    code = value(e, "exit_code")
    return EventView(
        e["id"], "Background ended" if ended else "Background started", "background", value(e, "handle"),
        value(e, "at"),
        _facts(("kind", value(e, "kind")), ("exit code", "none (its owner died)" if ended and code is None else code)),
        _blocks(Block("Command", value(e, "command")), Block("Output", value(e, "output") if ended else "")),
    )  # fmt: skip


def _subagent(e: Event) -> EventView:
    ended = e.get("type") == "subagent.end"
    text = Block("Result", value(e, "result")) if ended else Block("Task", value(e, "task"))
    kind = "Subagent ended" if ended else "Subagent started"
    return EventView(e["id"], kind, "subagent", value(e, "handle"), value(e, "at"), blocks=_blocks(text))


def _usage(e: Event) -> EventView:
    return EventView(
        e["id"], "Usage", "usage", at=value(e, "at"),
        facts=_facts(("input tokens", value(e, "input_tokens")), ("output tokens", value(e, "output_tokens")),
                     ("cache read", value(e, "cache_read_tokens")), ("cache write", value(e, "cache_write_tokens")),
                     ("cost", value(e, "cost")), ("for", value(e, "for"))),
    )  # fmt: skip


def _mcp_server(e: Event) -> EventView:
    return EventView(
        e["id"], "MCP server", "mcp-server", value(e, "server"), value(e, "at"),
        _facts(("state", value(e, "state")), ("from", value(e, "origin")), ("tools", value(e, "tools")),
               ("why", value(e, "reason"))),
    )  # fmt: skip


def _mcp_tools(e: Event) -> EventView:
    names = value(e, "names")
    return EventView(
        e["id"], "MCP tools changed", "mcp-tools", value(e, "server"), value(e, "at"),
        blocks=_blocks(Block("Tools", "\n".join(str(name) for name in names))),
    )  # fmt: skip


def _retry(e: Event) -> EventView:
    return EventView(
        e["id"], "Provider retry", "retry", at=value(e, "at"),
        facts=_facts(("attempt", value(e, "attempt")), ("status", value(e, "status")),
                     ("waited seconds", value(e, "wait_seconds")), ("error", value(e, "error"))),
    )  # fmt: skip


def _compaction(e: Event) -> EventView:
    return EventView(
        e["id"], "Compaction", "compaction", at=value(e, "at"),
        facts=_facts(("through event", value(e, "through")), ("tokens", value(e, "tokens")),
                     ("window", value(e, "window"))),
        blocks=_blocks(Block("Summary", value(e, "summary"))),
    )  # fmt: skip


def _plan(e: Event) -> EventView:
    marks = {"done": "[x]", "in_progress": "[~]"}
    lines = []
    for step in value(e, "steps"):
        step = step if isinstance(step, dict) else {"step": step}
        lines.append(f"{marks.get(str(step.get('status')), '[ ]')} {step.get('step', '')}")
    return EventView(e["id"], "Plan", "plan", at=value(e, "at"), blocks=_blocks(Block("Steps", "\n".join(lines))))


def _session_end(e: Event) -> EventView:
    return EventView(
        e["id"],
        "Session ended",
        "session-end",
        value(e, "reason"),
        value(e, "at"),
        _facts(("exit code", value(e, "exit_code")), ("by", value(e, "via"))),
        _blocks(Block("Error", value(e, "error"))),
    )


KNOWN: dict[str, Callable[[Event], EventView | None]] = {
    "session.start": _session_start,
    "session.adopt": _session_adopt,
    "workspace.open": _workspace_open,
    "workspace.close": _workspace_close,
    "user.message": _user_message,
    "assistant.delta": lambda e: None,  # streamed pieces: the `assistant.message` after them holds the whole text
    "assistant.message": _assistant_message,
    "tool.call": _tool_call,
    "tool.result": _tool_result,
    "mcp.server": _mcp_server,
    "mcp.tools": _mcp_tools,
    "approval.request": _approval_request,
    "approval.answer": _approval_answer,
    "background.start": _background,
    "background.end": _background,
    "subagent.start": _subagent,
    "subagent.end": _subagent,
    "usage": _usage,
    "provider.retry": _retry,
    "compaction": _compaction,
    "plan": _plan,
    "turn.end": lambda e: None,
    "session.end": _session_end,
}

# The fields each function above shows, or leaves out on purpose (where an owner ran, the workspace's admin dir,
# the model's copy of calls its `tool.call`s show): any other field an event has — one a later Chock declares, a
# rule, a whole diff — is shown after these, never dropped. Written out rather than read from EVENTS, so that a
# field declared later is one of the others.
_PLACE = ("pid", "pid_start", "machine_id", "boot_id", "host")
READS: dict[str, tuple[str, ...]] = {
    "session.start": ("session", "project", "message", "instance", "model", "owner", "approve_all", *_PLACE,
                      "instructions", "instructions_note"),
    "session.adopt": ("session", "via", "approve_all", *_PLACE, "after"),
    "workspace.open": ("directory", "commit", "admin"),
    "workspace.close": ("branch", "commit", "removed", "skipped", "left_out"),
    "user.message": ("text", "via"),
    "assistant.message": ("text", "tool_calls", "stop_reason"),
    "tool.call": ("call_id", "name", "args", "server", "tool"),
    "tool.result": ("call_id", "name", "output", "is_error", "diff"),
    "mcp.server": ("server", "state", "origin", "tools", "reason"),
    "mcp.tools": ("server", "names"),
    "approval.request": ("request_id", "tool", "summary", "call_id", "by_config"),
    "approval.answer": ("request_id", "answer", "via"),
    "background.start": ("handle", "kind", "command"),
    "background.end": ("handle", "kind", "command", "exit_code", "output"),
    "subagent.start": ("handle", "task"),
    "subagent.end": ("handle", "result"),
    "usage": ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost", "for"),
    "provider.retry": ("attempt", "status", "wait_seconds", "error", "for"),
    "compaction": ("summary", "through", "cut", "tokens", "window", "window_from"),
    "plan": ("steps",),
    "session.end": ("reason", "exit_code", "error", "via"),
}  # fmt: skip


def _unknown(e: Event) -> EventView:
    rest = {key: found for key, found in e.items() if key not in ("id", "at", "type")}
    kind = e.get("type")
    return EventView(
        e["id"],
        "Event",
        "unknown",
        kind if isinstance(kind, str) else as_json(kind),
        value(e, "at"),
        blocks=_blocks(Block("Fields", as_json(rest) if rest else "", "json")),
    )


_NOT_A_LABEL = re.compile(r"[^A-Za-z0-9_.-]")


def label(key: str) -> str:
    """A field's name from the log as a label: letters, digits, `_.-`, any other character a `?`; 64 at most."""
    return _NOT_A_LABEL.sub("?", key[:64]) or "?"


def _others(e: Event, entry: EventView) -> EventView:
    """`entry` with the fields of `e` it does not show (READS) added: a text of several lines (or past 200
    characters) as a block, anything else as a fact."""
    read = READS.get(str(e.get("type")), ())
    extra = {key: found for key, found in e.items() if key not in read and key not in COMMON}
    if not extra:
        return entry
    long = {key for key, found in extra.items() if isinstance(found, str) and ("\n" in found or len(found) > 200)}
    facts = tuple(
        (label(key), found if isinstance(found, str) else as_json(found))
        for key, found in extra.items()
        if key not in long
    )
    blocks = tuple(Block(label(key), extra[key], "diff" if "diff" in key else "text") for key in long)
    return EventView(
        entry.event_id, entry.kind, entry.css, entry.name, entry.at, entry.facts + facts, entry.blocks + blocks
    )


def entry(event: Event) -> EventView | None:
    """What a transcript shows of `event` (None: nothing, as for a streamed piece of text)."""
    kind = event.get("type")
    shows = KNOWN.get(kind) if isinstance(kind, str) else None
    if shows is None:
        return _unknown(event)
    shown = shows(event)
    return None if shown is None else _others(event, shown)
