"""`chock detach` and `chock approve` against a real daemon and real terminal sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient
from chock.control.framing import ProtocolError
from tests.fakes.projects import git
from tests.fakes.sessions import alive, replayed_terminal_session, wait_for_end, wait_for_event
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until

SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}},
                                {"call_id": "c2", "name": "shell", "args": {"command": "sleep 2"}}]},
    {"text": "", "tool_calls": [{"call_id": "c3", "name": "write_file", "args": {"path": "b.txt", "content": "B"}}]},
    {"text": "Both written.", "tool_calls": []},
]  # fmt: skip


def test_a_terminal_session_is_detached_to_the_daemon_and_completes_there(home, project, daemon):
    process, session_id = replayed_terminal_session(home, project, SLOW)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    result = home.chock("detach", session_id, "--daemon", daemon.address, cwd=project)
    assert result.returncode == 0, result.stderr
    assert process.wait(30) == 8
    wait_for_end(home, session_id, "completed")
    events = home.events(session_id)
    ends = [e["reason"] for e in events if e["type"] == "session.end"]
    assert ends == ["handover", "completed"]
    handover = next(i for i, e in enumerate(events) if e.get("reason") == "handover")
    assert events[handover + 1]["type"] == "session.adopt" and events[handover + 1]["via"] == "daemon"
    opens = [e["directory"] for e in events if e["type"] == "workspace.open"]
    assert len(opens) == 2 and opens[0] == opens[1]  # the same worktree moved with the session
    assert [e["text"] for e in events if e["type"] == "user.message"] == ["write two files"]
    assert [e["text"] for e in events if e["type"] == "assistant.message"] == ["", "", "Both written."]
    assert git(project, "show", f"chock/{session_id}:a.txt") == "A"
    assert git(project, "show", f"chock/{session_id}:b.txt") == "B"


def test_detach_defaults_to_the_newest_running_session_of_this_project(home, project, daemon):
    process, session_id = replayed_terminal_session(home, project, SLOW)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    result = home.chock("detach", cwd=project, env={"CHOCK_DAEMON": daemon.address})
    assert result.returncode == 0, result.stderr
    assert session_id in result.stdout
    assert process.wait(30) == 8


def test_background_work_holds_the_handover_and_wait_1_leaves_the_session_running(home, project, daemon):
    entries = [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell",
                                     "args": {"command": "sleep 4", "background": True}}]},
        {"text": "Waiting.", "tool_calls": []},
        {"text": "Done.", "tool_calls": []},
    ]  # fmt: skip
    process, session_id = replayed_terminal_session(home, project, entries)
    wait_for_event(home, session_id, "background.start")
    short = home.chock("detach", session_id, "--daemon", daemon.address, "--wait", "1", cwd=project)
    assert short.returncode != 0
    assert "1 background command" in short.stderr and "keeps running" in short.stderr
    assert process.poll() is None  # still running, unchanged
    result = home.chock("detach", session_id, "--daemon", daemon.address, "--wait", "20", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "holds 1 background command" in result.stderr
    assert process.wait(30) == 8
    events = home.events(session_id)
    handover = next(i for i, e in enumerate(events) if e.get("reason") == "handover")
    assert any(e["type"] == "background.end" for e in events[:handover])  # recorded before it let go
    wait_for_end(home, session_id, "completed")


def test_no_daemon_is_refused_at_once_and_the_session_is_untouched(home, project):
    process, session_id = replayed_terminal_session(home, project, SLOW)
    try:
        wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
        before = home.layout.log_path(session_id).read_bytes()
        started = time.monotonic()
        result = home.chock("detach", session_id, "--daemon", "unix:/tmp/no-such-chock.sock", cwd=project)
        assert time.monotonic() - started < 5  # includes starting Python; the refusal itself is immediate
        assert result.returncode != 0
        assert "no daemon" in result.stderr and "chock daemon" in result.stderr
        assert home.layout.log_path(session_id).read_bytes().startswith(before)
        assert process.wait(60) == 0  # it completed in its own terminal
    finally:
        process.kill()


def test_both_daemon_and_port_are_refused(home, project):
    result = home.chock("detach", "--daemon", "unix:/tmp/x.sock", "--port", "7890", cwd=project)
    assert result.returncode == 2 and "--daemon and --port" in result.stderr


def test_a_daemon_gone_between_ask_and_adopt_is_named_and_continue_takes_the_session_back(home, project, daemon):
    entries = [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}},
                                    {"call_id": "c2", "name": "shell", "args": {"command": "sleep 3"}}]},
        {"text": "Done.", "tool_calls": []},
    ]  # fmt: skip
    process, session_id = replayed_terminal_session(home, project, entries)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    detach = home.spawn(
        "detach", session_id, "--daemon", daemon.address, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    time.sleep(1.0)  # detach has proved the daemon and asked; the session is still in its long tool call
    daemon.kill()
    _, err = detach.communicate(timeout=60)
    assert detach.returncode != 0
    assert f"chock run --continue {session_id}" in err
    assert process.wait(30) == 8
    workspace = home.layout.workspace_dir(session_id)
    back = home.chock("run", "--continue", session_id, cwd=project)
    assert back.returncode == 0, back.stderr
    events = home.events(session_id)
    assert [e["directory"] for e in events if e["type"] == "workspace.open"] == [str(workspace)] * 2
    assert events[-1]["reason"] == "completed"
    assert git(project, "show", f"chock/{session_id}:a.txt") == "A"


def test_continue_takes_a_session_the_daemon_adopted_only_once_its_owner_is_gone(home, project, daemon):
    entries = [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}},
                                    {"call_id": "c2", "name": "shell", "args": {"command": "sleep 1"}}]},
        {"text": "", "tool_calls": [{"call_id": "c3", "name": "shell", "args": {"command": "sleep 60"}}]},
        {"text": "Done.", "tool_calls": []},
    ]  # fmt: skip
    process, session_id = replayed_terminal_session(home, project, entries)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    assert home.chock("detach", session_id, "--daemon", daemon.address, cwd=project).returncode == 0
    assert process.wait(30) == 8
    wait_for_event(home, session_id, "tool.call", lambda e: e["call_id"] == "c3")
    workspace = home.layout.workspace_dir(session_id)
    refused = home.chock("run", "--continue", session_id, "mine now", cwd=project)
    assert refused.returncode == 3 and "running in another process" in refused.stderr
    assert (workspace / "a.txt").read_text() == "A"
    adopt = next(e for e in reversed(home.events(session_id)) if e["type"] == "session.adopt")
    os.kill(adopt["pid"], signal.SIGKILL)
    wait_until(lambda: not alive({adopt["pid"]}), 30, "the adopting process to die")
    # Its owner is provably gone now (docs/log.md#ownership-the-lock): the terminal takes the workspace back.
    taken = home.chock("run", "--continue", session_id, "mine now", cwd=project)
    assert taken.returncode == 0, taken.stderr
    adopt = next(e for e in reversed(home.events(session_id)) if e["type"] == "session.adopt")
    assert (adopt["via"], adopt["after"]) == ("terminal", "crash")
    assert git(project, "show", f"chock/{session_id}:a.txt") == "A"


def test_an_abandoned_session_is_refused_by_detach_naming_its_workspace(home, project, daemon):
    process, session_id = replayed_terminal_session(home, project, SLOW)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    process.kill()
    process.wait(10)
    result = home.chock("detach", session_id, "--daemon", daemon.address, cwd=project)
    assert result.returncode != 0
    assert str(home.layout.workspace_dir(session_id)) in result.stderr and "chock workspace" in result.stderr


APPROVAL = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo first-ran"}}]},
    {"text": "", "tool_calls": [{"call_id": "c2", "name": "shell", "args": {"command": "echo second-ran"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def test_chock_approve_and_the_daemons_answer_verb_reach_the_same_socket(home, project, daemon):
    home.replay_instance(APPROVAL)
    started = ControlClient(daemon.address).call(dp.StartRequest(str(project), "two commands"))
    session_id = started.session_id
    wait_for_event(home, session_id, "approval.request")
    terminal = Terminal.chock(home, "approve", session_id, cwd=project)
    try:
        terminal.wait_for("Approve?")
        assert b"shell: echo first-ran" in terminal.screen
        terminal.type("y\r")
        terminal.wait_for("approved")
        terminal.exit_code()
    finally:
        terminal.close()
    second = wait_for_event(home, session_id, "approval.request", lambda e: "second" in e["summary"])
    with pytest.raises(ProtocolError) as stale:
        ControlClient(daemon.address).call(dp.AnswerRequest(str(project), session_id, "r1", True))
    assert stale.value.code == "not-pending"
    ControlClient(daemon.address).call(dp.AnswerRequest(str(project), session_id, second["request_id"], False))
    wait_for_end(home, session_id, "completed")
    answers = [(e["answer"], e["via"]) for e in home.events(session_id) if e["type"] == "approval.answer"]
    assert answers == [("yes", "socket"), ("no", "socket")]


def test_approve_refuses_a_session_that_is_not_running_here(home, project):
    home.replay_instance(APPROVAL[2:])
    assert home.chock("run", "quick", cwd=project).returncode == 0
    result = home.chock("approve", home.only_session())
    assert result.returncode != 0 and "not running on this machine" in result.stderr
    assert "not a session id" in home.chock("approve", "../../etc/passwd").stderr


def test_sessions_lists_through_the_daemon(home, project, daemon):
    home.replay_instance(APPROVAL[2:])
    assert home.chock("run", "quick", cwd=project).returncode == 0
    local = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    remote = json.loads(home.chock("sessions", "--json", "--daemon", daemon.address, cwd=project).stdout)
    assert remote["id"] == local["id"] and remote["status"] == "ended"


def test_an_empty_session_id_is_refused_never_taken_as_the_newest(home, project, daemon):
    process, session_id = replayed_terminal_session(home, project, SLOW)
    try:
        wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
        env = {"CHOCK_DAEMON": daemon.address}
        for args in (["detach", ""], ["stop", ""], ["attach", ""], ["approve", ""], ["export", ""]):
            result = home.chock(*args, cwd=project, env=env)
            assert result.returncode == 2, (args, result.stderr)
            assert "''" in result.stderr and "session" in result.stderr, (args, result.stderr)
        assert process.wait(60) == 0  # it completed in its own terminal: nothing took it
        assert [e["reason"] for e in home.events(session_id) if e["type"] == "session.end"] == ["completed"]
    finally:
        process.kill()
