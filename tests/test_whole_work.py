"""A session's whole work: its base, a branch only when the work differs from it, and the diff on the event that
records the branch (docs/log.md, `workspace.close`), with real git and real `chock run` sessions (replay)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.log.fold import fold
from chock.session import wholediff
from chock.session.hostgit import Repo
from tests.fakes.projects import git, git_value, make_project
from tests.fakes.sessions import write

DONE = {"text": "Done.", "tool_calls": []}


def closes(home, session_id: str) -> list[dict]:
    return [e for e in home.events(session_id) if e["type"] == "workspace.close"]


def opens(home, session_id: str) -> list[dict]:
    return [e for e in home.events(session_id) if e["type"] == "workspace.open"]


def commit_to_main(project: Path, name: str, text: str) -> str:
    """The person moves on: a commit on their own branch, so HEAD is no longer the session's base."""
    (project / name).write_text(text)
    git(project, "add", name)
    git(project, "commit", "-q", "-m", f"person: {name}")
    return git_value(project, "rev-parse", "HEAD")


# Sessions ---------------------------------------------------------------------------------------------------


def test_a_session_that_changed_nothing_makes_no_branch_and_says_so(home, project):
    home.replay_instance([DONE])
    ran = home.chock("run", "--yes", "look around", cwd=project)
    assert ran.returncode == 0 and "changes committed" not in ran.stdout + ran.stderr
    assert "no changes: the work equals its base, so no branch was made" in ran.stdout
    session_id = home.only_session()
    [close] = closes(home, session_id)
    assert close["branch"] is None and close["commit"] is None
    assert "diff" not in close and "files" not in close
    assert git_value(project, "branch", "--list", f"chock/{session_id}") == ""
    assert not home.layout.workspace_dir(session_id).exists()
    [opened] = opens(home, session_id)
    assert opened["base"] == opened["commit"] == git_value(project, "rev-parse", "HEAD")


def test_the_whole_diff_across_a_continue_is_against_the_first_base(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [write("notes.txt", "one\n")]},
        DONE,
        {"text": "", "tool_calls": [write("more.txt", "two\n")]},
        DONE,
    ])  # fmt: skip
    base = git_value(project, "rev-parse", "HEAD")
    assert home.chock("run", "--yes", "write notes", cwd=project).returncode == 0
    session_id = home.only_session()
    commit_to_main(project, "person.txt", "mine\n")  # HEAD moves on: the session's base does not
    continued = home.chock("run", "--continue", session_id, "--yes", "and more", cwd=project)
    assert continued.returncode == 0, continued.stderr

    assert [e["base"] for e in opens(home, session_id)] == [base, base]
    first, last = closes(home, session_id)
    branch = f"chock/{session_id}"
    assert first["branch"] == last["branch"] == branch and last["commit"] == git_value(project, "rev-parse", branch)
    assert last["base"] == base
    assert [(f["status"], f["path"], f["added"], f["deleted"]) for f in last["files"]] == [
        ("A", "more.txt", 1, 0),
        ("A", "notes.txt", 1, 0),
    ]
    assert last["diff"] == git(project, "diff", base, branch)  # the whole work, as git shows it
    assert "+++ b/more.txt" in last["diff"] and "+++ b/notes.txt" in last["diff"]
    assert "person.txt" not in last["diff"]
    assert [f["path"] for f in first["files"]] == ["notes.txt"]


def test_a_session_with_no_branch_continues_from_its_base(home, project):
    home.replay_instance([DONE, {"text": "", "tool_calls": [write("late.txt", "late\n")]}, DONE])
    base = git_value(project, "rev-parse", "HEAD")
    assert home.chock("run", "--yes", "nothing yet", cwd=project).returncode == 0
    session_id = home.only_session()
    commit_to_main(project, "person.txt", "mine\n")
    continued = home.chock("run", "--continue", session_id, "--yes", "now write", cwd=project)
    assert continued.returncode == 0, continued.stderr

    second = opens(home, session_id)[1]
    assert second["commit"] == second["base"] == base  # not the person's new HEAD
    close = closes(home, session_id)[-1]
    assert close["branch"] == f"chock/{session_id}" and close["base"] == base
    assert [f["path"] for f in close["files"]] == ["late.txt"]
    assert git_value(project, "rev-parse", f"chock/{session_id}^") == base


def test_workspace_remove_of_a_kept_workspace_that_changed_nothing_makes_no_branch(home, project):
    home.replay_instance(
        [{"text": "", "tool_calls": [{"call_id": "s", "name": "shell", "args": {"command": "false"}}]}]
    )
    home.write_config(
        '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }, .approvals = .{ .shell = "deny" } }\n'
    )
    home.chock("run", "look", cwd=project)  # the replay runs out: the session fails, its workspace kept
    session_id = home.only_session()
    assert home.layout.workspace_dir(session_id).is_dir()
    removed = home.chock("workspace", "remove", session_id, cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert "no changes" in removed.stdout
    assert closes(home, session_id)[-1]["branch"] is None
    assert git_value(project, "branch", "--list", f"chock/{session_id}") == ""


# Old logs ------------------------------------------------------------------------------------------------------


def test_a_log_older_than_base_takes_its_first_workspace_opens_commit():
    """Before `base` was logged, every session's branch was made at its first workspace.open's commit: that commit
    is its base, and a later open (a continue from the branch) does not move it."""
    state = fold([
        {"id": 1, "type": "session.start", "session": "s"},
        {"id": 2, "type": "workspace.open", "directory": "/w/s", "commit": "a" * 40},
        {"id": 3, "type": "workspace.close", "branch": "chock/s", "commit": "b" * 40},
        {"id": 4, "type": "session.end", "reason": "completed"},
        {"id": 5, "type": "workspace.open", "directory": "/w/s", "commit": "b" * 40},
    ])  # fmt: skip
    assert state.workspace_base == "a" * 40 and state.workspace_commit == "b" * 40
    assert state.branch == "chock/s"
    with_null = fold([{"id": 1, "type": "workspace.close", "branch": None, "commit": None}])
    assert with_null.branch == ""


# Bounds and a hostile config -----------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    project = make_project(tmp_path / "repo", {"README.md": "hello\n"})
    return Repo(git_dir=project / ".git", common_dir=project / ".git", work_tree=project)


def commit_all(repo: Repo) -> str:
    git(repo.work_tree, "add", "-A")
    git(repo.work_tree, "commit", "-q", "-m", "work")
    return git_value(repo.work_tree, "rev-parse", "HEAD")


def test_a_large_diff_is_cut_the_files_past_the_bound_counted_and_a_binary_named(repo: Repo):
    base = git_value(repo.work_tree, "rev-parse", "HEAD")
    many = repo.work_tree / "many"
    many.mkdir()
    for n in range(1100):
        (many / f"f{n:04}.txt").write_text(f"{n}\n")
    (repo.work_tree / "big.txt").write_text("".join(f"line {n:06} of a large file\n" for n in range(12000)))
    (repo.work_tree / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0binary")
    commit = commit_all(repo)

    whole = wholediff.whole(repo, base, commit)

    full = git(repo.work_tree, "diff", base, commit).encode()
    assert len(full) > 300 * 1024
    assert whole["diff_truncated"] is True
    assert len(whole["diff"].encode()) <= wholediff.DIFF_BYTES and whole["diff"].endswith("\n")
    assert full.startswith(whole["diff"].encode())
    assert len(whole["files"]) == 1000 and whole["files_left_out"] == 102  # 1,102 files in all
    listed = {f["path"]: f for f in whole["files"]}
    assert listed["logo.png"] == {"path": "logo.png", "status": "A", "added": None, "deleted": None, "binary": True}
    assert listed["big.txt"]["added"] == 12000 and not listed["big.txt"]["binary"]
    assert whole["base"] == base


def test_a_small_diff_is_whole(repo: Repo):
    base = git_value(repo.work_tree, "rev-parse", "HEAD")
    (repo.work_tree / "README.md").write_text("hello, world\n")
    commit = commit_all(repo)
    whole = wholediff.whole(repo, base, commit)
    assert whole == {
        "base": base,
        "diff": git(repo.work_tree, "diff", base, commit),
        "files": [{"path": "README.md", "status": "M", "added": 1, "deleted": 1, "binary": False}],
    }


def test_a_hostile_repository_config_changes_nothing_in_the_diff(repo: Repo, tmp_path: Path):
    """An external diff, a textconv filter, a pager, colour and the other settings that shape `git diff` are
    the project's own config: none of them runs, and the diff is git's plain one."""
    base = git_value(repo.work_tree, "rev-parse", "HEAD")
    (repo.work_tree / "README.md").write_text("hello, world\n")
    (repo.work_tree / "data.bin").write_text("text the driver would turn\n")
    commit = commit_all(repo)
    plain = wholediff.whole(repo, base, commit)
    ran = tmp_path / "ran"
    ran.mkdir()
    order = tmp_path / "order-fifo"
    subprocess.run(["mkfifo", str(order)], check=True)  # git would block opening it
    hostile = {
        "diff.external": f"sh -c 'touch {ran}/external' --",
        "diff.evil.textconv": f"sh -c 'touch {ran}/textconv; tr a-z A-Z' --",
        "diff.evil.command": f"sh -c 'touch {ran}/driver' --",
        "core.pager": f"sh -c 'touch {ran}/pager; cat'",
        "pager.diff": f"sh -c 'touch {ran}/pager; cat'",
        "color.ui": "always",
        "color.diff": "always",
        "diff.noprefix": "true",
        "diff.mnemonicPrefix": "true",
        "diff.renames": "copies",
        "diff.relative": "true",
        "diff.context": "0",
        "diff.orderFile": str(order),
        "diff.suppressBlankEmpty": "true",
        "core.attributesFile": str(tmp_path / "attributes"),
    }
    for key, value in hostile.items():
        git(repo.work_tree, "config", key, value)
    (tmp_path / "attributes").write_text("* diff=evil\n")
    (repo.work_tree / ".git" / "info").mkdir(exist_ok=True)
    (repo.work_tree / ".git" / "info" / "attributes").write_text("* diff=evil\n")

    assert wholediff.whole(repo, base, commit) == plain
    assert list(ran.iterdir()) == []
    assert "\x1b" not in plain["diff"] and "+++ b/README.md" in plain["diff"]


# remove-with-workspace ----------------------------------------------------------------------------------------


def test_remove_with_workspace_through_the_daemon_commits_the_kept_work_then_removes_both(home, project, daemon):
    from tests.fakes.sessions import replay_config, wait_for_event

    entries = [
        {"text": "", "tool_calls": [
            write("kept.txt", "k\n"), {"call_id": "s1", "name": "shell", "args": {"command": "sleep 60"}},
        ]},
        DONE,
    ]  # fmt: skip
    replay_config(home, entries, shell="allow")
    session_id = daemon.client.call(dp.StartRequest(str(project), "work")).session_id
    wait_for_event(home, session_id, "tool.call", lambda e: e.get("call_id") == "s1")
    daemon.client.call(dp.StopRequest(str(project), session_id))
    assert home.layout.workspace_dir(session_id).is_dir()
    plain = home.chock("sessions", "remove", session_id, "--daemon", daemon.address, cwd=project)
    assert plain.returncode != 0 and "keeps its workspace" in plain.stderr

    removed = home.chock("sessions", "remove", "--with-workspace", session_id, "--daemon", daemon.address, cwd=project)

    assert removed.returncode == 0, removed.stderr + daemon.stderr
    assert not home.layout.session_dir(session_id).exists()
    assert not home.layout.workspace_dir(session_id).exists()
    assert git_value(project, "show", f"chock/{session_id}:kept.txt") == "k"


def test_a_session_from_an_older_chock_continues_with_its_first_commit_as_its_base(home, project):
    """An older Chock made `chock/<id>` when the session started and logged no `base`: continuing such a log works
    from its branch, and the whole diff is against the first workspace.open's commit."""
    home.replay_instance([DONE, {"text": "", "tool_calls": [write("late.txt", "late\n")]}, DONE])
    base = git_value(project, "rev-parse", "HEAD")
    assert home.chock("run", "--yes", "nothing yet", cwd=project).returncode == 0
    session_id = home.only_session()
    log = home.layout.log_path(session_id)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for event in lines:
        event.pop("base", None)  # as an older Chock wrote it
        if event["type"] == "workspace.close":
            event.update(branch=f"chock/{session_id}", commit=base)
    log.write_text("".join(json.dumps(event) + "\n" for event in lines))
    git(project, "branch", f"chock/{session_id}", base)  # made at the start, equal to it
    commit_to_main(project, "person.txt", "mine\n")
    continued = home.chock("run", "--continue", session_id, "--yes", "now write", cwd=project)
    assert continued.returncode == 0, continued.stderr

    second = opens(home, session_id)[-1]
    assert second["base"] == second["commit"] == base
    close = closes(home, session_id)[-1]
    assert close["branch"] == f"chock/{session_id}" and close["base"] == base
    assert [f["path"] for f in close["files"]] == ["late.txt"]
