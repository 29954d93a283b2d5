"""Finishing by what changed (docs/architecture.md, "Finishing by what changed"): a worktree's stamps, with real
git and real worktrees. A file is read again only when its identity changed, it is racy, or the record cannot be
trusted; whatever the agent did, the commit holds what the worktree holds."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from chock.paths import Layout
from chock.session import stamps, workspace
from chock.session.sandbox import for_workspace
from tests.fakes.projects import git as git_output
from tests.fakes.projects import git_value as git
from tests.fakes.projects import make_project

SESSION = "20261201-073450-a1b2c3"
BRANCH = f"chock/{SESSION}"
FILES = {"README.md": "hello\n", "keep.txt": "keep\n", "gone.txt": "to be deleted\n", "src/app.py": "print(1)\n"}


def blob_id(text: str) -> bytes:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest().encode()


README, KEEP = blob_id(FILES["README.md"]), blob_id(FILES["keep.txt"])
# Longer than a tick of any kernel's coarse clock: what was written before it is past the racy window of a
# record taken after it.
SETTLE_SECONDS = 0.1


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "project", FILES)
    os.symlink("keep.txt", project / "link")
    git(project, "add", "link")
    git(project, "commit", "-q", "-m", "a link")
    return project


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "data" / "workspaces" / SESSION


def settled(project: Path, directory: Path) -> workspace.Worktree:
    """A worktree whose every file is older than its stamps' racy window: made, left past the window, and finished
    once (as a session continued after an earlier finish), so nothing of it is racy any more."""
    worktree, _ = workspace.create(project, directory, BRANCH)
    time.sleep(SETTLE_SECONDS)
    workspace.advance(worktree, workspace.commit(worktree, "settle"))
    return worktree


def commit(worktree: workspace.Worktree) -> workspace.Committed:
    committed = workspace.commit(worktree, "the work")
    workspace.advance(worktree, committed)
    return committed


def show(project: Path, path: str) -> str:
    return git_output(project, "show", f"{BRANCH}:{path}")


def test_an_unchanged_tree_hashes_nothing(project: Path, directory: Path) -> None:
    worktree = settled(project, directory)
    assert workspace.changes(worktree) == workspace.Changes([], [], hashed=0)
    committed = commit(worktree)
    assert (committed.commit, committed.hashed, committed.branch) == (worktree.base, 0, None)


def test_only_what_changed_is_read_and_every_kind_of_change_is_committed(project: Path, directory: Path) -> None:
    worktree = settled(project, directory)
    (directory / "gone.txt").unlink()
    (directory / "new.txt").write_text("added\n")
    (directory / "keep.txt").chmod(0o755)
    (directory / "README.md").unlink()
    (directory / "README.md").symlink_to("src/app.py")
    (directory / "link").unlink()
    (directory / "link").symlink_to("gone.txt")

    shown = workspace.changes(worktree)
    committed = commit(worktree)

    assert shown.lines == ["T README.md", "D gone.txt", "M keep.txt", "M link", "A new.txt"]
    assert shown.hashed == committed.hashed == 4  # new.txt, keep.txt and the two links; src/app.py is not read
    entries = {line.split("\t")[1]: line.split()[0] for line in git(project, "ls-tree", "-r", BRANCH).splitlines()}
    assert entries == {"README.md": "120000", "keep.txt": "100755", "link": "120000", "new.txt": "100644",
                       "src/app.py": "100644"}  # fmt: skip
    assert (show(project, "README.md"), show(project, "link"), show(project, "new.txt")) == (
        "src/app.py",
        "gone.txt",
        "added\n",
    )


def test_directories_that_go_come_or_turn_into_files_are_committed(project: Path, directory: Path) -> None:
    """The stamps are compared a directory at a time: a directory gone whole, a new one, a file that became a
    directory and back, and a file renamed within its directory are each committed as the worktree holds them,
    and only the files not recorded as they are now are read."""
    worktree = settled(project, directory)
    shutil.rmtree(directory / "src")
    (directory / "keep.txt").unlink()
    (directory / "keep.txt").mkdir()
    (directory / "keep.txt" / "inner.txt").write_text("inner\n")
    (directory / "gone.txt").rename(directory / "moved.txt")
    (directory / "lib").mkdir()
    (directory / "lib" / "x.py").write_text("x\n")
    time.sleep(SETTLE_SECONDS)  # so what the finish reads is not racy against the record it writes

    shown = workspace.changes(worktree)
    committed = commit(worktree)

    assert shown.lines == [
        "D gone.txt",
        "D keep.txt",
        "A keep.txt/inner.txt",
        "A lib/x.py",
        "A moved.txt",
        "D src/app.py",
    ]
    assert shown.hashed == committed.hashed == 3
    assert git(project, "ls-tree", "-r", "--name-only", BRANCH).split() == [
        "README.md", "keep.txt/inner.txt", "lib/x.py", "link", "moved.txt"
    ]  # fmt: skip
    shutil.rmtree(directory / "lib")
    (directory / "lib").write_text("a file again\n")
    committed = commit(worktree)
    assert committed.hashed == 1
    assert git(project, "ls-tree", "-r", "--name-only", BRANCH).split() == [
        "README.md", "keep.txt/inner.txt", "lib", "link", "moved.txt"
    ]  # fmt: skip
    assert (show(project, "lib"), show(project, "moved.txt")) == ("a file again\n", "to be deleted\n")


def test_a_continued_finish_reads_only_what_changed_since_the_last_one(project: Path, directory: Path) -> None:
    """A finish that hashed something records again every entry it trusted, and the next finish trusts them."""
    worktree = settled(project, directory)
    (directory / "README.md").write_text("first change\n")
    time.sleep(SETTLE_SECONDS)  # so README.md is not racy against the record this finish writes
    assert commit(worktree).hashed == 1
    (directory / "keep.txt").write_text("second change\n")
    committed = commit(worktree)
    assert committed.hashed == 1
    assert git(project, "diff", "--name-only", committed.parent, committed.commit) == "keep.txt"
    assert (show(project, "README.md"), show(project, "keep.txt")) == ("first change\n", "second change\n")


def test_a_worktree_finished_as_soon_as_it_is_made_reads_only_what_changed(project: Path, directory: Path) -> None:
    """Making a worktree takes its record's time once the clock is past every file it wrote, so none is racy: a
    finish right after reads only what the agent changed, even a change made at once, to the same size, with
    the old mtime given back."""
    worktree, _ = workspace.create(project, directory, BRANCH)
    path = directory / "keep.txt"
    before = path.lstat()
    with open(path, "r+b") as file:
        file.write(b"KEEP")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert workspace.changes(worktree) == workspace.Changes(["M keep.txt"], [], hashed=1)
    committed = commit(worktree)
    assert committed.hashed == 1
    assert git(project, "diff", "--name-only", committed.parent, committed.commit) == "keep.txt"
    assert show(project, "keep.txt") == "KEEP\n"


def test_stamps_stand_for_the_branch_only_while_they_are_its_tree(project: Path, directory: Path) -> None:
    """The stamps name the tree they record and stand for it, so git need not list it; once the branch moves on
    without the worktree (the person commits to it), git lists the branch's tree, and the commit still holds
    exactly what the worktree holds."""
    worktree = settled(project, directory)
    (directory / "README.md").write_text("the agent's\n")
    time.sleep(SETTLE_SECONDS)
    commit(worktree)
    elsewhere = project.parent / "elsewhere"
    git(project, "worktree", "add", "-q", str(elsewhere), BRANCH)
    (elsewhere / "keep.txt").write_text("the person's\n")
    git(elsewhere, "commit", "-q", "-am", "the person's change, on the session's branch")
    (directory / "src" / "app.py").write_text("print(2)\n")

    committed = commit(worktree)

    assert committed.hashed == 1  # app.py: keep.txt's stamps still hold, though the branch's keep.txt changed
    assert git(project, "diff", "--name-only", committed.parent, committed.commit).split() == ["keep.txt", "src/app.py"]
    assert (show(project, "keep.txt"), show(project, "README.md")) == ("keep\n", "the agent's\n")


def test_a_file_rewritten_to_its_size_and_given_back_its_mtime_is_committed(project: Path, directory: Path) -> None:
    worktree = settled(project, directory)
    path = directory / "keep.txt"
    before = path.stat()
    with open(path, "r+b") as file:  # the same inode, the same size
        file.write(b"KEEP")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only ctime says it changed
    assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    assert workspace.changes(worktree).lines == ["M keep.txt"]
    commit(worktree)
    assert show(project, "keep.txt") == "KEEP\n"


def test_a_file_written_again_in_the_tick_its_stamps_were_taken_is_read_again(project: Path, directory: Path) -> None:
    """The racy rule: stamps written in the same clock tick as a file's last write may hold the stat data of a
    content that is gone. That moment is made here by recording the file's stat data as it is now with the
    blob id of what it held before, as a record taken just before a same-tick rewrite would."""
    worktree, start = workspace.create(project, directory, BRANCH)
    path = directory / "keep.txt"
    with open(path, "r+b") as file:
        file.write(b"KEEP")
    # Its mtime is put past the record's time, so the write is one of the record's own tick however long the
    # record takes on a loaded machine.
    later = time.time_ns() + 60 * 1_000_000_000
    os.utime(path, ns=(later, later))
    with stamps.Recording(directory) as recording:
        recording.add("keep.txt", stamps.identity(path.lstat()), git(project, "rev-parse", f"{start}:keep.txt"))
        recording.close(stamp_now=True)
    assert workspace.changes(worktree).lines == ["M keep.txt"]
    commit(worktree)
    assert show(project, "keep.txt") == "KEEP\n"


DAMAGE = {
    # keep.txt's recorded blob id becomes README.md's: a record trusted anyway would commit the wrong content.
    "an entry changed": lambda record: record.replace(KEEP, README),
    "cut short": lambda record: record[: len(record) // 2],
    "without its last line": lambda record: record[: record.rindex(b"\0") + 1],
    "empty": lambda record: b"",
    "another version": lambda record: record.replace(stamps.MAGIC, b"chock-stamps 9", 1),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_stamps_are_not_trusted_and_every_file_is_read(project: Path, directory: Path, damage: str) -> None:
    worktree = settled(project, directory)
    record = stamps.path_of(directory)
    record.write_bytes(DAMAGE[damage](record.read_bytes()))
    (directory / "README.md").write_text("changed\n")
    committed = commit(worktree)
    assert committed.hashed == 5
    assert git(project, "diff", "--name-only", committed.parent, committed.commit) == "README.md"
    assert show(project, "keep.txt") == "keep\n"


def test_stamps_naming_a_file_twice_are_not_trusted(project: Path, directory: Path) -> None:
    """A record that names keep.txt twice, the second time with README.md's blob id, and says it is the base's
    tree: which entry is keep.txt cannot be known, so nothing of it is trusted and every file is read."""
    worktree = settled(project, directory)
    files = ["README.md", "gone.txt", "keep.txt", "keep.txt", "link", "src/app.py"]
    with stamps.Recording(directory) as recording:
        for path, oid in zip(files, [README, blob_id(FILES["gone.txt"]), KEEP, README], strict=False):
            recording.add(path, stamps.identity((directory / path).lstat()), oid.decode())
        for path in files[4:]:
            recording.add(path, stamps.identity((directory / path).lstat()), git(project, "rev-parse", f"HEAD:{path}"))
        recording.tree = git(project, "rev-parse", "HEAD^{tree}")  # the base's: settling made no branch
        recording.close()
    (directory / "src" / "app.py").write_text("print(2)\n")
    committed = commit(worktree)
    assert committed.hashed == 5
    assert git(project, "diff", "--name-only", committed.parent, committed.commit) == "src/app.py"
    assert show(project, "keep.txt") == "keep\n"


def test_a_record_in_place_of_the_stamps_that_is_not_a_file_is_not_followed(
    project: Path, directory: Path, tmp_path: Path
) -> None:
    worktree = settled(project, directory)
    record = stamps.path_of(directory)
    elsewhere = tmp_path / "elsewhere"
    record.rename(elsewhere)
    record.symlink_to(elsewhere)
    (directory / "README.md").write_text("changed\n")
    assert commit(worktree).hashed == 5
    assert show(project, "README.md") == "changed\n"


def test_stamps_naming_a_blob_git_no_longer_has_fall_back_to_reading_everything(project: Path, directory: Path) -> None:
    worktree = settled(project, directory)
    with stamps.Recording(directory) as recording:  # as if gc pruned keep.txt's blob
        recording.add("keep.txt", stamps.identity((directory / "keep.txt").lstat()), "1" * 40)
        recording.close()
    (directory / "README.md").write_text("changed\n")
    committed = commit(worktree)
    assert committed.hashed == 5
    assert git(project, "diff", "--name-only", committed.parent, committed.commit) == "README.md"


def test_the_stamps_are_outside_everything_the_sandbox_may_write(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "config.zon", tmp_path / "state", tmp_path / "data")
    project = make_project(tmp_path / "project", FILES)
    worktree, _ = workspace.create(project, layout.workspace_dir(SESSION), BRANCH)
    record = stamps.path_of(worktree.directory)
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    argv = for_workspace(layout, worktree).argv(["true"], bwrap="bwrap")
    writable = [Path(argv[i + 2]) for i, arg in enumerate(argv) if arg in ("--bind", "--bind-try", "--dev-bind")]
    assert writable  # the worktree, its admin dir, HOME, the knowledgebase
    for target in writable:
        assert not record.resolve().is_relative_to(target.resolve()), target
    workspace.remove(worktree, worktree.directory)
    assert not record.exists()
