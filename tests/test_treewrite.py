"""Writing only the trees that change (chock.session.treewrite), checked against git's own index and
write-tree on the same changes, with real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chock.session import treewrite
from chock.session.hostgit import GitFailed, Repo
from tests.fakes.projects import git_value as git
from tests.fakes.projects import make_project

FILES = {
    "README.md": "hello\n",
    "a": "a file that becomes a directory\n",
    "d/x.txt": "x\n",
    "d/e/y.txt": "y\n",
    "d/e/z.txt": "z\n",
    "only/one.txt": "the only file of its directory\n",
    "src/app.py": "print(1)\n",
    "src-old/keep.py": "a name that sorts after src/ in git's order\n",
}


def blob(project: Path, text: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(project), "hash-object", "-w", "--stdin"],
        input=text.encode(),
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().strip()


def by_git(project: Path, base_tree: str, changed: dict[str, str | None], tmp_path: Path) -> str:
    """The tree git's own index makes of `base_tree` with `changed` applied."""
    index = str(tmp_path / "git-index")
    environment = {"GIT_INDEX_FILE": index, "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "-C", str(project), "read-tree", base_tree], env=environment, check=True)
    zero = "0" * 40
    listed = "".join(
        f"0 {zero}\t{path}\0" if key is None else f"{key[:6]} {key[6:]}\t{path}\0" for path, key in changed.items()
    )
    subprocess.run(
        ["git", "-C", str(project), "update-index", "-z", "--index-info"],
        input=listed.encode(),
        env=environment,
        check=True,
    )
    done = subprocess.run(["git", "-C", str(project), "write-tree"], env=environment, capture_output=True, check=True)
    return done.stdout.decode().strip()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project", FILES)


def repo(project: Path) -> Repo:
    git_dir = Path(git(project, "rev-parse", "--absolute-git-dir"))
    return Repo(git_dir=git_dir, common_dir=git_dir, work_tree=project)


CHANGES = {
    "a file changed at the top": lambda new: {"README.md": new},
    "a file changed deep down": lambda new: {"d/e/y.txt": new},
    "files added in new directories": lambda new: {"n/m/o.txt": new, "n/p.txt": new, "z.txt": new},
    "a directory emptied goes away": lambda new: {"only/one.txt": None},
    "every file of a subtree deleted": lambda new: {"d/x.txt": None, "d/e/y.txt": None, "d/e/z.txt": None},
    "a file becomes a directory": lambda new: {"a": None, "a/inside.txt": new},
    "a directory becomes a file": lambda new: {"only/one.txt": None, "only": new},
    "an executable and a symlink": lambda new: {"src/run": "100755" + new[6:], "src/link": "120000" + new[6:]},
    "names that sort around a directory": lambda new: {"src.txt": new, "src-old/keep.py": None, "src/z": new},
}


@pytest.mark.parametrize("change", CHANGES)
def test_the_tree_written_is_the_one_git_writes_from_an_index(project: Path, tmp_path: Path, change: str) -> None:
    base_tree = git(project, "rev-parse", "HEAD^{tree}")
    changed = CHANGES[change]("100644" + blob(project, "new content\n"))
    built = treewrite.build(repo(project), base_tree, changed)
    assert built == by_git(project, base_tree, changed, tmp_path)
    assert git(project, "cat-file", "-t", built) == "tree"  # written, not only computed


def test_no_change_is_the_base_tree(project: Path) -> None:
    base_tree = git(project, "rev-parse", "HEAD^{tree}")
    assert treewrite.build(repo(project), base_tree, {}) == base_tree


def test_a_blob_the_repository_does_not_hold_is_refused(project: Path) -> None:
    base_tree = git(project, "rev-parse", "HEAD^{tree}")
    with pytest.raises(GitFailed, match="mktree"):
        treewrite.build(repo(project), base_tree, {"d/e/y.txt": "100644" + "1" * 40})
