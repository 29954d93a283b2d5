"""Answers at a terminal (docs/architecture.md#approvals): `chock approve` with no session answers every waiting
session of this project in turn, oldest first, from standard input; `--all` over this machine and another host (a
daemon of its own state directory, named in config.zon's `.connections`, as tests/test_remote_names.py makes one);
`chock attach` on a pty offers a no with a message and always with the proposal. Real daemons run real `chock run`
children on a replay instance whose shell calls ask.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from chock.commands.answering import Choice
from chock.commands.approve import Answering
from chock.control import daemon_protocol as dp
from chock.control.framing import ErrorCode, ProtocolError
from chock.paths import Layout
from tests.fakes.projects import make_project
from tests.fakes.sessions import replay_config, wait_for_end, wait_for_event
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until

ASKS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo one-ran"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def answers(home, session_id: str) -> list[tuple[str, str]]:
    return [(e["answer"], e["via"]) for e in home.events(session_id) if e["type"] == "approval.answer"]


def test_approve_with_no_session_answers_this_projects_waiting_sessions_in_turn_oldest_first(
    home, tmp_path, daemon, project
):
    home.replay_instance(ASKS)
    other = make_project(tmp_path / "other")
    first = daemon.client.call(dp.StartRequest(str(project), "first task")).session_id
    wait_for_event(home, first, "approval.request")
    second = daemon.client.call(dp.StartRequest(str(project), "second task")).session_id
    wait_for_event(home, second, "approval.request")
    elsewhere = daemon.client.call(dp.StartRequest(str(other), "another project's")).session_id
    wait_for_event(home, elsewhere, "approval.request")

    result = home.chock("approve", input="x\np echo; sh\ny\nn\n", cwd=project)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index(f"session {first} on local: first task") < out.index(f"session {second} on local: second task")
    assert "shell: echo one-ran" in out
    assert "type y, n, n MESSAGE, s, s RULE, p or p RULE" in out  # `x` is no answer: asked again
    assert "not answered: the rule cannot be saved: `echo; sh` holds `;`" in out  # nor is a rule that is none
    assert "another project's" not in out
    wait_for_end(home, first, "completed")
    wait_for_end(home, second, "completed")
    assert answers(home, first) == [("yes", "socket")]
    assert answers(home, second) == [("no", "socket")]
    assert answers(home, elsewhere) == []  # another project's session is not this command's

    nothing = home.chock("approve", cwd=project)
    assert nothing.returncode == 0 and "no session is waiting for an answer" in nothing.stdout


def test_approve_all_answers_every_projects_sessions_on_every_host(home, tmp_path, daemons, project):
    home.write_replay("demo.jsonl", ASKS)
    state = tmp_path / "host-a"
    a = daemons.start(env={"CHOCK_STATE_DIR": str(state)})
    here = daemons.start()
    home.write_config(
        '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }, '
        f'.connections = .{{ .a = "{a.address}" }} }}\n'
    )
    there = replace(home, layout=Layout(config=home.layout.config, state=state, data=tmp_path / "data"))
    local_id = here.client.call(dp.StartRequest(str(project), "here's task")).session_id
    wait_for_event(home, local_id, "approval.request")
    remote_id = a.client.call(dp.StartRequest(str(project), "a's task")).session_id
    wait_for_event(there, remote_id, "approval.request")
    away = tmp_path / "not-a-project"
    away.mkdir()

    result = home.chock("approve", "--all", input="y\ny\n", cwd=away)
    assert result.returncode == 0, result.stderr
    assert f"session {local_id} on local: here's task" in result.stdout
    assert f"session {remote_id} on a: a's task" in result.stdout
    assert result.stdout.index(local_id) < result.stdout.index(remote_id)  # the older first
    assert ": approved on a" in result.stdout and ": approved in session" in result.stdout
    wait_for_end(home, local_id, "completed")
    wait_for_end(there, remote_id, "completed")
    assert answers(home, local_id) == [("yes", "socket")]
    assert answers(there, remote_id) == [("yes", "socket")]
    refused = home.chock("approve", "--all", "--project", str(project), cwd=away)
    assert refused.returncode == 2 and "leave out --project" in refused.stderr


def test_approve_at_a_terminal_takes_no_answer_typed_before_the_request_was_shown(home, daemon, project):
    """`chock approve` answering in turn at a terminal: a second `y` typed with the first is no answer to the
    second request, which was not on the screen yet."""
    home.replay_instance(ASKS)
    first = daemon.client.call(dp.StartRequest(str(project), "first task")).session_id
    wait_for_event(home, first, "approval.request")
    second = daemon.client.call(dp.StartRequest(str(project), "second task")).session_id
    wait_for_event(home, second, "approval.request")
    terminal = Terminal.chock(home, "approve", cwd=project)
    try:
        terminal.wait_for("Approve?")
        terminal.type("y\ry\r")
        wait_until(lambda: terminal.read() or terminal.screen.count(b"Approve?") == 2, 30, "the second request")
        terminal.type("n\r")
        assert terminal.exit_code() == 0, terminal.text()
    finally:
        terminal.close()
    wait_for_end(home, second, "completed")
    assert answers(home, first) == [("yes", "socket")]
    assert answers(home, second) == [("no", "socket")]


TWO = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "rm -rf build"}}]},
    {"text": "", "tool_calls": [{"call_id": "c2", "name": "shell", "args": {"command": "git diff --stat"}}]},
    {"text": "", "tool_calls": [{"call_id": "c3", "name": "shell", "args": {"command": "git diff HEAD"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def test_attach_offers_a_no_with_a_message_and_always_with_the_proposal_at_a_terminal(home, project, daemon):
    replay_config(home, TWO, shell="ask")
    task = "two kinds\x1b]0;owned\x07 of answer\u202e"
    session_id = daemon.client.call(dp.StartRequest(str(project), task)).session_id
    argv = [sys.executable, "-m", "chock", "attach", session_id, "--daemon", daemon.address]
    terminal = Terminal(argv, {**home.env, "TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, project)
    try:
        terminal.wait_for("the rule proposed is `rm`")
        # The bell, and a desktop notification naming the task with its control characters removed.
        told = b"\x07\x1b]9;Chock: approval needed: two kinds]0;owned of answer\x07"
        terminal.wait_for("approval needed: two kinds]0;owned of answer\x07")  # the view rings a tick later
        assert terminal.screen.count(told) == 1  # once: the view rings, and nothing else does
        terminal.type("s rm; curl x | sh\r")  # a rule that is no rule: refused by the session, asked again
        terminal.wait_for("not answered")
        terminal.type("n not here: the build directory is mine\r")
        terminal.wait_for("the rule proposed is `git diff`")
        terminal.type("s\r")  # always in this session, as proposed: the next `git diff …` asks nobody
        assert terminal.exit_code(60) == 0, terminal.text()
    finally:
        terminal.close()
    answered = [e for e in home.events(session_id) if e["type"] == "approval.answer"]
    assert [(e["answer"], e.get("scope", "once"), e.get("note", ""), e["via"]) for e in answered] == [
        ("no", "once", "not here: the build directory is mine", "socket"),
        ("yes", "session", "", "socket"),
        ("yes", "session", "", "rule"),
    ]


def test_an_answer_a_host_is_too_old_for_is_said_and_asked_again_as_yes_or_no():
    asked: list[bool] = []
    said: list[str] = []
    sent: list[Choice] = []

    def ask(request: dict, more: bool) -> Choice:
        asked.append(more)
        return Choice(True, "project", "ls") if more else Choice(True)

    def send(request_id: str, choice: Choice) -> None:
        if not choice.plain:
            raise ProtocolError(ErrorCode.UNKNOWN_VERB, "the daemon at x knows no verb answer-with")
        sent.append(choice)

    answering = Answering(ask, said.append)
    assert answering.one({"request_id": "r1"}, send, "on build")
    assert answering.one({"request_id": "r2"}, send, "on build")  # asked yes or no at once: build is known older
    assert asked == [True, False, False]
    assert sent == [Choice(True), Choice(True)]
    assert "the Chock on build is older and takes a plain yes or no only" in said[0]
