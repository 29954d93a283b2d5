"""Which project a command is in: the top of the git work tree that holds a directory, found by reading files.

`chock run`, `chock sessions`, `chock usage` and `chock detach` all name a session's project by this one
function, so they agree on it. It starts no git process (listing sessions must be fast, and must work in
a repository with no commit yet): it walks up from the directory to the first one holding a `.git` —
a directory (an ordinary repository), or a file saying `gitdir: <path>` (a linked worktree or a
submodule, whose top is that directory itself) — as git's own discovery does, stopping where git stops:
at a file system boundary, and inside a git directory, which has no work tree. `chock run` then asks git
whether that repository has a commit (`chock.session.workspace.project_root`).
"""

from __future__ import annotations

import os
from pathlib import Path

from chock.errors import Refused

# A `.git` file is one line; one far larger is not a `.git` file.
MAX_GITFILE = 64 * 1024


class NotAProject(Refused):
    """The directory is in no git work tree."""


def find_root(path: Path | str) -> Path:
    """The resolved top of the git work tree holding `path` (a directory)."""
    try:
        start = os.path.realpath(path)
    except OSError as error:  # a link this user may not follow (/proc/PID/cwd of another's process)
        raise Refused(
            f"{path} is not readable ({error.strerror or error}): name a project directory you can read"
        ) from None
    not_a_repo = NotAProject(
        f"{path} is not a git repository: chock run works in a git project "
        "(run `git init` there, or pass --project DIR)"
    )
    try:
        device = os.stat(start).st_dev
    except OSError:
        raise not_a_repo from None
    if not os.path.isdir(start):
        raise not_a_repo
    directory = start
    while True:
        dot_git = os.path.join(directory, ".git")
        if _is_git_dir(dot_git):
            return Path(directory)
        if os.path.isfile(dot_git):
            _check_gitfile(dot_git, path)
            return Path(directory)
        if _is_git_dir(directory):
            raise NotAProject(f"{path} is inside a git directory, which has no work tree: run this in the work tree")
        parent = os.path.dirname(directory)
        if parent == directory:
            raise not_a_repo
        try:
            if os.stat(parent).st_dev != device:
                raise not_a_repo  # git stops at a file system boundary too
        except OSError:
            raise not_a_repo from None
        directory = parent


def _check_gitfile(dot_git: str, path: Path | str) -> None:
    """Refuse a `.git` file that names no git directory (git itself refuses to work there)."""
    try:
        with open(dot_git, "rb") as handle:
            text = handle.read(MAX_GITFILE).decode("utf-8", "replace")
    except OSError as error:
        raise NotAProject(
            f"{dot_git} cannot be read ({error.strerror}), so {path} is in no usable repository"
        ) from None
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir: "):
        raise NotAProject(f"{dot_git} is not a git link (it does not start with `gitdir: `): repair or remove it")
    target = os.path.join(os.path.dirname(dot_git), first[len("gitdir: ") :].strip())
    if not os.path.isdir(target):
        raise NotAProject(
            f"{dot_git} points at {target}, which is not there: repair the worktree (`git worktree repair`)"
        )


def _is_git_dir(directory: str) -> bool:
    """Whether `directory` is a git directory (a `.git`, or a bare repository): what git checks before it
    takes a `.git` directory for one, and walks on past it when it is not."""
    return (
        os.path.isfile(os.path.join(directory, "HEAD"))
        and os.path.isdir(os.path.join(directory, "objects"))
        and os.path.isdir(os.path.join(directory, "refs"))
    )
