"""What a session waiting on a person holds: Pss of N sessions waiting for an approval (docs/architecture.md#approvals).

N `chock run` sessions, one project each, are started as a terminal starts one and leaves it (each under
`setsid`, with no terminal: they wait on their approval.sock) against a loopback openai-compat provider
(tests/fakes/providers.py) whose first answer asks for a shell call. Once every one waits and has parked
(docs/architecture.md#parking: its process runs the lean waiter), the Pss of each
session process and its children (/proc/PID/smaps_rollup) is summed per session; the anchor is a bare sleeping
`python3 -c 'import time; time.sleep(1e9)'` measured the same way in the same run. Then every session is answered
yes through `chock approve`: each must run its command, make its second call and complete, and nothing may be
left running. The goal: 100 waiting sessions at <= 12 MiB Pss each (>= 2,000 per 24 GiB).

    python bench/waiting_memory.py               # 100 sessions
    python bench/waiting_memory.py --sessions 20
    python bench/waiting_memory.py --installed   # /usr/bin/chock under /usr/bin/python3
    python bench/waiting_memory.py --quick       # 3 sessions: asserts each parks, then completes once answered
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import _common
from finish_changed import git

from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import alive, descendants, parked, processes_with

GOAL_MIB = 12.0
MIB = 1024 * 1024
COMMAND = "echo answered"


def asks_then_finishes(body: dict[str, Any]) -> dict[str, Any]:
    """The provider: a shell call for a conversation that has no tool result yet, then "Done."."""
    if any(message.get("role") == "tool" for message in body["messages"]):
        return {"text": "Done."}
    return {"text": "", "tool_calls": [{"id": "c1", "name": "shell", "args": {"command": COMMAND}}]}


def pss(pid: int) -> int:
    """Pss of `pid` and every process below it, in bytes (0 for one gone meanwhile)."""
    total = 0
    for each in {pid, *descendants(pid)}:
        try:
            text = Path(f"/proc/{each}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("Pss:"))
    return total


def events(root: Path) -> dict[str, list[str]]:
    """Each session's event types, by session id, as its log says now."""
    sessions = _common.layout(root).state / "sessions"
    found: dict[str, list[str]] = {}
    for session_id in os.listdir(sessions) if sessions.exists() else []:
        log = sessions / session_id / "log.jsonl"
        if log.exists():
            lines = log.read_text().splitlines()
            found[session_id] = [json.loads(line)["type"] for line in lines if line.endswith("}")]
    return found


def wait_for(what: str, ready: Any, processes: list[subprocess.Popen[str]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        dead = [p for p in processes if p.poll() is not None]
        assert not dead, f"a session exited {dead[0].returncode} before {what}: {dead[0].stderr.read()}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"not {what} within {seconds:.0f} s"
        time.sleep(0.2)


def make_project(path: Path) -> Path:
    """A repository of one file in one commit."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "one file")
    return path


def sessions_projects(root: Path) -> dict[str, str]:
    """Each session's project, as its `session.start` says."""
    sessions = _common.layout(root).state / "sessions"
    return {
        session_id: json.loads((sessions / session_id / "log.jsonl").open().readline())["project"]
        for session_id in events(root)
    }


def main() -> None:
    parser = _common.arguments(__doc__ or "", "3 sessions: asserts each parks, then completes", installed=True)
    parser.add_argument("--sessions", type=int, default=100, help="sessions waiting at once (100)")
    options = _common.parse(parser)
    count = 3 if options.quick else options.sessions
    with _common.scratch() as root, FakeProvider(kind="openai", key=None, strict=False) as fake:
        fake.answer_with(asks_then_finishes)
        _common.layout(root).config.write_text(
            f'.{{ .instances = .{{ .fake = .{{ .kind = "openai-compat={fake.address}", .model = "m" }} }},\n'
            '   .approvals = .{ .shell = "ask" } }\n'
        )
        # One project each: `git worktree add`s started at once in one repository race in git itself.
        projects = [make_project(root / f"project{index}") for index in range(count)]
        env = _common.environment(root)
        anchor = subprocess.Popen([_common.python(), "-c", "import time; time.sleep(1e9)"], start_new_session=True)
        sessions: list[subprocess.Popen[str]] = []
        try:
            for index in range(count):
                sessions.append(subprocess.Popen(
                    _common.chock("run", f"task {index}"), env=env, cwd=projects[index], start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                ))  # fmt: skip
            wait_for(f"all {count} wait for approval",
                     lambda: sum("approval.request" in e for e in events(root).values()) == count,
                     sessions, 60 + 3 * count)  # fmt: skip
            # A waiting session parks (docs/architecture.md#parking) once nothing but the approval is in flight.
            wait_for(f"all {count} park", lambda: all(parked(p.pid) for p in sessions), sessions, 30 + count)
            held = [pss(p.pid) for p in sessions]
            bare = pss(anchor.pid)
            started = time.monotonic()
            for session_id, project in sessions_projects(root).items():
                answered = subprocess.run(_common.chock("approve", session_id), env=env, cwd=project,
                                          input="y\n", capture_output=True, text=True)  # fmt: skip
                assert answered.returncode == 0, answered.stderr
            for process in sessions:
                assert process.wait(60 + count - (time.monotonic() - started)) == 0, process.stderr.read()  # type: ignore[union-attr]
        finally:
            for process in sessions:
                if process.poll() is None:
                    process.kill()
            anchor.send_signal(signal.SIGTERM)
            anchor.wait()
        left = alive({p.pid for p in sessions}) | processes_with(str(root))  # a sandboxed command names its workspace
        logs = events(root)
        assert len(logs) == count, f"{len(logs)} logs for {count} sessions"
        for session_id, kinds in logs.items():
            assert kinds[-1] == "session.end" and kinds.count("tool.result") == 1, (session_id, kinds)
        assert not left, f"left running after every session ended: {sorted(left)}"
        results = [fake_call for fake_call in fake.calls if any(m.get("role") == "tool" for m in fake_call["messages"])]
        assert len(results) == count and all(COMMAND.split()[1] in json.dumps(r) for r in results)
    if options.quick:
        print(f"waiting_memory: quick mode: {count} sessions waited for approval and parked, then each ran its "
              f"command and completed once answered; nothing left running")  # fmt: skip
        return
    median = statistics.median(held)
    print(f"{count} sessions waiting for approval, openai-compat provider (low / median / high):")
    print(f"  chock run, per session          {_common.spread(held, scale=1 / MIB, unit='MiB', digits=2)}")
    print(f"  sleeping python3 (anchor)       {bare / MIB:6.2f} MiB")
    print(f"  sum {sum(held) / MIB:,.1f} MiB; median {median / bare:.2f}x the anchor; "
          f"{24 * 1024 * MIB / median:,.0f} per 24 GiB (goal: <= {GOAL_MIB:.0f} MiB each)")  # fmt: skip


if __name__ == "__main__":
    main()
