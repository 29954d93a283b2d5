"""Helpers for tests that drive real sessions: reading their logs as they grow, and their processes.

Every wait goes through `wait_until`; nothing here fakes Chock itself. A command at a real terminal is
tests/fakes/terminal.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator
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


def replayed_terminal_session(
    home, project: Path, entries: list[dict], *args: str
) -> tuple[subprocess.Popen[str], str]:
    """`chock run --yes ARGS "write two files"` on a replay of `entries`, owned by no terminal: the process,
    and the session's id once its log exists."""
    home.replay_instance(entries)
    process = terminal_session(home, project, "--yes", *args, message="write two files")
    return process, new_session(home)


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


def parked(pid: int) -> bool:
    """Whether the session process `pid` is parked: it is running the lean waiter (chock.session.parked)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"chock/session/parked.py" in handle.read()
    except OSError:
        return False


def processes_with(marker: str) -> set[int]:
    """Every live process on the machine whose command line holds `marker`, whoever its parent is now."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.add(int(entry))
        except OSError:
            continue
    return alive(found)


def processes_with_environment(entry: str, *, prefix: bool = False) -> list[int]:
    """Every process on the machine with `entry` (`NAME=value`) in its environment, or, with `prefix`, an entry
    starting with it."""
    wanted = entry.encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(item.startswith(wanted) if prefix else item == wanted for item in environ):
            found.append(int(pid))
    return found


@contextlib.contextmanager
def no_process_left() -> Iterator[str]:
    """A marker for the commands a test starts (put it in each command line); at the end, no process holding it
    may be left anywhere on the machine. What is left is killed either way, so a failure leaves nothing behind."""
    marker = str(secrets.randbelow(9 * 10**8) + 10**8)  # nine digits: a number `sleep` takes, as the command's own
    try:
        yield marker
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not processes_with(marker), 5, "the marked processes to go")
        left = processes_with(marker)
        assert not left, f"{len(left)} processes of the commands marked {marker} outlived them: {sorted(left)}"
    finally:
        for pid in processes_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


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
