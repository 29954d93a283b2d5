"""Errors are values a person can act on: what was refused, why, and what to do next.

Every module raises a subclass of `ChockError`; the CLI prints its message and exits with its code
(SPEC §5: 1 failed, 2 usage, 3 refused before starting). Nothing else prints tracebacks at a person.
"""

from __future__ import annotations

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_HANDED_OVER = 8
EXIT_INTERRUPTED = 130


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


class Refused(ChockError):
    """Refused before anything started: no log and no workspace exist because of this call."""

    exit_code = EXIT_REFUSED


class UsageError(ChockError):
    exit_code = EXIT_USAGE
