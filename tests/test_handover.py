"""The session's side of a handover (docs/protocol.md#session-sockets) and `chock run --adopt`."""

from __future__ import annotations

import json
import os
import subprocess

from chock.control import session_protocol as protocol
from chock.control.client import SessionClient
from chock.control.framing import Unreachable
from chock.control.session_protocol import APPROVAL, HANDOVER, ConfirmRequest, HandoverRequest
from tests.fakes.sessions import new_session, replayed_terminal_session, wait_for_event
from tests.fakes.wait import wait_until

SLOW_TURNS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}},
                                {"call_id": "c2", "name": "shell", "args": {"command": "sleep 1.5"}}]},
    {"text": "", "tool_calls": [{"call_id": "c3", "name": "write_file", "args": {"path": "b.txt", "content": "B"}}]},
    {"text": "Both files written.", "tool_calls": []},
]  # fmt: skip


def _handover_client(home, session_id, timeout=30.0) -> SessionClient:
    """A client on the session's handover socket, once the session has bound it."""
    path = home.layout.session_socket(session_id, "handover")

    def connected() -> SessionClient | None:
        try:
            return SessionClient(path, HANDOVER)
        except Unreachable:
            return None

    return wait_until(connected, timeout, "the handover socket")


def _hand_over(home, session_id) -> None:
    """The whole exchange by hand: ask, read `ready` at the next turn boundary, confirm."""
    with _handover_client(home, session_id) as client:
        client.ask(HandoverRequest())
        assert isinstance(client.next_reply(30), protocol.Ready)
        client.call(ConfirmRequest(), 30)


def test_a_confirmed_handover_ends_with_exit_8_and_adopt_carries_on_in_the_same_worktree(home, project):
    process, session_id = replayed_terminal_session(home, project, SLOW_TURNS)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    with _handover_client(home, session_id) as client:
        client.ask(HandoverRequest())
        assert isinstance(client.next_reply(30), protocol.Ready)  # after the slow tool: a turn boundary
        client.call(ConfirmRequest(), 30)
    assert process.wait(30) == 8
    events = home.events(session_id)
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "handover"
    assert json.loads(home.chock("sessions", "--json", cwd=project).stdout)["status"] == "handed-over"
    workspace = next(e["directory"] for e in events if e["type"] == "workspace.open")

    adopted = home.chock("run", "--adopt", session_id, cwd=project)  # what the daemon's child runs
    assert adopted.returncode == 0, adopted.stderr
    events = home.events(session_id)
    ends = [e for e in events if e["type"] == "session.end"]
    assert [e["reason"] for e in ends] == ["handover", "completed"]
    after = events[events.index(ends[0]) + 1 :]
    assert after[0]["type"] == "session.adopt" and after[0]["via"] == "daemon"
    assert after[1]["type"] == "workspace.open" and after[1]["directory"] == workspace  # the same checkout
    assert [e["text"] for e in events if e["type"] == "user.message"] == ["write two files"]  # nothing invented
    texts = [e["text"] for e in events if e["type"] == "assistant.message"]
    assert texts == ["", "", "Both files written."]  # no turn repeated
    from tests.fakes.projects import git

    assert git(project, "show", f"chock/{session_id}:a.txt") == "A"  # the earlier owner's edit is there
    assert git(project, "show", f"chock/{session_id}:b.txt") == "B"


def test_an_ask_that_is_never_confirmed_leaves_no_trace(home, project):
    process, session_id = replayed_terminal_session(home, project, SLOW_TURNS)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    before = None
    with _handover_client(home, session_id) as client:
        client.ask(HandoverRequest())
        assert isinstance(client.next_reply(30), protocol.Ready)
        before = home.layout.log_path(session_id).read_bytes()
    # the client went away without `confirm`: the session carries on and completes in its own terminal
    assert process.wait(60) == 0
    events = home.events(session_id)
    assert [e["reason"] for e in events if e["type"] == "session.end"] == ["completed"]
    assert home.layout.log_path(session_id).read_bytes().startswith(before)
    assert not any("handover" in json.dumps(e) for e in events)


def test_background_work_is_named_busy_and_the_handover_waits_for_it(home, project):
    entries = [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell",
                                     "args": {"command": "sleep 2; echo bg-done", "background": True}}]},
        {"text": "", "delay": 0.5, "tool_calls": [{"call_id": "c2", "name": "list_files", "args": {}}]},
        {"text": "Waiting for it.", "delay": 0.5, "tool_calls": []},
        {"text": "The background command finished.", "tool_calls": []},
    ]  # fmt: skip
    process, session_id = replayed_terminal_session(home, project, entries)
    wait_for_event(home, session_id, "background.start")
    with _handover_client(home, session_id) as client:
        client.ask(HandoverRequest())
        assert client.next_reply(30) == protocol.Busy(1, 0)
        turns_before = len([e for e in home.events(session_id) if e["type"] == "turn.end"])
        assert isinstance(client.next_reply(30), protocol.Ready)
        events = home.events(session_id)
        assert any(e["type"] == "background.end" and "bg-done" in e["output"] for e in events)
        assert len([e for e in events if e["type"] == "turn.end"]) > turns_before  # it kept working
        client.call(ConfirmRequest(), 30)
    assert process.wait(30) == 8
    adopted = home.chock("run", "--adopt", session_id, cwd=project)
    assert adopted.returncode == 0, adopted.stderr
    assert home.events(session_id)[-1]["reason"] == "completed"


def test_a_subagent_is_logged_with_its_result_and_holds_a_handover_as_busy(home, project):
    entries = [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "subagent", "args": {"task": "find the greeting"}}]},
        {"for": "subagent", "delay": 1.5, "text": "",
         "tool_calls": [{"call_id": "s1", "name": "search", "args": {"pattern": "hello"}}]},
        {"for": "subagent", "text": "app.py prints hello", "tool_calls": []},
        {"text": "Asked a subagent.", "tool_calls": []},
        {"text": "The subagent says app.py prints hello.", "tool_calls": []},
    ]  # fmt: skip
    process, session_id = replayed_terminal_session(home, project, entries)
    wait_for_event(home, session_id, "subagent.start")
    with _handover_client(home, session_id) as client:
        client.ask(HandoverRequest())
        assert client.next_reply(30) == protocol.Busy(0, 1)
        assert isinstance(client.next_reply(30), protocol.Ready)
    # not confirmed: it completes by itself
    assert process.wait(60) == 0
    events = home.events(session_id)
    end = next(e for e in events if e["type"] == "subagent.end")
    assert end["result"] == "app.py prints hello"
    assert [e["text"] for e in events if e["type"] == "assistant.message"] == [
        "",
        "Asked a subagent.",
        "The subagent says app.py prints hello.",
    ]  # the parent skipped its entries


def test_the_session_stays_single_threaded_and_answers_its_sockets_while_a_model_streams(home, project):
    from tests.fakes.providers import FakeProvider

    with FakeProvider(kind="openai", key=None) as fake:
        fake.script(text="x" * 40, pause=0.1)  # a slow stream: 10 chunks, 0.1 s apart
        fake.script(text="done")
        home.write_config(f'.{{ .instances = .{{ .local = .{{ .kind = "openai-compat={fake.address}" }} }} }}\n')
        process = home.spawn("run", "hello", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            session_id = new_session(home)
            wait_for_event(home, session_id, "assistant.delta")
            assert os.listdir(f"/proc/{process.pid}/task") == [str(process.pid)]  # one thread
            with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as client:
                assert client.pending() == []  # answered mid-stream
            assert process.wait(30) == 0
        finally:
            process.kill()


def test_allow_dirty_is_refused_on_a_workspace_that_moved(home, project):
    process, session_id = replayed_terminal_session(home, project, SLOW_TURNS)
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    _hand_over(home, session_id)
    assert process.wait(30) == 8
    refused = home.chock("run", "--continue", session_id, "--allow-dirty", "more", cwd=project)
    assert refused.returncode == 3 and "--allow-dirty" in refused.stderr
    assert home.events(session_id)[-1]["reason"] == "handover"  # the refusal wrote nothing


def test_the_scratchpad_and_approve_all_move_with_the_session(home, project):
    entries = [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "scratchpad",
                                     "args": {"action": "write", "text": "remember: b.txt next"}},
                                    {"call_id": "c2", "name": "shell", "args": {"command": "sleep 1.5"}}]},
        {"text": "", "tool_calls": [{"call_id": "c3", "name": "scratchpad", "args": {"action": "read"}},
                                    {"call_id": "c4", "name": "shell", "args": {"command": "echo approved-after"}}]},
        {"text": "Done.", "tool_calls": []},
    ]  # fmt: skip
    process, session_id = replayed_terminal_session(home, project, entries)  # --yes
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    _hand_over(home, session_id)
    assert process.wait(30) == 8
    adopted = home.chock("run", "--adopt", session_id, cwd=project, input="")  # no terminal: nobody to ask
    assert adopted.returncode == 0, adopted.stderr
    events = home.events(session_id)
    results = {e["call_id"]: e for e in events if e["type"] == "tool.result"}
    assert results["c3"]["output"] == "remember: b.txt next"  # the scratchpad is keyed on the id
    assert "approved-after" in results["c4"]["output"]  # --yes stayed with the session
    answers = [(e["answer"], e["via"]) for e in events if e["type"] == "approval.answer"]
    assert answers == [("yes", "config"), ("yes", "config")]  # nobody was asked, before or after the handover
    assert home.layout.scratchpad_path(session_id).read_text() == "remember: b.txt next"
