"""The workspace: a linked worktree on chock/<id>, built, filled, committed and removed with real git."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chock.errors import ChockError, Refused
from chock.session import workspace
from tests.conftest import git_value as git
from tests.conftest import make_project

BRANCH = "chock/20261201-073450-a1b2c3"


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


def test_git_dir_of_a_linked_worktree_is_the_common_dir(project: Path, directory: Path) -> None:
    workspace.create(project, directory, BRANCH)
    assert workspace.git_dir(directory) == (project / ".git").resolve()


# create / admin_dir -------------------------------------------------------------------------------------


def test_create_adds_a_linked_worktree_on_the_branch_at_head(project: Path, directory: Path) -> None:
    head = git(project, "rev-parse", "HEAD")
    assert workspace.create(project, directory, BRANCH) == head
    assert (directory / "README.md").read_text() == "hello\n"
    assert git(directory, "rev-parse", "HEAD") == head
    assert git(directory, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert f"worktree {directory}\nHEAD {head}\nbranch refs/heads/{BRANCH}" in worktrees(project)
    assert oct(directory.parent.stat().st_mode & 0o777) == "0o700"
    admin = workspace.admin_dir(directory, project=project)
    assert admin == (project / ".git" / "worktrees" / directory.name).resolve()
    assert workspace.admin_dir(directory) == admin


def test_create_runs_no_hook(project: Path, directory: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hook = project / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    workspace.create(project, directory, BRANCH)
    assert not marker.exists()


def test_create_from_an_existing_branch_checks_it_out(project: Path, directory: Path, tmp_path: Path) -> None:
    workspace.create(project, directory, BRANCH)
    (directory / "new.txt").write_text("made by the agent\n")
    tip = workspace.finish(project, directory, BRANCH, "first session")
    again = tmp_path / "data" / "workspaces" / "20261201-080000-d4e5f6"
    assert workspace.create(project, again, BRANCH, start="HEAD") == tip
    assert (again / "new.txt").read_text() == "made by the agent\n"
    assert git(again, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"


def test_create_fails_quoting_git(project: Path, directory: Path) -> None:
    with pytest.raises(ChockError, match=r"git rev-parse .*failed"):
        workspace.create(project, directory, BRANCH, start="no-such-revision")


def test_admin_dir_refuses_a_git_file_pointing_elsewhere(project: Path, directory: Path, tmp_path: Path) -> None:
    workspace.create(project, directory, BRANCH)
    elsewhere = tmp_path / "secrets"
    elsewhere.mkdir()
    (directory / ".git").write_text(f"gitdir: {elsewhere}\n")
    with pytest.raises(ChockError, match="not this worktree's admin directory"):
        workspace.admin_dir(directory)
    # Even a directory named like one, outside the project's .git, is refused when the project is given.
    fake = tmp_path / "fake" / "worktrees" / directory.name
    fake.mkdir(parents=True)
    (directory / ".git").write_text(f"gitdir: {fake}\n")
    with pytest.raises(ChockError, match="not this worktree's admin directory"):
        workspace.admin_dir(directory, project=project)


def test_admin_dir_of_a_plain_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ChockError, match="is not a linked worktree"):
        workspace.admin_dir(tmp_path)


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
    start = workspace.create(project, directory, BRANCH)
    (directory / "README.md").write_text("changed by the agent\n")
    (directory / "added.txt").write_text("added\n")
    (directory / "gone.txt").unlink()

    commit = workspace.finish(project, directory, BRANCH, "fix the flaky test")

    assert not directory.exists()
    assert str(directory) not in worktrees(project)
    assert not (project / ".git" / "worktrees" / directory.name).exists()
    assert git(project, "rev-parse", BRANCH) == commit
    assert git(project, "rev-parse", f"{commit}^") == start
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
    workspace.create(project, directory, BRANCH)
    (directory / "added.txt").write_text("added\n")
    commit = workspace.finish(project, directory, BRANCH, "done")
    assert git(project, "log", "-1", "--format=%an <%ae>", commit) == "Ada Person <ada@example.org>"


def test_finish_without_changes_makes_no_commit(project: Path, directory: Path) -> None:
    start = workspace.create(project, directory, BRANCH)
    assert workspace.finish(project, directory, BRANCH, "nothing to do") == start
    assert git(project, "rev-parse", BRANCH) == start
    assert not directory.exists()
    assert str(directory) not in worktrees(project)


def test_finish_trusts_nothing_the_sandbox_could_write(project: Path, directory: Path, tmp_path: Path) -> None:
    """HEAD, index and hooks are not consulted: the commit lands on the session's branch, and no hook runs."""
    start = workspace.create(project, directory, BRANCH)
    admin = workspace.admin_dir(directory, project=project)
    (admin / "HEAD").write_text("ref: refs/heads/main\n")  # as a tool inside the sandbox could
    (admin / "index").write_bytes(b"garbage")
    marker = tmp_path / "hook-ran"
    for name in ("pre-commit", "commit-msg", "post-commit", "reference-transaction"):
        hook = project / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
    (directory / "added.txt").write_text("added\n")

    commit = workspace.finish(project, directory, BRANCH, "done")

    assert git(project, "rev-parse", "main") == start
    assert git(project, "rev-parse", BRANCH) == commit != start
    assert not marker.exists()
    assert not directory.exists()


# remove -------------------------------------------------------------------------------------------------


def test_remove_a_kept_worktree(project: Path, directory: Path) -> None:
    workspace.create(project, directory, BRANCH)
    (directory / "untracked.txt").write_text("work in progress\n")
    workspace.remove(project, directory)
    assert not directory.exists()
    assert str(directory) not in worktrees(project)
    assert git(project, "rev-parse", "--verify", BRANCH)  # the branch stays


def test_remove_tolerates_a_worktree_gone_from_disk(project: Path, directory: Path) -> None:
    import shutil

    workspace.create(project, directory, BRANCH)
    shutil.rmtree(directory)
    workspace.remove(project, directory)
    assert str(directory) not in worktrees(project)
    assert not (project / ".git" / "worktrees" / directory.name).exists()


def test_remove_a_worktree_whose_git_file_was_tampered_with(project: Path, directory: Path, tmp_path: Path) -> None:
    workspace.create(project, directory, BRANCH)
    admin = workspace.admin_dir(directory, project=project)
    (admin / "locked").write_text("by a tool\n")
    (directory / ".git").write_text(f"gitdir: {tmp_path}\n")
    workspace.remove(project, directory)
    assert not directory.exists()
    assert not admin.exists()
    assert str(directory) not in worktrees(project)
    # The branch is free again: a continued session can check it out.
    workspace.create(project, directory, BRANCH)
