"""A transcript as one self-contained HTML page that loads nothing and runs nothing.

The first element of its head is the policy `default-src 'none'; style-src 'unsafe-inline'`: whatever a page
made of it held, the browser would fetch nothing and run no script. Nothing in it needs more: no script, no
image, no link, no external style; its one style sheet is inline. Every text of the log is escaped
(`html.escape`, quotes too) and shown through the safe printer's rule (chock/terminal.py), so a bidi override or
a zero-width in a command is shown as its escape rather than disguising it.
"""

from __future__ import annotations

from html import escape

from chock.terminal import safe
from chock.transcript.entries import EventView

POLICY = "default-src 'none'; style-src 'unsafe-inline'"

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #1b1b1b; }
section { border-left: 3px solid #ccc; padding: 0.1rem 0 0.1rem 0.8rem; margin: 1.2rem 0; }
h2 { font-size: 1rem; margin: 0.2rem 0; } h2 code { font-weight: normal; } time { color: #666; font-weight: normal; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0 1rem; margin: 0.3rem 0; } dt { color: #555; }
dd { margin: 0; } p.label { margin: 0.5rem 0 0.2rem; color: #555; }
pre { background: #f5f5f5; padding: 0.6rem; overflow-x: auto; white-space: pre-wrap; word-break: break-word; }
.assistant { border-color: #3b6fd4; } .user-message { border-color: #2a9d5c; }
.tool-error, .session-end { border-color: #c0392b; }
.approval-request, .approval-answer { border-color: #d49b3b; }
"""


def text(found: str) -> str:
    """A text of the log as HTML: its unsafe characters as escapes (chock/terminal.py), then HTML-escaped."""
    return escape(safe(found, styled=False), quote=True)


class Html:
    """Writes a transcript's pieces as one HTML page."""

    def head(self, session_id: str) -> str:
        title = text(f"Chock session {session_id}")
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
            '<meta charset="utf-8">\n<meta name="referrer" content="no-referrer">\n'
            f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
        )

    def entry(self, entry: EventView) -> str:
        title = f"{entry.event_id}. {escape(entry.kind)}"
        if entry.name:
            title += f" <code>{text(entry.name)}</code>"
        if entry.at:
            title += f" <time>{text(entry.at)}</time>"
        parts = [f'<section class="{entry.css}">\n<h2>{title}</h2>\n']
        if entry.facts:
            rows = "".join(f"<dt>{escape(label)}</dt><dd>{text(found)}</dd>" for label, found in entry.facts)
            parts.append(f"<dl>{rows}</dl>\n")
        for block in entry.blocks:
            parts.append(
                f'<p class="label">{escape(block.label)}</p>\n<pre class="{block.lang}">{text(block.text)}</pre>\n'
            )
        parts.append("</section>\n")
        return "".join(parts)

    def tail(self) -> str:
        return "</body>\n</html>\n"
