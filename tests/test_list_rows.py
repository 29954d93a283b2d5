"""A listing's rows read in one pass (chock/control/rows.py): a row the daemon wrote whole is read as it came, and
a row that leaves a field out gets the field's default however its neighbours' fields add up."""

from __future__ import annotations

from chock.control import daemon_protocol as dp
from chock.control.rows import ROW_DEFAULTS

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
