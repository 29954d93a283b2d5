"""Helpers for tests that drive real sessions: reading their logs as they grow, their processes, a pty.

Every wait goes through `wait_until`; nothing here fakes Chock itself.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.fakes.wait import wait_until


def event_of(home, session_id: str, kind: str, where: Callable[[dict], bool] = lambda e: True) -> dict | None:
    """The first event of `kind` (that `where` accepts) in the session's log, or None."""
    return next((e for e in home.events(session_id) if e["type"] == kind and where(e)), None)


def wait_for_event(home, session_id: str, kind: str, where=lambda e: True, timeout: float = 30.0) -> dict:
    return wait_until(lambda: event_of(home, session_id, kind, where), timeout, f"a {kind} event")


def wait_for_end(home, session_id: str, reason: str | None = None, timeout: float = 60.0) -> dict:
    """The session's latest end, once one is logged after its latest start or adopt."""

    def ended() -> dict | None:
        end = None
        for event in home.events(session_id):
            if event["type"] in ("session.start", "session.adopt"):
                end = None
            elif event["type"] == "session.end":
                end = event
        return end if end and (reason is None or end["reason"] == reason) else None

    return wait_until(ended, timeout, f"the session's end ({reason or 'any reason'})")


def new_session(home, timeout: float = 30.0) -> str:
    """The id of the one session in the state dir, once its log exists."""

    def found() -> str | None:
        if not home.layout.sessions_dir.exists():
            return None
        ids = [name for name in os.listdir(home.layout.sessions_dir) if not name.startswith(".")]
        return ids[0] if len(ids) == 1 and home.layout.log_path(ids[0]).exists() else None

    return wait_until(found, timeout, "the session's log")


def terminal_session(home, project: Path, *args: str, message: str = "do the task") -> subprocess.Popen[str]:
    """`chock run ARGS MESSAGE` in the background with no terminal: owned by the terminal, not the daemon."""
    return home.spawn(
        "run", *args, message, cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (read from /proc), however deep."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running (a zombie counts as gone)."""
    left = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


class Terminal:
    """A `chock` command on a real pseudo-terminal: what it printed so far, and keys to type."""

    def __init__(self, home, *args: str, cwd: Path) -> None:
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "chock", *args], home.env)
        self.pid, self.fd = pid, fd
        self.screen = b""
        self.code: int | None = None

    def read(self, timeout: float = 0.2) -> None:
        while select.select([self.fd], [], [], timeout)[0]:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen += data
            timeout = 0.05

    def wait_for(self, text: bytes | str, timeout: float = 30.0) -> None:
        wanted = text.encode() if isinstance(text, str) else text
        deadline = time.monotonic() + timeout
        while wanted not in self.screen:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {wanted!r}; the screen: {self.screen.decode(errors='replace')}"
                )
            self.read()

    def type(self, keys: str | bytes) -> None:
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def exit_code(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.code is None:
            self.read()
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.code = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                raise AssertionError(f"the command did not exit; the screen: {self.screen.decode(errors='replace')}")
        self.read()
        return self.code

    def lines(self) -> list[str]:
        text = self.screen.decode("utf-8", "replace").replace("\r\n", "\n")
        return text.split("\n")

    def close(self) -> None:
        if self.code is None:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def replay_config(home, entries, *, shell: str = "allow") -> None:
    """A replay instance and the approval policy the daemon's sessions follow."""
    home.write_replay("demo.jsonl", entries)
    instances = '.instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }'
    home.write_config(f'.{{ {instances}, .approvals = .{{ .shell = "{shell}" }} }}\n')


def write(path: str, content: str) -> dict:
    return {"call_id": f"w-{path}", "name": "write_file", "args": {"path": path, "content": content}}


# A session kept busy: a background command, a subagent that takes its time, and a foreground command that
# starts a process of its own session (setsid) — everything a stop must leave nothing of.
BUSY = [
    {"text": "", "tool_calls": [
        {"call_id": "b1", "name": "shell", "args": {"command": "sleep 300", "background": True}},
        {"call_id": "s1", "name": "subagent", "args": {"task": "look around"}},
        {"call_id": "f1", "name": "shell", "args": {"command": "setsid sleep 301 & sleep 302"}},
    ]},
    {"for": "subagent", "text": "still looking", "tool_calls": [], "delay": 300},
    {"text": "Done after the stop.", "tool_calls": []},
]  # fmt: skip
