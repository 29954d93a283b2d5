"""What a host keeps of a session's log that moved away, and joining what comes back onto it
(chock/session/kept_log.py, docs/remote.md#moving-a-session), on real files."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from chock.errors import Refused
from chock.session import kept_log

SESSION = "20261201-073450-a1b2c3"


def _line(event_id: int, kind: str, **fields: object) -> bytes:
    return json.dumps({"id": event_id, "at": "2026-12-01T07:34:50Z", "type": kind, **fields}).encode() + b"\n"


def _moved_away(path: Path, text: str = "x" * 5000) -> bytes:
    """A log that went to another host: its span there ends handed over, then the move's own span (adopt, moved).
    What it keeps, returned, is all but that last span."""
    kept = (
        _line(1, "session.start", session=SESSION)
        + _line(2, "assistant.delta", text=text)
        + _line(3, "session.adopt", session=SESSION, via="move")
        + _line(4, "session.end", reason="handover", to="hostb")
    )
    span = _line(5, "session.adopt", session=SESSION, via="move") + _line(6, "session.end", reason="moved", to="hostb")
    path.write_bytes(kept + span)
    return kept


def test_what_a_log_that_moved_away_keeps_is_all_but_its_last_span_and_a_log_that_begins_with_it_says_so(
    tmp_path: Path,
) -> None:
    here = tmp_path / "log.jsonl"
    kept = _moved_away(here)
    found = kept_log.kept_of(here)
    assert found == (len(kept), hashlib.sha256(kept).hexdigest())
    assert kept_log.Kept.parse(found.text()) == found
    away = tmp_path / "away.jsonl"
    away.write_bytes(kept + _line(5, "session.adopt", session=SESSION, via="move", **{"from": "hosta"}))
    with open(away, "rb") as log:
        assert kept_log.begins_with(log, found)
    away.write_bytes(kept.replace(b"x", b"y", 1) + b"more\n")  # one byte changed in what is kept
    with open(away, "rb") as log:
        assert not kept_log.begins_with(log, found)


@pytest.mark.parametrize("kernel_copies", ["all", "the part only"])
def test_a_part_joined_onto_what_is_kept_is_those_bytes_then_its_own(
    tmp_path: Path, monkeypatch, kernel_copies
) -> None:
    """The kernel copies where it can; where it cannot (the log here on another file system), the kept bytes are
    read and written, and the part's bytes, copied by the kernel, still come after them."""
    if kernel_copies == "the part only":
        copy, calls = os.copy_file_range, []

        def first_refused(*arguments: int) -> int:
            calls.append(arguments)
            if len(calls) == 1:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
            return copy(*arguments)

        monkeypatch.setattr(os, "copy_file_range", first_refused)
    here = tmp_path / "log.jsonl"
    kept = _moved_away(here, "x" * 100)  # less than a buffer holds: what is written stays there until flushed
    before = here.read_bytes()
    sent = tmp_path / "log"
    tail = _line(5, "session.adopt", session=SESSION, via="move", **{"from": "hosta"}) + b"y" * 3
    sent.write_bytes(tail)
    kept_log.join(here, sent, 1 << 20)
    assert sent.read_bytes() == kept + tail
    assert here.read_bytes() == before  # the log here is not changed
    assert not (tmp_path / "log.whole").exists()


def test_a_part_joined_onto_no_log_or_a_log_that_did_not_move_away_is_refused(tmp_path: Path) -> None:
    sent = tmp_path / "log"
    sent.write_bytes(_line(5, "session.end", reason="handover", to="hosta"))
    with pytest.raises(Refused, match="it keeps none"):
        kept_log.join(tmp_path / "absent.jsonl", sent, 1 << 20)
    here = tmp_path / "log.jsonl"
    here.write_bytes(_line(1, "session.start", session=SESSION) + _line(2, "session.end", reason="completed"))
    with pytest.raises(Refused, match="did not move away from here"):
        kept_log.join(here, sent, 1 << 20)
    moved = tmp_path / "moved.jsonl"
    kept = _moved_away(moved)
    with pytest.raises(Refused, match=f"longer than {len(kept) + 10} bytes"):
        kept_log.join(moved, sent, len(kept) + 10)
    assert sent.read_bytes() == _line(5, "session.end", reason="handover", to="hosta")
