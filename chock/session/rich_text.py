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


def complete(text: str) -> int:
    """How much of streamed `text` is whole blocks, to be rendered now: up to its last blank line, or the last
    line closing a fenced code block, outside such a block."""
    end = position = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        position += len(line)
        if not line.endswith("\n"):
            break  # a line still coming
        bare = line.strip()
        if bare.startswith(("```", "~~~")):
            fenced = not fenced
            if not fenced:
                end = position
        elif not bare and not fenced:
            end = position
    return end
