"""Hosts by name everywhere (docs/remote.md): `chock sessions --all` over every host, `NAME:SESSION` for the commands
that name a session, `chock run --on NAME`, and completion of connection names.

Each "host" here is a real daemon of its own state directory on a unix socket, named in config.zon's
`.connections` as any address is; tests/test_remote_ssh.py does the same over real OpenSSH.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from chock.control import daemon_protocol as dp
from chock.paths import Layout
from tests.fakes.sessions import wait_for_end, wait_for_event
from tests.fakes.terminal import Terminal
from tests.test_catalog import write_session


def other_host(home, tmp_path, daemons, project, number: int) -> tuple[object, str]:
    """A daemon of another state directory (another "host"), holding one ended session of `project`."""
    state = tmp_path / f"host{number}"
    session_id = write_session(Layout(config=home.layout.config, state=state, data=tmp_path / "data"), number, project)
    return daemons.start(env={"CHOCK_STATE_DIR": str(state)}), session_id


def hosts_listed(stdout: str) -> set[tuple[str, str]]:
    return {tuple(line.split()[:2]) for line in stdout.splitlines()}


@pytest.fixture
def two_hosts(home, tmp_path, daemons, project):
    """This machine with a session and no daemon, `build` (a daemon with one session) and `gone` (nothing there)."""
    here = write_session(home.layout, 1, project)
    build, there = other_host(home, tmp_path, daemons, project, 2)
    home.write_config(
        f'.{{ .connections = .{{ .build = "{build.address}", .gone = "unix:{tmp_path}/nothing.sock" }} }}\n'
    )
    return here, there


def test_sessions_all_lists_every_host_and_names_the_one_that_did_not_answer(home, tmp_path, two_hosts):
    here, there = two_hosts
    done = home.chock("sessions", "--all", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert hosts_listed(done.stdout) == {("local", here), ("build", there)}
    assert done.stdout.splitlines()[0].split()[:2] == ["build", there]  # newest first, over every host
    assert done.stderr.count("not listed") == 1
    assert "gone: not listed: " in done.stderr and "nothing.sock" in done.stderr, done.stderr

    narrowed = home.chock("sessions", "--all", "--daemon", "build", "--daemon", "local", cwd=tmp_path)
    assert narrowed.returncode == 0, narrowed.stderr
    assert hosts_listed(narrowed.stdout) == {("local", here), ("build", there)} and not narrowed.stderr

    just_build = home.chock("sessions", "--all", "--daemon", "build", "--json", cwd=tmp_path)
    assert just_build.returncode == 0, just_build.stderr
    assert '"host": "build"' in just_build.stdout and here not in just_build.stdout


def test_a_command_acting_on_one_daemon_refuses_a_second_by_its_name(home, project, two_hosts):
    done = home.chock("sessions", "--daemon", "build", "--daemon", "local", cwd=project)
    assert done.returncode == 2
    assert "--daemon was given 2 times (build, local); chock sessions acts through one daemon" in done.stderr


def test_a_host_reply_is_shown_through_the_safe_printer(home, tmp_path, daemons, project):
    state = tmp_path / "evil-state"
    layout = Layout(config=home.layout.config, state=state, data=tmp_path / "data")
    write_session(layout, 3, str(project) + "\x1b]0;owned\x07", None)
    build = daemons.start(env={"CHOCK_STATE_DIR": str(state)})
    home.write_config(f'.{{ .connections = .{{ .build = "{build.address}" }} }}\n')
    done = home.chock("sessions", "--all", "--daemon", "build", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "owned" in done.stdout


def test_completion_offers_connection_names_and_never_opens_one(home, two_hosts, project):
    env = {"_CHOCK_COMPLETE": "bash_complete", "COMP_WORDS": "chock sessions --daemon ", "COMP_CWORD": "3"}
    done = home.chock(env=env, cwd=project)
    assert done.returncode == 0, done.stderr
    offered = {line.split(",", 1)[1] for line in done.stdout.splitlines()}
    assert {"local", "build", "gone"} <= offered


def test_session_completion_offers_this_machines_ids_and_host_names(home, two_hosts, project):
    here, there = two_hosts
    env = {"_CHOCK_COMPLETE": "bash_complete", "COMP_WORDS": "chock stop ", "COMP_CWORD": "2"}
    done = home.chock(env=env, cwd=project)
    offered = {line.split(",", 1)[1] for line in done.stdout.splitlines()}
    assert here in offered and "build:" in offered and there not in offered


def test_name_colon_session_acts_on_that_host_with_no_project_here(home, tmp_path, two_hosts):
    here, there = two_hosts
    away = tmp_path / "not-a-project"
    away.mkdir()
    plan = home.chock("plan", f"build:{there}", cwd=away)
    assert plan.returncode == 0, plan.stderr
    assert f"session {there} has no plan" in plan.stdout

    wrong_host = home.chock("plan", f"build:{here}", cwd=away)
    assert wrong_host.returncode == 2 and f"no session '{here}' on build" in wrong_host.stderr, wrong_host.stderr
    address = home.chock("plan", f"127.0.0.1:{there}", cwd=away)
    assert address.returncode == 2 and "never an address" in address.stderr, address.stderr

    removed = home.chock("sessions", "remove", f"build:{there}", cwd=away)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout == f"removed session {there} on build\n"
    assert home.layout.log_path(here).exists()
    gone = home.chock("sessions", "--all", "--daemon", "build", cwd=away)
    assert there not in gone.stdout


def test_a_bare_id_on_more_than_one_host_is_refused_naming_them(home, tmp_path, daemons, project):
    twin = write_session(home.layout, 4, project)
    daemons.start(socket_path=home.layout.daemon_socket)  # this machine's own daemon (local)
    build, same = other_host(home, tmp_path, daemons, project, 4)
    assert same == twin
    home.write_config(f'.{{ .connections = .{{ .build = "{build.address}" }} }}\n')
    done = home.chock("stop", twin, "--daemon", "local", "--daemon", "build", cwd=tmp_path)
    assert done.returncode == 2
    assert f"session {twin} is held by local, build: name one, as NAME:{twin}" in done.stderr, done.stderr


ASKS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo first-ran"}}]},
    {"text": "", "tool_calls": [{"call_id": "c2", "name": "shell", "args": {"command": "echo '\x1b]0;owned\x07'"}}]},
    {"text": "", "tool_calls": [{"call_id": "c3", "name": "shell", "args": {"command": "echo third-ran"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def test_approve_name_colon_session_answers_on_that_host_through_its_daemon(home, tmp_path, daemons, project):
    home.write_replay("demo.jsonl", ASKS)
    state = tmp_path / "host-a"
    a = daemons.start(env={"CHOCK_STATE_DIR": str(state)})
    home.write_config(
        '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }, '
        f'.connections = .{{ .a = "{a.address}" }} }}\n'
    )
    there = replace(home, layout=Layout(config=home.layout.config, state=state, data=tmp_path / "data"))
    session_id = a.client.call(dp.StartRequest(str(project), "three commands")).session_id
    away = tmp_path / "not-a-project"
    away.mkdir()

    # Answered elsewhere while the person decides: the one answer stands, and approve says so.
    first = wait_for_event(there, session_id, "approval.request")
    asking = Terminal.chock(home, "approve", f"a:{session_id}", cwd=away)
    try:
        asking.wait_for("Approve?")
        assert b"shell: echo first-ran" in asking.screen
        a.client.call(dp.AnswerRequest(str(project), session_id, first["request_id"], True))
        asking.type("n\r")
        asking.wait_for("already answered elsewhere")
        assert asking.exit_code() == 0
    finally:
        asking.close()

    # A summary holding escape sequences is shown escaped; the answer lands in A's log.
    second = wait_for_event(there, session_id, "approval.request", lambda e: "\x1b]0;owned\x07" in e["summary"])
    approved = home.chock("approve", f"a:{session_id}", input="y\n", cwd=away)
    assert approved.returncode == 0, approved.stderr
    assert "\x1b" not in approved.stdout and "\x07" not in approved.stdout and "owned" in approved.stdout
    assert f"{second['request_id']}: approved on a" in approved.stdout

    third = wait_for_event(there, session_id, "approval.request", lambda e: "third" in e["summary"])
    denied = home.chock("approve", "--daemon", a.address, session_id, input="n\n", cwd=away)
    assert denied.returncode == 0, denied.stderr
    assert f"{third['request_id']}: denied through the daemon at {a.address}" in denied.stdout

    wait_for_end(there, session_id, "completed")
    answers = [
        (e["request_id"], e["answer"], e["via"]) for e in there.events(session_id) if e["type"] == "approval.answer"
    ]
    assert answers == [
        (first["request_id"], "yes", "socket"), (second["request_id"], "yes", "socket"),
        (third["request_id"], "no", "socket"),
    ]  # fmt: skip
    assert not home.layout.log_path(session_id).exists()  # the log lives only on A
    done = home.chock("approve", f"a:{session_id}", cwd=away)
    assert done.returncode == 0 and f"session {session_id} on a is not waiting for an answer" in done.stdout
    here = home.chock("approve", session_id, cwd=away)  # no host named: this machine's session, which it is not
    assert here.returncode != 0 and f"there is no session {session_id} on this machine" in here.stderr


def used(tokens: int) -> list[dict]:
    """A log body: one model call of `tokens` in and out, then the end."""
    call = {"type": "usage", "input_tokens": tokens, "output_tokens": tokens}
    return [call, {"type": "session.end", "reason": "completed", "exit_code": 0}]


def test_usage_counts_a_hosts_sessions_through_its_daemon_and_every_host_with_all(home, tmp_path, daemons):
    remote_project = "/srv/nowhere-here"  # a path on the host only: never looked at on this machine
    write_session(home.layout, 1, tmp_path / "mine", used(100))
    state = tmp_path / "host-b"
    there = write_session(Layout(config=home.layout.config, state=state, data=tmp_path / "data"), 2, remote_project,
                          used(7000))  # fmt: skip
    write_session(Layout(config=home.layout.config, state=state, data=tmp_path / "data"), 3, "/srv/other", used(5))
    build = daemons.start(env={"CHOCK_STATE_DIR": str(state)})
    home.write_config(
        f'.{{ .connections = .{{ .build = "{build.address}", .gone = "unix:{tmp_path}/nothing.sock" }} }}\n'
    )
    one = home.chock("usage", "--daemon", "build", "--project", remote_project, cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    (row, total) = one.stdout.splitlines()
    assert row.split()[:3] == [there, "in", "7000"]  # one host: named on the total line
    assert total.startswith("total on build") and total.split()[4] == "7000", total

    every = home.chock("usage", "--all", cwd=tmp_path)
    assert every.returncode == 1, every.stderr
    lines = every.stdout.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["local", "build", "build"]  # oldest first, over every host
    assert any(line.startswith("total on build") and line.split()[4] == "7005" for line in lines), lines
    assert lines[-1].split()[:3] == ["total", "in", "7105"], lines
    assert "gone: not counted: " in every.stderr and "nothing.sock" in every.stderr

    narrowed = home.chock("usage", "--all", "--daemon", "build", cwd=tmp_path)
    assert narrowed.returncode == 0 and narrowed.stdout.splitlines()[-1].split()[:5] == [
        "total",
        "on",
        "build",
        "in",
        "7005",
    ]


def test_approve_refuses_a_hosts_log_that_claims_too_many_requests_and_skips_a_bad_id(home, tmp_path, daemons):
    state = tmp_path / "host-c"
    layout = Layout(config=home.layout.config, state=state, data=tmp_path / "data")
    asked = [{"type": "approval.request", "request_id": f"r{n}", "tool": "shell", "summary": "x"} for n in range(257)]
    flooded = write_session(layout, 5, "/srv/app", asked)
    odd = write_session(layout, 6, "/srv/app", [{"type": "approval.request", "request_id": "r 1\x1b[2J", "tool": "t"}])
    c = daemons.start(env={"CHOCK_STATE_DIR": str(state)})
    home.write_config(f'.{{ .connections = .{{ .c = "{c.address}" }} }}\n')

    refused = home.chock("approve", f"c:{flooded}", input="y\n" * 300, cwd=tmp_path)
    assert refused.returncode == 1, refused.stderr
    assert "claims more than 256 requests waiting at once; nothing was answered" in refused.stderr
    assert "Approve?" not in refused.stdout  # nothing was asked

    skipped = home.chock("approve", f"c:{odd}", cwd=tmp_path)
    assert skipped.returncode == 0, skipped.stderr
    assert "is no request id an answer can carry; it was left unanswered" in skipped.stdout
    assert "\x1b" not in skipped.stdout and "Approve?" not in skipped.stdout

    # A log whose requests nobody on the host can take any more (its owner is gone) asks nothing.
    abandoned = write_session(layout, 7, "/srv/app", asked[:1])
    gone = home.chock("approve", f"c:{abandoned}", input="y\n", cwd=tmp_path)
    assert gone.returncode == 1 and "Approve?" not in gone.stdout, gone.stdout
    assert f"session {abandoned} on c is abandoned: nobody there can take an answer; nothing was asked" in gone.stderr
    assert f"chock run --on c --continue {abandoned}" in gone.stderr
