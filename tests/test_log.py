"""The session log: ids, one write per event, torn tails, replay after an id by seeking, the lock."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chock.log.events import MAX_EVENT_BYTES, encode
from chock.log.fold import fold
from chock.log.reader import iter_lines, lines_backwards, offset_after, owner_alive, read_events
from chock.log.writer import RESERVE, LogLocked, SessionLog


def write_log(path, count):
    with SessionLog.create(path) as log:
        for number in range(count):
            log.append("user.message", text=f"message {number}")


def test_ids_start_at_one_and_increase_by_one(tmp_path):
    path = tmp_path / "log.jsonl"
    write_log(path, 5)
    events = list(read_events(path))
    assert [event["id"] for event in events] == [1, 2, 3, 4, 5]
    assert all(event["at"].endswith("Z") for event in events)
    assert path.read_bytes().endswith(b"\n")
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("after", [0, 1, 2, 57, 98, 99, 100, 150])
def test_replay_after_an_id_returns_exactly_the_events_after_it(tmp_path, after):
    path = tmp_path / "log.jsonl"
    write_log(path, 100)
    assert [event["id"] for event in read_events(path, after)] == list(range(after + 1, 101))


def test_replay_seeks_instead_of_reading_from_the_start(tmp_path):
    path = tmp_path / "log.jsonl"
    write_log(path, 20000)

    class CountingFile:
        def __init__(self, handle):
            self.handle, self.lines = handle, 0

        def readline(self):
            self.lines += 1
            return self.handle.readline()

        def __getattr__(self, name):
            return getattr(self.handle, name)

    with open(path, "rb") as raw:
        counting = CountingFile(raw)
        offset = offset_after(counting, 19990)
        raw.seek(offset)
        assert json.loads(raw.readline())["id"] == 19991
    assert counting.lines < 12  # an interpolated guess or two, not 19,990 lines (nor a 30-step bisection)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=300), st.data())
def test_replay_finds_the_line_after_any_id_whatever_the_lines_lengths(tmp_path_factory, padding, data):
    """Guesses assume even lines; uneven ones (a huge tool output among short deltas) must still be found."""
    path = tmp_path_factory.mktemp("log") / "log.jsonl"
    path.write_bytes(b"".join(encode({"id": n, "type": "x", "pad": "p" * size}) for n, size in enumerate(padding, 1)))
    after = data.draw(st.integers(0, len(padding) + 2))
    with open(path, "rb") as handle:
        handle.seek(offset_after(handle, after))
        line = handle.readline()
    assert (json.loads(line)["id"] if line else None) == (after + 1 if after < len(padding) else None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 70, 65535, 65536, 200_000]), max_size=8),
    st.sampled_from([b"", b"{", b"t" * 70_000]),
)
def test_a_log_read_from_its_tail_gives_every_whole_line_last_first(tmp_path_factory, sizes, torn):
    """What a moved-away log's last span is read with (the tail of a 100 MB log, not all of it): lines longer
    than the chunk it reads, empty ones, and a torn tail, which is never given."""
    lines = [b"x" * size + b"\n" for size in sizes]
    path = tmp_path_factory.mktemp("log") / "log.jsonl"
    path.write_bytes(b"".join(lines) + torn)
    starts = [sum(map(len, lines[:n])) for n in range(len(lines))]
    with open(path, "rb") as handle:
        assert list(lines_backwards(handle)) == list(zip(starts, lines, strict=True))[::-1]


def test_a_torn_tail_is_ignored_by_readers_and_cut_by_the_next_owner(tmp_path):
    path = tmp_path / "log.jsonl"
    write_log(path, 3)
    with open(path, "ab") as handle:
        handle.write(b'{"id": 4, "type": "user.mes')
    assert [event["id"] for event in read_events(path)] == [1, 2, 3]
    assert [event["id"] for event in read_events(path, 2)] == [3]
    with SessionLog.take(path) as log:
        assert log.last_id == 3
        log.append("turn.end")
    lines = path.read_bytes().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [1, 2, 3, 4]


@pytest.mark.parametrize("damaged", [b"this is garbage\n", b'{"id": "4"}\n', b"[4]\n", b'{"id": true}\n' * 3])
def test_a_whole_line_that_is_not_an_event_is_skipped_and_the_ids_go_on_from_the_last_event(tmp_path, damaged):
    path = tmp_path / "log.jsonl"
    write_log(path, 3)
    with open(path, "ab") as handle:
        handle.write(damaged)
    with SessionLog.take(path) as log:
        assert log.last_id == 3
        log.append("turn.end")
    ids = [event.get("id") for event in read_events(path)]
    assert [event_id for event_id in ids if type(event_id) is int] == [1, 2, 3, 4]  # no id given twice
    assert [event["id"] for event in read_events(path, 3)][-1] == 4


def test_a_log_that_is_only_a_torn_line_is_cut_to_empty(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"id": 1, "ty')
    with SessionLog.take(path) as log:
        assert log.last_id == 0
        assert log.append("turn.end")["id"] == 1


def test_an_oversized_event_is_cut_to_the_bound_and_says_so():
    line = encode({"id": 1, "type": "tool.result", "output": "x" * (3 * MAX_EVENT_BYTES)})
    assert len(line) <= MAX_EVENT_BYTES
    event = json.loads(line)
    assert event["truncated"] is True and event["bytes"] > 3 * MAX_EVENT_BYTES


def test_each_event_is_one_write(tmp_path):
    """strace would prove it for real; here: a reader racing a writer never sees a partial line as an event."""
    path = tmp_path / "log.jsonl"
    big = "y" * 200_000
    with SessionLog.create(path) as log:
        for _ in range(30):
            log.append("tool.result", output=big)
            for line in iter_lines(path):
                assert json.loads(line)["output"] == big


def _hold_lock(path, ready, release):
    with SessionLog.take(path):
        ready.set()
        release.wait(30)


@pytest.mark.skipif(sys.platform != "linux", reason="the reserve is made with fallocate(2)")
def test_an_owner_keeps_room_for_the_end_while_it_writes_and_gives_it_back_when_it_lets_go(tmp_path):
    """The reserve is disk space: a thousand ended sessions must not each keep a quarter of a MiB."""
    path = tmp_path / "log.jsonl"
    with SessionLog.create(path) as log:
        log.append("user.message", text="hello")
        assert path.stat().st_blocks * 512 >= RESERVE  # allocated past the end, for the end a failure owes
    assert path.stat().st_blocks * 512 < 64 * 1024
    with SessionLog.take(path) as log:
        assert path.stat().st_blocks * 512 >= RESERVE
        log.append("user.message", text="again")
    assert path.stat().st_blocks * 512 < 64 * 1024
    assert [event["id"] for event in read_events(path)] == [1, 2]


def test_an_owner_lets_go_of_its_log_whatever_remembering_its_row_raises(tmp_path):
    path = tmp_path / "log.jsonl"

    def remember(fd: int, row: object, end: int) -> None:
        raise RuntimeError("a cache that fails in a way nobody foresaw")

    with SessionLog.create(path, remember=remember) as log:
        log.append("user.message", text="hello")
    assert not owner_alive(path)
    with SessionLog.take(path) as log:
        assert log.last_id == 1


def test_a_second_owner_is_refused_while_the_first_lives(tmp_path):
    path = tmp_path / "log.jsonl"
    write_log(path, 1)
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_lock, args=(path, ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        assert owner_alive(path)
        started = time.monotonic()
        with pytest.raises(LogLocked):
            SessionLog.take(path)
        assert time.monotonic() - started >= 1.5  # it retried before giving up
    finally:
        release.set()
        holder.join(10)
    assert not owner_alive(path)
    with SessionLog.take(path):
        pass


def test_a_readers_probe_never_makes_an_owner_fail(tmp_path):
    path = tmp_path / "log.jsonl"
    write_log(path, 1)
    prober = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\nfrom chock.log.reader import owner_alive\n"
            "end = time.monotonic() + 3\n"
            "while time.monotonic() < end: owner_alive(sys.argv[1])\n"
        ), str(path)],
    )  # fmt: skip
    try:
        time.sleep(0.3)
        for _ in range(200):
            SessionLog.take(path).release()
    finally:
        prober.wait(10)


def test_the_fold_rebuilds_conversation_usage_status_workspace_approvals_and_background():
    events = [
        {
            "id": 1,
            "type": "session.start",
            "session": "s",
            "project": "/p",
            "message": "fix it",
            "owner": "terminal",
            "at": "2026-12-01T00:00:00.000Z",
        },
        {"id": 2, "type": "workspace.open", "directory": "/w", "commit": "abc"},
        {"id": 3, "type": "user.message", "text": "fix it"},
        {"id": 4, "type": "assistant.delta", "text": "Look"},
        {
            "id": 5,
            "type": "assistant.message",
            "text": "Looking",
            "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "ls"}}],
        },
        {"id": 6, "type": "usage", "input_tokens": 10, "output_tokens": 4},
        {"id": 7, "type": "approval.request", "request_id": "r7", "tool": "shell", "summary": "ls"},
        {"id": 8, "type": "background.start", "handle": "bg-8", "command": "sleep 9"},
        {"id": 9, "type": "future.event", "whatever": True},
    ]
    state = fold(events)
    assert [m["role"] for m in state.conversation] == ["user", "assistant"]
    assert state.conversation[1]["tool_calls"][0]["name"] == "shell"
    assert (state.input_tokens, state.output_tokens) == (10, 4)
    assert state.status(owner_alive=True) == "waiting"
    assert state.status(owner_alive=False) == "abandoned"
    assert state.open_tool_calls == [{"call_id": "c1", "name": "shell", "args": {"command": "ls"}}]
    assert list(state.background) == ["bg-8"]
    assert state.workspace == "/w" and state.workspace_kept and not state.workspace_free
    more = [
        {"id": 10, "type": "approval.answer", "request_id": "r7", "answer": "yes"},
        {"id": 11, "type": "tool.result", "call_id": "c1", "output": "a\nb"},
        {"id": 12, "type": "background.end", "handle": "bg-8", "exit_code": 0, "output": "done"},
        {"id": 13, "type": "session.end", "reason": "handover", "exit_code": 8},
    ]
    for event in more:
        state.apply(event)
    assert state.status(owner_alive=False) == "handed-over"
    assert state.workspace_free  # the workspace.open is older than an ending
    assert state.conversation[-1]["role"] == "user" and "bg-8" in state.conversation[-1]["text"]
    assert not state.pending_approvals and not state.background
    row = state.row(owner_alive=False)
    assert row["status"] == "handed-over" and row["owner"] == "none" and row["last_event_id"] == 13


def _turn(first_id: int, number: int, output: str) -> list[dict]:
    call = {"call_id": f"c{number}", "name": "read_file", "args": {"path": "a"}}
    return [
        {"id": first_id, "type": "assistant.message", "text": f"turn {number}", "tool_calls": [call]},
        {"id": first_id + 1, "type": "tool.result", "call_id": f"c{number}", "name": "read_file", "output": output},
        {"id": first_id + 2, "type": "usage", "input_tokens": 100 * number, "output_tokens": 5, "cost": 0.5},
    ]


def test_a_compaction_restarts_the_conversation_from_its_summary_and_cuts_what_it_keeps():
    events = [{"id": 1, "type": "session.start", "session": "s", "message": "the task"},
              {"id": 2, "type": "user.message", "text": "the task"},
              *_turn(3, 1, "one"), *_turn(6, 2, "x" * 100),
              {"id": 9, "type": "background.end", "handle": "bg-1", "exit_code": 0, "output": "y" * 100},
              {"id": 10, "type": "usage", "input_tokens": 7, "output_tokens": 1, "for": "compaction"},
              {"id": 11, "type": "compaction", "summary": "Did turn one.", "through": 5, "cut": 10},
              *_turn(12, 3, "z" * 100)]  # fmt: skip
    state = fold(events)
    summary, kept_call, kept_result, note, call, result = state.conversation
    assert summary["role"] == "user" and "the task" in summary["text"] and "Did turn one." in summary["text"]
    assert kept_call["text"] == "turn 2" and kept_result["output"].startswith("x" * 10 + "\n[… cut when")
    assert "100 bytes in all" in kept_result["output"]
    assert note["text"].startswith("[backgroun\n[… cut when")
    assert call["text"] == "turn 3" and result["output"] == "z" * 100  # after the compaction: as it came
    assert state.conversation_ids == [5, 6, 7, 9, 12, 13]
    assert state.compactions == 1 and state.assistant_messages == 3
    assert (state.input_tokens, state.output_tokens, state.cost) == (607, 16, 1.5)
    assert (state.context_tokens, state.context_items) == (305, 6)  # the turn call after the compaction
    again = fold([*events, {"id": 15, "type": "compaction", "summary": "All of it.", "through": 14}])
    assert len(again.conversation) == 1 and "All of it." in again.conversation[0]["text"]
    assert "Did turn one." not in again.conversation[0]["text"]


def test_the_plan_is_the_latest_and_odd_values_are_read_as_defaults():
    state = fold([
        {"id": 1, "type": "plan", "steps": [{"step": "a", "status": "pending"}]},
        {"id": 2, "type": "plan", "steps": [{"step": "a", "status": "done"}, "junk", {"step": "b"}]},
        {"id": 3, "type": "usage", "input_tokens": "many", "output_tokens": None, "cost": "free"},
        {"id": 4, "type": "compaction", "summary": "s", "through": "soon"},
        {"id": 5, "type": "provider.retry", "attempt": 1, "status": 529, "wait_seconds": 0.5},
    ])  # fmt: skip
    assert state.plan == [{"step": "a", "status": "done"}, {"step": "b", "status": ""}]
    assert (state.input_tokens, state.output_tokens, state.cost) == (0, 0, None)
    assert state.conversation[0]["role"] == "user" and state.last_event_id == 5


def test_an_event_whose_bulk_is_nested_is_cut_too():
    huge = {"path": "big.txt", "content": "z" * (2 * MAX_EVENT_BYTES)}
    event = {
        "id": 3,
        "type": "assistant.message",
        "text": "",
        "tool_calls": [{"call_id": "c1", "name": "write_file", "args": huge}],
    }
    line = encode(event)
    assert len(line) <= MAX_EVENT_BYTES
    decoded = json.loads(line)
    assert decoded["truncated"] is True and decoded["id"] == 3 and decoded["type"] == "assistant.message"
    assert decoded["tool_calls"][0]["args"]["path"] == "big.txt"
