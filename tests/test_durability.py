"""The log is written ahead of what it authorises (docs/log.md#durability), seen in the system calls of a real
`chock run` under strace: a replay session whose shell command runs under real bwrap and whose work is committed
by real git."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import isolated_home
from tests.fakes.projects import make_project
from tests.fakes.syscalls import Call, Trace, traced

SCRIPT = [
    {"text": "Looking.", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo ran-c1"}}]},
    {"text": "Writing.", "tool_calls": [
        {"call_id": "c2", "name": "write_file", "args": {"path": "deep/new/notes.txt", "content": "one\ntwo\n"}},
        {"call_id": "c3", "name": "edit_file", "args": {"path": "app.py", "old": "hello", "new": "hello, world"}},
        {"call_id": "c4", "name": "scratchpad", "args": {"action": "write", "text": "remember this"}},
    ]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, Call, list[dict], str]:
    """One traced session for every test here: (the trace, the log's openat, the log's events, the session id)."""
    root = tmp_path_factory.mktemp("durability")
    with pytest.MonkeyPatch.context() as monkeypatch:
        home = isolated_home(root, monkeypatch)
        home.replay_instance(SCRIPT)
        project = make_project(root / "project")
        output = root / "trace"
        argv = traced([sys.executable, "-m", "chock", "run", "--yes", "tidy up"], output)
        done = subprocess.run(argv, cwd=project, env=home.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        session_id = home.only_session()
        events = home.events(session_id)
    trace = Trace.read(output)
    [log] = trace.opened(f"/{session_id}/log.jsonl", flag="O_APPEND")
    return trace, log, events, session_id


def _line(trace: Trace, log: Call, type: str, **fields: str) -> Call:
    """The one write of the log line of `type` whose fields include `fields`."""
    found = []
    for write in trace.on(log, "write"):
        text = write.strings[0] if write.strings else ""
        if f'"type": "{type}"' in text and all(
            f'"{key}": {json.dumps(value)}' in text for key, value in fields.items()
        ):
            found.append(write)
    assert len(found) == 1, (type, fields, found)
    return found[0]


def _synced_before(trace: Trace, log: Call, written: list[Call], effect: Call) -> None:
    """Every line in `written` returned, then the log was fdatasynced, and only then did `effect` begin."""
    syncs = [s for s in trace.on(log, "fdatasync") if s.result == 0 and s.end < effect.start]
    last = max(written, key=lambda write: write.end)
    assert any(s.start > last.end for s in syncs), (
        f"no fdatasync of the log between its line at trace line {last.end} and {effect.name} at {effect.start}"
    )


def test_a_tools_call_and_its_approval_are_durable_before_its_sandbox_runs(run) -> None:
    trace, log, events, _ = run
    [request] = [e["request_id"] for e in events if e["type"] == "approval.answer"]
    call = _line(trace, log, "tool.call", call_id="c1")
    answer = _line(trace, log, "approval.answer", request_id=request)
    sandboxes = [e for e in trace.execs("bwrap") if "echo ran-c1" in e.strings]
    assert sandboxes, "the shell command ran under bwrap"
    _synced_before(trace, log, [call, answer], sandboxes[0])


def _moves_the_branch(call) -> bool:  # type: ignore[no-untyped-def]
    """An `update-ref` of the session's branch (`git worktree add --detach` runs one of the worktree's HEAD)."""
    return "update-ref" in call.strings and any(s.startswith("refs/heads/chock/") for s in call.strings)


def test_every_line_is_durable_before_the_branch_commit_and_git_syncs_the_commit(run) -> None:
    trace, log, _, _ = run
    commits = [e for e in trace.execs("git") if "commit-tree" in e.strings or _moves_the_branch(e)]
    assert len(commits) == 2, "one commit-tree and one update-ref made the branch's commit"
    before = [w for w in trace.on(log, "write") if w.end < commits[0].start]
    assert _type_of(before[-1]) == "turn.end"
    _synced_before(trace, log, before, commits[0])
    for commit in commits:
        assert "core.fsync=committed" in commit.strings, "git syncs the commit's objects and ref itself"


def test_the_worktree_is_removed_only_once_workspace_close_is_durable(run) -> None:
    trace, log, _, session_id = run
    close = _line(trace, log, "workspace.close")
    [commit] = [e for e in trace.execs("git") if _moves_the_branch(e)]
    assert commit.end < close.start, "the branch holds the commit before the log says so"
    prunes = [e for e in trace.execs("git") if "prune" in e.strings and e.start > commit.end]
    assert prunes, "git forgot the worktree after it was removed"
    # The worktree's directory is opened to be deleted; that, and git forgetting it, come after the sync.
    removal = [o for o in trace.opened(f"/workspaces/{session_id}", flag="O_DIRECTORY") if o.start > commit.end]
    assert removal, "the worktree's directory was opened to be removed"
    _synced_before(trace, log, [close], removal[0])


def test_the_file_tools_sync_what_they_write_before_their_result_is_logged(run) -> None:
    trace, log, _, session_id = run
    # write_file and edit_file write the text to a new file beside the old one and sync it, rename it over the old
    # one, and sync the directory that holds the name, all before the result.
    for call_id, name, directory in (("c2", "notes.txt", "new"), ("c3", "app.py", session_id)):
        result = _line(trace, log, "tool.result", call_id=call_id)
        began = _line(trace, log, "tool.call", call_id=call_id)
        [opened] = [
            o
            for o in trace.named("openat", log.pid)
            if o.strings and o.strings[0].startswith(".chock-write-") and "O_EXCL" in o.args
            if began.end < o.start < result.start
        ]
        [write] = [w for w in trace.on(opened, "write") if w.end < result.start]
        [synced] = [s for s in trace.on(opened, "fsync") if write.end < s.start and s.end < result.start]
        [renamed] = [
            r
            for r in trace.named("renameat", log.pid) + trace.named("renameat2", log.pid)
            if r.strings == [opened.strings[0], name] and r.result == 0 and synced.end < r.start < result.start
        ]
        directories = [
            o
            for o in trace.named("openat", log.pid)
            if "O_DIRECTORY" in o.args and o.strings and Path(o.strings[0]).name == directory
            if began.end < o.start < result.start
        ]
        assert any(renamed.end < s.start and s.end < result.start for o in directories for s in trace.on(o, "fsync"))
    result = _line(trace, log, "tool.result", call_id="c4")
    began = _line(trace, log, "tool.call", call_id="c4")
    scratchpad = trace.opened(f"/scratchpads/{session_id}.md", flag="O_WRONLY")
    [opened] = [o for o in scratchpad if began.end < o.start < result.start]
    [write] = [w for w in trace.on(opened, "write") if w.end < result.start]
    assert any(write.end < s.start and s.end < result.start for s in trace.on(opened, "fsync"))
    # The new file's name is synced too: in the directory write_file made it in, and each directory it made in
    # the one above (the workspace root holds `deep`, `deep` holds `new`, `new` holds `notes.txt`).
    result = _line(trace, log, "tool.result", call_id="c2")
    began = _line(trace, log, "tool.call", call_id="c2")
    synced_names = {
        Path(o.strings[0]).name
        for o in trace.named("openat", log.pid)
        if "O_DIRECTORY" in o.args and began.end < o.start < result.start
        if any(s.end < result.start for s in trace.on(o, "fsync"))
    }
    assert {session_id, "deep", "new"} <= synced_names, synced_names


def test_a_new_logs_directory_is_synced_after_its_first_line(run) -> None:
    trace, log, _, session_id = run
    first = _line(trace, log, "session.start")
    assert trace.on(log, "write")[0] is first
    directories = [o for o in trace.opened(f"/sessions/{session_id}", flag="O_DIRECTORY") if o.pid == log.pid]
    synced = [s for o in directories for s in trace.on(o, "fsync") if s.start > first.end]
    assert synced, "the session's directory was fsynced after the log's first line"
    worktree = [e for e in trace.execs("git") if "worktree" in e.strings and "add" in e.strings]
    assert synced[0].end < worktree[0].start, "before the session's worktree is made"


def _type_of(write: Call) -> str:
    text = write.strings[0]
    start = text.index('"type": "') + len('"type": "')
    return text[start : text.index('"', start)]
