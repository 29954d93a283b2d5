"""An event too large for its line is cut once, to fit, keeping what names it (chock/log/shrink.py)."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from chock.log.events import MAX_EVENT_BYTES, encode
from chock.log.shrink import MIN_SHARE, TOO_DEEP, cut_string, shrink


def _line(event: dict) -> bytes:
    return (json.dumps(event, ensure_ascii=False, separators=(", ", ": ")) + "\n").encode("utf-8", "replace")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=300),
    lambda children: st.lists(children, max_size=12) | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(
    fields=st.dictionaries(st.sampled_from(["text", "args", "output", "steps", "name"]), json_values),
    limit=st.integers(300, 3000),
)
def test_any_event_is_cut_to_its_limit_keeping_what_names_it(fields, limit):
    event = {"id": 7, "at": "2026-12-06T03:00:00.000Z", "type": "tool.call", **fields}
    before = copy.deepcopy(event)
    cut = shrink(event, limit)
    assert event == before  # the caller's event is never changed
    assert len(_line(cut)) <= limit
    if len(_line(event)) > limit:
        assert cut["truncated"] is True and cut["bytes"] == len(_line(event))
        assert (cut["id"], cut["at"], cut["type"]) == (7, event["at"], "tool.call")
    else:
        assert cut is event


@settings(max_examples=300, deadline=None)
@given(text=st.text(), room=st.integers(0, 400))
def test_a_cut_string_is_the_longest_start_that_fits_and_never_splits_an_escape(text, room):
    kept = cut_string(text, room)
    assert text.startswith(kept)
    assert len(_line(kept)) - 1 <= max(room, 2)
    if len(kept) < len(text):  # one more character would not have fitted
        assert len(_line(text[: len(kept) + 1])) - 1 > room


def test_a_plan_of_50000_steps_keeps_its_first_steps_whole():
    steps = [{"step": f"step {n} " + "s" * 80, "status": "pending"} for n in range(50_000)]
    event = json.loads(encode({"id": 3, "type": "plan", "steps": steps}))
    kept = event["steps"]
    assert MIN_SHARE < len(_line(event)) <= MAX_EVENT_BYTES
    assert 1_000 < len(kept) < 50_000 and kept == steps[: len(kept)]


def test_short_fields_stay_whole_while_the_huge_ones_share_the_room():
    event = {
        "id": 4,
        "type": "assistant.message",
        "text": "t" * (3 * MAX_EVENT_BYTES),
        "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "é\n\x01" * MAX_EVENT_BYTES}}],
    }
    cut = json.loads(encode(event))
    call = cut["tool_calls"][0]
    assert (call["call_id"], call["name"]) == ("c1", "shell")
    assert event["text"].startswith(cut["text"]) and event["tool_calls"][0]["args"]["command"].startswith(
        call["args"]["command"]
    )
    assert len(cut["text"]) > MAX_EVENT_BYTES // 4 and len(call["args"]["command"]) > MAX_EVENT_BYTES // 16


def test_nesting_deeper_than_json_encodes_from_the_writer_is_cut_not_a_crash():
    deep = json.loads("[" * 950 + '"' + "a" * (2 * MAX_EVENT_BYTES) + '"' + "]" * 950)
    line = encode({"id": 5, "type": "tool.call", "name": "x", "args": deep})
    event = json.loads(line)
    assert len(line) <= MAX_EVENT_BYTES and event["truncated"] is True and event["name"] == "x"
    assert TOO_DEEP in line.decode() or "aaaa" in line.decode()


def test_a_lone_surrogate_becomes_a_replacement_and_the_line_is_valid_utf8():
    line = encode({"id": 6, "type": "assistant.message", "text": "ok \ud800 " * (MAX_EVENT_BYTES // 2)})
    assert len(line) <= MAX_EVENT_BYTES
    assert json.loads(line.decode("utf-8"))["text"].startswith("ok ? ok ?")


def test_an_object_of_110000_keys_whose_values_cannot_all_be_cut_still_fits():
    """Each value's cut takes at least 2 bytes (`""`): shares below that would overrun the bound."""
    args = {f"{n:05x}": "ab" for n in range(110_000)}
    line = encode({"id": 5, "type": "tool.call", "call_id": "c1", "name": "shell", "args": args})
    assert len(line) <= MAX_EVENT_BYTES
    event = json.loads(line)
    assert (event["call_id"], event["name"], event["truncated"]) == ("c1", "shell", True)


@settings(max_examples=200, deadline=None)
@given(
    width=st.integers(1, 400),
    value=st.one_of(st.just(""), st.just("ab"), st.integers(0, 10**6), st.booleans(), st.none()),
    limit=st.integers(120, 2000),
)
def test_many_small_values_are_cut_to_the_limit(width, value, limit):
    event = {"id": 1, "at": "x", "type": "tool.call", "args": {f"k{n}": value for n in range(width)}}
    assert len(_line(shrink(event, limit))) <= limit
