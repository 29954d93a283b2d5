"""How fast the commands a person types start: `chock --help` and `chock sessions`, against `python3 -c pass`.

`chock sessions` lists a project of 100 sessions of 100 events each (written as files) from the state dir, with
no daemon answering, once the row cache is warm (its first run wrote it) — what a person typing it sees every
time but the first. The baseline is the same interpreter starting with nothing to do, measured in the same
run, interleaved with the commands so that the machine's noise falls on both alike.

    python bench/cli_start.py               # prints the figures
    python bench/cli_start.py --installed   # the same for /usr/bin/chock (the Debian package installed)
    python bench/cli_start.py --quick       # a few rounds: asserts what the commands print only
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import _common
from _state import make_project, write_sessions

SESSIONS = 100
EVENTS = 100


def timed_run(argv: list[str], env: dict[str, str], cwd: str) -> Callable[[], str]:
    """A call that runs `argv` and returns what it printed (failing loudly on a non-zero exit)."""

    def run() -> str:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
        assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr}"
        return done.stdout

    return run


def main() -> None:
    parser = _common.arguments(__doc__, "a few rounds; assert what the commands print only", installed=True)
    options = _common.parse(parser)
    rounds = 3 if options.quick else 30
    with _common.scratch() as root:
        project = make_project(root / "project")
        ids = write_sessions(root, project, SESSIONS, EVENTS)
        env = _common.environment(root)
        help_ = timed_run(_common.chock("--help"), env, str(project))
        sessions = timed_run(_common.chock("sessions", "--json"), env, str(project))
        listed = [json.loads(line)["id"] for line in sessions().splitlines()]  # writes the row cache
        assert sorted(listed) == ids, "chock sessions lists every session of the project"
        assert "Usage: " in help_() and "sessions" in help_(), "chock --help prints the usage and its commands"
        timers = {"python3 -c pass": _common.bare_interpreter, "chock --help": help_, "chock sessions": sessions}
        medians = _common.interleaved({name: _common.stopwatch(call) for name, call in timers.items()}, rounds)
    if options.quick:
        print(f"cli_start: quick mode: {rounds} rounds; --help printed its usage and sessions listed {SESSIONS}")
        return
    bare = medians.pop("python3 -c pass")
    which = _common.INSTALLED_CHOCK if options.installed else "the checkout"
    print(f"{which}, interpreter {_common.python()}: python3 -c pass median {bare * 1e3:.1f} ms")
    for name, median in medians.items():
        what = f"{name} ({SESSIONS} sessions x {EVENTS} events, row cache warm)" if name == "chock sessions" else name
        print(f"{what}: median {median * 1e3:.1f} ms, ratio {median / bare:.1f}")


if __name__ == "__main__":
    main()
