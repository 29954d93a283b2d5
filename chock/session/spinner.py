"""The terminal view's screen: every write of `chock run`'s and `chock attach`'s view goes through one `Screen`,
which owns the spinner line at the bottom (docs/architecture.md#what-reaches-a-terminal).

The rule: while the session works (a model call, a tool), a line `⠹ thinking 4.2s` is redrawn in place with `\\r`
about ten times a second, on a live terminal only (a tty, `$TERM` not `dumb`) and unless `--progress never`.
Before anything else is written the line is cleared with `\\r`, spaces and `\\r`; it is drawn only when the cursor
stands at the start of a line, so it never lands inside streamed text; and nothing is drawn while a person is
asked (an approval) or once the session is over. One lock orders the spinner's thread and every write, so the
two never interleave. The same thread rings the bell (and sends the desktop notification `chock.terminal` says the
terminal shows) when an approval has been waiting one tick: a request answered at once, or one replayed from an
old log before its answer, rings nothing.

A write that fails (its reader stopped reading: `chock run … | head -1`; a full disk) ends the view, not the
session: the stream becomes a null sink (its descriptor /dev/null, so nothing later writes there or fails at
exit), standard error says so once, and the session runs on to its end. Its log holds everything: `chock export`
shows it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from typing import TextIO

from chock.terminal import live, notification, spinning

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TICK = 0.1  # seconds between frames


def elapsed(seconds: float) -> str:
    """A spinner's time: `4.2s` under a minute, `3m07s` past it."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


GONE_NOTE = (
    "chock: the terminal view's output was closed (its reader stopped reading); the session carries on to its end, "
    "and its log has everything: `chock export` shows it"
)


def put(out: TextIO, text: str) -> bool:
    """Write and flush `text` to `out`; False, with `out` made a null sink and the person told, when that fails."""
    try:
        out.write(text)
        out.flush()
        return True
    except (OSError, ValueError):  # the reader went, the disk is full, or the stream was closed
        silence(out)
        return False


def silence(out: TextIO) -> None:
    """Make `out` a null sink from now on (its descriptor /dev/null), and say so on standard error once."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, out.fileno())
        os.close(null)
    if out is not sys.stderr:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(GONE_NOTE, file=sys.stderr, flush=True)


class Screen:
    """Standard output (or `out`) as the terminal view writes it, with its spinner and its bell."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.live = live(out)
        self.progress = spinning(out)
        self._label: str | None = None  # what the session is doing; None: nothing to show
        self._since = 0.0
        self._drawn = 0  # the width of the spinner line on the screen, 0 when none is
        self._line_start = True  # whether the cursor is at the start of a line
        self._ring: str | None = None  # the note of an approval that waits, until the bell rings for it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gone = False  # a write failed: nothing more is written

    def _put(self, text: str) -> None:
        if not self._gone and not put(self.out, text):
            self._gone = True

    def write(self, text: str) -> None:
        """Write `text` (already made safe), the spinner's line cleared first."""
        if not text:
            return
        with self.lock:
            self._clear()
            self._put(text)
            self._line_start = text.endswith("\n")

    def doing(self, label: str | None) -> None:
        """What the session does from now on (`thinking`, `running shell`); None while nothing is to be shown."""
        with self.lock:
            if label != self._label:
                self._label, self._since = label, time.monotonic()
            if label is None:
                self._clear()
        if self.progress and label is not None:
            self._start()

    def relabel(self, label: str) -> None:
        """Say more of what is being done (an MCP call's progress) without starting its time again; nothing when
        the spinner shows nothing."""
        with self.lock:
            if self._label is not None:
                self._label = label

    def waiting(self, note: str) -> None:
        """An approval waits for a person: the spinner stops, and the bell rings at the next tick unless
        `answered` comes first."""
        with self.lock:
            self._label = None
            self._clear()
            self._ring = note
        self._start()

    def answered(self) -> None:
        with self.lock:
            self._ring = None

    def close(self) -> None:
        """Stop the thread and clear the line: the view is over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self.lock:
            self._clear()

    def _start(self) -> None:
        if self._thread is None and self.live:
            self._thread = threading.Thread(target=self._run, name="chock-spinner", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        frame = 0
        while not self._stop.wait(TICK):
            with self.lock:
                if self._ring is not None:
                    self._put("\a" + notification(self._ring))
                    self._ring = None
                if self.progress and self._label is not None and (self._line_start or self._drawn):
                    line = f"{FRAMES[frame % len(FRAMES)]} {self._label} {elapsed(time.monotonic() - self._since)}"
                    line = line[: max(1, shutil.get_terminal_size().columns - 1)]  # one line: `\r` reaches its start
                    pad = " " * max(0, self._drawn - len(line))
                    self._put("\r" + line + pad)
                    self._drawn = len(line)
                    frame += 1

    def _clear(self) -> None:
        if self._drawn:
            self._put("\r" + " " * self._drawn + "\r")
            self._drawn = 0
