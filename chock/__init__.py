"""Chock: a coding agent for the terminal whose session log is the single truth of a session."""

import sys

__version__ = "0.1.0"


def module_argv(module: str) -> list[str]:
    """How Chock runs one of its own modules as a child: `-P`, since `python -m` would otherwise put the working
    directory (a project, whose files an agent's merged branch may have written) first on the path, and a
    `chock/` there would run in place of Chock, outside any sandbox."""
    return [sys.executable, "-P", "-m", module]
