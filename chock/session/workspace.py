"""A session's workspace: a linked git worktree of the project, on a detached HEAD.

A session's work starts at its base (the commit of its first `workspace.open`) and goes to the branch
`chock/<id>` when it finishes, which is made then, and only when the work differs from the base; a session
whose branch exists carries on from it.

The worktree and its admin dir (`<common dir>/worktrees/<id>`) are writable from the sandbox, so Chock
records both when it makes them, before any tool runs (the `admin` field of `workspace.open`), and never
reads them back from the worktree's `.git` file or the admin dir's `commondir`. Git runs only through
`hostgit`, and never on the workspace itself: `tree` fills it from the commit's blobs, reads it back with
Chock's own file I/O, and builds the commit with plumbing and a private index. Removal deletes the recorded
directories without following a symlink, and only a directory that is the session's own (`check_own`): a log
names whatever it holds (docs/architecture.md, "What the sandbox may write").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from chock.errors import ChockError, Refused
from chock.paths import ensure_dir
from chock.platform.flock import lock_within
from chock.project import find_root
from chock.session import hostgit, stamps, tree, treewrite, wholediff
from chock.session.hostgit import GitFailed, GitStarted, Repo
from chock.value import Value

FALLBACK_IDENTITY = ("user.name=Chock", "user.email=chock@localhost")
T = TypeVar("T")


def _paths(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [os.fsdecode(raw) for raw in done.stdout.split(b"\0") if raw]


def _discover(path: Path) -> tuple[Repo | None, str]:
    """The repository containing the person's directory `path`, or None and git's complaint."""
    repo, _, detail = _lookup(path, head=False)
    return repo, detail


def _lookup(path: Path, *, head: bool) -> tuple[Repo | None, str | None, str]:
    """The repository containing `path`, with `head` the commit its HEAD names (None when there is none
    yet), in one git process; or None and git's complaint."""
    done = hostgit.discover(path, head=head)
    lines = done.stdout.decode(errors="surrogateescape").splitlines()
    found = len(lines) == 4 if head and done.returncode == 0 else len(lines) == 3
    if not found or done.returncode not in ((0, 1) if head else (0,)):
        return None, None, done.stderr.decode(errors="replace").strip()
    top, git_dir, common = (Path(line).resolve() for line in lines[:3])
    return Repo(git_dir=git_dir, common_dir=common, work_tree=top), lines[3] if len(lines) == 4 else None, ""


class Project(Value):
    """The person's project as a session's start finds it: the top of its work tree, its repository, and the
    commit HEAD names (where a new session starts)."""

    __slots__ = ("head", "repo", "root")

    def __init__(self, root: Path, repo: Repo, head: str) -> None:
        self.root = root
        self.repo = repo
        self.head = head


def open_project(path: Path) -> Project:
    """The project holding `path` as every command finds it (`chock.project.find_root`), with one git process,
    refused unless git works there and its repository has a commit: a workspace is made from the committed
    HEAD."""
    root = find_root(path)
    repo, commit, detail = _lookup(root, head=True)
    if repo is None:
        raise Refused(f"git cannot work in {root}: {detail or 'it finds no repository there'}")
    if repo.work_tree != root:
        raise Refused(
            f"git takes the work tree of {root} to be {repo.work_tree} (core.worktree?): chock works in a "
            "repository whose work tree holds its .git"
        )
    if commit is None:
        raise Refused(
            f"{root} has no commit yet: chock run builds its workspace from the committed HEAD, "
            "so make a first commit (`git add` and `git commit`) and run it again"
        )
    return Project(root, repo, commit)


def project_root(path: Path) -> Path:
    """The top of the work tree `open_project` finds."""
    return open_project(path).root


def _repo(project: Path) -> Repo:
    repo, detail = _discover(Path(project))
    if repo is None:
        raise ChockError(f"{project} is no longer a git repository: {detail or 'git found none there'}")
    return repo


def git_dir(project: Path) -> Path:
    """The project's resolved common .git directory (the one its linked worktrees share)."""
    return _repo(project).common_dir


def _branch_exists(repo: Repo, branch: str) -> bool:
    return repo.run(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], check=False).returncode == 0


def branch_exists(worktree: Worktree) -> bool:
    """Whether the session's branch exists: it is made by the first finish whose work differs from the base."""
    return _branch_exists(worktree.repo, worktree.branch)


def _start_commits(repo: Repo, start: str, branch: str) -> tuple[str, str | None, str]:
    """The commit `start` names, the commit of `branch` (None when there is no such branch), and the tree of the
    one a session starts at (the branch's when it exists), with one git command; a GitFailed saying which name
    is no commit."""
    return _started_commits(repo, start, branch, lambda found: found).result()


def _started_commits(
    repo: Repo, start: str, branch: str, then: Callable[[tuple[str, str | None, str]], T]
) -> GitStarted[T]:
    """`then` of what `_start_commits` says, its git command started now."""
    names = (
        f"{start}^{{commit}}",
        f"refs/heads/{branch}^{{commit}}",
        f"{start}^{{tree}}",
        f"refs/heads/{branch}^{{tree}}",
    )
    if any("\n" in name for name in names):  # cat-file reads one name a line
        raise GitFailed(f"{start!r} names no commit in {repo.common_dir}: a revision holds no line break")

    def commits(done: subprocess.CompletedProcess[bytes]) -> T:
        answers = done.stdout.decode(errors="surrogateescape").strip().splitlines()
        if len(answers) != len(names):
            raise GitFailed(f"git cat-file gave {len(answers)} answers for {len(names)} names in {repo.common_dir}")
        found: list[str | None] = []
        for name, line, kind in zip(names, answers, ("commit", "commit", "tree", "tree"), strict=True):
            fields = line.split(" ")
            if fields[-1] == "missing" and name in names[1::2]:
                found.append(None)  # no branch yet: the session starts at `start`
            elif len(fields) == 3 and fields[1] == kind:
                found.append(fields[0])
            else:
                raise GitFailed(f"{name} names no commit in {repo.common_dir}: git cat-file answered {line!r}")
        return then((found[0] or "", found[1], found[3] or found[2] or ""))

    return repo.start(["cat-file", "--batch-check"], commits, input="".join(f"{name}\n" for name in names).encode())


def _tip(worktree: Worktree) -> GitStarted[tuple[str, str, bool]]:
    """What the work builds on — the branch's commit when it exists, else the session's base — its tree, and
    whether the branch exists, with one git command, started now."""
    repo, ref = worktree.repo, f"refs/heads/{worktree.branch}"
    if worktree.base:
        return _started_commits(repo, worktree.base, worktree.branch, _tip_of)

    def branch_tip(done: subprocess.CompletedProcess[bytes]) -> tuple[str, str, bool]:
        for line in done.stdout.decode(errors="surrogateescape").strip().splitlines():
            name, kind, commit, tree_id = line.rsplit(" ", 3)
            if name == ref and kind == "commit":
                return commit, tree_id, True
        raise ChockError(
            f"the branch {worktree.branch} is gone from {repo.common_dir} and the session's log names no base, "
            "so the workspace has nothing to be committed on"
        )

    return repo.start(["for-each-ref", "--format=%(refname) %(objecttype) %(objectname) %(tree)", ref], branch_tip)


def _tip_of(found: tuple[str, str | None, str]) -> tuple[str, str, bool]:
    base, on_branch, tree_id = found
    return on_branch or base, tree_id, on_branch is not None


class Worktree(Value):
    """A session's worktree as Chock recorded it when it made it: every host-side use starts from this."""

    __slots__ = ("admin", "base", "branch", "directory", "repo")

    def __init__(self, repo: Repo, directory: Path, admin: Path, branch: str, base: str = "") -> None:
        self.repo = repo  # the project
        self.directory = directory
        self.admin = admin  # <common dir>/worktrees/<name>
        self.branch = branch  # where finishing puts the work: made then, when the work differs from `base`
        self.base = base  # the session's base: what a finish with no branch yet builds on ("" in logs older than it)


def create(project: Path | Repo, directory: Path, branch: str, *, start: str = "HEAD") -> tuple[Worktree, str]:
    """Add a linked worktree at `directory` on a detached HEAD; return it and the commit it starts at.

    It starts at `branch`'s commit when the branch exists (a session that finished with changes and is
    continued), else at `start`, the session's base. Git makes the worktree's `.git` file and admin dir but
    checks nothing out; `tree.write_files` writes the files. No branch is made here. A `Repo` given as
    `project` (what `open_project` found) saves looking it up again.
    """
    repo = project if isinstance(project, Repo) else _repo(project)
    directory = Path(directory).absolute()
    admin = repo.common_dir / "worktrees" / directory.name
    ensure_dir(directory.parent)
    base, on_branch, start_tree = _start_commits(repo, start, branch)
    commit = on_branch or base
    with _one_at_a_time(repo):
        if os.path.lexists(admin):  # a worktree gone without its admin dir: git would pick another name
            repo.run(["worktree", "prune"])
            if os.path.lexists(admin):
                raise Refused(
                    f"{admin} is in use by another worktree, so git cannot name this one after its session; "
                    f"remove that worktree (`git worktree remove`) or unlock it, then run again"
                )
        repo.run(["worktree", "add", "--no-checkout", "--detach", str(directory), commit])
    worktree = Worktree(repo, directory, admin, branch, base)
    try:
        _check_named(worktree)
        os.chmod(directory, 0o700)  # git makes it 0755; every directory Chock creates is 0700
        with stamps.Recording(directory) as recording:
            recording.tree = start_tree  # the files written are exactly it (write_files says when not)
            tree.write_files(repo, commit, directory, recording)
            repo.run(["read-tree", commit], index=admin / "index")  # so git in the sandbox sees a clean checkout
            recording.close(stamp_now=True)  # after read-tree: the clock has had time to pass the last write
    except BaseException:
        remove(worktree, directory)  # made just now, where the caller asked
        raise
    return worktree, commit


def _check_named(worktree: Worktree) -> None:
    """Git made exactly the admin dir Chock records (read now, before any tool could have written it)."""
    try:
        named = Path(os.fsdecode((worktree.admin / "gitdir").read_bytes().strip()))
        ok = named.resolve() == (worktree.directory / ".git").resolve()
    except OSError:
        ok = False
    if not ok:
        raise ChockError(f"git did not make {worktree.admin} for the worktree {worktree.directory}")


def recorded(project: Path, session_id: str, directory: Path, admin: str, base: str) -> Worktree:
    """The worktree a session's log records, with the session's base; a log from before the admin dir was
    recorded names none, and git's choice for a worktree named after the session is taken (never the
    worktree's `.git` file)."""
    repo = _repo(project)
    worktrees = repo.common_dir / "worktrees"
    where = Path(admin) if admin else worktrees / session_id
    if where.parent != worktrees:
        raise ChockError(
            f"the admin dir {where} recorded for session {session_id} is not in {worktrees}: the project's "
            "repository moved; remove the workspace with `chock workspace remove`"
        )
    return Worktree(repo, Path(directory), where, f"chock/{session_id}", base)


def copy_dirty(project: Path, directory: Path) -> list[str]:
    """Copy the project's uncommitted changes into the worktree (`--allow-dirty`); return the paths copied.

    Modified, added and untracked-but-not-ignored files are copied; files deleted in the project are deleted
    in the worktree. Directories (submodules, nested repositories) are left alone.
    """
    repo = _repo(project)
    # Plumbing: it compares with the index's stat data and never writes the person's index.
    changed = _paths(repo.run(["diff-index", "--name-only", "--no-renames", "-z", "HEAD", "--"]))
    untracked = _paths(repo.run(["ls-files", "-z", "--others", "--exclude-standard"], config=tree.excludes(repo)))
    target_root = Path(directory).resolve()
    present: list[str] = []
    deleted: list[str] = []
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


def _identity(found: dict[str, str]) -> tuple[str, ...]:
    """The person's git identity when both halves are configured (`found`: their settings), else Chock's own."""
    if len(found) != 2:
        return FALLBACK_IDENTITY
    return (f"user.name={found['user.name']}", f"user.email={found['user.email']}")


class Committed(Value):
    __slots__ = ("branch", "commit", "hashed", "made_branch", "parent", "skipped", "whole")

    def __init__(
        self,
        commit: str,
        skipped: list[str],
        parent: str = "",
        hashed: int = 0,
        branch: str | None = None,
        made_branch: bool = False,
        whole: dict[str, Any] | None = None,
    ) -> None:
        self.commit = commit  # the branch's commit after finishing (its old one, or the base, when nothing changed)
        self.skipped = skipped  # what was left out of it, and why
        self.parent = parent  # the commit it was built on: the branch's, or the base when there is no branch yet
        self.hashed = hashed  # files read and hashed to build it; every other file kept the blob id its stamps recorded
        self.branch = branch  # the branch holding the work once `advance` ran; None: no branch, no changes
        self.made_branch = made_branch  # `advance` creates the branch (it did not exist)
        self.whole = {} if whole is None else whole  # the branch's whole work against the base (wholediff)


def commit(worktree: Worktree, message: str) -> Committed:
    """Build the commit of everything in the worktree on its branch's commit, and say what it holds; the branch
    moves to it with `advance`, and the worktree stays (it is removed with `remove` once the log says where its
    work went). When a branch will hold the work, its whole diff against the session's base is said too.

    Building walks and hashes whatever the agent left, so a session runs it in a child it may kill
    (chock/session/offload.py): it writes only objects, which git ignores until a ref names them. The commit is
    built on the recorded branch, or on the session's base when the branch does not exist, with a private index
    (the worktree's HEAD, index and `.git` file were writable from the sandbox and are not consulted). No change
    means no commit, and, with no branch yet, no branch.
    """
    repo = worktree.repo
    # Started now, so that git's starts overlap the walk: what the work builds on, and the person's identity.
    tip, identity = _tip(worktree), repo.start_person_settings("user.name", "user.email")
    try:
        # Opened before the walk: its time stamp is when reading began, what the racy rule measures from.
        with stamps.Recording(worktree.directory) as recording:
            try:
                taken, new_tree = _written_tree(repo, worktree.directory, tip, trust=True)
            except GitFailed:
                # A blob the stamps name is gone (pruned by gc): the work is read whole instead.
                taken, new_tree = _written_tree(repo, worktree.directory, tip, trust=False)
            parent, parent_tree, had_branch = tip.result()
            made = parent
            if new_tree != parent_tree:
                made = repo.value(
                    ["commit-tree", new_tree, "-p", parent, "-F", "-"],
                    config=_identity(identity.result()),
                    input=message.encode(),
                )
            # What was read is recorded, so the next finish (a continue) reads only what changes; and the record
            # stands for the tree now built on, so that finish need not ask git for it.
            if taken.hashed or new_tree != parent_tree or not taken.from_record:
                files = {path: key for path, key in taken.current.items() if not key.startswith(tree.GITLINK)}
                recording.add_all(files, taken.found, taken.fresh)
                recording.keep(taken.clean)
                recording.tree = new_tree if len(files) == len(taken.current) else ""
                recording.close()
    finally:
        tip.stop()
        identity.stop()
    skipped = [f"{path} ({why})" for path, why in taken.skipped]
    branch = worktree.branch if had_branch or made != parent else None
    whole = wholediff.whole(repo, worktree.base, made) if branch and worktree.base else {}
    return Committed(made, skipped, parent, taken.hashed, branch, not had_branch and branch is not None, whole)


def _written_tree(
    repo: Repo, directory: Path, tip: GitStarted[tuple[str, str, bool]], *, trust: bool
) -> tuple[tree.WorktreeSnapshot, str]:
    """The worktree's snapshot on what `tip` says the work builds on, its blobs written, and the tree git wrote
    of it."""
    with tempfile.TemporaryDirectory(prefix="chock-index-") as scratch:
        taken = tree.snapshot(
            repo, directory, lambda: tip.result()[:2], Path(scratch) / "index", write=True, trust=trust
        )
    # mktree checks that every object it names exists: a blob a damaged record named is refused here.
    return taken, treewrite.build(repo, tip.result()[1], taken.changed)


def advance(worktree: Worktree, committed: Committed) -> None:
    """Move the branch to what `commit` built, from the commit it was built on, or create it when it did not
    exist (git refuses if the branch moved, or was made, since): one quick git command, never run where it could
    be killed halfway, which would leave the ref locked."""
    if committed.commit != committed.parent:
        ref = f"refs/heads/{worktree.branch}"
        message = f"chock: commit to {worktree.branch}"
        old = "" if committed.made_branch else committed.parent  # "": the ref must not exist yet
        worktree.repo.run(["update-ref", "-m", message, ref, committed.commit, old])


class Changes(Value):
    __slots__ = ("hashed", "lines", "skipped")

    def __init__(self, lines: list[str], skipped: list[str], hashed: int = 0) -> None:
        self.lines = lines  # "M path", "A path", "D path", "T path" against the branch's commit (or the base)
        self.skipped = skipped  # what a finish would leave out, and why
        self.hashed = hashed  # files read and hashed to say so; every other file kept the blob id its stamps recorded


def changes(worktree: Worktree) -> Changes:
    """What finishing now would commit, against the branch's commit (the base when there is no branch yet): the
    same computation as `finish`, trusting the stamps as it does (they are not written again: the blobs hashed
    here are not written to the repository, so no record may name them)."""
    repo, tip = worktree.repo, _tip(worktree)
    try:
        with tempfile.TemporaryDirectory(prefix="chock-index-") as scratch:
            index = Path(scratch) / "index"
            taken = tree.snapshot(repo, worktree.directory, lambda: tip.result()[:2], index, write=False, trust=True)
    finally:
        tip.stop()
    return Changes(
        [f"{status} {path}" for status, path in tree.changes(taken.base, taken.changed)],
        [f"{path} ({why})" for path, why in taken.skipped],
        taken.hashed,
    )


def remove(worktree: Worktree, own: Path) -> None:
    """Delete the worktree and its recorded admin dir (nothing in them followed through a symlink), then let
    git forget what it no longer finds; `own` is where Chock makes the session's worktree
    (`Layout.workspace_dir`), and a directory that is neither it nor a worktree git records as the session's is
    refused (`check_own`). The admin dir goes under the repository's worktree lock: once the directory is gone,
    another session's `git worktree prune` deletes that admin dir too, and two deletions of one directory at once
    fail each other. An admin dir that names another directory still there is another worktree's: it stays."""
    check_own(worktree, own)
    stamps.remove(worktree.directory)
    tree.delete(worktree.directory)
    with _one_at_a_time(worktree.repo):
        named = _named_by(worktree.admin)
        if named is None or not os.path.lexists(named) or _same(named, worktree.directory / ".git"):
            tree.delete(worktree.admin)
        worktree.repo.run(["worktree", "prune"])


class NotOwn(Refused):
    """A directory a log names as a session's worktree that Chock did not make for that session."""


def check_own(worktree: Worktree, own: Path) -> None:
    """NotOwn unless the worktree's directory is one Chock may delete: `own`, where it makes the session's
    worktree, or a linked worktree git records as the session's — its admin dir `<common dir>/worktrees/<name of
    own>` names `<directory>/.git`, and that file names the admin dir back (the sandbox writes an admin dir, never
    a `.git` file outside the workspaces). A log names whatever path it holds: a moved session's is its source's."""
    directory = Path(worktree.directory)
    if _same(directory, own) or _linked(directory, worktree.repo.common_dir / "worktrees" / own.name):
        return
    raise NotOwn(
        f"{directory} is not where Chock makes the worktree of session {own.name} ({own}), and git records no "
        "worktree of that session there: Chock neither works in nor deletes any other directory, so it was left "
        "as it is (remove it yourself if it is a leftover of the session)"
    )


def _same(one: Path, other: Path) -> bool:
    """Whether two paths name one entry: the same name in the same real directory (the entry itself not followed)."""
    return one.name == other.name and os.path.realpath(one.parent) == os.path.realpath(other.parent)


# A `.git` file or an admin dir's `gitdir` holds one path: read up to this much.
_LINK_BYTES = 4096 + 16


def _read_link_file(path: Path) -> bytes | None:
    """A small regular file's bytes (not followed through a symlink), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _LINK_BYTES).strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _named_by(admin: Path) -> Path | None:
    """The `.git` file an admin dir's `gitdir` names (git's own record of where its worktree is), or None."""
    found = _read_link_file(admin / "gitdir")
    return admin / os.fsdecode(found) if found else None  # relative to the admin dir, when git wrote it so


def _linked(directory: Path, admin: Path) -> bool:
    """Whether git records `directory` as the worktree of `admin`, both ways: the admin dir names its `.git` file,
    and that file (a regular file, in a directory that is no symlink) names the admin dir."""
    if directory.is_symlink() or not directory.is_dir():
        return False
    named, back = _named_by(admin), _read_link_file(directory / ".git")
    if named is None or back is None or not back.startswith(b"gitdir: "):
        return False
    pointed = directory / os.fsdecode(back.removeprefix(b"gitdir: "))  # an absolute one stands alone
    return _same(named, directory / ".git") and _same(pointed, admin)


# How long a session waits for another one adding or pruning a worktree of the same repository.
WORKTREE_LOCK_SECONDS = 60.0


@contextlib.contextmanager
def _one_at_a_time(repo: Repo) -> Iterator[None]:
    """Hold the repository's worktree lock (`<common dir>/chock-worktrees.lock`, flock): `git worktree add` reads
    every other worktree's admin dir, and one that a concurrent add has half made fails it ("failed to read
    …/commondir"), so sessions started or ended at once in one project add, prune and delete admin dirs in
    turn."""
    fd = os.open(repo.common_dir / "chock-worktrees.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        if not lock_within(fd, WORKTREE_LOCK_SECONDS, 0.02):
            raise Refused(
                f"another Chock has been adding or removing a worktree of {repo.common_dir} for over "
                f"{WORKTREE_LOCK_SECONDS:g} s; try again once it is done"
            )
        yield
    finally:
        os.close(fd)
