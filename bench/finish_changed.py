"""Finishing a session by what changed (docs/architecture.md, "Finishing by what changed").

On a repository of 20,000 and of 100,000 files, a session's worktree is made as `chock run` makes it
(`workspace.create`, which records each file's stamps), three files are changed, and the finish is timed:
`workspace.commit`, the walk, the commit and the new stamps, as a session's end runs it (there in a forked
child). Against it, `git status` on the same worktree (its index refreshed first, as the person's would be),
in the same run. Each round makes a fresh worktree; a second finish of the same worktree after three more
changes (a continued session) is timed too. Prints low / median / high of each and the ratios of the medians;
the goal is a finish within 3x `git status`.

    python bench/finish_changed.py           # 20,000 and 100,000 files, 5 rounds each
    python bench/finish_changed.py --quick   # 300 files, 2 rounds: asserts each commit holds exactly the changes
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

import _common

from chock.session import workspace

GOAL = 3.0
PER_DIRECTORY = 100
CHANGED = 3
IDENTITY = ("-c", "user.name=Bench", "-c", "user.email=bench@localhost")


def git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *IDENTITY, *args], capture_output=True, check=True, text=True)
    return done.stdout


def make_repository(path: Path, files: int) -> Path:
    """A repository of `files` small files, PER_DIRECTORY to a directory, in one commit."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for number in range(files):
        directory = path / f"d{number // PER_DIRECTORY:04d}"
        if number % PER_DIRECTORY == 0:
            directory.mkdir()
        (directory / f"f{number:06d}.txt").write_text(f"file {number}\n" + "some content\n" * (number % 7))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "the project")
    return path


def change(directory: Path, files: int, round_: int, which: int) -> set[str]:
    """Rewrite CHANGED files spread over the tree; the paths changed."""
    changed = set()
    for index in range(CHANGED):
        number = (files // (CHANGED + 1)) * (index + 1) + which
        path = f"d{number // PER_DIRECTORY:04d}/f{number:06d}.txt"
        (directory / path).write_text(f"changed in round {round_}, {which}\n")
        changed.add(path)
    return changed


def check(project: Path, committed: workspace.Committed, changed: set[str]) -> None:
    """The commit holds exactly the changed files, each as it is in the worktree."""
    listed = git(project, "diff", "--name-status", "--no-renames", committed.parent, committed.commit)
    assert sorted(listed.splitlines()) == sorted(f"M\t{path}" for path in changed), listed


def status(directory: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["git", "-C", str(directory), "status", "--porcelain"], check=True, capture_output=True)
    return time.perf_counter() - started


def measure(root: Path, files: int, rounds: int) -> dict[str, list[float]]:
    project = make_repository(root / f"project-{files}", files)
    samples: dict[str, list[float]] = {"finish": [], "continued": [], "git status": [], "hashed": []}
    for round_ in range(rounds):
        directory = root / "data" / "workspaces" / f"bench-{files}-{round_}"
        worktree, _ = workspace.create(project, directory, f"chock/bench-{files}-{round_}")
        changed = change(directory, files, round_, 0)
        started = time.perf_counter()
        committed = workspace.commit(worktree, "the session's work")
        samples["finish"].append(time.perf_counter() - started)
        samples["hashed"].append(committed.hashed)
        check(project, committed, changed)
        workspace.advance(worktree, committed)
        status(directory)  # git refreshes the worktree's index once, as a person's index is
        samples["git status"].append(min(status(directory) for _ in range(3)))
        changed = change(directory, files, round_, 1)
        started = time.perf_counter()
        again = workspace.commit(worktree, "the continued session's work")
        samples["continued"].append(time.perf_counter() - started)
        check(project, again, changed)
        workspace.advance(worktree, again)
        workspace.remove(worktree, own=worktree.directory)  # the bench made it where it is
    return samples


def main() -> None:
    parser = _common.arguments(__doc__ or "", "300 files, 2 rounds; asserts correctness only")
    parser.add_argument("--files", type=int, action="append", help="measure this many files (again for more)")
    parser.add_argument("--rounds", type=int, default=5, help="fresh worktrees measured per size (5)")
    options = _common.parse(parser)
    sizes, rounds = ([300], 2) if options.quick else (options.files or [20_000, 100_000], options.rounds)
    with _common.scratch() as root:
        for files in sizes:
            samples = measure(root, files, rounds)
            if options.quick:
                continue
            base = statistics.median(samples["git status"])
            hashed = samples.pop("hashed")
            print(f"{files:,} files, {CHANGED} changed, {rounds} rounds (low / median / high):")
            for name, values in samples.items():
                ratio = statistics.median(values) / base
                print(f"  {name:<11} {_common.spread(values)}   {ratio:5.2f}x git status")
            print(f"  files hashed by the first finish: {sorted(int(n) for n in hashed)}")
            print(f"  goal: finish <= {GOAL}x git status")
    if options.quick:
        print("finish_changed: each commit held exactly the files changed")


if __name__ == "__main__":
    main()
