"""The target's step of `chock move` alone: `chock run --move-in` of a session with a 100 MB log and a 50 MiB branch
whose parts are already received (docs/remote.md#moving-a-session), against what it cannot do without — `git
index-pack --strict` of the branch's pack and a copy of the log, one after the other — measured in the same run.

The session is a real one, ended on host A (a Chock home in a scratch root), padded as bench/move_ssh.py pads it,
and moved out; each run moves its parts into a new host B (another home, with its own clone of the project) and
times the move-in from its start to its exit. Then the session is moved back to A, whose log is a prefix of the
one coming back (the A -> B -> A case): timed too. Printed: low / median / high of each, and of the ratio of a
first move-in to the baseline (the goal: at most 1.5x; the work is the baseline's, done at once rather than in
turn, plus a Python start).

    python bench/move_in.py           # a 100 MB log and a 50 MiB branch, 5 move-ins: the figures
    python bench/move_in.py --quick   # 4 MB and 2 MiB, 2 move-ins: asserts the session arrives whole each time
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common
from move_ssh import PAD

from chock.control.parts import PARTS

ONE_FILE = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "Wrote it.", "tool_calls": []},
]  # fmt: skip
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]


def host(root: Path) -> dict[str, str]:
    """A Chock home in `root` with the replay instance `demo`: its environment."""
    (root / "runtime").mkdir(parents=True, mode=0o700)
    (root / "demo.jsonl").write_text("".join(json.dumps({"type": "assistant.message", **e}) + "\n" for e in ONE_FILE))
    (root / "config.zon").write_text('.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }\n')
    # One compiled-module cache for every host, as an installed Chock has: no host compiles Chock again.
    return {**_common.environment(root), "PYTHONPYCACHEPREFIX": str(root.parent / "pycache")}


def run(env: dict[str, str], *args: str, cwd: Path) -> str:
    done = subprocess.run(_common.chock(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"chock {' '.join(args)}: {done.stderr}"
    return done.stdout


def move_out(env: dict[str, str], root: Path, session_id: str, to: str) -> tuple[Path, bool]:
    said = json.loads(run(env, "run", "--move-out", session_id, "--to", to, cwd=root).splitlines()[-1])
    return _common.layout(root).move_dir(session_id) / "out", bool(said["was_running"])


def received(parts: Path, root: Path, session_id: str) -> None:
    """What the target's daemon does before the move-in: each part, as a file of its own, in `moves/<id>/in/`."""
    into = _common.layout(root).move_dir(session_id) / "in"
    into.mkdir(parents=True)
    for part in PARTS:
        shutil.copyfile(parts / part, into / part)


def move_in(env: dict[str, str], root: Path, session_id: str, project: Path, source: str) -> float:
    started = time.perf_counter()
    out = run(env, "run", "--move-in", session_id, "--project", str(project), "--from", source, cwd=root)
    took = time.perf_counter() - started
    assert json.loads(out)["adopted"] > 0, out
    return took


def baseline(parts: Path, project: Path, scratch: Path) -> float:
    """`git index-pack --strict` of the bundle's pack into a clone of the project, then the log copied: seconds."""
    subprocess.run(
        ["git", "clone", "-q", "--bare", "--single-branch", "-b", "main", str(project), str(scratch)], check=True
    )
    bundle = (parts / "bundle").read_bytes()
    pack = bundle[bundle.index(b"\n\n") + 2 :]
    started = time.perf_counter()
    subprocess.run(
        ["git", "-C", str(scratch), "index-pack", "--strict", "--fix-thin", "--stdin"], input=pack, check=True,
        capture_output=True,
    )  # fmt: skip
    shutil.copyfile(parts / "log", scratch / "log")
    took = time.perf_counter() - started
    shutil.rmtree(scratch)
    return took


def main() -> None:
    options = _common.parse(_common.arguments(__doc__ or "", "4 MB and 2 MiB, 2 move-ins: asserts it arrives whole"))
    log_bytes = (4 if options.quick else 100) * 1000 * 1000
    branch_bytes = (2 if options.quick else 50) << 20
    runs = 2 if options.quick else 5
    with _common.scratch() as root:
        a_root = root / "a"
        a = host(a_root)
        project = root / "project"
        subprocess.run([*GIT, "init", "-q", "-b", "main", str(project)], check=True)
        (project / "README.md").write_text("# demo\n")
        subprocess.run([*GIT, "-C", str(project), "add", "-A"], check=True)
        subprocess.run([*GIT, "-C", str(project), "commit", "-q", "-m", "first"], check=True)
        run(a, "run", "--yes", "write a file", cwd=project)
        (session_id,) = (path.name for path in _common.layout(a_root).sessions_dir.iterdir())
        log = _common.layout(a_root).log_path(session_id)
        subprocess.run(
            [sys.executable, "-c", PAD, str(log), str(log_bytes), str(project), session_id, str(branch_bytes)],
            check=True,
        )  # fmt: skip
        parts, _ = move_out(a, a_root, session_id, "b")
        firsts, theirs, backs = [], [], []
        for turn in range(runs):
            b_root = root / f"b{turn}"
            b = host(b_root)
            there = b_root / "project"
            subprocess.run(
                ["git", "clone", "-q", "--single-branch", "-b", "main", str(project), str(there)], check=True
            )
            theirs.append(baseline(parts, project, root / "baseline.git"))
            received(parts, b_root, session_id)
            firsts.append(move_in(b, b_root, session_id, there, "a"))
            shutil.rmtree(_common.layout(b_root).move_dir(session_id), ignore_errors=True)
            sent = log.read_bytes()
            arrived = _common.layout(b_root).log_path(session_id).read_bytes()
            assert arrived.startswith(sent) and arrived.count(b"\n") == sent.count(b"\n") + 2, "the log arrived whole"
            size = subprocess.run(
                ["git", "-C", str(there), "cat-file", "-s", f"chock/{session_id}:big.bin"], capture_output=True,
                text=True, check=True,
            ).stdout.strip()  # fmt: skip
            assert int(size) == branch_bytes, size
            if turn == runs - 1:
                break
            shutil.rmtree(b_root)
        # Back to A, which holds the log up to the move-out: the prefix it holds is compared, not checked again.
        run(a, "run", "--moved", session_id, "--to", "b", cwd=a_root)
        for _ in range(runs):
            back, _ = move_out(b, b_root, session_id, "a")
            received(back, a_root, session_id)
            backs.append(move_in(a, a_root, session_id, project, "b"))
            run(b, "run", "--moved", session_id, "--to", "a", cwd=b_root)
            there_parts, _ = move_out(a, a_root, session_id, "b")
            received(there_parts, b_root, session_id)
            move_in(b, b_root, session_id, b_root / "project", "a")
            run(a, "run", "--moved", session_id, "--to", "b", cwd=a_root)
        assert json.loads(log.read_bytes().splitlines()[-1])["reason"] == "moved"
    if options.quick:
        print(
            f"move_in --quick: {runs} move-ins of a {log_bytes // 10**6} MB log and a {branch_bytes >> 20} MiB branch"
        )
        return
    print(f"a {log_bytes // 10**6} MB log and a {branch_bytes >> 20} MiB branch, moved in {runs} times")
    print(_common.labelled("  baseline (git index-pack --strict, then the log copied)", theirs))
    print(_common.labelled("  chock run --move-in, first time here", firsts))
    print(
        _common.labelled("  ratio", [m / t for m, t in zip(firsts, theirs, strict=True)], "x") + " (goal: at most 1.5x)"
    )
    print(_common.labelled("  chock run --move-in, coming back (A -> B -> A)", backs))


if __name__ == "__main__":
    main()
