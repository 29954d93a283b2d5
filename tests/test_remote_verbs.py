"""The verbs a client with no project path needs — `sessions`, `find`, `instances`, `start-with` — and the commands
that use them: `chock sessions --all` and `chock run --on ADDR` (docs/protocol.md#the-control-protocol).

Real daemons and their real `chock run` children on `replay` instances, a real pty for the attached view, and, for
an older daemon, a real server speaking protocol 1 with the codec of a Chock that had none of these verbs.
"""

from __future__ import annotations

import contextlib
import socket
import sys

import pytest

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient
from chock.control.framing import ErrorCode, ProtocolError
from tests.fakes.old_daemon import old_daemon
from tests.fakes.projects import make_project
from tests.fakes.sessions import replay_config, wait_for_end, wait_for_event
from tests.fakes.terminal import Terminal

DONE = [{"text": "Done.", "tool_calls": []}] * 6
TOKEN = "sk-test-9f8e7d6c5b4a-NEVER-SHOWN"
SECRET_ADDRESS = "http://127.0.0.1:9/private-gateway/v1"


def rows_of(client: ControlClient, request) -> list[dict]:
    return [line.row for line in client.collect(request, most=dp.MAX_SESSIONS)]


def started(home, daemon, project, message: str = "a task") -> str:
    session_id = daemon.client.call(dp.StartRequest(project, message)).session_id
    wait_for_end(home, session_id, "completed")
    return session_id


def raw_reply(address_path: str, request: bytes) -> bytes:
    """What the daemon writes in answer to one request, as bytes on the socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(address_path)
        sock.sendall(b"hello chock-control 1\n" + request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


# sessions and find ------------------------------------------------------------------------------------------


def test_sessions_lists_every_project_newest_first_and_find_names_any_one(home, tmp_path, daemon):
    replay_config(home, DONE)
    first, second = make_project(tmp_path / "first"), make_project(tmp_path / "second")
    ids = [started(home, daemon, first), started(home, daemon, second), started(home, daemon, first)]

    rows = rows_of(daemon.client, dp.SessionsRequest())
    assert [row["id"] for row in rows] == ids[::-1]
    assert [row["project"] for row in rows] == [str(first), str(second), str(first)]
    assert {row["status"] for row in rows} == {"ended"}
    # The same rows as `list` gives for each project.
    listed = rows_of(daemon.client, dp.ListRequest(first)) + rows_of(daemon.client, dp.ListRequest(second))
    assert sorted(rows, key=lambda row: row["id"]) == sorted(listed, key=lambda row: row["id"])

    found = daemon.client.call(dp.FindRequest(ids[1]))
    assert found.row == rows[1] and found.started_at == rows[1]["started_at"]


def test_find_of_a_session_the_daemon_does_not_hold_is_not_found(home, daemon):
    with pytest.raises(ProtocolError) as caught:
        daemon.client.call(dp.FindRequest("20261201-073450-a1b2c3"))
    assert caught.value.code == ErrorCode.NOT_FOUND
    assert caught.value.text == "there is no session 20261201-073450-a1b2c3"


def test_sessions_all_lists_two_projects_with_their_project_and_sessions_still_lists_one(home, tmp_path, daemon):
    replay_config(home, DONE)
    first, second = make_project(tmp_path / "first"), make_project(tmp_path / "second")
    one, two = started(home, daemon, first, "task of the first"), started(home, daemon, second, "task of the second")

    every = home.chock("sessions", "--all", "--daemon", daemon.address, cwd=tmp_path)
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [[daemon.address, two], [daemon.address, one]]
    assert str(second) in lines[0] and "task of the second" in lines[0]
    assert str(first) in lines[1] and "task of the first" in lines[1]

    # With no daemon named and none in the state dir, the state dir's own rows: the same lines.
    assert not home.layout.daemon_socket.exists()
    read_here = home.chock("sessions", "--all", cwd=tmp_path)
    assert read_here.returncode == 0, read_here.stderr
    here_lines = [line.split(None, 1) for line in read_here.stdout.splitlines()]
    assert [host for host, _ in here_lines] == ["local", "local"]
    assert [rest for _, rest in here_lines] == [line.split(None, 1)[1] for line in lines]

    here = home.chock("sessions", "--daemon", daemon.address, cwd=first)
    assert here.returncode == 0 and two not in here.stdout and one in here.stdout and str(first) not in here.stdout

    both = home.chock("sessions", "--all", "--project", str(first), cwd=tmp_path)
    assert both.returncode == 2 and "--all lists every project's sessions; leave out --project" in both.stderr


# instances ----------------------------------------------------------------------------------------------------


def test_instances_names_kinds_and_the_default_and_never_an_address_a_path_or_a_token(home, daemon):
    home.write_replay("demo.jsonl", DONE)
    home.write_config(
        '.{ .instance = "work", .instances = .{\n'
        f'  .work = .{{ .kind = "openai-compat={SECRET_ADDRESS}", .model = "secret-model-x", .token = "{TOKEN}" }},\n'
        '  .demo = .{ .kind = "replay=demo.jsonl" },\n'
        "} }\n"
    )
    replies = daemon.client.collect(dp.InstancesRequest(), most=dp.MAX_SESSIONS)
    assert replies == [dp.InstanceRow("demo", "replay", False), dp.InstanceRow("work", "openai-compat", True)]

    raw = raw_reply(str(daemon.socket), b"instances\n").decode()
    for secret in (TOKEN, "127.0.0.1:9", "private-gateway", "secret-model-x", "demo.jsonl", str(home.root)):
        assert secret not in raw, secret
    assert raw.count("\n") == 3  # the greeting's answer, then one line per instance


def test_a_config_the_daemon_cannot_read_is_refused_without_quoting_its_token(home, daemon):
    home.write_config(f'.{{ .instances = .{{ .work = .{{ .kind = "anthropic", .token = "{TOKEN}" oops }} }} }}\n')
    raw = raw_reply(str(daemon.socket), b"instances\n").decode()
    assert raw.splitlines()[1].startswith("error refused ") and "config.zon: line 1" in raw
    assert TOKEN not in raw


# start-with -----------------------------------------------------------------------------------------------------


def two_instances(home) -> None:
    home.write_replay("one.jsonl", [{"text": "Answered by one.", "tool_calls": []}])
    home.write_replay("two.jsonl", [{"text": "Answered by two.", "tool_calls": []}])
    home.write_config(
        '.{ .instance = "one", .instances = .{ .one = .{ .kind = "replay=one.jsonl" }, '
        '.two = .{ .kind = "replay=two.jsonl" } } }\n'
    )


def test_start_with_runs_the_instance_named_and_start_the_default(home, project, daemon):
    two_instances(home)
    named = daemon.client.call(dp.StartWithRequest(project, "two", "which are you?")).session_id
    default = daemon.client.call(dp.StartRequest(project, "which are you?")).session_id
    for session_id, instance in ((named, "two"), (default, "one")):
        wait_for_end(home, session_id, "completed")
        assert wait_for_event(home, session_id, "session.start")["instance"] == instance
        said = [e["text"] for e in home.events(session_id) if e["type"] == "assistant.message"]
        assert said == [f"Answered by {instance}."]


def test_start_with_an_instance_the_daemon_does_not_have_is_refused_in_the_daemons_words(
    home, tmp_path, project, daemon
):
    two_instances(home)
    with pytest.raises(ProtocolError) as caught:
        daemon.client.call(dp.StartWithRequest(project, "nope", "do it"))
    assert caught.value.code == ErrorCode.REFUSED
    assert "there is no instance named 'nope' (instances here: one, two)" in caught.value.text

    # The same refusal reaches a person through `chock run --on`, exit 3, and nothing was started.
    refused = home.chock("run", "--on", daemon.address, "--project", str(project), "--instance", "nope", "do it")
    assert refused.returncode == 3, refused.stderr
    assert "there is no instance named 'nope' (instances here: one, two)" in refused.stderr
    assert [row["id"] for row in rows_of(daemon.client, dp.SessionsRequest())] == []


# An older daemon ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        dp.SessionsRequest(),
        dp.FindRequest("20261201-073450-a1b2c3"),
        dp.InstancesRequest(),
        dp.StartWithRequest("/srv/project", "work", "do it"),
    ],
    ids=lambda request: request.verb,
)
def test_an_older_daemon_answering_unknown_verb_is_named_as_needing_a_newer_chock(request_):
    with old_daemon() as old:
        client = ControlClient(old.address, timeout=10)
        with pytest.raises(ProtocolError) as caught:
            client.collect(request_, most=dp.MAX_SESSIONS) if request_.streams else client.call(request_)
        assert old.asked == ["unknown-verb"]
    assert caught.value.code == ErrorCode.UNKNOWN_VERB
    assert caught.value.text == (
        f"the daemon at {old.address} needs a newer Chock for `{request_.verb}` (it answered unknown-verb): "
        "upgrade chock there"
    )


def test_commands_pass_an_older_daemons_answer_on_to_a_person(home, project):
    with old_daemon() as old:
        listing = home.chock("sessions", "--all", "--daemon", old.address, cwd=project)
        started_with = home.chock("run", "--on", old.address, "--instance", "work", "do it", cwd=project)
    newer = "needs a newer Chock for `{}` (it answered unknown-verb): upgrade chock there"
    assert listing.returncode == 1
    assert listing.stderr == f"{old.address}: not listed: the daemon at {old.address} {newer.format('sessions')}\n"
    assert started_with.returncode == 3
    assert started_with.stderr == f"chock: the daemon at {old.address} {newer.format('start-with')}\n"


# chock run --on -------------------------------------------------------------------------------------------------

SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 4"}}]},
    {"text": "Finished there.", "tool_calls": []},
    {"text": "Carried on.", "tool_calls": []},
]


def test_run_on_starts_in_another_project_attaches_and_ctrl_c_leaves_it_running(home, tmp_path, daemon):
    replay_config(home, SLOW)
    there = make_project(tmp_path / "there")
    elsewhere = tmp_path / "not-a-repository"
    elsewhere.mkdir()
    # This machine's own config is unreadable: --on looks at nothing here, the daemon at its own.
    broken = tmp_path / "broken.zon"
    broken.write_text(".{ .instances = oops }\n")
    env = {**home.env, "CHOCK_CONFIG": str(broken)}
    terminal = Terminal(
        [sys.executable, "-m", "chock", "run", "--on", daemon.address, "--project", str(there), "sleep a little"],
        env,
        elsewhere,
    )
    try:
        terminal.wait_for("sleep 4")
        terminal.type("\x03")
        assert terminal.exit_code() == 0, terminal.text()
        assert b"keeps running" in terminal.screen
    finally:
        terminal.close()
    (row,) = rows_of(daemon.client, dp.SessionsRequest())
    session_id = row["id"]
    assert f"started session {session_id} through the daemon at {daemon.address}" in terminal.text()
    # The way back names the host: this terminal's machine has no such session.
    assert f"`chock attach --daemon {daemon.address} {session_id}` comes back" in " ".join(terminal.text().split())
    assert row["project"] == str(there) and row["status"] in ("running", "ended")

    listed = home.chock("sessions", "--all", "--daemon", daemon.address, cwd=elsewhere)
    assert listed.returncode == 0 and session_id in listed.stdout and str(there) in listed.stdout
    wait_for_end(home, session_id, "completed")  # left running, it finished on its own


def test_run_on_with_no_project_sends_the_working_directory_and_exits_as_attach_does(home, tmp_path, daemon):
    replay_config(home, SLOW)
    there = make_project(tmp_path / "there")
    ran = home.chock("run", "--on", daemon.address, input="the task, from a pipe", cwd=there)
    assert ran.returncode == 0, ran.stderr  # the session completed
    (row,) = rows_of(daemon.client, dp.SessionsRequest())
    assert row["project"] == str(there) and row["status"] == "ended" and row["end_reason"] == "completed"
    assert row["message"] == "the task, from a pipe"
    assert "Finished there." in ran.stdout

    # --continue ID carries it on there, with the project the daemon's `find` names.
    more = home.chock("run", "--on", daemon.address, "--continue", row["id"], "one more thing", cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert "the daemon continues it with your message" in more.stdout and "Carried on." in more.stdout
    told = [e["text"] for e in home.events(row["id"]) if e["type"] == "user.message"]
    assert told == ["the task, from a pipe", "one more thing"]


def test_run_on_sends_the_project_as_typed_and_never_looks_at_it_here(home, tmp_path, daemon):
    replay_config(home, DONE)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    done = home.chock("run", "--on", daemon.address, "--project", str(a_file), "do it", cwd=tmp_path)
    # The daemon's refusal (exit 3), not this machine's check of its own file (click's exit 2, "is a file").
    assert done.returncode == 3, done.stderr
    assert "is a file" not in done.stderr and str(a_file) in done.stderr
    here = home.chock("run", "--project", str(a_file), "do it", cwd=tmp_path)
    assert here.returncode == 2 and "is a file" in here.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--project", "relative/dir"), "--project relative/dir is not absolute"),
        (("--project", "~/dir"), "--project ~/dir is not absolute"),
        (("--yes",), "--yes cannot be used with --on"),
        (("--allow-dirty",), "--allow-dirty cannot be used with --on"),
        (("--continue",), "--continue with --on needs the session's id"),
    ],
)
def test_run_on_refuses_what_it_cannot_send_by_name_and_starts_nothing(home, project, daemon, args, named):
    replay_config(home, DONE)
    refused = home.chock("run", "--on", daemon.address, *args, "do it", cwd=project)
    assert refused.returncode == 2, refused.stderr
    assert named in refused.stderr
    assert rows_of(daemon.client, dp.SessionsRequest()) == []


def test_a_daemon_that_lists_without_end_is_cut_at_the_most_a_listing_keeps(tmp_path, project):
    """`chock sessions --daemon ADDR` (and `usage`) keeps at most MAX_SESSIONS of a daemon's `list`, as `--all`
    keeps of its `sessions`: a reply from another machine is untrusted."""
    from chock.commands.listing import project_rows
    from chock.control.address import parse_address
    from chock.control.connection import ServerConnection
    from chock.paths import Layout
    from tests.fakes.old_daemon import OldDaemon

    class Flooding(OldDaemon):
        def _answer(self, conn: socket.socket) -> None:
            codec = ServerConnection(dp.CONTROL)
            codec.receive_data(conn.recv(65536))
            codec.next_event()
            conn.sendall(codec.greeting_reply())
            line = dp.ListRow("2026-12-01T07:34:50.123Z", {"id": "20261201-073450-a1b2c3"}).encode()
            with contextlib.suppress(OSError):
                for _ in range(dp.MAX_SESSIONS + 5):
                    conn.sendall(line)

    from tests.fakes.daemon import short_dir

    flooding = Flooding(short_dir() / "flood.sock")
    try:
        layout = Layout(tmp_path / "config.zon", tmp_path / "state", tmp_path / "data", tmp_path / "cache")
        rows = project_rows(layout, project, parse_address(flooding.address))
    finally:
        flooding.close()
    assert len(rows) == dp.MAX_SESSIONS
