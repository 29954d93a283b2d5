"""Replay after an id must seek, not read from the start (docs/log.md#lines).

Prints the time to read the last 10 events of a log of N events, as a ratio against the same read on a
log of 1,000 events measured in the same run; with seeking the ratio stays near 1 however long the log.

    python bench/log_replay.py           # 1,000,000 events: prints the figures
    python bench/log_replay.py --quick   # 100,000 events, under a minute: asserts correctness only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chock.log.events import encode, timestamp
from chock.log.reader import read_events

BASELINE_EVENTS = 1_000
TAIL = 10


def write_log(path: Path, count: int) -> None:
    """Write `count` events quickly (one buffered file; the owner's one-write-per-event path is not measured)."""
    at = timestamp()
    with open(path, "wb", buffering=1 << 20) as handle:
        for number in range(1, count + 1):
            handle.write(
                encode(
                    {
                        "id": number,
                        "at": at,
                        "type": "tool.result",
                        "call_id": f"c{number}",
                        "output": "a line of tool output " * 3,
                        "is_error": False,
                    }
                )
            )


def time_tail(path: Path, count: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        events = list(read_events(path, count - TAIL))
        samples.append(time.perf_counter() - started)
        ids = [event["id"] for event in events]
        assert ids == list(range(count - TAIL + 1, count + 1)), ids  # exactly the events after the id
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller log; assert correctness only")
    parser.add_argument("--events", type=int, default=None)
    options = parser.parse_args()
    large = options.events or (100_000 if options.quick else 1_000_000)
    with tempfile.TemporaryDirectory() as scratch:
        small_log, large_log = Path(scratch) / "small.jsonl", Path(scratch) / "large.jsonl"
        write_log(small_log, BASELINE_EVENTS)
        write_log(large_log, large)
        repeats = 5 if options.quick else 50
        baseline = time_tail(small_log, BASELINE_EVENTS, repeats)
        measured = time_tail(large_log, large, repeats)
        size = os.path.getsize(large_log)
    if options.quick:
        print(f"log_replay: quick mode: the last {TAIL} of {large:,} events replayed correctly")
        return
    print(f"log of {large:,} events ({size / 1e6:.0f} MB): last {TAIL} in {measured * 1e6:.0f} µs")
    print(f"log of {BASELINE_EVENTS:,} events: last {TAIL} in {baseline * 1e6:.0f} µs")
    print(f"ratio {measured / baseline:.2f} (near 1: replay seeks instead of reading from the start)")


if __name__ == "__main__":
    main()
