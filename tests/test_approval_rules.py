"""Approval rules in real sessions (issue 23, docs/approvals.md): config.zon's rules decide calls with no question
and refuse a denied one before its sandbox starts; "always in this project" answers hold for the project's next
session and not another project's, until `chock rules remove`; a no's message reaches the model; an unanswered
question ends as no at `.approvals.timeout`. Real `chock run` and daemons, real bubblewrap, replay and loopback
providers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from chock.config import ConfigError, load_config
from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, SessionClient
from chock.control.framing import ProtocolError
from chock.control.session_protocol import APPROVAL, SessionAnswerWithRequest
from tests.fakes.old_daemon import OLD_APPROVAL, OldDaemon
from tests.fakes.projects import make_project
from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import new_session, wait_for_end, wait_for_event
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until

INSTANCE = '.instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }'


def shell(call_id: str, command: str) -> dict:
    return {"call_id": call_id, "name": "shell", "args": {"command": command}}


def config(home, entries: list[dict], approvals: str) -> Path:
    home.write_replay("demo.jsonl", entries)
    return home.write_config(f".{{\n    {INSTANCE},\n    .approvals = .{{\n{approvals}\n    }},\n}}\n")


def counting_bwrap(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A `bwrap` first on PATH that notes each command line it is given, then runs the real one."""
    directory, calls = tmp_path / "bin", tmp_path / "bwrap-calls"
    directory.mkdir()
    wrapper = directory / "bwrap"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\nexec /usr/bin/bwrap "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{directory}:{os.environ['PATH']}"}, calls


def of(events: list[dict], kind: str, call_id: str | None = None) -> list[dict]:
    return [e for e in events if e["type"] == kind and (call_id is None or e.get("call_id") == call_id)]


def answer_for(events: list[dict], request: dict) -> dict:
    return next(e for e in events if e["type"] == "approval.answer" and e["request_id"] == request["request_id"])


RULED = [
    {"text": "", "tool_calls": [shell("c1", "echo allowed-ran")]},
    {"text": "", "tool_calls": [shell("c2", "git push origin main")]},
    {"text": "", "tool_calls": [shell("c3", "printf asked-ran")]},
    {"text": "Done.", "tool_calls": []},
]

RULES = """        .shell = "ask",
        .rules = .{
            .{ .allow = "echo" },
            .{ .deny = "git push" },
        },"""


def test_a_session_with_rules_runs_the_allowed_refuses_the_denied_before_bwrap_and_asks_the_rest(
    home, project, daemons, tmp_path
):
    path = config(home, RULED, RULES)
    env, bwrap_calls = counting_bwrap(tmp_path)
    daemon = daemons.start(env=env)
    client = ControlClient(daemon.address)
    session_id = client.call(dp.StartRequest(str(project), "three commands")).session_id
    asked = wait_for_event(home, session_id, "approval.request", lambda e: not e.get("by_config"))
    assert (asked["summary"], asked["propose"]) == ("printf asked-ran", "printf asked-ran")
    client.call(dp.AnswerWithRequest(str(project), session_id, asked["request_id"], True))
    wait_for_end(home, session_id, "completed")

    events = home.events(session_id)
    allowed, denied, _ = of(events, "approval.request")
    assert (allowed.get("by_config"), allowed.get("rule"), denied.get("by_config"), denied.get("rule")) == (
        True, "echo", True, "git push",
    )  # fmt: skip
    assert {k: answer_for(events, allowed).get(k) for k in ("answer", "via", "rule", "scope")} == {
        "answer": "yes", "via": "rule", "rule": "echo", "scope": "config",
    }  # fmt: skip
    assert (answer_for(events, denied)["answer"], answer_for(events, denied)["via"]) == ("no", "rule")
    assert (answer_for(events, asked)["answer"], answer_for(events, asked)["via"]) == ("yes", "socket")
    results = {e["call_id"]: e for e in of(events, "tool.result")}
    assert "allowed-ran" in results["c1"]["output"] and "asked-ran" in results["c3"]["output"]
    assert results["c2"]["is_error"] and "git push" in results["c2"]["output"]
    assert "config.zon line 7" in results["c2"]["output"]  # the rule, named with its file and line
    ran = bwrap_calls.read_text()
    assert "echo allowed-ran" in ran and "printf asked-ran" in ran
    assert "git push" not in ran  # refused before any sandbox started

    listed = home.chock("rules", "--daemon", daemon.address, "--project", str(project), cwd=project)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["c1", "allow", "echo"] and lines[0].endswith(f"{path.name} line 6")
    assert lines[1].split()[:4] == ["c2", "deny", "git", "push"] and lines[1].endswith(f"{path.name} line 7")
    assert "~/.config/chock/config.zon line 7" in lines[1]
    refused = home.chock("rules", "remove", "c2", "--daemon", daemon.address, "--project", str(project))
    assert refused.returncode != 0 and "config.zon line 7" in refused.stderr and "never writes" in refused.stderr


ONE_COMMAND = [{"text": "", "tool_calls": [shell("c1", "ls -a")]}, {"text": "Done.", "tool_calls": []}]


def start(client: ControlClient, project: Path) -> str:
    return client.call(dp.StartRequest(str(project), "one command")).session_id


def test_always_in_this_project_holds_for_its_next_session_not_another_project_until_removed(
    home, project, daemon, tmp_path
):
    config(home, ONE_COMMAND, '        .shell = "ask",')
    client = ControlClient(daemon.address)
    first = start(client, project)
    asked = wait_for_event(home, first, "approval.request")
    assert asked["propose"] == "ls"
    client.call(dp.AnswerWithRequest(str(project), first, asked["request_id"], True, "project", asked["propose"]))
    wait_for_end(home, first, "completed")
    answer = of(home.events(first), "approval.answer")[0]
    assert (answer["scope"], answer["rule"], answer["via"]) == ("project", "ls", "socket")

    listed = home.chock("rules", "--daemon", daemon.address, "--project", str(project)).stdout.splitlines()
    assert len(listed) == 1 and listed[0].split()[1:3] == ["allow", "ls"], listed
    assert f"session {first}, answer {asked['request_id']}" in listed[0]
    rule_id = listed[0].split()[0]
    assert rule_id.startswith("p")

    second = start(client, project)  # asks nothing: the project's rule decides
    wait_for_end(home, second, "completed")
    (decided,) = of(home.events(second), "approval.answer")
    assert (decided["via"], decided["rule"], decided["scope"]) == ("rule", "ls", "project")

    other = make_project(tmp_path / "other")
    elsewhere = start(client, other)  # another project's session is asked
    asked_there = wait_for_event(home, elsewhere, "approval.request")
    assert not asked_there.get("by_config")
    client.call(dp.AnswerRequest(str(other), elsewhere, asked_there["request_id"], False))
    wait_for_end(home, elsewhere, "completed")
    assert home.chock("rules", "--daemon", daemon.address, "--project", str(other)).stdout.startswith("no rules")

    removed = home.chock("rules", "--daemon", daemon.address, "--project", str(project), "remove", rule_id)
    assert removed.returncode == 0, removed.stderr
    (rules_file,) = home.layout.state.joinpath("rules").glob("*.json")  # on the host, never in the repository
    assert '"ls"' not in rules_file.read_text()
    third = start(client, project)  # asked again
    asked_again = wait_for_event(home, third, "approval.request")
    assert not asked_again.get("by_config")
    client.call(dp.AnswerRequest(str(project), third, asked_again["request_id"], True))
    wait_for_end(home, third, "completed")
    again = home.chock("rules", "remove", rule_id, "--daemon", daemon.address, "--project", str(project))
    assert again.returncode != 0 and f"no rule {rule_id}" in again.stderr


def test_the_daemons_child_runs_chock_never_a_chock_package_in_the_project(home, project, daemon):
    """`rule-remove` runs `python -m chock … --here` in the project, which an agent's merged branch may have given a
    `chock/` package: Python must not put the project first on its path (that is code outside the sandbox)."""
    marker = project.parent / "project-code-ran"
    (project / "chock").mkdir()
    (project / "chock" / "__init__.py").write_text("")
    (project / "chock" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    client = ControlClient(daemon.address)
    with pytest.raises(ProtocolError) as refused:
        client.call(dp.RuleRemoveRequest(str(project), "p0123abcd"))
    assert refused.value.code == "refused" and "no rule p0123abcd" in refused.value.text
    assert not marker.exists()


def running(home, project: Path, message: str = "do it") -> subprocess.Popen[str]:
    process = home.spawn("run", message, cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # fmt: skip
    return process


def test_a_no_with_a_message_reaches_the_model_in_its_next_request(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="", tool_calls=[{"id": "c1", "name": "shell", "args": {"command": "rm -rf build"}}])
        fake.script(text="Understood.")
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "fake-model" }} }}, '
            '.approvals = .{ .shell = "ask" } }\n'
        )
        process = running(home, project)
        try:
            session_id = new_session(home)
            asked = wait_for_event(home, session_id, "approval.request")
            note = "not the build dir:\tuse `make clean` instead"
            with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as session:
                session.call(SessionAnswerWithRequest(asked["request_id"], False, "once", "", note))
            process.communicate(timeout=60)
        finally:
            process.kill()
        assert process.returncode == 0
        (answer,) = of(home.events(session_id), "approval.answer")
        assert (answer["answer"], answer.get("note")) == ("no", note)
        sent = fake.calls[1]["messages"][-1]["content"][0]
        assert sent["type"] == "tool_result" and note in str(sent["content"])


def test_an_unanswered_question_ends_as_no_at_the_timeout_and_the_session_carries_on(home, project):
    config(home, [{"text": "", "tool_calls": [shell("c1", "echo never")]}, {"text": "Carried on.", "tool_calls": []}],
           '        .shell = "ask",\n        .timeout = "2s",')  # fmt: skip
    result = home.chock("run", "wait for me", cwd=project, timeout=60)
    assert result.returncode == 0, result.stderr
    events = home.events(home.only_session())
    (answer,) = of(events, "approval.answer")
    assert (answer["answer"], answer["via"]) == ("no", "timeout")
    (told,) = of(events, "tool.result")
    assert told["is_error"] and "nobody answered within 2s" in told["output"] and "never\n" not in told["output"]
    assert of(events, "assistant.message")[-1]["text"] == "Carried on."
    assert "no: nobody answered within .approvals.timeout" in result.stdout  # the terminal says why


def test_a_session_rule_answered_over_the_socket_holds_for_the_rest_of_the_session(home, project):
    config(home, [{"text": "", "tool_calls": [shell("c1", "echo one")]},
                  {"text": "", "tool_calls": [shell("c2", "echo two")]}, {"text": "Done.", "tool_calls": []}],
           '        .shell = "ask",')  # fmt: skip
    process = running(home, project)
    try:
        session_id = new_session(home)
        asked = wait_for_event(home, session_id, "approval.request")
        with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as session:
            with pytest.raises(ProtocolError) as refused:
                session.call(SessionAnswerWithRequest(asked["request_id"], True, "session", "echo; curl x"))
            assert refused.value.code == "bad-request" and "cannot be saved" in refused.value.text
            session.call(SessionAnswerWithRequest(asked["request_id"], True, "session", "echo"))
        process.communicate(timeout=60)
    finally:
        process.kill()
    answers = of(home.events(session_id), "approval.answer")
    assert [(a["via"], a.get("scope"), a.get("rule")) for a in answers] == [
        ("socket", "session", "echo"), ("rule", "session", "echo"),
    ]  # fmt: skip
    assert not (home.layout.state / "rules").exists()  # a session's rule is in its log only


@pytest.mark.parametrize(
    ("approvals", "refusal"),
    [
        ('.rules = .{ .{ .allow = "git; rm" } }', "line 1"),
        ('.rules = .{ .{ .allow = "tool:wrte_file" } }', "no tool named 'wrte_file'"),
        ('.rules = .{ .{ .allow = "ls", .deny = "ls" } }', "exactly one of .allow, .ask or .deny"),
        ('.rules = .{ .{ .permit = "ls" } }', "unknown key .approvals.rules[0].permit"),
        ('.timeout = "0s"', "between 1s and 7 days"),
        ('.timeout = "8d"', 'like "30m"'),
        ('.timeout = "169h"', "between 1s and 7 days"),
    ],
)
def test_config_refuses_a_bad_rule_or_timeout_naming_it(home, approvals, refusal):
    path = home.write_config(f".{{ .approvals = .{{ {approvals} }} }}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert refusal in str(refused.value) and str(path) in str(refused.value)


def test_config_rules_carry_their_file_and_line(home):
    path = home.write_config(
        '.{ .approvals = .{\n  .timeout = "30m",\n  .rules = .{\n    .{ .deny = "git   push" },\n  },\n} }\n'
    )
    loaded = load_config(path)
    assert loaded.approvals_timeout == 1800
    (rule,) = loaded.approvals_rules
    assert (rule.id, rule.verdict, rule.pattern) == ("c1", "deny", "git push")
    assert rule.origin == "~/.config/chock/config.zon line 4"


def test_yes_answers_what_would_ask_and_never_a_deny_rule(home, project):
    config(home, [{"text": "", "tool_calls": [shell("c1", "git push origin main"), shell("c2", "echo asked")]},
                  {"text": "Done.", "tool_calls": []}],
           '        .shell = "ask",\n        .rules = .{ .{ .deny = "git push" } },')  # fmt: skip
    result = home.chock("run", "--yes", "push it", cwd=project)
    assert result.returncode == 0, result.stderr
    events = home.events(home.only_session())
    assert [(a["answer"], a["via"]) for a in of(events, "approval.answer")] == [("no", "rule"), ("yes", "config")]
    assert "no by rule `git push` (config)" in result.stdout
    results = {e["call_id"]: e for e in of(events, "tool.result")}
    assert results["c1"]["is_error"] and "denied by rule `git push`" in results["c1"]["output"]
    assert "asked" in results["c2"]["output"]


def test_yes_never_overrides_a_shell_default_of_deny(home, project):
    """`.approvals.shell = "deny"` is no question `--yes` could answer: the command is refused, as without it."""
    config(home, [{"text": "", "tool_calls": [shell("c1", "echo ran > ran.txt")]}, {"text": "Done.", "tool_calls": []}],
           '        .shell = "deny",')  # fmt: skip
    result = home.chock("run", "--yes", "write it", cwd=project)
    assert result.returncode == 0, result.stderr
    events = home.events(home.only_session())
    assert [(a["answer"], a["via"]) for a in of(events, "approval.answer")] == [("no", "config")]
    assert of(events, "tool.result", "c1")[0]["is_error"]
    assert not (project / "ran.txt").exists()


def test_a_session_rule_holds_when_the_session_is_continued(home, project):
    config(home, [{"text": "", "tool_calls": [shell("c1", "ls -a")]}, {"text": "Done.", "tool_calls": []},
                  {"text": "", "tool_calls": [shell("c2", "ls -l")]}, {"text": "Done again.", "tool_calls": []}],
           '        .shell = "ask",')  # fmt: skip
    process = running(home, project)
    try:
        session_id = new_session(home)
        asked = wait_for_event(home, session_id, "approval.request")
        with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as session:
            session.call(SessionAnswerWithRequest(asked["request_id"], True, "session", "ls"))
        process.communicate(timeout=60)
    finally:
        process.kill()
    continued = home.chock("run", "--continue", session_id, "list them long", cwd=project, timeout=60)
    assert continued.returncode == 0, continued.stderr
    answers = of(home.events(session_id), "approval.answer")
    assert [(a["via"], a.get("rule")) for a in answers] == [("socket", "ls"), ("rule", "ls")]
    listed = home.chock("rules", "--project", str(project)).stdout
    assert listed.startswith("no rules")  # the session has ended: its rules ended with it


def test_the_terminal_offers_always_in_this_project_with_the_proposal_and_saves_the_rule_as_edited(home, project):
    config(home, [{"text": "", "tool_calls": [shell("c1", "git diff --stat")]},
                  {"text": "", "tool_calls": [shell("c2", "git diff HEAD")]},
                  {"text": "", "tool_calls": [shell("c3", "git log -1")]}, {"text": "Done.", "tool_calls": []}],
           '        .shell = "ask",')  # fmt: skip
    terminal = Terminal.chock(home, "run", "look at the diff", cwd=project)
    try:
        terminal.wait_for("saving the rule `git diff`")
        terminal.type("p\r")
        terminal.wait_for("Enter keeps `git diff`")
        terminal.type("git; x\r")  # not a rule: said why, and asked again
        terminal.wait_for("not saved:")
        terminal.type("\r")
        terminal.wait_for("saving the rule `git log`")  # `git diff HEAD` was not asked
        terminal.type("n use the plan instead\r")
        terminal.wait_for("session ended")
        assert terminal.exit_code() == 0
    finally:
        terminal.close()
    events = home.events(home.only_session())
    answers = [(a["answer"], a["via"], a.get("scope"), a.get("rule"), a.get("note")) for a in
               of(events, "approval.answer")]  # fmt: skip
    assert answers == [
        ("yes", "terminal", "project", "git diff", None),
        ("yes", "rule", "project", "git diff", None),
        ("no", "terminal", None, None, "use the plan instead"),
    ]
    assert "said: use the plan instead" in of(events, "tool.result")[-1]["output"]


def test_keys_typed_before_a_question_is_asked_never_answer_it(home, project):
    """A `y` typed ahead (a second one, an Enter too many, keys meant for something else) is not an answer to a
    question the person has not seen yet: the terminal's prompt drops what was typed before it asked."""
    config(home, [{"text": "", "tool_calls": [shell("c1", "echo one")]},
                  {"text": "", "tool_calls": [shell("c2", "echo two")]}, {"text": "Done.", "tool_calls": []}],
           '        .shell = "ask",')  # fmt: skip
    terminal = Terminal.chock(home, "run", "say two things", cwd=project)
    try:
        terminal.wait_for("[y/N]")
        terminal.type("y\ry\r")  # the second `y` is typed before the second question is asked
        wait_until(lambda: terminal.read() or terminal.screen.count(b"[y/N]") == 2, 30, "the second question")
        terminal.type("n\r")
        terminal.wait_for("session ended")
    finally:
        terminal.close()
    answers = [(a["answer"], a["via"]) for a in of(home.events(home.only_session()), "approval.answer")]
    assert answers == [("yes", "terminal"), ("no", "terminal")]


def test_the_daemon_passes_on_an_older_sessions_unknown_verb_so_the_client_can_offer_yes_or_no(home, project, daemon):
    config(home, ONE_COMMAND, '        .shell = "ask",')
    client = ControlClient(daemon.address)
    session_id = start(client, project)
    asked = wait_for_event(home, session_id, "approval.request")
    path = home.layout.session_socket(session_id, "approval")
    path.unlink()  # in its place, an approval.sock as a session of an older Chock serves it
    older = OldDaemon(path, OLD_APPROVAL)
    try:
        with pytest.raises(ProtocolError) as refused:
            client.call(dp.AnswerWithRequest(str(project), session_id, asked["request_id"], True, "project", "ls"))
    finally:
        older.close()
    assert refused.value.code == "unknown-verb" and "answer-with" in refused.value.text
    client.call(dp.StopRequest(str(project), session_id))
    assert not (home.layout.state / "rules").exists()


def test_a_subagent_decides_its_calls_by_the_sessions_tool_rules(home, project):
    def answer(body: dict) -> dict:
        content = body["messages"][-1]["content"]
        results = [c for c in content if isinstance(c, dict) and c.get("type") == "tool_result"]
        if "sub-agent" in json.dumps(body.get("system")):
            if results:
                return {"text": "what read_file said: " + json.dumps(results[0]["content"])}
            return {"tool_calls": [{"id": "r1", "name": "read_file", "args": {"path": "README.md"}}]}
        if len(body["messages"]) == 1:
            return {"tool_calls": [{"id": "s1", "name": "subagent", "args": {"task": "read the readme"}}]}
        return {"text": "Done."}

    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.answer_with(answer)
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "fake-model" }} }}, '
            '.approvals = .{ .rules = .{ .{ .deny = "tool:read_file" } } } }\n'
        )
        result = home.chock("run", "ask a subagent", cwd=project, timeout=90)
    assert result.returncode == 0, result.stderr
    (ended,) = of(home.events(home.only_session()), "subagent.end")
    assert "denied by rule `tool:read_file`" in ended["result"], ended["result"]


def test_a_subagent_runs_chock_never_a_chock_package_in_the_project(home, project):
    """The session starts its subagent as `python -m chock.session.subagent_process` in the project: a `chock/` an
    agent's merged branch put there must not be what runs (the `chock` command, a console script, never puts the
    working directory on Python's path; tests run it as `python -P -m chock` alike)."""
    marker = project.parent / "project-code-ran"
    (project / "chock").mkdir()
    (project / "chock" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")

    def answer(body: dict) -> dict:
        if "sub-agent" in json.dumps(body.get("system")):
            return {"text": "nothing to read"}
        if len(body["messages"]) == 1:
            return {"tool_calls": [{"id": "s1", "name": "subagent", "args": {"task": "read the readme"}}]}
        return {"text": "Done."}

    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.answer_with(answer)
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "m" }} }} }}\n'
        )
        result = home.chock("run", "ask a subagent", cwd=project, timeout=90)
    assert result.returncode == 0, result.stderr
    (ended,) = of(home.events(home.only_session()), "subagent.end")
    assert ended["result"] == "nothing to read"
    assert not marker.exists()


def test_sessions_saving_project_rules_at_once_lose_none(home, project):
    """Eight processes save a rule each into one project's file at the same moment: the lock keeps all eight."""
    script = (
        "import sys; from chock.paths import Layout; from chock.session.rule_sources import save_project_rule; "
        "save_project_rule(Layout.from_env(), sys.argv[1], f'make target{sys.argv[2]}', 'a test')"
    )
    savers = [subprocess.Popen([sys.executable, "-c", script, str(project), str(n)], env=home.env) for n in range(8)]
    assert [saver.wait(60) for saver in savers] == [0] * 8
    from chock.session.rule_sources import project_rules

    saved = sorted(rule.pattern for rule in project_rules(home.layout, project))
    assert saved == [f"make target{n}" for n in range(8)]
