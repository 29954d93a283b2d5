"""What `chock.terminal.safe` costs on a tool's output (docs/architecture.md#what-reaches-a-terminal).

Tool output can be megabytes, and every byte of it that is shown passes `safe`. Measures it on text like real
output (coloured test runs: an SGR every line, accents, CJK) and on the worst case (nothing but escapes), at 1 MB
and 8 MB, against encoding the same text as UTF-8 (what writing it to the terminal costs anyway), in the same
run. Prints each as a ratio to that baseline, and the 8 MB time over eight times the 1 MB one: near 1 is linear.

    python bench/terminal_safe.py           # prints the figures
    python bench/terminal_safe.py --quick   # 256 kB, seconds: asserts correctness only
"""

from __future__ import annotations

import _common

from chock.terminal import escape, safe

LINE = "\x1b[32mPASSED\x1b[0m tests/test_café.py::test_漢字[\u202eparam] - ok\r\n"


def realistic(size: int) -> str:
    return (LINE * (size // len(LINE.encode()) + 1))[: size // 2]


def worst(size: int) -> str:
    return "\x1b" * size


def reference(text: str) -> str:
    """The rule one character at a time, the slow way: what `safe` must equal."""
    return "".join(escape(char) if safe(char, styled=False) != char else char for char in text)


def main() -> None:
    parser = _common.arguments(__doc__ or "", "256 kB; assert correctness only")
    options = _common.parse(parser)
    if options.quick:
        for make in (realistic, worst):
            text = make(256 * 1024)
            assert safe(text, styled=False) == reference(text), make.__name__
            assert "\x1b" not in safe(text, styled=False)
            styled = safe(text, styled=True).replace("\x1b[7m", "").replace("\x1b[27m", "")
            assert styled == safe(text, styled=False)
        print("terminal_safe: quick mode: realistic and worst-case output made safe correctly")
        return
    for make in (realistic, worst):
        times = {}
        for megabytes in (1, 8):
            text = make(megabytes << 20)
            baseline = _common.median_time(lambda text=text: text.encode("utf-8"), 5)
            measured = _common.median_time(lambda text=text: safe(text, styled=True), 5)
            times[megabytes] = measured
            print(f"{make.__name__:>9} {megabytes} MB: safe {measured * 1e3:7.1f} ms, encode {baseline * 1e3:6.1f} ms, "
                  f"ratio {measured / baseline:6.1f}")  # fmt: skip
        print(f"{make.__name__:>9}: 8 MB / (8 × 1 MB) = {times[8] / (8 * times[1]):.2f} (near 1: linear)")


if __name__ == "__main__":
    main()
