"""What reaches a person's terminal: every text Chock did not write itself passes `safe` on its way there
(docs/architecture.md#what-reaches-a-terminal).

The rule: C0 controls but newline and tab, DEL, C1 controls, Unicode format characters (category Cf: the bidi
overrides and isolates, the zero-widths, the BOM, …), the line and paragraph separators U+2028 and U+2029, and
lone surrogates are shown as escapes — `\\x1b`, `\\x9b`, `\\u202e`, `\\U000e0001` — in reverse video when the
output is a terminal showing colour, as the bare escape text elsewhere. Every other character (accents, CJK,
emoji) passes as it is. One character at a time, never a sequence: a stream cut anywhere is made safe the same,
and the work is one compiled character class over the text, linear in its length.

The class is written out here rather than read from `unicodedata`, so `chock sessions` imports nothing for it and
every interpreter escapes the same characters; tests/test_terminal.py checks it holds every Cf character of the
interpreter that runs it.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import TextIO

# Category Cf as of Unicode 14 (Python 3.11), with the Egyptian format controls Unicode 15 completed.
FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
# What is escaped: C0 but tab and newline, DEL and C1, Cf, the separators, lone surrogates.
UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f" + FORMAT + "\u2028\u2029\ud800-\udfff"
# Runs of them are escaped together, at most 4096 at a time so that megabytes of escapes are joined in pieces
# of a bounded size (bench/terminal_safe.py: linear in the text whatever it holds). Compiled at the first text
# that needs them: a text `str.isprintable` passes holds none (every character of the rule is one it refuses).
_PATTERNS: dict[bool, re.Pattern[str]] = {}


def _pattern(one_line: bool) -> re.Pattern[str]:
    pattern = _PATTERNS.get(one_line)
    if pattern is None:  # a name or a table's cell: a newline would forge a line
        pattern = _PATTERNS[one_line] = re.compile(f"[{chr(10) * one_line}{UNSAFE}]{{1,4096}}")
    return pattern


# Reverse video on and off alone: an escape inside text another style holds leaves that style as it was.
REVERSE, REVERSE_OFF = "\x1b[7m", "\x1b[27m"


def escape(char: str) -> str:
    """One character as the escape that shows it: `\\x1b`, `\\u202e`, `\\U000e0001`."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class _Escapes(dict[str, str]):
    """Each character's escape, made at its first sight: a run of them is joined in one pass, in C."""

    def __init__(self, styled: bool) -> None:
        super().__init__()
        self.styled = styled

    def __missing__(self, char: str) -> str:
        shown = self[char] = REVERSE + escape(char) + REVERSE_OFF if self.styled else escape(char)
        return shown

    def run(self, match: re.Match[str]) -> str:
        found = match.group()
        return self[found] if len(found) == 1 else "".join(map(self.__getitem__, found))


_PLAIN, _STYLED = _Escapes(styled=False), _Escapes(styled=True)


def safe(text: str, *, styled: bool, one_line: bool = False) -> str:
    """`text` as it may reach a terminal: each character of the rule above shown as its escape (in reverse video
    when `styled`), every other one as it is. `one_line` escapes a newline too, for a name or a table's cell."""
    if text.isprintable():
        return text
    return _pattern(one_line).sub((_STYLED if styled else _PLAIN).run, text)


# What `--color` and `--progress` said (`auto` until a command is told otherwise): the settings `colour` and
# `spinning` read.
COLOR_CHOICES = ("auto", "always", "never")
PROGRESS_CHOICES = ("auto", "never")
_colour_choice = "auto"
_progress_choice = "auto"


def choose_colour(choice: str) -> None:
    """Take `--color`: `always` and `never` beat `$NO_COLOR`, which beats the tty test (`auto`)."""
    global _colour_choice
    if choice not in COLOR_CHOICES:
        raise ValueError(f"--color takes one of {', '.join(COLOR_CHOICES)}, not {choice!r}")
    _colour_choice = choice


def choose_progress(choice: str) -> None:
    """Take `--progress`: `never` turns the spinner off; `auto` draws it where the output is `live`."""
    global _progress_choice
    if choice not in PROGRESS_CHOICES:
        raise ValueError(f"--progress takes one of {', '.join(PROGRESS_CHOICES)}, not {choice!r}")
    _progress_choice = choice


def spinning(stream: TextIO | None = None) -> bool:
    """Whether the spinner is drawn on `stream`: not with `--progress never`, else where it is `live`."""
    return _progress_choice != "never" and live(stream)


def live(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default standard output) is a terminal that moves its cursor: a tty, `$TERM` not `dumb`."""
    stream = stream or sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        return False
    return tty and os.environ.get("TERM") != "dumb"


def colour(stream: TextIO | None = None) -> bool:
    """Whether what goes to `stream` (default standard output) may hold SGR sequences (colour, bold, dim,
    underline, reverse video): `--color always|never` says so; else not with `$NO_COLOR` non-empty; else when
    `stream` is `live`. The one place that decides it."""
    if _colour_choice != "auto":
        return _colour_choice == "always"
    return not os.environ.get("NO_COLOR") and live(stream)


def notification(task: str) -> str:
    """That the session of `task` waits for approval, as a desktop notification the terminal shows, or "" when it
    shows none: OSC 9 for iTerm2, WezTerm and ghostty (`$TERM_PROGRAM`) and foot, OSC 99 for kitty, nothing
    elsewhere — nor under tmux or screen, which swallow it or pass it to a terminal that may print it. The task
    has every character of the rule removed (a newline or a tab becomes a space), is cut to 100 characters and
    follows "Chock: ", so the notification never reads as ConEmu's `OSC 9;4;…` progress report and holds nothing
    a terminal acts on. The terminal view (chock/session/spinner.py) writes it after the bell, in `run` and
    `attach` alike."""
    environ = os.environ
    program, term = environ.get("TERM_PROGRAM", ""), environ.get("TERM", "")
    if environ.get("TMUX") or environ.get("STY") or term.startswith(("screen", "tmux")):
        return ""
    plain = _pattern(False).sub("", re.sub("[\t\n]+", " ", task)).strip()[:100]
    if program in ("iTerm.app", "WezTerm", "ghostty") or term.startswith("foot"):
        return f"\x1b]9;Chock: approval needed: {plain}\x07"
    if "kitty" in term or "KITTY_WINDOW_ID" in environ:
        return f"\x1b]99;;Chock: approval needed: {plain}\x1b\\"
    return ""


def shown(text: object, stream: TextIO | None = None, *, one_line: bool = False) -> str:
    """`safe(str(text))`, styled as `stream` (default standard output) shows it: for a line about to be printed."""
    return safe(str(text), styled=colour(stream), one_line=one_line)


def as_lines(text: str, *, styled: bool, indent: str = "    ") -> str:
    """A command shown exactly as it will run: after the text it follows when it is one line (with a space
    before it), else each of its lines on a line of its own under `indent`, the last one ending in a newline."""
    if "\n" not in text:
        return " " + safe(text, styled=styled)
    return "\n" + "".join(f"{indent}{safe(line, styled=styled)}\n" for line in text.split("\n"))


def _json_char(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _json_escape(match: re.Match[str]) -> str:
    return "".join(map(_json_char, match.group()))


def safe_json(line: str) -> str:
    """A line of JSON (`json.dumps(…, ensure_ascii=False)`) with every character of the rule written as its
    `\\uXXXX` escape: the same value, and nothing in it a terminal acts on. (json escapes C0 itself, but neither
    DEL, C1, Cf nor U+2028; every such character stands inside a string, where the escape means it.)"""
    return line if line.isprintable() else _pattern(False).sub(_json_escape, line)


def drop_typed_ahead(fd: int) -> None:
    """Drop what was typed at the terminal `fd` and not read yet, before a question is asked: keys typed ahead are
    no answer to a question the person has not seen (a pipe, or no terminal, is left as it is)."""
    import contextlib
    import termios

    with contextlib.suppress(OSError, termios.error):
        termios.tcflush(fd, termios.TCIFLUSH)
