"""A session's workspace: a linked git worktree of the project on branch `chock/<id>` (SPEC §5).

Every git command runs on the host, never in the sandbox, through `_git`. The worktree and its admin dir are
writable from the sandbox, so nothing here trusts what a tool may have left there: `finish` builds the commit
from the project's own repository with a private index (not the worktree's HEAD, index or `.git` file), every
command runs with hooks off (a pre-commit hook would otherwise run the agent's code outside the sandbox), and
`admin_dir` refuses a `.git` file that points anywhere but a worktree admin dir of this name.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from chock.errors import ChockError, Refused
from chock.paths import ensure_dir

# `git rev-parse --local-env-vars`: what makes git work on some other repository than the one we name.
GIT_LOCAL_ENV = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
    }
)
GIT_CONFIG_ENV_RE = re.compile(r"^GIT_CONFIG_(KEY|VALUE)_[0-9]+$")  # the pairs GIT_CONFIG_COUNT counts

FALLBACK_IDENTITY = ("-c", "user.name=Chock", "-c", "user.email=chock@localhost")


class GitFailed(ChockError):
    """A git command failed; the message quotes git's own stderr."""


def _git(
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command on the host, in a cleaned environment (plus `env`), hooks off."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in GIT_LOCAL_ENV and not GIT_CONFIG_ENV_RE.match(name)
    }
    environment["GIT_TERMINAL_PROMPT"] = "0"
    environment.update(env or {})
    argv = ["git", "-c", "core.hooksPath=/dev/null", *args]
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=environment,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
        )
    except FileNotFoundError:
        raise ChockError("git is not installed; chock run works in a git project") from None
    except OSError as error:
        raise GitFailed(f"git {' '.join(args)} could not run in {cwd}: {error}") from None
    if check and done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        raise GitFailed(f"git {' '.join(args)} failed in {cwd}: {detail}")
    return done


def _out(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stdout.decode(errors="surrogateescape").strip()


def _paths(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [os.fsdecode(raw) for raw in done.stdout.split(b"\0") if raw]


def project_root(path: Path) -> Path:
    """The resolved top level of the git repository containing `path`, refused unless it has a commit."""
    path = Path(path)
    not_a_repo = Refused(
        f"{path} is not a git repository: chock run works in a git project "
        "(run `git init` there, or pass --project DIR)"
    )
    if not path.is_dir():
        raise not_a_repo
    done = _git(["rev-parse", "--show-toplevel"], cwd=path, check=False)
    if done.returncode != 0 or not _out(done):
        detail = done.stderr.decode(errors="replace").strip()
        if "not a git repository" in detail or not detail:
            raise not_a_repo
        raise Refused(f"git cannot work in {path}: {detail}")  # e.g. "detected dubious ownership"
    root = Path(_out(done)).resolve()
    if _git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=root, check=False).returncode != 0:
        raise Refused(
            f"{root} has no commit yet: chock run builds its workspace from the committed HEAD, "
            "so make a first commit (`git add` and `git commit`) and run it again"
        )
    return root


def git_dir(project: Path) -> Path:
    """The project's resolved common .git directory (the one its linked worktrees share)."""
    done = _git(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=project)
    return Path(_out(done)).resolve()


def _branch_exists(project: Path, branch: str) -> bool:
    done = _git(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=project, check=False)
    return done.returncode == 0


def _commit_of(project: Path, revision: str) -> str:
    return _out(_git(["rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}"], cwd=project))


def create(project: Path, directory: Path, branch: str, *, start: str = "HEAD") -> str:
    """Add a linked worktree at `directory` on `branch`; return the commit it starts at.

    A new branch starts at `start`. An existing branch (a completed session continued after its worktree was
    removed, SPEC §5) is checked out as it is, and `start` is ignored.
    """
    directory = Path(directory).absolute()
    ensure_dir(directory.parent)
    if _branch_exists(project, branch):
        commit = _commit_of(project, f"refs/heads/{branch}")
        _git(["worktree", "add", str(directory), branch], cwd=project)
    else:
        commit = _commit_of(project, start)
        _git(["worktree", "add", "--no-track", "-b", branch, str(directory), commit], cwd=project)
    os.chmod(directory, 0o700)  # git makes it 0755; every directory Chock creates is 0700 (SPEC §3)
    return commit


def admin_dir(directory: Path, *, project: Path | None = None) -> Path:
    """The worktree's admin dir (`.git/worktrees/<name>`), read from the `gitdir:` line of `<directory>/.git`.

    That file is writable from the sandbox, so what it names must look like git's own choice for this
    directory: `<...>/worktrees/<name>` with `<name>` the directory's name (git appends a number on a clash),
    and, given `project`, inside that project's .git. Anything else would have the next sandbox bind some
    other host directory read-write.
    """
    dot_git = Path(directory) / ".git"
    try:
        first = dot_git.read_text(encoding="utf-8", errors="surrogateescape").splitlines()[0]
    except (OSError, IndexError):
        raise ChockError(f"{directory} is not a linked worktree: {dot_git} is missing or empty") from None
    if not first.startswith("gitdir:"):
        raise ChockError(f"{directory} is not a linked worktree: {dot_git} has no gitdir: line")
    admin = (Path(directory) / first.removeprefix("gitdir:").strip()).resolve()
    name_ok = re.fullmatch(re.escape(Path(directory).name) + r"[0-9]*", admin.name) is not None
    where_ok = admin.parent.name == "worktrees" and (project is None or admin.parent == git_dir(project) / "worktrees")
    if not (name_ok and where_ok and admin.is_dir()):
        raise ChockError(
            f"{dot_git} points at {admin}, which is not this worktree's admin directory; "
            "remove the workspace with `chock workspace remove`"
        )
    return admin


def copy_dirty(project: Path, directory: Path) -> list[str]:
    """Copy the project's uncommitted changes into the worktree (`--allow-dirty`); return the paths copied.

    Modified, added and untracked-but-not-ignored files are copied; files deleted in the project are deleted
    in the worktree. Directories (submodules, nested repositories) are left alone.
    """
    changed = _paths(_git(["diff", "--name-only", "--no-renames", "-z", "HEAD", "--"], cwd=project))
    untracked = _paths(_git(["ls-files", "-z", "--others", "--exclude-standard"], cwd=project))
    target_root = Path(directory).resolve()
    present, deleted = [], []
    for relative in dict.fromkeys([*changed, *untracked]):
        (present if os.path.lexists(project / relative) else deleted).append(relative)
    # Deletions first: a path that changed from a symlink to a directory is deleted and then filled.
    for relative in deleted:
        target = target_root / relative
        if _parents_are_real(target_root, target) and (target.is_symlink() or target.is_file()):
            target.unlink()
    copied = []
    for relative in present:
        source = project / relative
        if source.is_dir() and not source.is_symlink():
            continue
        target = target_root / relative
        _make_real_parents(target_root, target)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
        copied.append(relative)
    return copied


def _parents_are_real(root: Path, target: Path) -> bool:
    probe = target.parent
    while probe != root:
        if probe.is_symlink() or not probe.is_dir():
            return False
        probe = probe.parent
    return True


def _make_real_parents(root: Path, target: Path) -> None:
    """Create `target`'s parents below `root`, replacing symlinks: a copy never lands outside the worktree."""
    probe = root
    for part in target.relative_to(root).parts[:-1]:
        probe = probe / part
        if probe.is_symlink() or (probe.exists() and not probe.is_dir()):
            probe.unlink()
        if not probe.exists():
            probe.mkdir()


def _identity(project: Path) -> tuple[str, ...]:
    """The person's git identity when configured, else Chock's own."""
    for key in ("user.name", "user.email"):
        if _git(["config", "--get", key], cwd=project, check=False).returncode != 0:
            return FALLBACK_IDENTITY
    return ()


def finish(project: Path, directory: Path, branch: str, message: str) -> str:
    """Commit everything in the worktree to `branch`, remove the worktree, and return the branch's commit.

    The commit is built from the project's own .git with a private index: the worktree's HEAD, index and
    `.git` file were writable from the sandbox and are not consulted. No change means no commit.
    """
    common = git_dir(project)
    ref = f"refs/heads/{branch}"
    parent = _commit_of(project, ref)
    with tempfile.TemporaryDirectory(prefix="chock-index-") as scratch:
        env = {
            "GIT_DIR": str(common),
            "GIT_WORK_TREE": str(Path(directory).resolve()),
            "GIT_INDEX_FILE": str(Path(scratch) / "index"),
        }
        _git(["read-tree", parent], cwd=directory, env=env)
        _git(["add", "--all", "--", "."], cwd=directory, env=env)
        tree = _out(_git(["write-tree"], cwd=directory, env=env))
    commit = parent
    if tree != _out(_git(["rev-parse", f"{parent}^{{tree}}"], cwd=project)):
        done = _git(
            [*_identity(project), "commit-tree", tree, "-p", parent, "-F", "-"],
            cwd=project,
            input=message.encode(),
        )
        commit = _out(done)
        _git(["update-ref", "-m", f"chock: commit to {branch}", ref, commit, parent], cwd=project)
    remove(project, directory)
    return commit


def remove(project: Path, directory: Path) -> None:
    """Remove a kept worktree and its admin dir; one already gone from disk is pruned."""
    directory = Path(directory).absolute()
    if directory.exists():
        admin = _admin_for_removal(project, directory)
        done = _git(["worktree", "remove", "--force", "--force", str(directory)], cwd=project, check=False)
        if done.returncode != 0:
            # git refuses a worktree whose .git file was tampered with, or one holding a submodule.
            shutil.rmtree(directory)
            if admin is not None and admin.exists():
                shutil.rmtree(admin)
    _git(["worktree", "prune"], cwd=project)


def _admin_for_removal(project: Path, directory: Path) -> Path | None:
    """The admin dir to delete should git refuse: the validated `.git` file's, else the one naming it back."""
    try:
        return admin_dir(directory, project=project)
    except ChockError:
        pass
    expected = os.fsencode(directory.resolve() / ".git")
    for candidate in sorted((git_dir(project) / "worktrees").glob(f"{glob.escape(directory.name)}*")):
        try:
            if (candidate / "gitdir").read_bytes().strip() == expected:
                return candidate
        except OSError:
            continue
    return None
