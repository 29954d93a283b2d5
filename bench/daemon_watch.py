"""100 concurrent watchers of one session appending 1,000 events/s, through one daemon (docs/protocol.md#watch).

A writer process owns a session log the way `chock run` does (the exclusive flock, one write() per event)
and appends `assistant.delta` events at a fixed rate, each stamped with the time it was written; watcher
processes hold 100 `watch` connections and stamp each line as it arrives. Every watcher must receive every
event, in order, with no gap and no repeat, and its watch must close after `session.end`. The figure is the
append-to-delivery latency; the baseline, measured in the same run, is the same session watched by one
watcher, so the ratio is what fanning out to 100 costs.

    python bench/daemon_watch.py           # 10 s at 1,000 events/s, then the 1-watcher baseline: figures
    python bench/daemon_watch.py --quick   # 2 s, under a minute: asserts delivery only
"""

from __future__ import annotations

import argparse
import array
import fcntl
import json
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common

WATCHERS = 100
PROCESSES = 4
RATE = 1000
SESSION_ID = "20260101-000000-0000aa"
TEXT = "streamed text " * 4


# --------------------------------------------------------------------------------------------------------
# The writer: owns the log like a session, appends at RATE until told how many


def writer(log: Path, count: int, rate: int) -> None:
    from chock.log.events import timestamp

    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()  # go
    started = time.monotonic()
    next_id = 2  # the log holds session.start
    for number in range(count):
        pause = started + number / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        line = (
            f'{{"id": {next_id}, "t": {time.time():.6f}, "at": "{timestamp()}", "type": "assistant.delta", '
            f'"text": "{TEXT}"}}\n'
        )
        os.write(fd, line.encode())
        next_id += 1
    end = {"id": next_id, "at": timestamp(), "type": "session.end", "reason": "completed", "exit_code": 0}
    os.write(fd, (json.dumps(end) + "\n").encode())
    os.close(fd)


# --------------------------------------------------------------------------------------------------------
# Watchers: many connections per process, read with one selector


def watchers(socket_path: str, project: str, count: int, out: Path) -> None:
    selector = selectors.DefaultSelector()
    request = f"hello chock-control 1\nwatch {project}\t{SESSION_ID}\t0\n".encode()
    state = {}
    for index in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
        sock.sendall(request)
        state[sock] = {"index": index, "buffer": b"", "header": 0, "last": 0, "ok": True, "closed": False}
    latencies = array.array("d")
    ready_sent = False
    for sock in state:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_count = count
    while open_count:
        if not ready_sent and all(s["header"] == 2 for s in state.values()):
            print("ready", flush=True)
            ready_sent = True
        for key, _ in selector.select(30):
            sock = key.fileobj
            info = state[sock]
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                continue
            now = time.time()
            if not data:
                selector.unregister(sock)
                sock.close()
                info["closed"] = True
                open_count -= 1
                continue
            lines = (info["buffer"] + data).split(b"\n")
            info["buffer"] = lines.pop()
            for line in lines:
                if info["header"] < 2:  # `ok chock-control 1`, then `ok <row>`
                    info["ok"] &= line.startswith(b"ok ")
                    info["header"] += 1
                    continue
                parts = line.split(b", ", 2)
                event_id = int(parts[0][len(b'{"id": ') :])
                if event_id != info["last"] + 1:
                    info["ok"] = False
                info["last"] = event_id
                if parts[1].startswith(b'"t": '):
                    latencies.append(now - float(parts[1][5:]))
        else:
            if not selector.get_map():
                break
    with open(out, "wb") as handle:
        latencies.tofile(handle)
    summary = [{"last": s["last"], "ok": s["ok"] and s["closed"] and not s["buffer"]} for s in state.values()]
    print(json.dumps(summary), flush=True)


# --------------------------------------------------------------------------------------------------------
# The run


def run(root: Path, socket_path: Path, watcher_count: int, seconds: float) -> tuple[list[float], int]:
    """One session, `watcher_count` watchers: returns (latencies, events each watcher received)."""
    from chock.log.events import encode, timestamp

    project = root / "project"
    project.mkdir(exist_ok=True)
    session = root / "state" / "sessions" / SESSION_ID
    if session.exists():
        shutil.rmtree(session)
    session.mkdir(parents=True, mode=0o700)
    log = session / "log.jsonl"
    start = {"id": 1, "at": timestamp(), "type": "session.start", "session": SESSION_ID, "project": str(project),
             "message": "bench", "owner": "daemon"}  # fmt: skip
    log.write_bytes(encode(start))
    count = int(seconds * RATE)
    me = [sys.executable, os.path.abspath(__file__)]
    write = subprocess.Popen(
        [*me, "--writer", str(log), str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert write.stdout.readline() == "locked\n"
    per = [watcher_count // PROCESSES + (1 if i < watcher_count % PROCESSES else 0) for i in range(PROCESSES)]
    workers = []
    for index, n in enumerate(filter(None, per)):
        out = root / f"latencies-{index}"
        process = subprocess.Popen(
            [*me, "--watchers", str(socket_path), str(project), str(n), str(out)], stdout=subprocess.PIPE, text=True
        )
        workers.append((process, out, n))
    for process, _, _ in workers:
        assert process.stdout.readline() == "ready\n", "every watcher got its header"
    write.stdin.write("go\n")
    write.stdin.flush()
    assert write.wait(seconds + 60) == 0
    latencies: list[float] = []
    expected_last = count + 2  # session.start, the deltas, session.end
    for process, out, n in workers:
        summary = json.loads(process.stdout.readline())
        assert process.wait(60) == 0
        assert len(summary) == n
        for watcher in summary:
            assert watcher["ok"], "events in order, no gap, no repeat, and the watch closed after session.end"
            assert watcher["last"] == expected_last, (watcher["last"], expected_last)
        data = array.array("d")
        with open(out, "rb") as handle:
            data.frombytes(handle.read())
        latencies.extend(data)
    assert len(latencies) == watcher_count * count
    return latencies, expected_last


def main() -> None:
    parser = _common.arguments(__doc__, "2 s, no baseline; assert delivery only", installed=True)
    parser.add_argument("--writer", nargs=2, metavar=("LOG", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--watchers", nargs=4, metavar=("SOCKET", "PROJECT", "N", "OUT"), help=argparse.SUPPRESS)
    options = _common.parse(parser)
    if options.writer:
        writer(Path(options.writer[0]), int(options.writer[1]), RATE)
        return
    if options.watchers:
        path, project, n, out = options.watchers
        watchers(path, project, int(n), Path(out))
        return
    seconds = 2.0 if options.quick else 10.0
    with _common.scratch() as root, _common.running_daemon(root) as socket_path:
        fanned, last = run(root, socket_path, WATCHERS, seconds)
        single = None if options.quick else run(root, socket_path, 1, seconds)[0]
    if options.quick:
        print(f"daemon_watch: quick mode: {WATCHERS} watchers each received all {last} events, then the close")
        return
    p50, p99 = _common.percentile(fanned, 50), _common.percentile(fanned, 99)
    b50, b99 = _common.percentile(single, 50), _common.percentile(single, 99)
    print(f"{WATCHERS} watchers x {int(seconds * RATE):,} events at {RATE}/s: every event delivered to every watcher")
    print(f"append-to-delivery latency: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, max {max(fanned) * 1e3:.1f} ms")
    mean = statistics.mean(single)
    print(f"baseline (1 watcher): p50 {b50 * 1e3:.2f} ms, p99 {b99 * 1e3:.2f} ms, mean {mean * 1e3:.2f} ms")
    print(f"ratio p99 {p99 / b99:.1f}")


if __name__ == "__main__":
    main()
