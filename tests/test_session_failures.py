"""What a session does when the world does not cooperate: a full disk, a workspace removed by hand, a person
who takes a minute to decide. Real `chock run` processes, real bwrap and git; the full disk is a real tmpfs in
a private mount namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fakes.projects import git_value
from tests.fakes.sessions import new_session, write
from tests.fakes.wait import wait_until


def event_of(home, session_id, kind, where=lambda e: True):
    return next((e for e in home.events(session_id) if e["type"] == kind and where(e)), None)


def _ids_are_whole(events) -> bool:
    return [e["id"] for e in events] == list(range(1, len(events) + 1))


# A failed --continue leaves the log as it found it ------------------------------------------------------------


NOTE = {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "n.txt", "content": "1"}}]}


def _kept_session(home, project) -> str:
    """A session that ended in an error with its workspace kept: its replay runs out after one tool call."""
    home.replay_instance([NOTE])
    result = home.chock("run", "write a note", cwd=project)
    assert result.returncode == 1, result.stderr
    session_id = home.only_session()
    assert home.events(session_id)[-1]["reason"] == "error"
    return session_id


def test_continue_of_a_session_whose_workspace_was_removed_refuses_and_changes_nothing(home, project):
    session_id = _kept_session(home, project)
    workspace = home.layout.workspace_dir(session_id)
    subprocess.run(["rm", "-rf", str(workspace)], check=True)  # by hand, not `chock workspace remove`
    before = home.layout.log_path(session_id).read_bytes()

    result = home.chock("run", "--continue", session_id, "carry on", cwd=project)
    assert result.returncode == 3, result.stderr
    assert f"the workspace {workspace} of session {session_id} is gone" in result.stderr
    assert f"chock workspace remove {session_id}" in result.stderr
    assert "Traceback" not in result.stderr
    assert home.layout.log_path(session_id).read_bytes() == before  # not a byte more
    row = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert (row["status"], row["end_reason"]) == ("ended", "error")

    # The way out the refusal names works: the removal is recorded, and the session carries on from its branch.
    assert home.chock("workspace", "remove", session_id).returncode == 0
    home.replay_instance([NOTE, {"text": "Done.", "tool_calls": []}])  # a replay resumes after what was played
    finished = home.chock("run", "--continue", session_id, "carry on", cwd=project)
    assert finished.returncode == 0, finished.stderr


def test_continue_of_a_session_whose_admin_dir_is_gone_refuses_and_changes_nothing(home, project):
    session_id = _kept_session(home, project)
    admin = event_of(home, session_id, "workspace.open")["admin"]
    subprocess.run(["rm", "-rf", admin], check=True)
    before = home.layout.log_path(session_id).read_bytes()
    result = home.chock("run", "--continue", session_id, "carry on", cwd=project)
    assert result.returncode == 3 and "admin directory" in result.stderr, result.stderr
    assert home.layout.log_path(session_id).read_bytes() == before


# A full disk mid-session ------------------------------------------------------------------------------------

# Each call prints about 60 KB, so each `tool.result` is a large line; a dozen of them do not fit in what the
# tmpfs leaves free, and all of them fit once the filler is gone.
LOUD = "python3 -c \"print('x' * 60000)\""
CALLS = 12


def _on_a_full_disk(home, project, out: Path, then: str) -> None:
    """`chock run --yes "print a lot"` with the state dir on a 4 MiB tmpfs that 700 KiB are left of (its output
    in OUT/first.*, the session's id in $id), then the shell lines `then` (which may name {state} and {out}), in
    one private mount namespace: the tmpfs lives as long as the script."""
    state = home.layout.state
    state.mkdir(parents=True, exist_ok=True)
    out.mkdir()
    script = textwrap.dedent(f"""
        set -u
        mount -t tmpfs -o size=4m,mode=0700 tmpfs {state}
        head -c $((4096 * 1024 - 700 * 1024)) /dev/zero > {state}/filler || true
        cd {project}
        {sys.executable} -m chock run --yes "print a lot" > {out}/first.out 2> {out}/first.err
        echo $? > {out}/first.code
        id=$(ls {state}/sessions | head -n 1)
    """) + textwrap.dedent(then).format(state=state, out=out, python=sys.executable)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        env=home.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


# With a background command still running when the disk fills, the end must not wait behind the
# `background.end` it would log first: only the end fits in the reserve.
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "with-background"])
def test_a_full_disk_mid_session_is_one_sentence_and_the_session_carries_on_once_there_is_room(
    home, project, tmp_path, background
):
    entries = [
        {"text": "", "tool_calls": [{"call_id": f"c{n}", "name": "shell", "args": {"command": LOUD}}]}
        for n in range(CALLS)
    ]
    if background:
        sleeper = {"call_id": "bg", "name": "shell", "args": {"command": "sleep 100", "background": True}}
        entries[0]["tool_calls"].insert(0, sleeper)
    home.replay_instance([*entries, {"text": "All printed.", "tool_calls": []}])
    out = tmp_path / "out"
    _on_a_full_disk(
        home,
        project,
        out,
        """
        cp {state}/sessions/$id/log.jsonl {out}/after-failure.jsonl
        rm {state}/filler
        {python} -m chock run --yes --continue "$id" > {out}/second.out 2> {out}/second.err
        echo $? > {out}/second.code
        cp {state}/sessions/$id/log.jsonl {out}/final.jsonl
    """,
    )

    first_err = (out / "first.err").read_text()
    assert (out / "first.code").read_text().strip() == "1", first_err
    lines = [line for line in first_err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in first_err, first_err
    assert lines[0].startswith("chock: could not write to the session log ") and "No space left" in lines[0]
    assert "chock run --continue" in lines[0]

    failed = [json.loads(line) for line in (out / "after-failure.jsonl").read_text().splitlines()]
    assert _ids_are_whole(failed)  # whole lines only: nothing torn was left
    assert failed[-1]["type"] == "session.end" and failed[-1]["reason"] == "error"  # the end still fitted
    shown = sum(1 for e in failed if e["type"] == "tool.result")
    assert 0 < shown < CALLS

    second_err = (out / "second.err").read_text()
    assert (out / "second.code").read_text().strip() == "0", second_err
    final = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    assert _ids_are_whole(final)
    assert final[-1]["type"] == "session.end" and final[-1]["reason"] == "completed"
    assert sum(1 for e in final if e["type"] == "tool.call") >= CALLS


def test_a_workspace_is_removed_on_a_full_disk_which_is_how_a_person_makes_room(home, project, tmp_path):
    home.replay_instance([
        NOTE,
        *[{"text": "", "tool_calls": [{"call_id": f"c{n}", "name": "shell", "args": {"command": LOUD}}]}
          for n in range(2, CALLS)],
        {"text": "All printed.", "tool_calls": []},
    ])  # fmt: skip
    out = tmp_path / "out"
    _on_a_full_disk(
        home,
        project,
        out,
        """
        {python} -m chock workspace remove "$id" > {out}/remove.out 2> {out}/remove.err
        echo $? > {out}/remove.code
        df -k --output=avail {state} | tail -n 1 > {out}/free
        cp {state}/sessions/$id/log.jsonl {out}/final.jsonl
    """,
    )
    assert int((out / "free").read_text()) < 256, "the disk is still full: the log has no room for a reserve"
    assert (out / "remove.code").read_text().strip() == "0", (out / "remove.err").read_text()
    final = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    assert _ids_are_whole(final)
    assert final[-2]["type"] == "session.end" and final[-1]["type"] == "workspace.close"
    assert final[-1]["removed"] is True and final[-1]["branch"].startswith("chock/")
    assert git_value(project, "show", f"{final[-1]['branch']}:n.txt") == "1"  # the work is on its branch


# A person who takes a minute to decide ------------------------------------------------------------------------


@pytest.mark.slow
def test_chock_approve_idle_for_60_s_then_answering_lands(home, project):
    import pty

    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo approved-late"}}]},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    session = home.spawn(
        "run", "one command", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        session_id = new_session(home)  # its log, not only its directory: its events are read next
        wait_until(lambda: event_of(home, session_id, "approval.request"), what="the approval request")
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(project)
            os.execve(sys.executable, [sys.executable, "-m", "chock", "approve", session_id], home.env)
        screen = b""
        while b"Approve?" not in screen:
            screen += os.read(fd, 4096)
        time.sleep(60)  # the person thinks it over, the connection idle all the while
        os.write(fd, b"y\r")
        while b"approved" not in screen:
            screen += os.read(fd, 4096)
        os.waitpid(pid, 0)
        os.close(fd)
        assert session.wait(60) == 0, session.stderr.read()
    finally:
        session.kill()
    answer = event_of(home, session_id, "approval.answer")
    assert (answer["answer"], answer["via"]) == ("yes", "socket")
    assert "approved-late" in event_of(home, session_id, "tool.result")["output"]


def test_a_worktree_left_after_its_close_was_logged_is_removed_by_the_next_continue(home, project):
    """A crash between `workspace.close` (synced) and the worktree's removal leaves the worktree on disk while the
    log says its work is on the branch (docs/log.md#durability): the next owner clears it and carries on."""
    home.replay_instance([
        {"text": "", "tool_calls": [write("a.txt", "A")]},
        {"text": "Done.", "tool_calls": []},
        {"text": "Again.", "tool_calls": []},
    ])  # fmt: skip
    assert home.chock("run", "--yes", "write a", cwd=project).returncode == 0
    session_id = home.only_session()
    opened = next(e for e in home.events(session_id) if e["type"] == "workspace.open")
    subprocess.run(  # what the crash left: the worktree as git made it, at the recorded place
        ["git", "-C", str(project), "worktree", "add", "-q", "--detach", opened["directory"], f"chock/{session_id}"],
        check=True,
    )
    continued = home.chock("run", "--continue", session_id, "--yes", "again", cwd=project)
    assert continued.returncode == 0, continued.stderr
    assert home.events(session_id)[-1]["reason"] == "completed"
    assert not os.path.exists(opened["directory"])
