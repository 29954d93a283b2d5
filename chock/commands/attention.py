"""What a terminal showing a session writes when the session starts to wait for a person: the bell, and, where the
terminal is one known to show it as a desktop notification, OSC 9 (`ESC ] 9 ; text BEL`, iTerm2's, also read by
kitty, WezTerm, ghostty and foot). A multiplexer (tmux, screen) swallows OSC 9 or passes it on to a terminal that
may not read it, so under one only the bell is written.

The text is the session's task, which the agent's user wrote but a log carries: every control and format
character (C0, C1, DEL, bidi overrides, zero-widths) is removed, so nothing in it ends the sequence early or
starts another, and it is cut to TASK_MOST characters.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping

BEL = "\a"
# At most this many characters of the task go in the notification.
TASK_MOST = 100
# TERM_PROGRAM of the terminals that show OSC 9 as a desktop notification; kitty and foot are known by TERM.
OSC9_PROGRAMS = frozenset({"iTerm.app", "WezTerm", "ghostty"})
OSC9_TERMS = ("xterm-kitty", "foot")


def notifies(env: Mapping[str, str]) -> bool:
    """Whether the terminal of `env` shows OSC 9 as a desktop notification (never under tmux or screen)."""
    term = env.get("TERM", "")
    if env.get("TMUX") or env.get("STY") or term.startswith(("screen", "tmux")):
        return False
    return env.get("TERM_PROGRAM", "") in OSC9_PROGRAMS or term.startswith(OSC9_TERMS) or "KITTY_WINDOW_ID" in env


def plain(text: str) -> str:
    """`text` with every control and format character removed (a newline or tab is a space), cut to TASK_MOST."""
    spaced = text.replace("\n", " ").replace("\t", " ")
    kept = "".join(char for char in spaced if unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn"))
    return kept if len(kept) <= TASK_MOST else kept[: TASK_MOST - 1] + "…"


def attention(task: str, env: Mapping[str, str] | None = None) -> str:
    """The bell, and the OSC 9 notification naming the task where the terminal shows one."""
    env = os.environ if env is None else env
    if not notifies(env):
        return BEL
    return f"{BEL}\x1b]9;Chock: a session waits for your approval: {plain(task) or 'a session'}{BEL}"
