"""Moving a session: what each side is left with when the last step on the source dies, and a session coming back
to another clone than the one it began in (docs/remote.md#moving-a-session). Two real daemons on this machine, A
and B (B in a UTS namespace of its own, named `hostb`), as tests/test_move_cuts.py sets them up; a move's child is
killed with SIGKILL at the write that matters by a `sitecustomize.py` on A's daemon's PYTHONPATH, never by
sleeping."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from tests.conftest import Home
from tests.fakes.projects import git, git_value
from tests.fakes.sessions import replay_config, replayed_terminal_session, wait_for_event
from tests.fakes.wait import wait_until
from tests.test_move_children import SLOW as CHILD_SLOW
from tests.test_move_children import (
    _move_in,
    _move_out,
    _relay,
    hosts,  # noqa: F401 - the fixture: two Chock homes, two clones
)
from tests.test_move_cuts import (
    ADOPT_HERE,
    HOST_B,
    Pair,
    _dies,
    pair,  # noqa: F401 - the fixture: A and B
)

# The second model call waits, so `chock move` reaches the session while it runs; the third runs on B.
SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "", "delay": 10,
     "tool_calls": [{"call_id": "c2", "name": "write_file", "args": {"path": "b.txt", "content": "B"}}]},
    *[{"text": "Both written.", "tool_calls": []}] * 6,
]  # fmt: skip
MOVED_END = (b'"type": "session.end"', b'"reason": "moved"')


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _running_on_a(two: Pair) -> tuple[str, Path]:
    """A session A's daemon runs, waiting in its second (slow) model call with a.txt written in its worktree; and
    that worktree."""
    replay_config(two.home, SLOW)
    session_id = two.a.client.call(dp.StartRequest(str(two.here), "write two files")).session_id
    log = two.log(two.env_a, session_id)
    wait_until(lambda: log.exists() and b'"type": "tool.result"' in log.read_bytes(), 60, "its first tool's result")
    opened = next(e for e in _events(log) if e["type"] == "workspace.open")
    return session_id, Path(opened["directory"])


def _row(two: Pair, env: dict[str, str], project: Path, session_id: str) -> dict:
    listed = two.home.chock("sessions", "--json", cwd=project, env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    return next(row for row in rows if row["id"] == session_id)


def _worktrees(project: Path) -> str:
    return git(project, "worktree", "list", "--porcelain")


@pytest.mark.parametrize(
    "when, needles",
    [("before", ADOPT_HERE), ("after", ADOPT_HERE), ("after", MOVED_END)],
    ids=["before-its-adopt", "between-its-lines", "before-the-worktree-goes"],
)
def test_the_sources_last_step_killed_leaves_the_target_the_one_owner(pair, when, needles):  # noqa: F811
    """`chock run --moved` killed before it writes, between its two lines, or before it removes the worktree: B
    is the one owner; `chock move` says B has it and how to finish; A's `--continue` refuses naming B; `chock
    sessions` on both says it is B's; and re-running `chock move` (or `chock sessions remove`, once A's copy
    says it moved) leaves nothing of it on A — no log, no worktree, nothing git still lists."""
    two = pair(a_dies=_dies("--moved", when, needles))
    session_id, worktree = _running_on_a(two)
    cut = two.move(session_id, two.b.address)
    assert cut.returncode == 1, cut.stderr
    assert f"session {session_id} moved to {two.b.address}" in cut.stderr, cut.stderr
    assert "`chock run --moved` was killed by signal 9" in cut.stderr, cut.stderr
    assert f"`chock move {session_id} --to {two.b.address}` again ends it on local" in cut.stderr, cut.stderr
    wait_until(lambda: two.status(two.b, session_id) == "ended", 60, "the session to end on B")
    assert git_value(two.there, "show", f"chock/{session_id}:b.txt") == "B"  # all of A's work, and B's ending

    refused = two.go_on(two.env_a, two.here, session_id)
    assert refused.returncode == 3, refused.stderr
    assert HOST_B in refused.stderr, refused.stderr
    assert two.status(two.b, session_id) == "ended"
    row_a = _row(two, two.env_a, two.here, session_id)
    assert (row_a["status"], row_a["end_to"]) == ("moved" if needles == MOVED_END else "handed-over", HOST_B)
    assert _row(two, two.env_b, two.there, session_id)["status"] == "ended"
    listed = two.home.chock("sessions", cwd=two.here, env=two.env_a).stdout
    went = f"moved to {HOST_B}" if needles == MOVED_END else f"moved out to {HOST_B}, which may hold it"
    assert went in listed, listed

    if needles == MOVED_END:  # A's copy says it moved: history, which `chock sessions remove` removes
        done = two.home.chock("sessions", "remove", session_id, cwd=two.here, env=two.env_a)
    else:  # A's copy is handed over to B: the move, again, finds B holding it and ends it on A
        done = two.move(session_id, two.b.address)
    assert done.returncode == 0, done.stderr
    assert not worktree.exists()
    assert str(worktree) not in _worktrees(two.here)
    if needles != MOVED_END:
        assert f"session {session_id} is on {two.b.address}: ended it on local" in done.stdout, done.stderr
        assert _row(two, two.env_a, two.here, session_id)["status"] == "moved"
        assert two.home.chock("sessions", "remove", session_id, cwd=two.here, env=two.env_a).returncode == 0
    assert two.status(two.a, session_id) is None
    assert two.status(two.b, session_id) == "ended"
    assert subprocess.run(["git", "-C", str(two.there), "worktree", "prune"], check=True).returncode == 0


# Coming back to another clone ------------------------------------------------------------------------------


def _listed(home: Home, project: Path) -> dict[str, dict]:
    listed = home.chock("sessions", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    return {row["id"]: row for row in map(json.loads, listed.stdout.splitlines())}


@pytest.mark.parametrize("answer", ["said", "lost", "lost, first clone gone"])
def test_a_session_coming_back_to_another_clone_leaves_nothing_in_the_first(hosts, tmp_path, answer):  # noqa: F811
    """A → B → A, back into a second clone on A holding the base: A keeps its old log as `log.jsonl.moved-1`; the
    session is the second clone's (its branch holds A's and B's work, `chock sessions` there lists it, and it
    carries on there); the first clone lists it as no live session of its own and keeps no worktree of it — also
    when B's answer to the first move was lost, so that A's step 1 kept the worktree (in the first clone), and
    when the first clone is gone by the time the session comes back."""
    a, b, project_a, project_b = hosts
    second = tmp_path / "a" / "second"
    subprocess.run(["git", "clone", "-q", str(project_a), str(second)], check=True)
    process, session_id = replayed_terminal_session(a, project_a, CHILD_SLOW)
    wait_for_event(a, session_id, "tool.result", lambda e: e["call_id"] == "c1")  # waits in the slow model call
    sent = _move_out(a, session_id, "hostb")
    assert process.wait(30) == 8
    kept = a.layout.workspace_dir(session_id)
    assert str(kept) in _worktrees(project_a)
    b.replay_instance(CHILD_SLOW)
    _relay(a, b, session_id, sent)
    taken = _move_in(b, session_id, project_b, "hosta", "--running")
    assert taken.returncode == 0, taken.stderr  # it carried on there, to its end
    if answer == "said":
        assert a.chock("run", "--moved", session_id, "--to", "hostb").returncode == 0

    gone = answer.endswith("gone")
    if gone:
        shutil.rmtree(project_a)
    back = _move_out(b, session_id, "hosta")
    _relay(b, a, session_id, back)
    came = _move_in(a, session_id, second, "hostb")
    assert came.returncode == 0, came.stderr
    assert a.layout.log_path(session_id).with_name("log.jsonl.moved-1").exists()
    assert not kept.exists()
    assert gone or str(kept) not in _worktrees(project_a)  # nothing git still lists there, prunable or not
    assert git_value(second, "show", f"chock/{session_id}:b.txt") == "B"
    assert _listed(a, second)[session_id]["project"] == str(second.resolve())
    assert _listed(a, second)[session_id]["status"] == "ended"
    assert gone or session_id not in _listed(a, project_a)

    a.replay_instance([{"text": "More done.", "tool_calls": []}] * 6)
    done = a.chock("run", "--yes", "--continue", session_id, "more", cwd=second)
    assert done.returncode == 0, done.stderr
    assert a.events(session_id)[-1]["reason"] == "completed"
    assert gone or str(kept) not in _worktrees(project_a)
    assert git_value(second, "show", f"chock/{session_id}:a.txt") == "A"
    removed = a.chock("sessions", "remove", session_id, cwd=second)
    assert removed.returncode == 0, removed.stderr
    assert not a.layout.session_dir(session_id).exists()


def test_a_session_whose_last_step_died_between_its_lines_comes_back(pair):  # noqa: F811
    """`chock run --moved` killed between its adopt and its end leaves A's log with a span no end closes; moved back
    from B, A takes all before that span as the log it left: it keeps its old log as `log.jsonl.moved-1`, takes B's,
    which begins with all of A's but that span, and the worktree the dead step left goes."""
    two = pair(a_dies=_dies("--moved", "after", ADOPT_HERE))
    session_id, worktree = _running_on_a(two)
    assert two.move(session_id, two.b.address).returncode == 1
    wait_until(lambda: two.status(two.b, session_id) == "ended", 60, "the session to end on B")
    left = two.log(two.env_a, session_id).read_bytes()
    assert json.loads(left.splitlines()[-1])["type"] == "session.adopt"  # the span the kill left open

    back = two.move(session_id, "local", source=("--daemon", two.b.address), project=two.here)
    assert back.returncode == 0, back.stderr
    assert two.status(two.a, session_id) == "ended"
    assert two.status(two.b, session_id) == "moved"
    assert two.log(two.env_a, session_id).with_name("log.jsonl.moved-1").read_bytes() == left
    came = two.log(two.env_a, session_id).read_bytes()
    assert came.startswith(left[: left.rindex(b"\n", 0, len(left) - 1) + 1])  # all but the open span
    assert not worktree.exists() and str(worktree) not in _worktrees(two.here)
    assert git_value(two.here, "show", f"chock/{session_id}:b.txt") == "B"


def test_a_move_back_whose_last_step_died_too_leaves_one_owner_and_a_move_again_ends_it(pair):  # noqa: F811
    """Both last steps killed between their lines: A's as the session goes to B, then B's as it comes back. A holds
    it (the move back's adopt is A's), B's copy is a span no end closes after its handover to A, and `chock move`
    again, from B, finds A holding it and ends it on B; A's log tells the whole story once."""
    two = pair(a_dies=_dies("--moved", "after", ADOPT_HERE), b_dies=_dies("--moved", "after", ADOPT_HERE))
    session_id, _ = _running_on_a(two)
    assert two.move(session_id, two.b.address).returncode == 1
    wait_until(lambda: two.status(two.b, session_id) == "ended", 60, "the session to end on B")

    back = two.move(session_id, "local", source=("--daemon", two.b.address), project=two.here)
    assert back.returncode == 1, back.stderr
    assert "`chock run --moved` was killed by signal 9" in back.stderr, back.stderr
    left = two.log(two.env_b, session_id).read_bytes()
    assert json.loads(left.splitlines()[-1])["type"] == "session.adopt"  # B's span the kill left open
    assert two.status(two.a, session_id) == "ended"

    again = two.move(session_id, "local", source=("--daemon", two.b.address), project=two.here)
    assert again.returncode == 0, again.stderr
    assert two.status(two.b, session_id) == "moved"
    assert two.status(two.a, session_id) == "ended"
    refused = two.go_on(two.env_b, two.there, session_id)
    assert refused.returncode == 3 and f"moved to {socket.gethostname()}" in refused.stderr, refused.stderr
    events = _events(two.log(two.env_a, session_id))
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    moves = [(e["type"], e.get("from", e.get("reason"))) for e in events if e.get("via") == "move" or "to" in e]
    assert moves[-2:] == [("session.end", "handover"), ("session.adopt", HOST_B)], moves
    assert git_value(two.here, "show", f"chock/{session_id}:b.txt") == "B"


def test_a_moved_sessions_leftover_worktree_goes_with_it_once_its_project_is_gone(pair, tmp_path):  # noqa: F811
    """The source's last step killed before it removed the worktree, and then the project itself deleted: `chock
    sessions remove` still removes the session and the worktree Chock made for it (its work is on B's branch)."""
    two = pair(a_dies=_dies("--moved", "after", MOVED_END))
    session_id, worktree = _running_on_a(two)
    assert two.move(session_id, two.b.address).returncode == 1
    wait_until(lambda: two.status(two.b, session_id) == "ended", 60, "the session to end on B")
    assert worktree.exists()
    shutil.rmtree(two.here)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = two.home.chock("sessions", "remove", session_id, cwd=elsewhere, env=two.env_a)
    assert done.returncode == 0, done.stderr
    assert not worktree.exists()
    assert two.status(two.a, session_id) is None
