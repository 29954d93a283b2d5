"""The fold's cost for a long session, with and without a compaction near its end (docs/log.md, "Compaction").

Writes the log of a session of N events (turns of an assistant message with a tool call, its result, its
usage), once as it is and once with a `compaction` a few turns before its end, and folds each as
`chock run --continue`, the daemon and `chock sessions` do. Prints the fold's time and what the folded
conversation holds (its messages, its size as JSON: what the next request sends), each as a ratio against the
log without the compaction, measured in the same run. A compaction must not make the fold slower (it reads the
same events), and leaves a conversation a small fraction of the whole.

    python bench/fold_compaction.py           # 100,000 events: prints the figures
    python bench/fold_compaction.py --quick   # 20,000 events, seconds: asserts correctness only
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import _common

from chock.log.events import encode, timestamp
from chock.log.fold import SessionState, fold
from chock.log.reader import read_events

EVENTS_PER_TURN = 5  # assistant.message, tool.call, tool.result, usage, turn.end
KEPT_TURNS = 3  # turns after the compaction's `through`
OUTPUT = "a line of tool output\n" * 10


def turn_events(number: int) -> list[dict]:
    call = {"call_id": f"c{number}", "name": "read_file", "args": {"path": f"file{number % 50}.py"}}
    return [
        {"type": "assistant.message", "text": f"Reading file {number % 50}.", "tool_calls": [call]},
        {"type": "tool.call", **call},
        {"type": "tool.result", "call_id": call["call_id"], "name": "read_file", "output": OUTPUT, "is_error": False},
        {"type": "usage", "input_tokens": 1000 + number, "output_tokens": 20},
        {"type": "turn.end"},
    ]


def write_log(path: Path, count: int, *, compacted: bool) -> int:
    """A session of about `count` events; with `compacted`, a compaction before its last `KEPT_TURNS` turns.
    Returns the compaction's `through` (0 without one)."""
    at = timestamp()
    head = [
        {"type": "session.start", "session": "bench", "project": "/p", "message": "work on it", "instance": "x"},
        {"type": "user.message", "text": "work on it"},
    ]
    turns = (count - len(head)) // EVENTS_PER_TURN
    through = 0
    with open(path, "wb", buffering=1 << 20) as handle:
        number = 0

        def write(event: dict) -> None:
            nonlocal number
            number += 1
            handle.write(encode({"id": number, "at": at, **event}))

        for event in head:
            write(event)
        for turn in range(turns):
            if compacted and turn == turns - KEPT_TURNS:
                through = number  # the summary covers everything before this turn's assistant message
                write({"type": "usage", "input_tokens": 5000, "output_tokens": 300, "for": "compaction"})
                write({"type": "compaction", "summary": "Read every file once.", "through": through, "cut": 4096})
            for event in turn_events(turn):
                write(event)
    return through


def time_fold(path: Path, repeats: int) -> tuple[float, SessionState]:
    samples, state = [], SessionState()
    for _ in range(repeats):
        started = time.perf_counter()
        state = fold(read_events(path))
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), state


def conversation_bytes(state: SessionState) -> int:
    return len(json.dumps(state.conversation).encode())


def main() -> None:
    parser = _common.arguments(__doc__ or "", "20,000 events; assert correctness only")
    parser.add_argument("--events", type=int, default=None)
    options = _common.parse(parser)
    count = options.events or (20_000 if options.quick else 100_000)
    repeats = 1 if options.quick else 5
    with tempfile.TemporaryDirectory() as scratch:
        plain_log, compacted_log = Path(scratch) / "plain.jsonl", Path(scratch) / "compacted.jsonl"
        write_log(plain_log, count, compacted=False)
        through = write_log(compacted_log, count, compacted=True)
        baseline, plain = time_fold(plain_log, repeats)
        measured, compacted = time_fold(compacted_log, repeats)
    turns = (count - 2) // EVENTS_PER_TURN
    assert len(plain.conversation) == 1 + 2 * turns, len(plain.conversation)
    assert compacted.conversation[0]["role"] == "user" and "Read every file once." in compacted.conversation[0]["text"]
    assert len(compacted.conversation) == 1 + 2 * KEPT_TURNS, len(compacted.conversation)
    assert compacted.conversation_ids[0] == through and compacted.compactions == 1
    assert (compacted.input_tokens, compacted.output_tokens) == (plain.input_tokens + 5000, plain.output_tokens + 300)
    if options.quick:
        print(f"fold_compaction: quick mode: {count:,} events folded, with and without a compaction, correctly")
        return
    plain_size, compacted_size = conversation_bytes(plain), conversation_bytes(compacted)
    print(f"{count:,} events, no compaction: fold {baseline * 1e3:.0f} ms, conversation of "
          f"{len(plain.conversation):,} messages ({plain_size / 1e6:.1f} MB)")  # fmt: skip
    print(f"{count:,} events, compacted {KEPT_TURNS} turns before the end: fold {measured * 1e3:.0f} ms, "
          f"conversation of {len(compacted.conversation)} messages ({compacted_size / 1e3:.1f} kB)")  # fmt: skip
    print(f"ratio: fold time {measured / baseline:.2f} (near 1: the same events are read), conversation size "
          f"{compacted_size / plain_size:.5f} (what a continued session sends)")  # fmt: skip


if __name__ == "__main__":
    main()
