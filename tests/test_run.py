"""`chock run` end to end: a real process, a real git project, real bwrap, replay or loopback providers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from tests.fakes.projects import git
from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import alive, new_session, processes_with, wait_for_event
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until

DEMO = [
    {"text": "Looking around.", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "ls"}}]},
    {"text": "Writing.", "tool_calls": [
        {"call_id": "c2", "name": "write_file", "args": {"path": "notes.txt", "content": "one\ntwo\n"}},
        {"call_id": "c3", "name": "edit_file", "args": {"path": "app.py", "old": "hello", "new": "hello, world"}},
    ]},
    {"text": "All done.", "tool_calls": []},
]  # fmt: skip


def test_a_replay_session_runs_tools_and_commits_to_its_branch(home, project):
    home.replay_instance(DEMO)
    result = home.chock("run", "--yes", "tidy up", cwd=project)
    assert result.returncode == 0, result.stderr
    session_id = home.only_session()
    events = home.events(session_id)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    for expected in ("session.start", "workspace.open", "user.message", "usage", "workspace.close"):
        assert expected in types
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"
    calls = {e["call_id"]: e for e in events if e["type"] == "tool.call"}
    results = {e["call_id"]: e for e in events if e["type"] == "tool.result"}
    assert set(calls) == set(results) == {"c1", "c2", "c3"}
    assert "app.py" in results["c1"]["output"] and not results["c1"]["is_error"]
    branch = f"chock/{session_id}"
    assert git(project, "show", f"{branch}:notes.txt") == "one\ntwo\n"
    assert "hello, world" in git(project, "show", f"{branch}:app.py")
    assert not home.layout.workspace_dir(session_id).exists()
    assert str(home.layout.workspace_dir(session_id)) not in git(project, "worktree", "list")
    assert "hello, world" not in (project / "app.py").read_text()  # the person's checkout is untouched


def test_json_prints_every_event_as_a_json_line(home, project):
    home.replay_instance(DEMO[2:])
    result = home.chock("run", "--json", "say hi", cwd=project)
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed == home.events(home.only_session())


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_two_turn_tool_calling_conversation_against_a_loopback_provider(home, project, kind):
    with FakeProvider(kind=kind, key="sk-loopback-secret") as fake:
        fake.script(
            text="Let me check.",
            tool_calls=[{"id": "t1", "name": "read_file", "args": {"path": "app.py"}}],
            input_tokens=100,
            output_tokens=20,
        )
        fake.script(text="It prints hello.", input_tokens=150, output_tokens=7)
        wire = "anthropic" if kind == "anthropic" else "openai-compat"
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "{wire}={fake.address}", .model = "m1",'
            ' .token = "sk-loopback-secret" } } }\n'
        )
        result = home.chock("run", "what does app.py print?", cwd=project)
        assert result.returncode == 0, result.stderr + result.stdout
        assert fake.rejections == []
        assert len(fake.calls) == 2
    session_id = home.only_session()
    events = home.events(session_id)
    deltas = [e for e in events if e["type"] == "assistant.delta"]
    assert "".join(d["text"] for d in deltas) == "Let me check.It prints hello."
    results = [e for e in events if e["type"] == "tool.result"]
    assert results[0]["output"] == "print('hello')\n"
    usage = home.chock("usage", cwd=project).stdout
    assert "in       250  out        27" in usage.splitlines()[-1]
    log_text = home.layout.log_path(session_id).read_text()
    assert "sk-loopback-secret" not in log_text


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        ({"status": 401, "message": "invalid x-api-key"}, "401"),
        ({"status": 429, "message": "slow down"}, "429"),
        ({"status": 500, "message": "boom"}, "500"),
        ("cut", "ended before it was complete"),
    ],
)
def test_a_provider_error_ends_the_session_clearly_with_the_log_intact(home, project, failure, expected):
    with FakeProvider(kind="anthropic", key=None) as fake:
        if failure == "cut":
            fake.cut_after(3)
        else:
            fake.fail(**failure)
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .retries = 0 }} }} }}\n'
        )
        result = home.chock("run", "hello", cwd=project)
    assert result.returncode == 1
    assert expected in result.stderr + result.stdout
    events = home.events(home.only_session())
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "error"
    assert expected in events[-1]["error"]
    assert home.layout.workspace_dir(home.only_session()).exists()  # kept: nothing is lost


def test_a_shell_call_sees_a_clean_environment_and_none_of_the_persons_files(home, project):
    secret = "sk-ant-from-the-persons-environment"
    data = home.layout.data
    data.mkdir(parents=True, exist_ok=True)
    (data / "tokens.zon").write_text('.{ .x = "token-in-the-file-store" }\n')
    (data / "instances.zon").write_text('.{ .x = .{ .kind = "anthropic", .stored = "file" } }\n')
    (home.root / ".bashrc").write_text("export SECRET_OF_THE_PERSON=1\n")
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command":
            f'echo "HOME=$HOME"; env; cat /root/.bashrc {home.root}/.bashrc {data}/tokens.zon {data}/instances.zon;'
            ' ls "$HOME/knowledgebase" && echo kb-ok; touch /usr/x; touch inside && echo ws-ok'}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    result = home.chock("run", "--yes", "--instance", "demo", "probe", cwd=project, env={"ANTHROPIC_API_KEY": secret})
    assert result.returncode == 0, result.stderr
    output = next(e for e in home.events(home.only_session()) if e["type"] == "tool.result")["output"]
    assert f"HOME={home.layout.toolchains_dir(project)}" in output
    assert secret not in output and "ANTHROPIC_API_KEY" not in output and "CHOCK_" not in output
    assert "token-in-the-file-store" not in output and "stored" not in output
    assert "SECRET_OF_THE_PERSON" not in output
    assert "kb-ok" in output and "ws-ok" in output
    assert "Read-only file system" in output or "Permission denied" in output


def test_approval_over_the_socket_when_no_terminal_is_attached(home, project):
    from chock.control.client import SessionClient
    from chock.control.framing import ProtocolError
    from chock.control.session_protocol import APPROVAL

    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo approved-run"}}]},
        {"text": "", "tool_calls": [{"call_id": "c2", "name": "shell", "args": {"command": "echo denied-run"}}]},
        {"text": "done", "tool_calls": []},
    ])  # fmt: skip
    process = home.spawn("run", "two commands", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        session_id = new_session(home)
        socket_path = home.layout.session_socket(session_id, "approval")
        first = _wait_for_pending(socket_path)
        with SessionClient(socket_path, APPROVAL) as client:
            client.answer(first.request_id, True)
        second = _wait_for_pending(socket_path, not_id=first.request_id)
        with SessionClient(socket_path, APPROVAL) as client:
            with pytest.raises(ProtocolError, match="not waiting") as refused:
                client.answer(first.request_id, False)  # answered already: the first answer won
            assert refused.value.code == "not-pending"
            client.answer(second.request_id, False)
        assert process.wait(60) == 0
    finally:
        process.kill()
    events = home.events(session_id)
    answers = [e for e in events if e["type"] == "approval.answer"]
    assert [(a["answer"], a["via"]) for a in answers] == [("yes", "socket"), ("no", "socket")]
    outputs = [e["output"] for e in events if e["type"] == "tool.result"]
    assert "approved-run" in outputs[0]
    assert "declined" in outputs[1]


def _wait_for_pending(socket_path, not_id=None, timeout=30.0):
    """The first question the session's socket holds (other than `not_id`), once it holds one."""
    from chock.control.client import SessionClient
    from chock.control.framing import Unreachable
    from chock.control.session_protocol import APPROVAL

    def pending():
        try:
            with SessionClient(socket_path, APPROVAL) as client:
                return next((item for item in client.pending() if item.request_id != not_id), None)
        except Unreachable:
            return None  # the socket is not there yet

    return wait_until(pending, timeout, "an approval request")


BLOCKING = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "w.txt", "content": "x"}},
                                {"call_id": "c2", "name": "shell", "args": {"command": "sleep 60"}}]},
    {"text": "done", "tool_calls": []},
]  # fmt: skip


def test_continue_is_refused_while_the_owner_lives_and_takes_the_workspace_after_kill_9(home, project):
    """The owner is killed with SIGKILL (its sandbox dies with it): the session is abandoned and provably free
    (docs/log.md#ownership-the-lock), and `chock run --continue` takes its workspace and completes."""
    marker = f"sleep 60 # {os.getpid()}-{id(home)}"  # this test's sandbox, among every process on the machine
    home.replay_instance([BLOCKING[0] | {"tool_calls": [BLOCKING[0]["tool_calls"][0], {
        "call_id": "c2", "name": "shell", "args": {"command": marker}}]}, BLOCKING[1]])  # fmt: skip
    process = home.spawn("run", "--yes", "block", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        session_id = new_session(home)
        wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
        sandboxed = wait_until(lambda: processes_with(marker), 10, "the sandboxed command")
        assert sandboxed
        refused = home.chock("run", "--continue", session_id, "more", cwd=project)
        assert refused.returncode == 3
        assert "running in another process" in refused.stderr
        listed = home.chock("sessions", "--json", cwd=project).stdout
        assert json.loads(listed)["status"] == "running" and json.loads(listed)["free"] is False
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()
    wait_until(lambda: not alive(sandboxed), 10, "the sandbox to die with its owner")
    row = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert row["status"] == "abandoned" and row["workspace_kept"] is True
    assert (row["free"], row["interrupted_by"]) == (True, "crash")
    text = home.chock("sessions", cwd=project).stdout
    assert f"interrupted by crash — `chock run --continue {session_id}`" in text
    workspace = home.layout.workspace_dir(session_id)
    assert (workspace / "w.txt").read_text() == "x"
    result = home.chock("run", "--continue", session_id, "go on", cwd=project)
    assert result.returncode == 0, result.stderr
    events = home.events(session_id)
    adopt = next(e for e in events if e["type"] == "session.adopt")
    assert (adopt["via"], adopt["after"]) == ("terminal", "crash")
    cut = next(e for e in events if e["type"] == "tool.result" and e["call_id"] == "c2")
    assert cut["is_error"] and "cut off" in cut["output"]  # the dead owner's call got its ending
    opened = [e["directory"] for e in events if e["type"] == "workspace.open"]
    assert opened == [str(workspace), str(workspace)]  # the same worktree, taken over
    assert events[-1]["reason"] == "completed"
    assert git(project, "show", f"chock/{session_id}:w.txt") == "x"


def test_an_abandoned_session_with_no_proof_keeps_its_workspace_refused(home, project):
    """A log whose owner recorded no machine (an older chock) proves nothing: its kept workspace is refused."""
    home.replay_instance(BLOCKING)
    process = home.spawn("run", "--yes", "block", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        session_id = new_session(home)
        wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()
    log = home.layout.log_path(session_id)
    lines = log.read_bytes().split(b"\n")
    first = json.loads(lines[0])
    del first["machine_id"]
    lines[0] = json.dumps(first).encode()
    log.write_bytes(b"\n".join(lines))
    row = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert (row["status"], row["free"], row["interrupted_by"]) == ("abandoned", False, "")
    workspace = home.layout.workspace_dir(session_id)
    before = log.read_bytes()
    refused = home.chock("run", "--continue", session_id, "go on", cwd=project)
    assert refused.returncode == 3
    assert str(workspace) in refused.stderr and "chock workspace" in refused.stderr
    assert (workspace / "w.txt").exists()
    assert log.read_bytes() == before  # the refusal wrote nothing


def test_a_torn_tail_is_ignored_then_cut_and_the_conversation_resumes(home, project):
    home.replay_instance([
        {"text": "First answer.", "tool_calls": []},
        {"text": "", "tool_calls": [{"call_id": "c9", "name": "read_file", "args": {"path": "README.md"}}]},
        {"text": "Second answer.", "tool_calls": []},
    ])  # fmt: skip
    assert home.chock("run", "first task", cwd=project).returncode == 0
    session_id = home.only_session()
    log = home.layout.log_path(session_id)
    with open(log, "ab") as handle:
        handle.write(b'{"id": 999, "type": "user.mess')
    row = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert row["status"] == "ended" and row["last_event_id"] == len(log.read_bytes().splitlines()) - 1
    result = home.chock("run", "--continue", session_id, "a follow-up", cwd=project)
    assert result.returncode == 0, result.stderr
    events = home.events(session_id)  # every line parses: the torn tail was cut
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    adopt = next(i for i, e in enumerate(events) if e["type"] == "session.adopt")
    assert events[adopt]["via"] == "terminal"
    messages = [e["text"] for e in events if e["type"] == "assistant.message"]
    assert messages == ["First answer.", "", "Second answer."]  # the replay resumed where it left off
    users = [e["text"] for e in events if e["type"] == "user.message"]
    assert users == ["first task", "a follow-up"]
    assert git(project, "branch", "--list", f"chock/{session_id}") == ""  # it changed nothing: no branch
    assert events[-1]["reason"] == "completed"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing-replay", "cannot be read"),
        ("unknown-instance", "no instance named 'nope'"),
        ("not-git", "is not a git repository"),
        ("bad-config", "line 1, column"),
        ("bad-kind", "kinds: anthropic, aiand, openai-compat, replay"),
    ],
)
def test_checks_before_a_log_exists_exit_3_and_leave_nothing(home, project, tmp_path, setup, message):
    cwd = project
    args = ["run", "task"]
    if setup == "missing-replay":
        home.write_config('.{ .instances = .{ .demo = .{ .kind = "replay=nowhere.jsonl" } } }\n')
    elif setup == "unknown-instance":
        home.replay_instance(DEMO)
        args = ["run", "--instance", "nope", "task"]
    elif setup == "not-git":
        home.replay_instance(DEMO)
        cwd = tmp_path / "plain"
        cwd.mkdir()
    elif setup == "bad-config":
        home.write_config(".{ .instances = }\n")
    elif setup == "bad-kind":
        home.write_config('.{ .instances = .{ .x = .{ .kind = "gpt" } } }\n')
    result = home.chock(*args, cwd=cwd)
    assert result.returncode == 3, result.stderr
    assert message in result.stderr
    assert not home.layout.sessions_dir.exists() or not os.listdir(home.layout.sessions_dir)
    assert not home.layout.workspaces_dir.exists() or not os.listdir(home.layout.workspaces_dir)


def test_a_file_tool_outside_the_workspace_is_refused(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file",
                                     "args": {"path": "../outside", "content": "escape"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    assert home.chock("run", "escape", cwd=project).returncode == 0
    result = next(e for e in home.events(home.only_session()) if e["type"] == "tool.result")
    assert result["is_error"] and "outside the workspace" in result["output"]
    assert not (home.layout.workspaces_dir / "outside").exists()


def test_anthropic_at_its_own_address_with_no_credential_is_refused_before_anything(home, project):
    home.write_config(
        '.{ .credentials = .{ .store = "file" }, .instances = .{ .claude = .{ .kind = "anthropic" } } }\n'
    )
    result = home.chock("run", "task", cwd=project)
    assert result.returncode == 3
    assert "claude" in result.stderr and "https://api.anthropic.com/v1" in result.stderr
    assert not home.layout.sessions_dir.exists()


def test_running_out_of_replay_entries_ends_the_session_with_a_clear_error(home, project):
    home.replay_instance(DEMO[:1])
    result = home.chock("run", "--yes", "task", cwd=project)
    assert result.returncode == 1
    assert "has no entry 2" in result.stderr + result.stdout


@pytest.mark.parametrize(("typed", "answer"), [(b"\r", "no"), (b"y\r", "yes")])
def test_a_terminal_approval_prompt_defaults_to_no(home, project, typed, answer):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo ran-it"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    terminal = Terminal.chock(home, "run", "run a command", cwd=project)
    try:
        terminal.wait_for("[y/N]")
        terminal.type(typed)
        terminal.wait_for("session ended")
        assert terminal.exit_code() == 0
    finally:
        terminal.close()
    events = home.events(home.only_session())
    answers = [(e["answer"], e["via"]) for e in events if e["type"] == "approval.answer"]
    assert answers == [(answer, "terminal")]
    output = next(e for e in events if e["type"] == "tool.result")["output"]
    assert ("ran-it" in output) == (answer == "yes")


def test_workspace_list_show_and_remove_manage_a_kept_workspace(home, project):
    # The replay runs out after the first turn: the session ends in an error and keeps its work.
    write = {"call_id": "c1", "name": "write_file", "args": {"path": "kept.txt", "content": "k"}}
    home.replay_instance([{"text": "", "tool_calls": [write]}])
    assert home.chock("run", "--yes", "keep it", cwd=project).returncode == 1
    session_id = home.only_session()
    listed = home.chock("workspace", "list").stdout
    assert session_id in listed and "ended" in listed
    shown = home.chock("workspace", "show", session_id).stdout
    assert "kept.txt" in shown and str(home.layout.workspace_dir(session_id)) in shown
    removed = home.chock("workspace", "remove", session_id)
    assert removed.returncode == 0, removed.stderr
    assert not home.layout.workspace_dir(session_id).exists()
    assert git(project, "show", f"chock/{session_id}:kept.txt") == "k"  # the work went to the branch first
    assert "no kept workspaces" in home.chock("workspace", "list").stdout
    assert home.events(session_id)[-1]["type"] == "workspace.close"
    assert home.chock("workspace", "remove", "../../etc").returncode != 0


def test_config_can_deny_every_shell_command(home, project):
    home.write_replay("demo.jsonl", [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo should-not-run"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    home.write_config(
        '.{ .approvals = .{ .shell = "deny" }, .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }\n'
    )
    assert home.chock("run", "task", cwd=project).returncode == 0
    result = next(e for e in home.events(home.only_session()) if e["type"] == "tool.result")
    assert result["is_error"] and "denied" in result["output"] and "should-not-run" not in result["output"]


def test_allow_dirty_copies_uncommitted_files_into_the_new_workspace(home, project):
    (project / "app.py").write_text("print('edited, not committed')\n")
    (project / "new.txt").write_text("untracked\n")
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "read_file", "args": {"path": "app.py"}},
                                    {"call_id": "c2", "name": "read_file", "args": {"path": "new.txt"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    assert home.chock("run", "--allow-dirty", "look", cwd=project).returncode == 0
    outputs = [e["output"] for e in home.events(home.only_session()) if e["type"] == "tool.result"]
    assert outputs == ["print('edited, not committed')\n", "untracked\n"]


def test_an_interrupted_session_exits_130_logs_it_and_keeps_its_workspace(home, project):
    home.replay_instance(BLOCKING)
    process = home.spawn("run", "--yes", "block", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        session_id = new_session(home)
        wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 130
    finally:
        process.kill()
    end = home.events(session_id)[-1]
    assert end["type"] == "session.end" and end["reason"] == "interrupted" and end["exit_code"] == 130
    assert (home.layout.workspace_dir(session_id) / "w.txt").read_text() == "x"
    row = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert row["status"] == "ended" and row["workspace_kept"] is True


def test_no_bwrap_is_refused_before_anything_exists(home, project, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which("git"), bin_dir / "git")
    home.replay_instance(DEMO)
    result = home.chock("run", "task", cwd=project, env={"PATH": str(bin_dir)})
    assert result.returncode == 3
    assert "bubblewrap" in result.stderr and "apt install bubblewrap" in result.stderr
    assert not home.layout.sessions_dir.exists() or not os.listdir(home.layout.sessions_dir)


def test_file_tools_never_follow_a_symlink_out_of_the_workspace(home, project):
    data = home.layout.data
    data.mkdir(parents=True, exist_ok=True)
    (data / "tokens.zon").write_text('.{ .x = "SECRET-IN-THE-FILE-STORE" }\n')
    link = {"call_id": "c1", "name": "shell", "args": {"command": f"ln -s {data}/tokens.zon leak"}}
    home.replay_instance([
        {"text": "", "tool_calls": [link,
                                    {"call_id": "c2", "name": "search", "args": {"pattern": "SECRET"}},
                                    {"call_id": "c3", "name": "read_file", "args": {"path": "leak"}},
                                    {"call_id": "c4", "name": "write_file", "args": {"path": "leak", "content": "x"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    assert home.chock("run", "--yes", "leak", cwd=project).returncode == 0
    results = {e["call_id"]: e for e in home.events(home.only_session()) if e["type"] == "tool.result"}
    assert results["c2"]["output"] == "(no matches)"
    assert results["c3"]["is_error"] and "outside the workspace" in results["c3"]["output"]
    assert results["c4"]["is_error"]
    assert "SECRET-IN-THE-FILE-STORE" in (data / "tokens.zon").read_text()  # not overwritten


def test_arguments_of_the_wrong_shape_are_the_tools_error_not_a_crash(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "read_file", "args": {"path": "app.py", "offset": "abc"}},
                                    {"call_id": "c2", "name": "read_file", "args": {"path": "a\u0000b"}},
                                    {"call_id": "c3", "name": "write_file", "args": {"path": 7, "content": "x"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    result = home.chock("run", "--yes", "bad args", cwd=project)
    assert result.returncode == 0, result.stderr
    results = [e for e in home.events(home.only_session()) if e["type"] == "tool.result"]
    assert [r["is_error"] for r in results] == [True, True, True]
    assert "whole number" in results[0]["output"] and "NUL" in results[1]["output"]
