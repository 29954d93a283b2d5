"""Events declared once (chock/log/events.py): the writer refuses what is not declared, a session writes only
declared events of their declared types, and docs/log.md's table, the page's renderers and the readers' handlers
name the same types as the declarations."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from chock.log import fold, row
from chock.log.events import COMMON, EVENTS, UndeclaredEvent, value
from chock.log.reader import read_events
from chock.log.writer import SessionLog
from chock.session.render import terminal_renderer

ROOT = Path(__file__).resolve().parent.parent


def problems(event: dict) -> list[str]:
    """What in `event` its declaration does not allow: an unknown type, an unknown field, a value of another
    type. Empty for an event as Chock writes it (a test reads whole logs with it)."""
    declared = EVENTS.get(event.get("type"))
    if declared is None:
        return [f"undeclared type {event.get('type')!r}"]
    said = []
    for name, found in event.items():
        field = declared.get(name) or COMMON.get(name)
        if field is None:
            said.append(f"{event['type']}: undeclared field {name!r}")
        elif not isinstance(found, field[0]) or (isinstance(found, bool) and bool not in field[0]):
            said.append(f"{event['type']}: {name} is {found!r}, not of {[t.__name__ for t in field[0]]}")
    return said


# --- the writer ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type", "fields", "named"),
    [
        ("tool.reslt", {"output": "x"}, "'tool.reslt'"),  # a misspelt type
        ("tool.result", {"call_id": "c1", "outptu": "x"}, "'outptu'"),  # a misspelt field
        ("turn.end", {"text": "x"}, "'text'"),  # a field of another type
        ("user.message", {"text": "x", "id": 7}, "the writer sets it"),  # the log's own
    ],
)
def test_an_undeclared_type_or_field_is_refused_and_nothing_is_written(tmp_path, type, fields, named):
    path = tmp_path / "log.jsonl"
    with SessionLog.create(path) as log:
        with pytest.raises(UndeclaredEvent, match=re.escape(named)) as refused:
            log.append(type, **fields)
        assert "chock/log/events.py" in str(refused.value)
        assert path.read_bytes() == b""
        assert log.append("user.message", text="next")["id"] == 1  # the log goes on, its ids dense


def test_every_declared_field_is_written_and_reads_back_as_written(tmp_path):
    path = tmp_path / "log.jsonl"
    with SessionLog.create(path) as log:
        for type, declared in EVENTS.items():
            log.append(type, **{name: types[0]() for name, (types, _) in declared.items()})
    events = list(read_events(path))
    assert [event["type"] for event in events] == list(EVENTS)
    assert [said for event in events for said in problems(event)] == []


A_SESSION = [
    {"text": "Looking.", "tool_calls": [
        {"call_id": "c1", "name": "shell", "args": {"command": "ls"}},
        {"call_id": "c2", "name": "shell", "args": {"command": "echo later", "background": True}},
        {"call_id": "c3", "name": "plan", "args": {"steps": [{"step": "Write notes", "status": "in_progress"}]}},
    ]},
    {"text": "Writing.", "tool_calls": [
        {"call_id": "c4", "name": "write_file", "args": {"path": "notes.txt", "content": "one\n"}},
        {"call_id": "c5", "name": "edit_file", "args": {"path": "app.py", "old": "hello", "new": "hello, world"}},
        {"call_id": "c6", "name": "read_file", "args": {"path": "missing.txt"}},
    ]},
    {"text": "All done.", "tool_calls": []},
    {"text": "Noted.", "tool_calls": []},  # when the background command's end comes after the last turn
]  # fmt: skip


def test_a_session_writes_only_declared_events_of_their_declared_types(home, project):
    home.replay_instance(A_SESSION)
    result = home.chock("run", "--yes", "take notes", cwd=project)
    assert result.returncode == 0, result.stderr
    events = home.events(home.only_session())
    assert [said for event in events for said in problems(event)] == []
    written = {event["type"] for event in events}
    assert {"session.start", "approval.request", "background.end", "plan", "tool.result", "session.end"} <= written


# --- reading through the declarations ------------------------------------------------------------------------


def test_a_missing_or_wrong_typed_field_reads_as_its_declared_default():
    end = {"type": "session.end", "reason": 3, "exit_code": True}
    assert value(end, "reason") == "" and value(end, "exit_code") is None and value(end, "error") == ""
    assert value({"type": "session.end", "exit_code": 2}, "exit_code") == 2
    assert value({"type": "usage", "cost": 0.5, "input_tokens": 1.5}, "cost") == 0.5
    assert value({"type": "usage", "input_tokens": 1.5}, "input_tokens") == 0
    assert value({"type": "plan", "steps": "all of them"}, "steps") == ()
    assert value({"type": "a.newer.type", "id": 4}, "id") == 4  # what every event has
    assert value({"type": "a.newer.type", "text": "x"}, "text") is None  # a type this version does not know
    assert problems({"type": "usage", "input_tokens": True}) == ["usage: input_tokens is True, not of ['int']"]


# --- the declarations and the rest of the house --------------------------------------------------------------


def documented() -> tuple[set[str], dict[str, set[str]]]:
    """docs/log.md's "Event types": the fields it says every event has or may carry, and its table's types with
    their fields (the names in backquotes outside parentheses; what is inside says more about one of them)."""
    section = (ROOT / "docs/log.md").read_text().split("\n## Event types\n", 1)[1].split("\n## ", 1)[0]
    common = next(line for line in section.split("\n\n") if line.lstrip().startswith("`chock/log/events.py`"))
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            table[cells[0].strip("`")] = set(re.findall(r"`([a-z_]+)`", _outside_parentheses(cells[1])))
    said = set(re.findall(r"`([a-z_]+)`", common.split("Every event has", 1)[1]))
    return said, table


def _outside_parentheses(text: str) -> str:
    depth, kept = 0, []
    for character in text:
        depth += character == "("
        if depth == 0:
            kept.append(character)
        depth -= character == ")" and depth > 0
    return "".join(kept)


def test_docs_log_md_declares_the_same_types_and_fields_as_the_code():
    common, table = documented()
    assert common == set(COMMON)
    assert list(table) == list(EVENTS), "the same types, in the same order"
    differ = {
        type: {"in docs/log.md only": table[type] - set(fields), "in events.py only": set(fields) - table[type]}
        for type, fields in EVENTS.items()
        if table[type] != set(fields)
    }
    assert differ == {}


def renderers() -> set[str]:
    """The event types the page's renderer table (`const RENDER = {…}`, wherever under static/ it is) names."""
    for script in sorted((ROOT / "chock/serve/static").rglob("*.js")):
        found = re.search(r"^( *)const RENDER = \{\n(.*?)^\1\};", script.read_text(), re.M | re.S)
        if found:
            indent = found[1] + "  "
            return set(re.findall(rf'^{indent}"([^"]+)"\s*(?:\(|:)', found[2], re.M))
    raise AssertionError("no `const RENDER = {` in chock/serve/static")


def test_the_pages_renderer_table_names_the_declared_types():
    assert renderers() == set(EVENTS)


def test_every_handler_of_the_folds_is_for_a_declared_type():
    handled = set(row._ROW_HANDLERS) | set(fold._HANDLERS)
    assert handled - set(EVENTS) == set()


def test_the_terminal_view_reads_a_wrong_typed_field_as_its_default():
    shown = io.StringIO()
    render = terminal_renderer(shown)
    for event in [
        {"id": 1, "type": "usage", "input_tokens": 5, "output_tokens": "7", "cost": True},
        {"id": 2, "type": "usage", "input_tokens": True, "output_tokens": 3, "cache_read_tokens": 2.5},
        {"id": 3, "type": "workspace.close", "branch": "chock/s", "skipped": "big.bin", "left_out": "many"},
        {"id": 4, "type": "workspace.close", "branch": "chock/s", "skipped": ["big.bin", 4], "left_out": 2},
        {"id": 5, "type": "plan", "steps": "all of them"},  # no steps: nothing to show
        {"id": 6, "type": "session.end", "reason": "completed"},
    ]:
        render(event)
    assert shown.getvalue().splitlines() == [
        "changes committed to branch chock/s",
        "changes committed to branch chock/s",
        "  left out: big.bin",
        "  left out: 4",
        "  left out: 2 more, not listed",
        "used 5 in · 3 out tokens",
        "session ended: completed",
    ]


def test_the_terminal_view_says_what_became_of_each_mcp_server_with_its_words_escaped():
    shown = io.StringIO()
    render = terminal_renderer(shown)
    for event in [
        {"id": 1, "type": "mcp.server", "server": "docs", "state": "started", "origin": "config", "tools": 3},
        {"id": 2, "type": "mcp.server", "server": "tracker", "state": "failed", "reason": "no answer\x1b[2J in 20 s"},
        {
            "id": 3,
            "type": "mcp.server",
            "server": "proj",
            "state": "skipped",
            "origin": "project",
            "reason": "untrusted",
        },
        {"id": 4, "type": "mcp.tools", "server": "docs", "names": ["mcp__docs__search", "mcp__docs__\x07ring"]},
        {"id": 5, "type": "mcp.server", "server": "docs", "state": "stopped"},  # the session's own end says enough
    ]:
        render(event)
    assert shown.getvalue().splitlines() == [
        "MCP server docs started (3 tools)",
        "MCP server tracker failed: no answer\\x1b[2J in 20 s",
        "MCP server proj skipped: untrusted",
        "MCP server docs changed its tools: mcp__docs__search, mcp__docs__\\x07ring",
    ]
