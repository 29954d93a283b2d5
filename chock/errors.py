"""Errors are values a person can act on: what was refused, why, and what to do next.

Every module raises a subclass of `ChockError`; the CLI prints its message and exits with its code (1 failed,
2 usage, 3 refused before starting; `EXIT_STATUS` has every command's codes). Nothing else prints tracebacks
at a person.
"""

from __future__ import annotations

import sys

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_HANDED_OVER = 8
# `chock dial-stdio` (the far end of an ssh:// connection) found no daemon at the socket (EX_UNAVAILABLE).
EXIT_NO_DAEMON = 69
EXIT_INTERRUPTED = 130

# What each command's exit status means. `chock --help`, the manual pages' EXIT STATUS sections and the
# journal's session records all read this table, so a command's codes are written once: one entry each.
EXIT_STATUS: dict[str, tuple[tuple[int, str], ...]] = {
    "run": (
        (EXIT_COMPLETED, "completed"),
        (EXIT_FAILED, "failed"),
        (EXIT_USAGE, "usage error"),
        (EXIT_REFUSED, "refused before starting (nothing was created)"),
        (EXIT_HANDED_OVER, "handed over to the daemon"),
        (EXIT_INTERRUPTED, "interrupted"),
    ),
    "detach": (
        (EXIT_COMPLETED, "handed over: the daemon runs the session now"),
        (
            EXIT_FAILED,
            "not handed over (the session runs on where it was), or handed over and not taken; "
            "the message says which, and what to type next",
        ),
        (EXIT_USAGE, "usage error"),
    ),
    "attach": (
        (EXIT_COMPLETED, "the session completed, or you left it running (Ctrl-C)"),
        (EXIT_FAILED, "the session failed, or was abandoned (`chock run --continue` takes it back)"),
        (EXIT_USAGE, "usage error"),
        (EXIT_INTERRUPTED, "the session was stopped"),
    ),
}


def exit_reason(code: int | None) -> str:
    """A `chock run` child's exit status in words, for records: its meaning, or the signal that ended it."""
    if code is None:
        return "unknown"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return dict(EXIT_STATUS["run"]).get(code, f"exit code {code}")


class ChockError(Exception):
    """A failure with a message meant for a person and the exit code that goes with it."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self)


def exit_status(command: str) -> str:
    """The sentence naming a command's exit codes (its `--help` epilog), from the one table of them."""
    codes = ", ".join(f"{code} {meaning}" for code, meaning in EXIT_STATUS[command])
    return f"Exit status of chock {command}: {codes}."


def complain(error: ChockError) -> int:
    """Say a refusal the way every command says one, `chock: <message>` on stderr, one line; its exit code. The
    message may quote a daemon's reply, a file's name or a provider's words: it is made safe for the terminal
    first, a newline in it escaped too, so nothing it quotes can start a line that reads as another message."""
    from chock.terminal import shown

    print(f"chock: {shown(error, sys.stderr, one_line=True)}", file=sys.stderr, flush=True)
    return error.exit_code


class Refused(ChockError):
    """Refused before anything started: no log and no workspace exist because of this call."""

    exit_code = EXIT_REFUSED


class UsageError(ChockError):
    exit_code = EXIT_USAGE
