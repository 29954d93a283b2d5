"""Model text as Markdown at a terminal, through rich: imported only by the terminal view, when it renders
(docs/architecture.md#what-reaches-a-terminal).

The text given here has passed `chock.terminal.safe` already, so nothing in it is a control character; rich then
lays it out with its own markup, emoji codes and hyperlinks off (a link is its text then its URL in brackets, no
OSC 8) and raw HTML read as text, so `[bold red]x[/]`, `:smile:` and `<b>` are shown as written.
"""

from __future__ import annotations

import io
import re

from markdown_it import MarkdownIt
from rich.console import Console
from rich.markdown import Markdown


def rendered(text: str, width: int) -> str:
    """`text` (safe already) as Markdown laid out `width` columns wide, each line's trailing spaces removed."""
    buffer = io.StringIO()
    console = Console(
        file=buffer, force_terminal=True, no_color=False, width=width, emoji=False, markup=False, highlight=False,
        legacy_windows=False, force_jupyter=False, force_interactive=False,
    )  # fmt: skip
    view = Markdown(text, hyperlinks=False)
    view.parsed = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").parse(text)
    console.print(view)
    return re.sub(" +$", "", buffer.getvalue(), flags=re.MULTILINE)


class Blocks:
    """Streamed text cut into whole Markdown blocks: `add` a delta, and get back the text of the blocks it
    completed — up to its last blank line, or the last line closing a fenced code block, outside such a block —
    or "". Each line is looked at once, so a long block costs its length, not its length times its deltas."""

    def __init__(self) -> None:
        self.text = ""
        self.scanned = 0  # lines up to here are looked at
        self.end = 0  # whole blocks end here
        self.fenced = False  # whether `scanned` is inside a fenced code block

    def add(self, delta: str) -> str:
        self.text += delta
        while (newline := self.text.find("\n", self.scanned)) >= 0:
            bare = self.text[self.scanned : newline].strip()
            self.scanned = newline + 1
            if bare.startswith(("```", "~~~")):
                self.fenced = not self.fenced
                if not self.fenced:
                    self.end = self.scanned
            elif not bare and not self.fenced:
                self.end = self.scanned
        return self._take(self.end)

    def rest(self) -> str:
        """What is left when the text ends: the last block, whole or not."""
        rest = self._take(len(self.text))
        self.fenced = False
        return rest

    def _take(self, end: int) -> str:
        whole, self.text = self.text[:end], self.text[end:]
        self.scanned -= end
        self.end = 0
        return whole
