"""Model text as Markdown at a terminal, through rich: imported only by the terminal view, when it renders
(docs/architecture.md#what-reaches-a-terminal).

The text given here has passed `chock.terminal.safe` already, so nothing in it is a control character; rich then
lays it out with its own markup, emoji codes and hyperlinks off (a link is its text then its URL in brackets, no
OSC 8) and raw HTML read as text, so `[bold red]x[/]`, `:smile:` and `<b>` are shown as written. Markdown's own
escapes make characters anew (`&#x202E;` is U+202E), so what rich lays out passes `safe` once more, around the
colours rich adds: no character of the rule reaches the terminal whatever the text spells.
"""

from __future__ import annotations

import io
import re
from collections import Counter

from markdown_it import MarkdownIt
from rich.console import Console
from rich.markdown import Markdown

from chock.terminal import safe

SGR = re.compile("\x1b\\[[0-9;]*m")
SGR_APART = re.compile("(\x1b\\[[0-9;]*m)")  # split on, keeping each
WORD = re.compile("[^\\W_]+")  # letters and digits: `_em_` is shown as `em`
# What is not shown as words, so not counted: an entity (`&amp;` is shown as `&`), a code fence's info string.
UNSHOWN = re.compile("&#?\\w+;|^ {0,3}(?:```|~~~).*$", re.MULTILINE)
OSC = re.compile("\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)")
# A character `safe` shows as its escape (`\u200b`): no word, wherever it stands (`&shy;` inside a word).
ESCAPED = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def rendered(text: str, width: int) -> str | None:
    """`text` (safe already) as Markdown laid out `width` columns wide, each line's trailing spaces removed; None
    when the layout would lose a word of it (nesting past markdown-it's bound drops a block, an image hides its
    address, a word longer than a line is cut in two): the caller shows such text as it is."""
    buffer = io.StringIO()
    console = Console(
        file=buffer, force_terminal=True, no_color=False, width=width, emoji=False, markup=False, highlight=False,
        legacy_windows=False, force_jupyter=False, force_interactive=False,
    )  # fmt: skip
    view = Markdown(text, hyperlinks=False)
    view.parsed = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").parse(text)
    console.print(view)
    # The text held no ESC (it is safe), so an OSC here is rich's own: none passes, whatever rich's version does.
    laid_out = SGR_APART.split(OSC.sub("", buffer.getvalue()))
    laid_out[::2] = [safe(piece, styled=False) for piece in laid_out[::2]]  # rich's colours are the odd pieces
    shown = re.sub(" +$", "", "".join(laid_out), flags=re.MULTILINE)
    said = Counter(WORD.findall(ESCAPED.sub(" ", UNSHOWN.sub(" ", text))))
    if said - Counter(WORD.findall(ESCAPED.sub(" ", SGR.sub("", shown)))):
        return None
    return shown


class Blocks:
    """Streamed text cut into whole Markdown blocks: `add` a delta, and get back the text of the blocks it
    completed — up to its last blank line, or the last line closing a fenced code block, outside such a block —
    or "". Each character is looked at and copied a bounded number of times, so a long block costs its length,
    not its length times its deltas (bench/terminal_markdown.py)."""

    def __init__(self) -> None:
        self.line: list[str] = []  # the line still coming, in pieces
        self.lines: list[str] = []  # whole lines since the last end of a block
        self.fenced = False  # whether those lines are inside a fenced code block

    def add(self, delta: str) -> str:
        whole: list[str] = []
        start = 0
        while (newline := delta.find("\n", start)) >= 0:
            self.line.append(delta[start : newline + 1])
            line = "".join(self.line)
            self.line = []
            self.lines.append(line)
            start = newline + 1
            bare = line.strip()
            if bare.startswith(("```", "~~~")):
                self.fenced = not self.fenced
                ends = not self.fenced
            else:
                ends = not bare and not self.fenced
            if ends:
                whole += self.lines
                self.lines = []
        if start < len(delta):
            self.line.append(delta[start:])
        return "".join(whole)

    def rest(self) -> str:
        """What is left when the text ends: the last block, whole or not."""
        rest = "".join(self.lines + self.line)
        self.line, self.lines, self.fenced = [], [], False
        return rest
