"""Reading a large config.zon with every value placed (`zon.loads(..., placed=True)`, as config.py reads one):
each value's line is a binary search among the file's newlines, found once, so the time grows with the file,
not with its square (a count from the file's start for each value took 289 s for 100,000 rules).

Prints the seconds to read 10,000 and 100,000 rules, and their ratio (the goal: about 10×, linear).

    python bench/zon_placed.py           # prints the figures
    python bench/zon_placed.py --quick   # 1,000 and 10,000 rules, once: asserts correctness only
"""

from __future__ import annotations

import time

import _common

from chock import zon


def config(rules: int) -> str:
    lines = "".join(f'        .{{ .allow = "tool{n} run --flag" }},\n' for n in range(rules))
    return ".{\n    .approvals = .{\n    .rules = .{\n" + lines + "    },\n    },\n}\n"


def read(rules: int) -> float:
    text = config(rules)
    started = time.perf_counter()
    value = zon.loads(text, placed=True)
    seconds = time.perf_counter() - started
    placed = value["approvals"]["rules"]
    assert len(placed) == rules and placed.lines[rules - 1] == rules + 3  # the last rule's line, as written
    assert placed[rules - 1]["allow"].line == rules + 3
    return seconds


def main() -> None:
    parser = _common.arguments(__doc__ or "", "1,000 and 10,000 rules, once; assert correctness only")
    options = _common.parse(parser)
    small, large = (1_000, 10_000) if options.quick else (10_000, 100_000)
    few, many = read(small), read(large)
    if options.quick:
        return
    print(f"read {small:,} rules: {few:.3f} s; {large:,} rules: {many:.3f} s; ratio {many / few:.1f}× (goal ≈ 10×)")


if __name__ == "__main__":
    main()
