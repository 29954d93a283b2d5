"""200 browsers on one session through `chock serve`, while the session appends 200 events a second.

A real daemon follows a real session log (this process owns it, holding its lock as `chock run` would, and
appends `assistant.delta` events at a fixed rate, each carrying the wall-clock time it was written); a real
`chock serve` holds one upstream `watch` and fans it out to 200 Server-Sent Event streams, read by client
processes. Measured in the same run: the latency from append to arrival for each event at each client, the
same for one client watching the daemon directly (the baseline: what the daemon and the log cost without
serve), and serve's CPU time and memory.

    python bench/serve_sse.py           # prints the figures
    python bench/serve_sse.py --quick   # under a minute: asserts every client got every event once, in order
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from pathlib import Path

import _common

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, events_of, expect
from chock.log.writer import SessionLog

CLIENTS = 200
RATE = 200  # events per second
WORKERS = 4  # client processes, so parsing 40 000 messages a second is not what gets measured
SESSION_ID = "20260101-000000-5e55e5"


# --------------------------------------------------------------------------------------------------------
# The clients


# Each delta's text begins with the time it was written (an event carries only its declared fields).
SENT = b"sent at "


def _sent(message: bytes) -> float | None:
    at = message.find(SENT)
    if at < 0:
        return None
    start = end = at + len(SENT)
    while end < len(message) and message[end : end + 1] in b"0123456789.":
        end += 1
    return float(message[start:end])


async def _client(url: str, ready: asyncio.Event, result: dict) -> None:  # type: ignore[type-arg]
    import aiohttp

    ids: list[int] = []
    latencies: list[float] = []
    ended = False
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
        assert response.status == 200, response.status
        buffer = b""
        async for chunk in response.content.iter_any():
            now = time.time()
            buffer += chunk
            *messages, buffer = buffer.split(b"\n\n")
            for message in messages:
                if message.startswith(b"id: "):
                    # `id: <host>/<session>/<event id>` (docs/architecture.md#serve): the event id is the last part
                    number = int(message[4 : message.index(b"\n")].rpartition(b"/")[2])
                    ids.append(number)
                    sent = _sent(message)
                    if sent is not None:
                        latencies.append(now - sent)
                    if number == 1:
                        ready.set()
                elif message.startswith(b"event: end"):
                    ended = True
    result.update(ids=ids, latencies=latencies, ended=ended)


def worker(url: str, count: int, ready_queue: multiprocessing.Queue, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> None:
        readies = [asyncio.Event() for _ in range(count)]
        outcomes: list[dict] = [{} for _ in range(count)]  # type: ignore[type-arg]
        tasks = [asyncio.create_task(_client(url, readies[n], outcomes[n])) for n in range(count)]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        ready_queue.put(count)
        await asyncio.gather(*tasks)
        results.put(outcomes)

    asyncio.run(main())


class DirectWatch(threading.Thread):
    """The baseline: one client of the daemon's own `watch`, no serve in between."""

    def __init__(self, address: str, project: Path) -> None:
        super().__init__(daemon=True)
        stream = ControlClient(address).stream(dp.WatchRequest(project, SESSION_ID), idle_timeout=None)
        self.row, self.events = expect(stream.header, dp.WatchHeader).row, events_of(stream)
        self.latencies: list[float] = []
        self.ids: list[int] = []

    def run(self) -> None:
        for event in self.events:
            self.ids.append(event["id"])
            sent = _sent(str(event.get("text", "")).encode())
            if sent is not None:
                self.latencies.append(time.time() - sent)


# --------------------------------------------------------------------------------------------------------
# serve's own cost, from /proc (Linux)


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) for line in lines if line.startswith(("VmRSS", "VmHWM"))}


def main() -> None:
    parser = _common.arguments(__doc__, "a short run; assert delivery only", installed=True)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--rate", type=int, default=RATE, help="events appended per second")
    parser.add_argument("--seconds", type=float, help="how long to append (default 3 quick, 20 full)")
    options = _common.parse(parser)
    seconds = options.seconds or (3.0 if options.quick else 20.0)
    count = int(seconds * options.rate)
    shares = [options.clients // WORKERS + (1 if n < options.clients % WORKERS else 0) for n in range(WORKERS)]
    with _common.scratch() as root:
        project = root / "project"
        project.mkdir()
        log_path = root / "state" / "sessions" / SESSION_ID / "log.jsonl"
        log_path.parent.mkdir(parents=True, mode=0o700)
        log = SessionLog.create(log_path)
        log.append("session.start", project=str(project), message="bench", instance="bench", model="",
                   owner="terminal", approve_all=False, pid=os.getpid())  # fmt: skip
        with _common.running_daemon(root) as socket_path, _common.running_serve(root, socket_path) as (serve, port):
            url = f"http://127.0.0.1:{port}/api/sessions/{SESSION_ID}/watch?project={project}"
            direct = DirectWatch(f"unix:{socket_path}", project)
            direct.start()
            workers: list[multiprocessing.process.BaseProcess] = []
            try:
                context = multiprocessing.get_context("spawn")
                ready_queue, results = context.Queue(), context.Queue()
                for share in filter(None, shares):
                    process = context.Process(target=worker, args=(url, share, ready_queue, results), daemon=True)
                    process.start()
                    workers.append(process)
                connected = sum(ready_queue.get(timeout=90) for _ in workers)
                assert connected == options.clients

                cpu_before, started = cpu_seconds(serve.pid), time.monotonic()
                for number in range(count):
                    delay = started + number / options.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    text = f"sent at {time.time():.6f} " + "streamed text of a typical size " * 2
                    log.append("assistant.delta", text=text)
                log.append("session.end", reason="completed", exit_code=0)
                outcomes = [outcome for _ in workers for outcome in results.get(timeout=120)]
                elapsed = time.monotonic() - started
                cpu_after = cpu_seconds(serve.pid)
                memory = memory_kib(serve.pid)
                direct.join(30)
                log.release()
            finally:
                for process in workers:
                    process.join(10)
                    if process.is_alive():
                        process.kill()

    expected = list(range(1, count + 3))  # session.start, the deltas, session.end
    bad = [n for n, outcome in enumerate(outcomes) if outcome.get("ids") != expected or not outcome.get("ended")]
    assert len(outcomes) == options.clients, f"{len(outcomes)} of {options.clients} clients reported"
    assert not bad, f"{len(bad)} clients missed, repeated or reordered events (first: {bad[0]})"
    assert direct.ids == expected, "the direct watch missed events"
    if options.quick:
        print(f"serve_sse: quick mode: {options.clients} clients each got all {len(expected)} events once, in order")
        return
    latencies = [value for outcome in outcomes for value in outcome["latencies"]]
    p50, p99 = _common.percentile(latencies, 50), _common.percentile(latencies, 99)
    base50, base99 = _common.percentile(direct.latencies, 50), _common.percentile(direct.latencies, 99)
    print(f"{options.clients} SSE clients, {count} events at {options.rate}/s ({len(latencies)} deliveries)")
    print(f"through serve: p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, max {max(latencies) * 1e3:.1f} ms")
    print(f"daemon watch directly: p50 {base50 * 1e3:.1f} ms, p99 {base99 * 1e3:.1f} ms")
    print(f"ratio of p99 (serve / direct): {p99 / base99:.1f}" if base99 else "ratio: n/a")
    if cpu_before is not None and cpu_after is not None:
        used = cpu_after - cpu_before
        print(f"serve CPU: {used:.2f} s over {elapsed:.1f} s ({used / elapsed:.0%} of a core)")
    if memory:
        rss, peak = memory.get("VmRSS", 0) / 1024, memory.get("VmHWM", 0) / 1024
        print(f"serve memory: RSS {rss:.1f} MiB, peak {peak:.1f} MiB")


if __name__ == "__main__":
    main()
