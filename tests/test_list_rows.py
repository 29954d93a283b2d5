"""A listing's rows read in one pass (chock/control/rows.py): a row the daemon wrote whole is read as it came, and
a row that leaves a field out gets the field's default however its neighbours' fields add up."""

from __future__ import annotations

from chock.control import daemon_protocol as dp
from chock.control.rows import ROW_DEFAULTS, well_typed

AT = "2026-12-01T07:34:50.123Z"


def whole(n: int) -> dict[str, object]:
    """A row as a daemon of this version writes it: every field, none other."""
    return {**ROW_DEFAULTS, "id": f"s{n}", "status": "ended", "last_event_id": n}


def block(rows: list[dict[str, object]]) -> bytes:
    return b"".join(dp.ListRow(AT, row).encode() for row in rows)


def test_rows_with_every_field_are_read_as_the_daemon_wrote_them():
    rows = [whole(n) for n in range(3)]
    got = dp.ListRow.decode_block(block(rows))
    assert got == [dp.ListRow(AT, row) for row in rows]
    assert [list(line.row) for line in got] == [list(ROW_DEFAULTS)] * 3  # the daemon's order


def test_a_row_short_of_a_field_gets_its_default_whatever_its_neighbours_hold():
    """Each reply's rows hold as many fields in all as whole rows would, one of them without `budget`: it makes up
    the count with a field this client does not know, or its neighbour holds that field besides every known one."""
    short = {name: value for name, value in whole(0).items() if name != "budget"}
    for rows in ([{**short, "newer": 1}, whole(1)], [short, {**whole(1), "newer": 1}]):
        assert sum(map(len, rows)) == 2 * len(ROW_DEFAULTS)
        got = dp.ListRow.decode_block(block(rows))
        assert got is not None
        assert [line.row for line in got] == [{**ROW_DEFAULTS, **row} for row in rows]
        assert got[0].row["budget"] is None


def test_a_row_for_a_page_has_a_session_id_and_each_field_of_its_defaults_kind():
    """Another machine's daemon need not be honest: a page sorts and compares what it shows."""
    hostile = {**ROW_DEFAULTS, "id": "20261201-073450-a1b2c3", "status": ["running"], "last_event_id": True,
               "pending_approvals": "3", "workspace_kept": 1, "exit_code": 2, "extra": {"kept": True}}  # fmt: skip
    typed = well_typed(hostile)
    assert typed is not None
    assert (typed["status"], typed["last_event_id"], typed["pending_approvals"], typed["workspace_kept"]) == (
        "",
        0,
        0,
        False,
    )
    assert typed["exit_code"] == 2 and typed["extra"] == {"kept": True}  # a None default, an unknown field: as came
    assert hostile["status"] == ["running"]  # the row read is not changed
    for no_id in (["x"], 7, None, "../../etc", "20261201-073450-a1b2c3\n"):
        assert well_typed({**ROW_DEFAULTS, "id": no_id}) is None
    honest = {**ROW_DEFAULTS, "id": "20261201-073450-a1b2c3"}
    assert well_typed(honest) == honest
