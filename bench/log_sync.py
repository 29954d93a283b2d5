"""What writing the log ahead costs (docs/log.md#durability): a 30-turn replay session, against the same session
with every sync made a no-op.

Each turn runs one tool — a shell command under bwrap or a write_file, alternately — and the session ends by
committing its work to its branch: every sync point is passed (the log's fdatasync after each tool.call and
approval answer and at each turn boundary, the file tools' fsync, git's core.fsync=committed, the new log's
directory). The baseline is the same `chock run` under Debian's `eatmydata`, which makes fsync and fdatasync
no-ops for the whole process tree, measured in the same run, interleaved, on the same file system. The target
is a ratio of at most 1.25. On a file system where a sync costs nothing (tmpfs) the ratio says nothing: the
file system measured is printed.

    python bench/log_sync.py           # 7 rounds of each: prints the figures
    python bench/log_sync.py --quick   # one of each: asserts both sessions completed every turn only
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import _common

TURNS = 30


def script() -> list[dict]:
    """The replay's entries: TURNS turns of one tool call each, then an answer with none."""
    entries = []
    for turn in range(1, TURNS + 1):
        if turn % 2:
            call = {"name": "shell", "args": {"command": f"echo turn {turn}"}}
        else:
            call = {"name": "write_file", "args": {"path": f"notes/{turn}.txt", "content": f"turn {turn}\n"}}
        entries.append({"type": "assistant.message", "text": "", "tool_calls": [{"call_id": f"c{turn}", **call}]})
    entries.append({"type": "assistant.message", "text": "Done.", "tool_calls": []})
    return entries


def make_project(path: Path) -> Path:
    path.mkdir(parents=True)
    identity = ["-c", "user.name=Bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README.md").write_text("# bench\n")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), *identity, "commit", "-q", "-m", "first"], check=True)
    return path.resolve()


def file_system(path: Path) -> str:
    """The type of the file system `path` is on, from /proc/self/mounts (the longest mount point holding it)."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        point = fields[1].replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def session(root: Path, project: Path, prefix: list[str]) -> Callable[[], str]:
    """A call that runs one session to its end (under `prefix`) and returns its id, checking what it did."""
    env = _common.environment(root)
    layout = _common.layout(root)

    def run() -> str:
        before = set(os.listdir(layout.sessions_dir)) if layout.sessions_dir.exists() else set()
        argv = [*prefix, *_common.chock("run", "--yes", "thirty turns")]
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr}"
        [session_id] = set(os.listdir(layout.sessions_dir)) - before
        events = [json.loads(line) for line in layout.log_path(session_id).read_text().splitlines()]
        results = [e for e in events if e["type"] == "tool.result"]
        assert len(results) == TURNS and not any(e["is_error"] for e in results), "every turn's tool ran"
        assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed", events[-1]
        return session_id

    return run


def main() -> None:
    parser = _common.arguments(__doc__, "one session of each; asserts both completed every turn only")
    options = _common.parse(parser)
    eatmydata = shutil.which("eatmydata")
    if eatmydata is None:
        parser.error("needs eatmydata for its baseline: apt-get install eatmydata (scripts/debian-packages.txt)")
    rounds = 1 if options.quick else 7
    with _common.scratch() as root:
        layout = _common.layout(root)
        layout.config.write_text('.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }\n')
        (layout.config.parent / "demo.jsonl").write_text("".join(json.dumps(entry) + "\n" for entry in script()))
        project = make_project(root / "project")
        synced, unsynced = session(root, project, []), session(root, project, [eatmydata])
        synced()  # the first run compiles the modules (PYTHONPYCACHEPREFIX): neither side pays for that
        timers = {"synced": _common.stopwatch(synced), "eatmydata": _common.stopwatch(unsynced)}
        medians = _common.interleaved(timers, rounds)
        kind = file_system(layout.state)
    if options.quick:
        print(f"log_sync: quick mode: a {TURNS}-turn session completed with its syncs and under eatmydata")
        return
    ratio = medians["synced"] / medians["eatmydata"]
    print(f"a {TURNS}-turn replay session on {kind}, median of {rounds}:")
    print(f"  with its syncs {medians['synced'] * 1e3:.0f} ms, under eatmydata {medians['eatmydata'] * 1e3:.0f} ms")
    print(f"ratio {ratio:.2f} (target: at most 1.25)")


if __name__ == "__main__":
    main()
