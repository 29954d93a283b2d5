"""The workspace: a linked worktree on chock/<id>, built, filled, committed and removed with real git."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from chock.errors import ChockError, Refused
from chock.session import workspace
from tests.fakes.projects import git_value as git
from tests.fakes.projects import make_project

BRANCH = "chock/20261201-073450-a1b2c3"
T = TypeVar("T")


# README.md is changed by the agent, keep.txt kept, gone.txt deleted, and *.log ignored.
FILES = {"README.md": "hello\n", "keep.txt": "keep\n", "gone.txt": "to be deleted\n", ".gitignore": "*.log\n"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project", FILES)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "data" / "workspaces" / "20261201-073450-a1b2c3"


@pytest.fixture
def no_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No git identity anywhere: an empty HOME, no XDG config, no system config."""
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)


def finish(worktree: workspace.Worktree, message: str) -> workspace.Committed:
    """What a completing session does: commit the worktree to its branch, then remove it."""
    committed = workspace.commit(worktree, message)
    workspace.advance(worktree, committed)
    workspace.remove(worktree, worktree.directory)
    return committed


def worktrees(project: Path) -> str:
    return git(project, "worktree", "list", "--porcelain")


# project_root / git_dir ---------------------------------------------------------------------------------


def test_project_root_is_the_resolved_top_level(project: Path) -> None:
    (project / "sub").mkdir()
    assert workspace.project_root(project / "sub") == project.resolve()


def test_project_root_ignores_git_variables_of_the_callers_environment(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_project(tmp_path / "other", FILES)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert workspace.project_root(project) == project.resolve()
    assert workspace.git_dir(project) == (project / ".git").resolve()


@pytest.mark.parametrize("make", ["plain", "missing"])
def test_a_directory_that_is_not_a_repository_is_refused(tmp_path: Path, make: str) -> None:
    target = tmp_path / "plain"
    if make == "plain":
        target.mkdir()
    with pytest.raises(Refused) as refused:
        workspace.project_root(target)
    assert str(refused.value) == (
        f"{target} is not a git repository: chock run works in a git project "
        "(run `git init` there, or pass --project DIR)"
    )
    assert refused.value.exit_code == 3


def test_a_repository_without_a_commit_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(Refused, match=r"has no commit yet.*first commit"):
        workspace.project_root(empty)


# create -------------------------------------------------------------------------------------------------


def test_create_adds_a_linked_worktree_on_a_detached_head_at_head(project: Path, directory: Path) -> None:
    head = git(project, "rev-parse", "HEAD")
    worktree, commit = workspace.create(project, directory, BRANCH)
    assert commit == head == worktree.base
    assert (directory / "README.md").read_text() == "hello\n"
    assert git(directory, "rev-parse", "HEAD") == head
    assert subprocess.run(["git", "-C", str(directory), "symbolic-ref", "-q", "HEAD"]).returncode == 1  # detached
    assert git(directory, "status", "--porcelain") == ""  # git in the sandbox sees a clean checkout
    assert f"worktree {directory}\nHEAD {head}\ndetached" in worktrees(project)
    assert BRANCH not in git(project, "branch", "--list")  # made by a finish whose work differs from the base
    assert oct(directory.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    assert worktree.admin == (project / ".git" / "worktrees" / directory.name).resolve()
    assert worktree.repo.common_dir == workspace.git_dir(project) == (project / ".git").resolve()
    assert worktree.branch == BRANCH


def test_create_runs_no_hook(project: Path, directory: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hook = project / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    workspace.create(project, directory, BRANCH)
    assert not marker.exists()


def test_create_writes_the_committed_bytes_with_no_filter_or_conversion(
    project: Path, directory: Path, tmp_path: Path
) -> None:
    """A smudge filter of the person's and end-of-line attributes change nothing: what the agent sees is
    what the commit holds, so an untouched file commits back unchanged."""
    marker = tmp_path / "filter-ran"
    git(project, "config", "filter.upper.smudge", f"touch {marker}; tr a-z A-Z")
    git(project, "config", "core.autocrlf", "true")
    (project / ".gitattributes").write_text("*.txt filter=upper\n*.bat text eol=crlf\n")
    (project / "run.bat").write_text("echo one\necho two\n")
    (project / "tool.sh").write_text("#!/bin/sh\n")
    (project / "tool.sh").chmod(0o755)
    (project / "link").symlink_to("keep.txt")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "attributes")
    head = git(project, "rev-parse", "HEAD")
    marker.unlink(missing_ok=True)  # the test's own `git add` ran the person's filter in the project

    worktree, _ = workspace.create(project, directory, BRANCH)

    assert not marker.exists()
    assert (directory / "keep.txt").read_bytes() == b"keep\n"
    assert (directory / "run.bat").read_bytes() == b"echo one\necho two\n"
    assert os.readlink(directory / "link") == "keep.txt"
    assert os.access(directory / "tool.sh", os.X_OK) and not os.access(directory / "keep.txt", os.X_OK)
    assert workspace.changes(worktree).lines == []
    assert finish(worktree, "nothing changed").commit == head
    assert not marker.exists()


def test_create_from_an_existing_branch_checks_it_out(project: Path, directory: Path, tmp_path: Path) -> None:
    worktree, _ = workspace.create(project, directory, BRANCH)
    (directory / "new.txt").write_text("made by the agent\n")
    tip = finish(worktree, "first session").commit
    again = tmp_path / "data" / "workspaces" / "20261201-080000-d4e5f6"
    made, commit = workspace.create(project, again, BRANCH, start=worktree.base)
    assert commit == tip and made.base == worktree.base  # the base stays the session's first
    assert (again / "new.txt").read_text() == "made by the agent\n"
    assert git(again, "rev-parse", "HEAD") == tip


def test_create_fails_quoting_git(project: Path, directory: Path) -> None:
    with pytest.raises(ChockError, match=r"no-such-revision\^\{commit\} names no commit .*git cat-file answered"):
        workspace.create(project, directory, BRANCH, start="no-such-revision")


def test_a_stale_admin_dir_of_the_same_name_is_pruned_so_git_picks_exactly_that_name(
    project: Path, directory: Path
) -> None:
    stale = project / ".git" / "worktrees" / directory.name
    stale.mkdir(parents=True)
    (stale / "gitdir").write_text("/nowhere/.git\n")
    (stale / "HEAD").write_text("ref: refs/heads/main\n")
    (stale / "commondir").write_text("../..\n")
    worktree, _ = workspace.create(project, directory, BRANCH)
    assert worktree.admin == stale.resolve()
    assert (stale / "gitdir").read_text().strip() == str(directory / ".git")


def test_an_admin_dir_in_use_by_another_worktree_is_refused(project: Path, directory: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / directory.name
    git(project, "worktree", "add", "-q", str(elsewhere), "-b", "other")
    with pytest.raises(Refused, match="in use by another worktree"):
        workspace.create(project, directory, BRANCH)
    assert not directory.exists()


# recorded -----------------------------------------------------------------------------------------------


def test_recorded_takes_the_admin_dir_from_the_log_never_from_the_git_file(
    project: Path, directory: Path, tmp_path: Path
) -> None:
    made, _ = workspace.create(project, directory, BRANCH)
    (directory / ".git").write_text(f"gitdir: {tmp_path}\n")  # as a tool inside the sandbox could
    session = directory.name
    assert workspace.recorded(project, session, directory, str(made.admin), made.base) == made
    # A log older than the recorded admin dir: git's name for a worktree named after the session.
    assert workspace.recorded(project, session, directory, "", made.base) == made
    with pytest.raises(ChockError, match=r"is not in .*worktrees"):
        workspace.recorded(project, session, directory, str(tmp_path / "worktrees" / session), made.base)


# copy_dirty ---------------------------------------------------------------------------------------------


def test_copy_dirty_copies_changes_and_applies_deletions(project: Path, directory: Path) -> None:
    (project / "README.md").write_text("modified\n")
    (project / "untracked.txt").write_text("new\n")
    (project / "dir").mkdir()
    (project / "dir" / "nested.txt").write_text("nested\n")
    (project / "staged.txt").write_text("staged\n")
    git(project, "add", "staged.txt")
    (project / "gone.txt").unlink()
    (project / "debug.log").write_text("ignored\n")
    (project / "link").symlink_to("README.md")
    workspace.create(project, directory, BRANCH)

    copied = workspace.copy_dirty(project, directory)

    assert sorted(copied) == ["README.md", "dir/nested.txt", "link", "staged.txt", "untracked.txt"]
    assert (directory / "README.md").read_text() == "modified\n"
    assert (directory / "untracked.txt").read_text() == "new\n"
    assert (directory / "dir" / "nested.txt").read_text() == "nested\n"
    assert (directory / "staged.txt").read_text() == "staged\n"
    assert os.readlink(directory / "link") == "README.md"
    assert not (directory / "gone.txt").exists()
    assert not (directory / "debug.log").exists()
    assert (directory / "keep.txt").read_text() == "keep\n"


def test_copy_dirty_never_writes_through_a_symlink(project: Path, directory: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "sub").symlink_to(outside)
    git(project, "add", "sub")
    git(project, "commit", "-q", "-m", "a symlinked directory")
    (project / "sub").unlink()
    (project / "sub").mkdir()
    (project / "sub" / "file.txt").write_text("belongs in the worktree\n")
    workspace.create(project, directory, BRANCH)

    workspace.copy_dirty(project, directory)

    assert list(outside.iterdir()) == []
    assert (directory / "sub" / "file.txt").read_text() == "belongs in the worktree\n"
    assert not (directory / "sub").is_symlink()


def test_copy_dirty_of_a_clean_project_copies_nothing(project: Path, directory: Path) -> None:
    workspace.create(project, directory, BRANCH)
    assert workspace.copy_dirty(project, directory) == []


# finish -------------------------------------------------------------------------------------------------


def test_finish_commits_to_the_branch_and_removes_the_worktree(
    project: Path, directory: Path, no_identity: None
) -> None:
    worktree, start = workspace.create(project, directory, BRANCH)
    (directory / "README.md").write_text("changed by the agent\n")
    (directory / "added.txt").write_text("added\n")
    (directory / "gone.txt").unlink()
    (directory / "debug.log").write_text("ignored\n")

    finished = finish(worktree, "fix the flaky test")

    assert finished.skipped == []
    assert not directory.exists()
    assert str(directory) not in worktrees(project)
    assert not (project / ".git" / "worktrees" / directory.name).exists()
    assert git(project, "rev-parse", BRANCH) == finished.commit
    assert git(project, "rev-parse", f"{finished.commit}^") == start
    assert git(project, "show", f"{BRANCH}:README.md") == "changed by the agent"
    assert git(project, "show", f"{BRANCH}:added.txt") == "added"
    files = git(project, "ls-tree", "-r", "--name-only", BRANCH).splitlines()
    assert sorted(files) == [".gitignore", "README.md", "added.txt", "keep.txt"]
    assert git(project, "log", "-1", "--format=%an <%ae>", BRANCH) == "Chock <chock@localhost>"
    assert git(project, "log", "-1", "--format=%B", BRANCH) == "fix the flaky test"
    assert git(project, "rev-parse", "main") == start  # the person's branch is untouched
    assert (project / "README.md").read_text() == "hello\n"


def test_finish_uses_the_persons_identity_when_configured(project: Path, directory: Path, no_identity: None) -> None:
    git(project, "config", "user.name", "Ada Person")
    git(project, "config", "user.email", "ada@example.org")
    worktree, _ = workspace.create(project, directory, BRANCH)
    (directory / "added.txt").write_text("added\n")
    commit = finish(worktree, "done").commit
    assert git(project, "log", "-1", "--format=%an <%ae>", commit) == "Ada Person <ada@example.org>"


def test_finish_without_changes_makes_no_commit_and_no_branch(project: Path, directory: Path) -> None:
    worktree, start = workspace.create(project, directory, BRANCH)
    finished = finish(worktree, "nothing to do")
    assert finished.commit == start and finished.branch is None and finished.whole == {}
    assert BRANCH not in git(project, "branch", "--list")
    assert not directory.exists()
    assert str(directory) not in worktrees(project)


def test_finish_trusts_nothing_the_sandbox_could_write(project: Path, directory: Path, tmp_path: Path) -> None:
    """HEAD, index and hooks are not consulted: the commit lands on the session's branch, and no hook runs."""
    worktree, start = workspace.create(project, directory, BRANCH)
    (worktree.admin / "HEAD").write_text("ref: refs/heads/main\n")  # as a tool inside the sandbox could
    (worktree.admin / "index").write_bytes(b"garbage")
    marker = tmp_path / "hook-ran"
    for name in ("pre-commit", "commit-msg", "post-commit", "reference-transaction"):
        hook = project / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
    (directory / "added.txt").write_text("added\n")

    commit = finish(worktree, "done").commit

    assert git(project, "rev-parse", "main") == start
    assert git(project, "rev-parse", BRANCH) == commit != start
    assert not marker.exists()
    assert not directory.exists()


def test_what_is_committed_symlinks_ignores_nested_repositories_and_invalid_names(
    project: Path, directory: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the person's\n")
    git(project, "rm", "-q", "--cached", "keep.txt")  # tracked before: ignoring it later changes nothing
    (project / ".gitignore").write_text("*.log\nbuild/\nkeep.txt\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "ignore more")
    git(project, "add", "-f", "keep.txt")
    git(project, "commit", "-q", "-m", "tracked although ignored")
    worktree, _ = workspace.create(project, directory, BRANCH)
    (directory / "escape").symlink_to(outside)  # a symlink to a host directory is a symlink, not its files
    (directory / "dangling").symlink_to("/no/such/file")
    (directory / "keep.txt").write_text("still tracked\n")
    (directory / "build" / "sub").mkdir(parents=True)
    (directory / "build" / "sub" / "out.o").write_text("binary\n")
    (directory / "src").mkdir()
    (directory / "src" / ".gitignore").write_text("*.tmp\n")
    (directory / "src" / "a.tmp").write_text("scratch\n")
    (directory / "src" / "a.py").write_text("code\n")
    (directory / "vendored").mkdir()
    (directory / "vendored" / ".git").write_text("gitdir: /elsewhere\n")
    (directory / "vendored" / "lib.py").write_text("theirs\n")
    (directory / "ignored.log").mkdir()  # an ignored directory holding a repository says nothing
    (directory / "ignored.log" / ".git").mkdir()
    (directory / "sub" / ".GIT").mkdir(parents=True)
    (directory / "sub" / ".GIT" / "config").write_text("a name git refuses\n")
    os.mkfifo(directory / "pipe")

    shown = workspace.changes(worktree)
    finished = finish(worktree, "done")

    assert shown.lines == ["A dangling", "A escape", "M keep.txt", "A src/.gitignore", "A src/a.py"]
    assert shown.skipped == ["vendored (a nested repository)", "sub/.GIT/config (a path git cannot hold)"]
    assert finished.skipped == shown.skipped
    tree = git(project, "ls-tree", "-r", "--full-tree", BRANCH)
    assert next(line for line in tree.splitlines() if line.endswith("\tescape")).startswith("120000 blob ")
    assert git(project, "cat-file", "blob", f"{BRANCH}:escape") == str(outside)
    assert git(project, "cat-file", "blob", f"{BRANCH}:dangling") == "/no/such/file"
    assert git(project, "show", f"{BRANCH}:keep.txt") == "still tracked"
    names = git(project, "ls-tree", "-r", "--name-only", BRANCH).splitlines()
    assert sorted(names) == [".gitignore", "README.md", "dangling", "escape", "gone.txt", "keep.txt",
                             "src/.gitignore", "src/a.py"]  # fmt: skip
    assert (outside / "secret.txt").read_text() == "the person's\n"  # removal followed no symlink


def test_a_fifo_named_gitignore_does_not_hang_reading_the_workspace(project: Path, directory: Path) -> None:
    worktree, _ = workspace.create(project, directory, BRANCH)
    (directory / "sub").mkdir()
    os.mkfifo(directory / "sub" / ".gitignore")
    (directory / "sub" / "file").write_text("kept\n")
    found: list[list[str]] = []
    # Were git to open the FIFO it would wait for a writer forever: the check runs beside the test.
    worker = threading.Thread(target=lambda: found.append(workspace.changes(worktree).lines), daemon=True)
    worker.start()
    worker.join(60)
    assert found == [["A sub/file"]]


def test_a_gitignore_past_its_bound_is_not_applied_and_not_copied_whole(project: Path, directory: Path) -> None:
    """A sparse `.gitignore` of any size would have been copied whole to the host's temporary directory (one of
    3 GiB fails git 2.39): past its bound it is not applied, so what it would hide is committed; a `.gitignore` of
    ordinary size applies."""
    worktree, _ = workspace.create(project, directory, BRANCH)
    (directory / "huge").mkdir()
    with open(directory / "huge" / ".gitignore", "wb") as rules:
        rules.write(b"*.out\n")
        rules.truncate(64 << 20)
    (directory / "huge" / "run.out").write_text("shown\n")
    (directory / "small").mkdir()
    (directory / "small" / ".gitignore").write_text("*.out\n")
    (directory / "small" / "run.out").write_text("hidden\n")
    assert workspace.changes(worktree).lines == ["A huge/.gitignore", "A huge/run.out", "A small/.gitignore"]


def test_a_tree_deeper_than_the_walk_goes_is_left_out_and_removed(project: Path, directory: Path) -> None:
    worktree, _ = workspace.create(project, directory, BRANCH)
    fd = os.open(directory, os.O_RDONLY)
    for _ in range(1500):  # deeper than shutil.rmtree's recursion reaches
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("bottom.txt", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    finished = finish(worktree, "deep")
    assert finished.skipped == ["/".join(["d"] * 200) + " (directories nested too deep)"]
    assert not directory.exists()


# remove -------------------------------------------------------------------------------------------------


def test_remove_a_kept_worktree(project: Path, directory: Path) -> None:
    worktree, _ = workspace.create(project, directory, BRANCH)
    (directory / "untracked.txt").write_text("work in progress\n")
    workspace.advance(worktree, workspace.commit(worktree, "kept"))
    workspace.remove(worktree, worktree.directory)
    assert not directory.exists()
    assert str(directory) not in worktrees(project)
    assert git(project, "show", f"{BRANCH}:untracked.txt") == "work in progress"  # the branch stays


def test_remove_tolerates_a_worktree_gone_from_disk(project: Path, directory: Path) -> None:
    import shutil

    worktree, _ = workspace.create(project, directory, BRANCH)
    shutil.rmtree(directory)
    workspace.remove(worktree, worktree.directory)
    assert str(directory) not in worktrees(project)
    assert not (project / ".git" / "worktrees" / directory.name).exists()


def test_remove_a_worktree_whose_git_file_and_admin_dir_were_tampered_with(
    project: Path, directory: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("the person's\n")
    worktree, _ = workspace.create(project, directory, BRANCH)
    (worktree.admin / "locked").write_text("by a tool\n")
    (worktree.admin / "commondir").write_text(f"{tmp_path}\n")
    (worktree.admin / "escape").symlink_to(outside)
    (directory / ".git").write_text(f"gitdir: {tmp_path}\n")
    (directory / "blocked").mkdir()
    (directory / "blocked" / "file").write_text("x\n")
    (directory / "blocked").chmod(0)
    workspace.remove(worktree, worktree.directory)
    assert not directory.exists()
    assert not worktree.admin.exists()
    assert (outside / "keep").read_text() == "the person's\n"
    assert str(directory) not in worktrees(project)
    # The branch is free again: a continued session can check it out.
    workspace.create(project, directory, BRANCH)


def _at_once(work: Callable[[T], object], items: list[T]) -> list[str]:
    """`work(item)` for every item at once, each in its own thread; what each failure said."""
    errors: list[str] = []

    def one(item: T) -> None:
        try:
            work(item)
        except (ChockError, OSError) as error:
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=one, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_sessions_started_at_once_in_one_project_each_get_their_worktree(tmp_path: Path) -> None:
    """`git worktree add` reads every other worktree's admin dir, and fails on one a concurrent add has half
    made ("failed to read …/commondir"): sixteen started at once, three times over, all succeed."""
    for round_ in range(3):
        project = make_project(tmp_path / f"p{round_}")
        made = [(project, tmp_path / f"w{round_}" / f"s{i}", f"chock/s{i}") for i in range(16)]
        assert _at_once(lambda place: workspace.create(*place), made) == []
        assert git(project, "worktree", "list", "--porcelain").count("worktree ") == 17  # the project and its 16


def test_sessions_ending_at_once_in_one_project_each_remove_their_worktree(tmp_path: Path) -> None:
    """A session's `git worktree prune` deletes the admin dir of every worktree whose directory is gone, another
    session's too, even as that one deletes it itself: sixteen removed at once, three times over, all succeed."""
    for round_ in range(3):
        project = make_project(tmp_path / f"p{round_}")
        made = [workspace.create(project, tmp_path / f"w{round_}" / f"s{i}", f"chock/s{i}")[0] for i in range(16)]
        assert _at_once(lambda worktree: workspace.remove(worktree, worktree.directory), made) == []
        assert git(project, "worktree", "list", "--porcelain").count("worktree ") == 1  # the project alone
        assert not any(worktree.admin.exists() or worktree.directory.exists() for worktree in made)


def test_tree_entries_reads_several_root_files_at_once_and_keeps_only_what_a_commit_id_names(project: Path) -> None:
    (project / ".chock").mkdir()
    (project / ".chock" / "mcp.zon").write_text(".{}\n")
    (project / "AGENTS.md").write_text("be brief\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "instructions and servers")
    found = workspace.open_project(project)
    commit = found.head
    entries = found.repo.tree_entries(commit, ("AGENTS.md", ".chock/mcp.zon", "absent.txt", ".chock"))
    agents, servers, absent, folder = (
        entries[name] for name in ("AGENTS.md", ".chock/mcp.zon", "absent.txt", ".chock")
    )
    assert agents is not None and agents.regular and agents.size == len("be brief\n")
    assert servers is not None and servers.regular and servers.size == len(".{}\n")
    assert absent is None
    assert folder is not None and folder.kind == "tree" and not folder.regular
    # HEAD moves: a name that is not a commit id is read again, and the new commit's entry is its own.
    (project / "AGENTS.md").write_text("be briefer still\n")
    git(project, "commit", "-q", "-am", "longer")
    moved = found.repo.tree_entry("HEAD", "AGENTS.md")
    assert moved is not None and moved.size == len("be briefer still\n")
    again = found.repo.tree_entry(commit, "AGENTS.md")  # the first commit's, kept
    assert again == agents
