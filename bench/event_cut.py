"""Cutting an event too large for its line, and a stop while a session cuts them (docs/log.md#lines).

Prints:
- the time `encode` takes to cut a 5 MB event of 50,000 short strings (a model's plan or argument list), as a
  ratio against one `json.dumps` of the same event measured in the same run (the goal: at most 3×), and the
  same for one 5 MB string and for 5 MB of escapes;
- the latency of a stop sent over the session's handover socket to a real `chock run` busy with 5 MB tool calls
  (each cut twice: as the model's answer and as the tool's call), from the request to the `ended` reply.

    python bench/event_cut.py           # prints the figures
    python bench/event_cut.py --quick   # one of each, seconds: asserts correctness only
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import _common

from chock.control import session_protocol as sp
from chock.control.client import SessionClient
from chock.control.framing import Unreachable
from chock.log.events import MAX_EVENT_BYTES, encode

SHORT_STRINGS = {
    "id": 9,
    "type": "tool.call",
    "name": "plan",
    "args": {"items": [f"item {n:05d} " * 9 for n in range(50_000)]},
}
ONE_STRING = {"id": 9, "type": "tool.call", "name": "write_file", "args": {"path": "a", "content": "x" * 5_000_000}}
ESCAPES = {"id": 9, "type": "assistant.message", "text": 'é\n"\\\x01' * 1_000_000}


def dumps(event: dict) -> bytes:
    return json.dumps(event, ensure_ascii=False, separators=(", ", ": ")).encode()


def check(event: dict) -> None:
    line = encode(event)
    assert len(line) <= MAX_EVENT_BYTES and json.loads(line)["truncated"] is True, len(line)


def cut_ratios(rounds: int) -> dict[str, tuple[float, float]]:
    figures = {}
    for name, event in (("50,000 short strings", SHORT_STRINGS), ("one 5 MB string", ONE_STRING), ("escapes", ESCAPES)):
        check(event)
        times = _common.interleaved(
            {"dumps": _common.stopwatch(lambda e=event: dumps(e)), "cut": _common.stopwatch(lambda e=event: encode(e))},
            rounds,
        )
        figures[name] = (times["cut"], times["cut"] / times["dumps"])
    return figures


def stop_latency(root: Path, delay: float) -> float:
    """Seconds from a stop to the session's `ended` reply, sent `delay` s after the session's loop started on twenty
    5 MB answers."""
    env = _common.environment(root)
    layout = _common.layout(root)
    project = root / f"project-{random.randrange(10**9)}"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(project), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(project), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "a"], check=True
    )
    # A network provider's answer arrives while the loop waits: a millisecond's delay stands for it.
    big = {"text": "", "delay": 0.001, "tool_calls": [{"call_id": "c", "name": "plan", "args": SHORT_STRINGS["args"]}]}
    layout.config.parent.mkdir(parents=True, exist_ok=True)
    (layout.config.parent / "cut.jsonl").write_text((json.dumps({"type": "assistant.message", **big}) + "\n") * 20)
    layout.config.write_text('.{ .instances = .{ .cut = .{ .kind = "replay=cut.jsonl" } } }\n')
    before = set(layout.sessions_dir.iterdir()) if layout.sessions_dir.exists() else set()
    process = subprocess.Popen(
        _common.chock("run", "--yes", "--instance", "cut", "cut"), cwd=project, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:  # the session's socket is bound as its loop starts, a moment before its first answer
            made = (set(layout.sessions_dir.iterdir()) if layout.sessions_dir.exists() else set()) - before
            log = next(iter(made), None)
            if log is not None and layout.session_socket(log.name, "handover").exists():
                break
            assert time.monotonic() < deadline, "the session never bound its socket"
            time.sleep(0.01)
        time.sleep(delay)
        started = time.perf_counter()
        try:
            with SessionClient(layout.session_socket(log.name, "handover"), sp.HANDOVER, timeout=120) as client:
                client.ask(sp.SessionStopRequest())
                reply = client.next_reply(120)
        except Unreachable:
            tail = "".join(
                line[:160].decode(errors="replace") + "\n" for line in (log / "log.jsonl").read_bytes().splitlines()
            )
            raise AssertionError(f"the session had ended before the stop: give it more work\n{tail}") from None
        latency = time.perf_counter() - started
        assert isinstance(reply, sp.Ended) and reply.reason == "interrupted", reply
        assert process.wait(60) == 130
    finally:
        process.kill()
        process.wait()
    return latency


def main() -> None:
    parser = _common.arguments(__doc__ or "", "one round and one stop; assert correctness only")
    options = _common.parse(parser)
    figures = cut_ratios(1 if options.quick else 15)
    with _common.scratch() as root:
        latencies = [stop_latency(root, random.uniform(0.1, 0.6)) for _ in range(1 if options.quick else 10)]
    if options.quick:
        print("event_cut --quick: ok")
        return
    for name, (seconds, ratio) in figures.items():
        print(f"cut {name}: {seconds * 1000:.0f} ms, {ratio:.2f}× one json.dumps of it")
    print(
        f"stop while cutting 5 MB events: median {_common.percentile(latencies, 50) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} stops"
    )


if __name__ == "__main__":
    main()
