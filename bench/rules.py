"""Deciding a shell command against rules, and reading a large command (docs/approvals.md#matching).

Prints, as low / median / high over rounds, each round timing both sides in turn:
- deciding a shell text of four simple commands against 1,000 rules (900 programs, and 100 `git` subcommands)
  as a ratio against deciding it against one rule (the goal: at most 10×), the rules compiled once, and
  compiled for each decision as a session does (it reads the project's rules at every approval);
- reading a 1 MiB command (`simple_commands`) as a ratio against `shlex.split` of it (the goal: at most 5×).

    python bench/rules.py           # prints the figures
    python bench/rules.py --quick   # a few rounds: asserts correctness only
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Callable

import _common

from chock.rules import Rule, RuleSet, simple_commands

TEXT = "pytest -x tests/test_a.py -k 'b and c' && git diff --stat > out.txt; curl -s x | sh"
DECISIONS_PER_SAMPLE = 500
UNIT = "pytest -x 'tests/a b.py' -k \"c and d\" && git diff --stat > out.txt; "
MEGABYTE = UNIT * (1_048_576 // len(UNIT))


def rule_lists() -> tuple[list[Rule], list[Rule]]:
    """One rule, and 1,000 rules that hold it."""
    one = [Rule("allow", "pytest", "bench", "c0")]
    many = one + [Rule("allow", f"tool{n} run", "bench", f"c{n + 1}") for n in range(899)]
    many += [Rule("deny" if n % 10 == 0 else "allow", f"git sub{n}", "bench", f"g{n}") for n in range(99)]
    many += [Rule("allow", "git diff", "bench", "g99")]
    assert len(many) == 1_000
    return one, many


def check(one: RuleSet, many: RuleSet) -> None:
    """Both sets decide as the rules say (the figures are of right answers)."""
    assert one.decide("shell", TEXT, "ask").verdict == "ask"
    assert many.decide("shell", TEXT, "ask").verdict == "ask"
    assert many.decide("shell", "pytest -x && git diff --stat", "deny").verdict == "allow"
    assert one.decide("shell", "pytest -x && git diff --stat", "deny").verdict == "deny"
    assert many.decide("shell", "env git sub20 x", "allow").verdict == "deny"
    continued = simple_commands("cat <<E\n" + "abcdefgh\\\n" * 100_000 + "x\nE\necho")  # once quadratic
    assert [command.words for command in continued.commands] == [("cat",), ("echo",)], continued.unsure
    parsed = simple_commands(MEGABYTE)
    assert not parsed.unsure and len(parsed.commands) == 2 * (1_048_576 // len(UNIT))
    assert parsed.commands[0].words == ("pytest", "-x", "tests/a b.py", "-k", "c and d")


def rounds_of(timers: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each timer's seconds per round, the timers taking turns."""
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].append(timer())
    return samples


def deciding(rules: RuleSet) -> float:
    return _common.stopwatch(lambda: [rules.decide("shell", TEXT, "ask") for _ in range(DECISIONS_PER_SAMPLE)])()


def compiling_and_deciding(rules: list[Rule]) -> float:
    runs = DECISIONS_PER_SAMPLE // 10
    return _common.stopwatch(lambda: [RuleSet(rules).decide("shell", TEXT, "ask") for _ in range(runs)])() * 10


def spread(ratios: list[float]) -> str:
    return f"low {min(ratios):.2f}× / median {statistics.median(ratios):.2f}× / high {max(ratios):.2f}×"


def main() -> None:
    parser = _common.arguments(__doc__ or "", "three rounds of each; assert correctness only")
    options = _common.parse(parser)
    one_list, many_list = rule_lists()
    one, many = RuleSet(one_list), RuleSet(many_list)
    check(one, many)
    rounds = 3 if options.quick else 21
    decide = rounds_of({"one": lambda: deciding(one), "many": lambda: deciding(many)}, rounds)
    build = rounds_of(
        {"one": lambda: compiling_and_deciding(one_list), "many": lambda: compiling_and_deciding(many_list)}, rounds
    )
    read = rounds_of(
        {
            "shlex": _common.stopwatch(lambda: shlex.split(MEGABYTE)),
            "read": _common.stopwatch(lambda: simple_commands(MEGABYTE)),
        },
        max(3, rounds // 3),
    )
    if options.quick:
        print("rules --quick: ok")
        return
    decide_ratios = [m / o for m, o in zip(decide["many"], decide["one"], strict=True)]
    build_ratios = [m / o for m, o in zip(build["many"], build["one"], strict=True)]
    read_ratios = [r / s for r, s in zip(read["read"], read["shlex"], strict=True)]
    one_us = statistics.median(decide["one"]) / DECISIONS_PER_SAMPLE * 1e6
    print(
        f"decide against 1,000 rules / against one ({one_us:.0f} µs a decision): {spread(decide_ratios)} (goal ≤ 10×)"
    )
    print(
        "… compiling the rules again for each decision (a session does only when its project file or its own rules"
        f" changed): {spread(build_ratios)}"
    )
    print(
        f"read a 1 MiB command / shlex.split of it ({statistics.median(read['shlex']) * 1000:.0f} ms): "
        f"{spread(read_ratios)} (goal ≤ 5×)"
    )


if __name__ == "__main__":
    main()
