"""A real git project for a test: a repository with one commit, and git run in it with a fixed identity."""

from __future__ import annotations

import subprocess
from pathlib import Path

# Every git command a test runs names an identity, so a commit never depends on the machine's git config.
_IDENTITY = ("-c", "user.name=Test", "-c", "user.email=test@example.com")


def make_project(path: Path, files: dict[str, str] | None = None, message: str = "first") -> Path:
    """A git repository at `path` with `files` (a README and an app.py by default) in one commit on main."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": "# demo\n", "app.py": "print('hello')\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)
    return path.resolve()


def git(project: Path, *args: str) -> str:
    """`git ARGS` in `project`; its output as it came (a file's content keeps its last newline)."""
    return subprocess.run(
        ["git", "-C", str(project), *_IDENTITY, *args], capture_output=True, text=True, check=True
    ).stdout


def git_value(project: Path, *args: str) -> str:
    """`git ARGS` in `project` for a value (a hash, a ref, a list of names): its output, stripped."""
    return git(project, *args).strip()
