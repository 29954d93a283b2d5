"""`chock approve` with no session (docs/architecture.md#approvals): every waiting session of this project answered in
turn, oldest first, from standard input; `--all` over this machine and another host (a daemon of its own state
directory, named in config.zon's `.connections`, as tests/test_remote_names.py makes one). Real daemons run real
`chock run` children on a replay instance whose shell calls ask.
"""

from __future__ import annotations

from dataclasses import replace

from chock.control import daemon_protocol as dp
from chock.paths import Layout
from tests.fakes.projects import make_project
from tests.fakes.sessions import wait_for_end, wait_for_event

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

    result = home.chock("approve", input="x\ny\nn\n", cwd=project)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index(f"session {first} on local: first task") < out.index(f"session {second} on local: second task")
    assert "shell: echo one-ran" in out
    assert "type y, n, n MESSAGE, s, s RULE, p or p RULE" in out  # `x` is no answer: asked again
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
