"""The row fold's scan for plain `usage` lines (`chock.log.row._plain_usages`): every log it reads gives the row the
conversation fold gives, whether its usage lines are plain (found by the scan) or not (read line by line)."""

from __future__ import annotations

import pytest

from chock.log import row
from chock.log.catalog import Catalog
from chock.log.events import encode
from chock.log.row import MESSAGE_PREVIEW
from tests.test_catalog import AT, full_rows, log_bytes, rows_of, session_id, write_session

USAGE = {"type": "usage", "input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 1000, "cache_write_tokens": 0}


def _log(*lines: bytes) -> bytes:
    start = encode({"id": 1, "at": AT, "type": "session.start", "session": "s", "project": "/p", "message": "m"})
    return start + b"".join(lines)


def _usage(event_id: int, at: str = AT, **fields: object) -> bytes:
    return encode({"id": event_id, "at": at, **USAGE, **fields})


PLAIN = {
    "ids of every width": _log(*(_usage(10**digits + 7) for digits in range(15))),
    "a cost, and a purpose": _log(
        _usage(2, cost=0.25), _usage(3, cost=2, **{"for": "subagent"}), _usage(4, cost=1e-06)
    ),
    "a purpose spelled usage": _log(_usage(2, **{"for": "usage"}), _usage(3)),
    "usage quoted in a string": _log(
        encode({"id": 2, "at": AT, "type": "tool.result", "output": '"usage"'}), _usage(3)
    ),
}
NOT_PLAIN = {
    "a time of another width": _log(_usage(2), _usage(3, at="2026-12-01T07:34:50Z"), _usage(4)),
    "an id wider than any alternative": _log(_usage(2), _usage(10**16), _usage(3)),
    "usage as another field's value": _log(encode({"id": 2, "at": AT, "type": "tool.result", "output": "usage"})),
    "a key before the id": _log(_usage(2), b'{"cost": 3, ' + _usage(3)[1:]),
    "a key after the end": _log(_usage(2)[:-2] + b', "input_tokens": 7}\n'),
    "a leading zero": _log(_usage(2).replace(b'"input_tokens": 1200', b'"input_tokens": 01200')),
    "the type escaped": _log(_usage(2).replace(b'"usage"', b'"\\u0075sage"'), _usage(3)),
    "two lines in one": _log(_usage(2)[:-1] + b" " + _usage(3)),
}


@pytest.mark.parametrize("data", PLAIN.values(), ids=PLAIN.keys())
def test_plain_usage_lines_are_found_by_the_scan_and_give_the_conversation_folds_row(data, tmp_path):
    assert row._plain_usages(data) is not None
    assert rows_of(data) == full_rows(data, tmp_path / "log.jsonl")


@pytest.mark.parametrize("data", NOT_PLAIN.values(), ids=NOT_PLAIN.keys())
def test_a_usage_line_spelled_otherwise_is_read_line_by_line_to_the_same_row(data, tmp_path):
    assert row._plain_usages(data) is None
    assert rows_of(data) == full_rows(data, tmp_path / "log.jsonl")


@pytest.mark.parametrize("length", [10, 4096 - 120, 4096, 70_000])
def test_a_first_line_of_any_length_names_the_sessions_project(home, tmp_path, length):
    """The index reads a first line in a small first piece and then larger ones: a task of any length is read whole."""
    layout, project, other = home.layout, tmp_path / "p", tmp_path / "q"
    project.mkdir()
    other.mkdir()
    start = {"type": "session.start", "session": session_id(1), "project": str(project), "message": "m" * length}
    layout.session_dir(session_id(1)).mkdir(parents=True)
    layout.log_path(session_id(1)).write_bytes(log_bytes([start, {"type": "session.end", "reason": "completed"}]))
    write_session(layout, 2, other)
    rows = [(entry.session_id, entry.state.message) for entry in Catalog(layout).of_project(project)]
    assert rows == [(session_id(1), "m" * min(length, MESSAGE_PREVIEW))]
