"""What the terminal view's Markdown costs while model text streams (docs/architecture.md#what-reaches-a-terminal).

Streamed text is held until a block is whole (`chock.session.rich_text.Blocks`), then laid out by rich. A model
can stream one block for a long time (a fenced file of megabytes): cutting must look at each line once, not at
the whole block at every delta. Measures cutting a 1 MB and an 8 MB fenced block, streamed in 100-character
deltas, against `safe` over the same deltas (which every delta passes anyway) in the same run, and prints the
8 MB time over eight times the 1 MB one: near 1 is linear. Then the time rich takes to lay out a typical answer
(a heading, paragraphs, a list, a code block: about 4 kB), in milliseconds.

    python bench/terminal_markdown.py           # prints the figures
    python bench/terminal_markdown.py --quick   # 64 kB, seconds: asserts correctness only
"""

from __future__ import annotations

import re

import _common

from chock.session.rich_text import Blocks, rendered
from chock.terminal import safe

DELTA = 100
ANSWER = (
    "# What I changed\n\nThe parser now reads **every** field, and `--verbose` says which.\n\n"
    + "- the reader\n- the writer, see [the docs](https://docs.example/x)\n\n"
    + "```python\n"
    + "def f(x):\n    return x + 1\n" * 40
    + "```\n\n"
    + "A closing paragraph of some length that wraps. " * 20
    + "\n"
) * 3


def block(size: int) -> str:
    line = "    value = compute(value, 'a line of code in a long file')\n"
    return "```python\n" + line * (size // len(line)) + "```\n\nafter\n"


def deltas(text: str) -> list[str]:
    return [text[i : i + DELTA] for i in range(0, len(text), DELTA)]


def cut(pieces: list[str]) -> str:
    blocks = Blocks()
    return "".join(blocks.add(safe(piece, styled=False)) for piece in pieces) + blocks.rest()


def main() -> None:
    parser = _common.arguments(__doc__ or "", "64 kB; assert correctness only")
    options = _common.parse(parser)
    if options.quick:
        text = block(64 * 1024)
        assert cut(deltas(text)) == text
        shown = rendered(safe(ANSWER + "\n[bold red]x[/] \x1b]8;;https://e.example/\x1b\\l\n", styled=False), 100)
        assert "\x1b]8" not in shown and "[bold red]x[/]" in shown
        assert not re.sub(r"\x1b\[[0-9;]*m", "", shown).count("\x1b"), "only SGR sequences"
        assert "the docs (https://docs.example/x)" in " ".join(re.sub(r"\x1b\[[0-9;]*m", "", shown).split())
        print("terminal_markdown: quick mode: blocks cut and laid out correctly")
        return
    times = {}
    for megabytes in (1, 8):
        pieces = deltas(block(megabytes << 20))
        baseline = _common.median_time(lambda pieces=pieces: [safe(piece, styled=False) for piece in pieces], 3)
        measured = _common.median_time(lambda pieces=pieces: cut(pieces), 3)
        times[megabytes] = measured
        print(f"{megabytes} MB block in {DELTA}-character deltas: cut {measured * 1e3:7.1f} ms, "
              f"safe alone {baseline * 1e3:6.1f} ms, ratio {measured / baseline:5.1f}")  # fmt: skip
    print(f"8 MB / (8 × 1 MB) = {times[8] / (8 * times[1]):.2f} (near 1: linear)")
    text = safe(ANSWER, styled=False)
    rendered(text, 100)  # rich's first use imports and builds its tables
    laid_out = _common.median_time(lambda: rendered(text, 100), 5)
    print(f"a {len(ANSWER) / 1024:.1f} kB answer laid out by rich: {laid_out * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
