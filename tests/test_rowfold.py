"""A cold look at many logs with a helper folding from the last (chock.log.rowfold): the same rows as a look
alone, whatever the helper does."""

from __future__ import annotations

import os
import time

from chock.control import daemon_protocol as dp
from chock.log import catalog as catalog_module
from chock.log.catalog import Catalog
from chock.log.events import encode
from chock.log.rowfold import Helper, fold_file
from tests.test_catalog import AT, append, write_session

EVENTS = [
    {"type": "usage", "input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 1, "cache_write_tokens": 0},
    {"type": "tool.result", "call_id": "c1", "name": "shell", "output": '\x1b[1m"session.end"\x1b[0m'},
    {"type": "usage", "input_tokens": 3, "output_tokens": 1, "cost": 0.25},
    {"type": "approval.request", "request_id": "r1", "tool": "shell", "summary": "rm -rf x", "call_id": "c2"},
]


def _sessions(layout, project, count: int) -> list[str]:
    """`count` sessions of `project`, of every kind a listing meets: ended, waiting on an approval with nobody
    holding the log (abandoned), with a torn last line."""
    ids = []
    for number in range(1, count + 1):
        kind = number % 3
        body = [*EVENTS, {"type": "session.end", "reason": "completed", "exit_code": 0}] if kind == 0 else EVENTS
        ids.append(write_session(layout, number, project, body))
        if kind == 2:
            append(layout, ids[-1], encode({"id": 99, "at": AT, "type": "usage", "input_tokens": 1})[:15])
    return ids


def _listed(layout, project, fan_out: int, monkeypatch) -> bytes:
    """The daemon's first `list` of `project` with no row cache, a helper started past `fan_out` logs."""
    monkeypatch.setattr(catalog_module, "FAN_OUT", fan_out)
    return Catalog(layout, cache=False, watched=True).reply(project, lambda at, row: dp.ListRow(at, row).encode())


def test_a_cold_listing_with_a_helper_is_the_listing_without_one(home, tmp_path, monkeypatch):
    project = tmp_path / "p"
    project.mkdir()
    _sessions(home.layout, project, 60)
    alone = _listed(home.layout, project, 10**9, monkeypatch)
    assert alone.count(b"\n") == 60 and b'"status":"abandoned"' in alone and b'"status":"ended"' in alone
    # Racing: the look and the helper meet wherever their speeds put the middle (or not at all).
    assert _listed(home.layout, project, 2, monkeypatch) == alone
    # A helper done before the look begins: the look meets it at the first log and folds none itself.
    taken = []
    start, take = Helper.start, Helper.take

    def finished_first(sessions, ids):
        helper = start(sessions, ids)
        assert helper is not None and helper._process.wait(30) == 0  # 60 rows fit in the pipe: it has exited
        return helper

    def counted(helper, sid):
        row = take(helper, sid)
        taken.append(row is not None)
        return row

    monkeypatch.setattr(Helper, "start", staticmethod(finished_first))
    monkeypatch.setattr(Helper, "take", counted)
    assert _listed(home.layout, project, 2, monkeypatch) == alone
    assert taken == [True] * 60


def test_the_helpers_rows_are_the_rows_a_look_folds_and_come_last_first(home, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    ids = _sessions(home.layout, project, 9)
    helper = Helper.start(home.layout.sessions_text, ids)
    assert helper is not None
    with helper:
        deadline = time.monotonic() + 30
        while (first := helper.take(ids[0])) is None:  # the helper's last: every other is there before it
            assert time.monotonic() < deadline, "the helper folded nine logs within 30 s"
            time.sleep(0.01)
        taken = [first, *(helper.take(sid) for sid in ids[1:])]
    reals: dict[str, str] = {}
    for sid, row in zip(ids, taken, strict=True):
        alone = fold_file(str(home.layout.log_path(sid)), sid, reals)
        assert row is not None and alone is not None
        assert (row.identity, row.mtime, row.offset, row.project_real) == (
            alone.identity,
            alone.mtime,
            alone.offset,
            alone.project_real,
        )
        assert row.state.to_json() == alone.state.to_json()
        assert row.state.input_tokens == 13 and row.state.cost == 0.25


def test_a_log_grown_after_the_helper_read_it_is_folded_on_from_the_helpers_row(home, tmp_path, monkeypatch):
    project = tmp_path / "p"
    project.mkdir()
    ids = _sessions(home.layout, project, 4)
    grown = ids[0]
    helper = Helper.start(home.layout.sessions_text, [grown])
    assert helper is not None
    with helper:
        deadline = time.monotonic() + 30
        while (row := helper.take(grown)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    size = home.layout.log_path(grown).stat().st_size
    assert row.offset == size
    append(home.layout, grown, encode({"id": 6, "at": AT, "type": "usage", "input_tokens": 100, "output_tokens": 0}))
    entry = Catalog(home.layout, cache=False)._look(grown, None, row)
    assert entry is not None and entry.state.input_tokens == 113 and entry.state.last_event_id == 6
    assert entry.state.message == "task 1"  # the helper's row, not a fold from the start of a replaced file


def test_a_helper_that_dies_or_reads_nothing_leaves_every_log_to_the_look(home, tmp_path, monkeypatch):
    project = tmp_path / "p"
    project.mkdir()
    ids = _sessions(home.layout, project, 6)
    gone = Helper.start(str(tmp_path / "no-such-dir"), ids)  # a helper whose every log cannot be opened
    assert gone is not None
    with gone:
        deadline = time.monotonic() + 30
        while gone._process.poll() != 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert [gone.take(sid) for sid in ids] == [None] * len(ids)
    killed = Helper.start(home.layout.sessions_text, ids)
    assert killed is not None
    killed._process.kill()
    killed._process.wait()
    with killed:
        assert all(killed.take(sid) is None for sid in ids)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _is_helper(int(p))]


def _is_helper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"chock.log.rowfold" in handle.read()
    except OSError:
        return False


def test_the_helper_is_killed_and_reaped_when_the_look_is_done(home, tmp_path, monkeypatch):
    project = tmp_path / "p"
    project.mkdir()
    _sessions(home.layout, project, 30)
    assert _listed(home.layout, project, 2, monkeypatch).count(b"\n") == 30
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _is_helper(int(p))]
