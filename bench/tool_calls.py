"""What a tool call costs beyond the plain command doing the same work (docs/architecture.md, "Tools").

  - shell: a call as the session makes it — the sandbox's bubblewrap command line built
    (chock.session.ports.Sandboxed), the process spawned in its own session, its output collected — against
    the same bwrap command line, built beforehand, run alone by subprocess (goal <= 1.3x);
  - search: the `search` tool over a 10 MB text file against `grep -n` of the same pattern on it (goal <= 3x).
Both take turns with their baseline round after round; prints low / median / high and the ratio of medians.

    python bench/tool_calls.py           # 40 rounds
    python bench/tool_calls.py --quick   # 3 rounds on a 1 MB file: asserts the outputs only
"""

from __future__ import annotations

import asyncio
import random
import statistics
import subprocess
import time
from pathlib import Path

import _common

from chock.session import tools
from chock.session.ports import Sandboxed
from chock.session.sandbox import Sandbox, find_bwrap, host_environment
from chock.session.tools import shell

GOALS = {"shell": 1.3, "search": 3.0}
WORDS = ["alpha", "beta", "gamma", "delta", "def", "return", "x = 1", "import os", "self.value"]


class Context:
    """What the shell and search tools ask of a session: its tool runner and its workspace."""

    def __init__(self, runner: Sandboxed, workspace: Path) -> None:
        self.runner = runner
        self.workspace = workspace


def text_file(path: Path, size: int) -> None:
    """`size` bytes of code-like lines, with one line holding `needle` near the end."""
    chooser = random.Random(25)
    lines, total = [], 0
    while total < size:
        line = " ".join(chooser.choice(WORDS) for _ in range(8)) + "\n"
        lines.append(line)
        total += len(line)
    lines.insert(len(lines) - 10, "the needle is here\n")
    path.write_text("".join(lines))


def timed(call: object) -> float:
    began = time.perf_counter()
    assert callable(call)
    call()
    return time.perf_counter() - began


def main() -> None:
    options = _common.parse(_common.arguments(__doc__ or "", "3 rounds, a 1 MB file; asserts the outputs only"))
    rounds, size = (3, 1_000_000) if options.quick else (40, 10_000_000)
    with _common.scratch() as root:
        places = {name: root / name for name in ("workspace", "git", "admin", "home", "kb")}
        for place in places.values():
            place.mkdir()
        workspace = places["workspace"]
        text_file(workspace / "big.txt", size)
        box = Sandbox(workspace, places["git"], places["admin"], places["home"], places["kb"])
        bwrap = find_bwrap()
        context = Context(Sandboxed(box, bwrap), workspace)
        alone_argv = box.argv(["/bin/sh", "-c", "true"], bwrap=bwrap)
        loop = asyncio.new_event_loop()

        async def shell_call() -> None:
            started = await shell.spawn(context, "true")  # type: ignore[arg-type]
            output, code = await shell.run_to_end(context, "true", 30, started)  # type: ignore[arg-type]
            assert (output, code) == ("", 0), (output, code)

        def search_call() -> None:
            call = tools.dispatch(tools.SESSION_TOOLS, context, "search", {"pattern": "needle"})  # type: ignore[arg-type]
            result = loop.run_until_complete(call)
            assert result.output.endswith(":the needle is here"), result.output

        def alone() -> None:
            subprocess.run(alone_argv, env=host_environment(), stdin=subprocess.DEVNULL, check=True)

        def grep() -> None:
            done = subprocess.run(["grep", "-n", "needle", "big.txt"], cwd=workspace, capture_output=True, text=True)
            assert done.stdout.endswith(":the needle is here\n"), done.stdout

        timers = {
            "shell": (lambda: loop.run_until_complete(shell_call()), "bwrap command line alone", alone),
            "search": (search_call, "grep -n", grep),
        }
        samples = {name: {name: [], base: []} for name, (_, base, _) in timers.items()}
        for _ in range(rounds):
            for name, (call, base, baseline) in timers.items():
                samples[name][name].append(timed(call))
                samples[name][base].append(timed(baseline))
        loop.close()
    if options.quick:
        print(f"tool_calls: quick mode: {rounds} shell calls ran under bwrap and search found the needle")
        return
    for name, (_, base, _) in timers.items():
        measured, baseline = samples[name][name], samples[name][base]
        ratio = statistics.median(measured) / statistics.median(baseline)
        print(f"{name} (low / median / high over {rounds} rounds):")
        print(f"  {name:<26} {_common.spread(measured, digits=2)}")
        print(f"  {base:<26} {_common.spread(baseline, digits=2)}")
        print(f"  ratio of medians {ratio:.2f}x (goal <= {GOALS[name]}x)")


if __name__ == "__main__":
    main()
