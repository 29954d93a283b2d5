"""A session's start: `chock run` from its exec to the provider's first request (docs/architecture.md#start-up).

The provider is a loopback fake speaking the openai-compat wire (tests/fakes/providers.py); the time is taken
when its request arrives. Against it, in the same run and taking turns with it:
  - on a one-file repository, `python3 -c pass` + `git worktree add` of the same repository (goal <= 6x);
  - on a 20,000-file repository, `git worktree add` of it, which checks out every file (goal <= 1.3x).
Prints low / median / high of each and the ratio of the medians.

    python bench/run_start.py               # 15 rounds each
    python bench/run_start.py --installed   # /usr/bin/chock under /usr/bin/python3
    python bench/run_start.py --quick       # 2 rounds on a one-file repository: asserts the session completes
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from pathlib import Path

import _common
from finish_changed import git, make_repository

from tests.fakes.providers import FakeProvider

GOALS = {1: 6.0, 20_000: 1.3}


class Runs:
    """`chock run` in `project` against one fake provider; each call times exec -> first request."""

    def __init__(self, root: Path, project: Path, fake: FakeProvider) -> None:
        self.root, self.project, self.fake = root, project, fake
        self.env = _common.environment(root)
        self.arrived: list[float] = []
        fake.answer_with(self._answer)
        _common.layout(root).config.write_text(
            f'.{{ .instances = .{{ .fake = .{{ .kind = "openai-compat={fake.address}", .model = "m" }} }} }}\n'
        )

    def _answer(self, body: dict) -> dict:
        self.arrived.append(time.perf_counter())
        return {"text": "Done."}

    def __call__(self) -> float:
        began = time.perf_counter()
        done = subprocess.run(
            _common.chock("run", "--yes", "say hello"), env=self.env, cwd=self.project,
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0 and "Done." in done.stdout, done.stderr
        return self.arrived[-1] - began


def worktree_add(project: Path, where: Path, *, bare: bool) -> float:
    """`git worktree add` of `project` at a fresh `where` (and `python3 -c pass` first when `bare`), timed;
    the worktree is removed after, untimed."""
    began = time.perf_counter()
    if bare:
        _common.bare_interpreter()
    subprocess.run(["git", "-C", str(project), "worktree", "add", "-q", "--detach", str(where)], check=True)
    took = time.perf_counter() - began
    shutil.rmtree(where)
    subprocess.run(["git", "-C", str(project), "worktree", "prune"], check=True)
    return took


def main() -> None:
    parser = _common.arguments(__doc__ or "", "2 rounds, one file; asserts the session completes", installed=True)
    parser.add_argument("--rounds", type=int, default=15, help="rounds per repository (15)")
    options = _common.parse(parser)
    sizes, rounds = ([1], 2) if options.quick else (list(GOALS), options.rounds)
    with _common.scratch() as root, FakeProvider(kind="openai", key=None) as fake:
        for files in sizes:
            if files == 1:
                project = root / "one"
                project.mkdir()
                git(project, "init", "-q", "-b", "main")
                (project / "README.md").write_text("hello\n")
                git(project, "add", "-A")
                git(project, "commit", "-q", "-m", "one file")
            else:
                project = make_repository(root / f"r{files}", files)
            run = Runs(root, project, fake)
            baseline = "python3 -c pass + git worktree add" if files == 1 else "git worktree add"
            samples: dict[str, list[float]] = {"chock run to first request": [], baseline: []}
            for round_ in range(rounds):
                samples["chock run to first request"].append(run())
                samples[baseline].append(worktree_add(project, root / f"wt{round_}", bare=files == 1))
            if options.quick:
                continue
            ratio = statistics.median(samples["chock run to first request"]) / statistics.median(samples[baseline])
            print(f"{files:,} file(s), {rounds} rounds (low / median / high):")
            for name, values in samples.items():
                print(f"  {name:<36} {_common.spread(values)}")
            print(f"  ratio of medians {ratio:.2f}x (goal <= {GOALS[files]}x)")
    if options.quick:
        print("run_start: quick mode: chock run reached its provider and completed, 2 rounds")


if __name__ == "__main__":
    main()
