"""A cold listing's second hand (chock.log.cold_fold): a child that folds logs from the far end of a listing gives
each the row its log folds to, a row it gave of a log that has grown since is folded on, and what it hands over
is plain values only."""

from __future__ import annotations

import json
import os
import pickle

from chock.log import cold_fold
from chock.log.catalog import COLD_FOLD_AT, Catalog
from chock.log.events import encode
from chock.log.folding import fold_log
from chock.log.row import RowState
from tests.fakes.wait import wait_until
from tests.test_catalog import AT, append, rows_of, write_session

USAGE = {"type": "usage", "input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 1000, "cache_write_tokens": 0}
END = {"type": "session.end", "reason": "completed", "exit_code": 0}
BODIES = [
    [],  # no end, and nobody holds its lock: abandoned
    [USAGE, {**USAGE, "cost": 0.25}, END],
    [{"type": "approval.request", "request_id": "r1", "tool": "shell", "summary": "ls", "call_id": "c1"}],
    [{"type": "background.start", "handle": "bg-1", "kind": "shell", "command": "sleep 9"}, USAGE],
    [{"type": "tool.result", "call_id": "c1", "output": '\u001b[1m"session.end"\u001b[0m'}, END],
    [{"type": "session.end", "reason": "handover", "to": "build"}],
]
MANY = COLD_FOLD_AT + 44
# Enough of a log that folding the listing's half takes longer than the helper's start: both hands fold.
PADDING = [{"type": "tool.result", "call_id": "c0", "output": "\u001b[0m ok"}, USAGE] * 200


def _as_json(state: RowState) -> str:
    return json.dumps([state.row(True), state.row(False), state.to_json()], sort_keys=True)


def _whole_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


def _many_sessions(layout, project, other) -> list[str]:
    """MANY sessions of `project` in every state of BODIES (one with a torn tail), and a few of `other`."""
    ids = [write_session(layout, n, project, [*PADDING, *BODIES[n % len(BODIES)]]) for n in range(MANY)]
    append(layout, ids[7], b'{"id": 99, "at": "2026')
    for number in range(MANY, MANY + 12):
        write_session(layout, number, other)
    return ids


def test_a_cold_listing_of_many_sessions_gives_each_the_row_its_log_folds_to(home, project, tmp_path):
    layout = home.layout
    other = tmp_path / "other"
    other.mkdir()
    ids = _many_sessions(layout, project, other)
    expected = {sid: rows_of(_whole_lines(layout.log_path(sid).read_bytes())) for sid in ids}
    listed = Catalog(layout).of_project(project)  # no cache yet: every log is folded
    assert [entry.session_id for entry in listed] == ids
    assert {entry.session_id: _as_json(entry.state) for entry in listed} == expected
    again = Catalog(layout).of_project(project)  # a new reader, from the cache the first one wrote
    assert {entry.session_id: _as_json(entry.state) for entry in again} == expected


def test_the_helper_folds_each_log_it_is_given_and_a_row_it_gave_is_folded_on_once_the_log_grows(home, project):
    layout = home.layout
    ids = _many_sessions(layout, project, project)[:40]
    helper = cold_fold.start(layout.sessions_text, ids[::-1])
    assert helper is not None
    try:
        given = {sid: wait_until(lambda sid=sid: helper.take(sid), what=f"the row of {sid}") for sid in ids}
    finally:
        helper.close()
    for sid, row in given.items():
        assert _as_json(row.state) == rows_of(_whole_lines(layout.log_path(sid).read_bytes())), sid
    grown = ids[1]
    append(layout, grown, encode({"id": 5, "at": AT, **USAGE}))  # its log held ids 1 to 4
    fd = os.open(layout.log_path(grown), os.O_RDONLY)
    try:
        row, based = fold_log(grown, fd, given[grown])
    finally:
        os.close(fd)
    assert based, "the helper's row is where the fold goes on from"
    assert row.state.input_tokens == given[grown].state.input_tokens + USAGE["input_tokens"]
    assert _as_json(row.state) == rows_of(layout.log_path(grown).read_bytes())


def test_a_frame_that_names_any_class_is_refused():
    values = RowState().values()
    plain = pickle.dumps(("20260101-000001-000001", 1, 2, 3, 4, "/p", values))
    assert cold_fold._row_of(plain) is not None
    for hostile in (os.system, RowState(), ("20260101-000001-000001", 1, 2, 3, 4, "/p", (print,))):
        assert cold_fold._row_of(pickle.dumps(hostile)) is None
