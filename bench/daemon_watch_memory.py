"""The daemon's memory while one `watch` follows a log that grows to 1 GB.

A session log is owned by this process the way `chock run` owns one (the exclusive flock, one write() per
event) and grows by `tool.result` events of about 64 KiB while a watcher reads every line the daemon sends.
The figure is the daemon's peak resident memory (VmHWM) against its own at rest before the watch, measured
in the same run: a follower that kept what it folds would grow with the log (the conversation: about
1 MiB per MB watched), one that keeps only the session's row stays where it started.

    python bench/daemon_watch_memory.py           # a log of 1 GB: the figures (the goal: under 100 MiB)
    python bench/daemon_watch_memory.py --quick   # a log of 64 MB, under a minute: asserts delivery only
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import _common

from chock.log.writer import SessionLog

SESSION_ID = "20260101-000000-3e3e3e"
OUTPUT = "o" * (64 * 1024 - 200)  # with its fields, a line of about 64 KiB


def vm(pid: int, name: str) -> int:
    """A `VmXXX:` figure of /proc/PID/status, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {name} in /proc/{pid}/status")


class Watcher(threading.Thread):
    """A raw `watch` from 0, as a client resumes one: when the daemon closes it before `session.end` (a
    watcher that falls too far behind is cut), it watches again from the last id it has. It checks that the
    ids run 1, 2, 3, … across every connection, and that the last one ends in `session.end`."""

    def __init__(self, socket_path: Path, project: Path) -> None:
        super().__init__(daemon=True)
        self.socket_path = socket_path
        self.project = project
        self.last = 0
        self.in_order = True
        self.ended = False
        self.connections = 0

    def run(self) -> None:
        while not self.ended and self.in_order:
            self._watch()

    def _watch(self) -> None:
        self.connections += 1
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(self.socket_path))
            sock.sendall(f"hello chock-control 1\nwatch {self.project}\t{SESSION_ID}\t{self.last}\n".encode())
            buffer = b""
            header = 0
            while data := sock.recv(1 << 20):
                buffer += data
                lines = buffer.split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if header < 2:  # `ok chock-control 1`, then `ok <row>`
                        self.in_order &= line.startswith(b"ok ")
                        header += 1
                        continue
                    event_id = int(line[len(b'{"id": ') : line.index(b",")])
                    self.in_order &= event_id == self.last + 1
                    self.last = event_id
                    self.ended = b'"type": "session.end"' in line[:80]


def run(root: Path, socket_path: Path, size: int) -> dict[str, float]:
    project = root / "project"
    project.mkdir()
    log_path = root / "state" / "sessions" / SESSION_ID / "log.jsonl"
    log_path.parent.mkdir(parents=True, mode=0o700)
    pid = json.loads((root / "state" / "daemon-status.json").read_text())["pid"]
    with SessionLog.create(log_path) as log:
        log.append("session.start", session=SESSION_ID, project=str(project), message="bench", owner="terminal")
        at_rest = vm(pid, "VmRSS")
        watcher = Watcher(socket_path, project)
        watcher.start()
        peak_rss = 0
        while log_path.stat().st_size < size:
            log.append("assistant.message", text="reading a large file", tool_calls=[])
            log.append("tool.result", call_id="c", name="read_file", output=OUTPUT, is_error=False)
            if log.last_id % 256 == 0:
                peak_rss = max(peak_rss, vm(pid, "VmRSS"))
        log.append("session.end", reason="completed", exit_code=0)
        last = log.last_id
    watcher.join(600)
    assert not watcher.is_alive(), "the watch closed after session.end"
    assert watcher.in_order and watcher.ended, (
        watcher.in_order,
        watcher.ended,
        watcher.last,
        last,
        watcher.connections,
    )
    assert watcher.last == last, (watcher.last, last)
    return {
        "log": log_path.stat().st_size,
        "events": last,
        "at_rest": at_rest,
        "peak": max(peak_rss, vm(pid, "VmHWM")),
        "connections": watcher.connections,
    }


def main() -> None:
    parser = _common.arguments(__doc__, "a log of 64 MB; assert delivery only", installed=True)
    options = _common.parse(parser)
    size = (64 if options.quick else 1024) * 1000 * 1000
    with _common.scratch() as root, _common.running_daemon(root) as socket_path:
        figures = run(root, socket_path, size)
    mib, mb = 1024 * 1024, 1000 * 1000
    if options.quick:
        print(f"daemon_watch_memory: quick mode: a watch of a log grown to {figures['log'] / mb:.0f} MB received "
              f"all {figures['events']:,} events in order over {figures['connections']} connection(s)")  # fmt: skip
        return
    growth = (figures["peak"] - figures["at_rest"]) / mib
    connections = figures["connections"]
    print(f"a watch of a log grown to {figures['log'] / mb:,.0f} MB ({figures['events']:,} events): every one "
          f"delivered, over {connections} connection(s) (one that falls behind is cut and resumes)")  # fmt: skip
    print(f"daemon resident memory: at rest {figures['at_rest'] / mib:.1f} MiB, peak {figures['peak'] / mib:.1f} MiB "
          f"(goal: under 100 MiB)")  # fmt: skip
    print(f"ratio peak / at rest {figures['peak'] / figures['at_rest']:.2f}; "
          f"growth {growth / (figures['log'] / mb):.4f} MiB per MB of log watched")  # fmt: skip


if __name__ == "__main__":
    main()
