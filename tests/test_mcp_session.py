"""MCP servers in real sessions (issue 26): `chock run` as a real process against the loopback provider
(tests/fakes/providers.py) and the reference server `@modelcontextprotocol/server-everything` (pinned in
scripts/npm-packages.txt, installed on the host), over stdio inside its sandbox and over Streamable HTTP behind a
recording proxy.

The server is the real one; what the tests watch on its wire: over stdio a shell wrapper in the server's own
sandbox copies what Chock writes to it into the server's private HOME (readable from the host), over HTTP the
proxy (tests/fakes/recording_proxy.py) records every request with its headers.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chock.control import daemon_protocol as dp
from chock.control import session_protocol as sp
from chock.control.client import SessionClient
from chock.control.session_protocol import APPROVAL, SessionAnswerWithRequest
from tests.fakes.projects import make_project
from tests.fakes.providers import FakeProvider
from tests.fakes.recording_proxy import RecordingProxy
from tests.fakes.sessions import new_session, processes_with_environment, wait_for_event
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until

SERVER = "mcp-server-everything"
NPM_PACKAGES = Path(__file__).parent.parent / "scripts" / "npm-packages.txt"  # the pin, which CI installs
TOKEN = "mcp-secret-7f3a9c41d2e8"


@pytest.fixture(autouse=True)
def _reference_server() -> None:
    if shutil.which(SERVER) is None:
        [pin] = [line for line in NPM_PACKAGES.read_text().splitlines() if "server-everything" in line]
        pytest.fail(
            f"the reference MCP server is not installed: `npm install -g {pin}` (scripts/system-packages installs "
            "what scripts/npm-packages.txt pins)"
        )


def config(home, fake: FakeProvider, servers: str, approvals: str = "", *, extra: str = "") -> None:
    home.write_config(
        f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "fake-model" }} }},\n'
        f"  .mcp = .{{ .servers = .{{ {servers} }} }},\n"
        f"  .approvals = .{{ {approvals} }},{extra} }}\n"
    )


def stdio_server(name: str = "everything", *, recording: bool = False) -> str:
    """The reference server over stdio; `recording`: behind `tee`, which copies what Chock sends it to
    `$HOME/received.jsonl` in the server's private HOME."""
    if not recording:
        return f'.{name} = .{{ .command = .{{ "{SERVER}", "stdio" }} }}'
    script = f"tee -a $HOME/received.jsonl | exec {SERVER} stdio"
    return f'.{name} = .{{ .command = .{{ "/bin/sh", "-c", "{script}" }} }}'


def rules(*pairs: tuple[str, str]) -> str:
    return ".rules = .{ " + ", ".join(f'.{{ .{verdict} = "{pattern}" }}' for verdict, pattern in pairs) + " }"


def of(events: list[dict], kind: str) -> list[dict]:
    return [event for event in events if event["type"] == kind]


def tool_names(body: dict) -> list[str]:
    return [tool["name"] for tool in body["tools"]]


def tool_result(body: dict) -> str:
    """The text of the last message's tool result, as the model was sent it."""
    (result,) = [c for c in body["messages"][-1]["content"] if c.get("type") == "tool_result"]
    content = result["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def server_processes(home) -> list[int]:
    """The processes of this home's MCP servers: their environment names a HOME under its data dir's `mcp/`."""
    return processes_with_environment(f"HOME={home.env['CHOCK_DATA_DIR']}/mcp/", prefix=True)


def waited(home, session_id: str, kind: str, where=lambda event: True) -> dict:
    """`wait_for_event`, failing with the session's log so far (what the session did instead)."""
    try:
        return wait_for_event(home, session_id, kind, where, timeout=90)
    except AssertionError as failed:
        raise AssertionError(f"{failed}; the log: {home.events(session_id)}") from None


def received(home, server: str) -> list[dict]:
    """What Chock wrote to a recording stdio server (`stdio_server(recording=True)`)."""
    paths = glob.glob(f"{home.env['CHOCK_DATA_DIR']}/mcp/*/{server}/received.jsonl")
    lines = b"".join(Path(path).read_bytes() for path in paths).splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def assert_started(home) -> None:
    """The session's first server started (else the test fails saying why it did not)."""
    said = of(home.events(home.only_session()), "mcp.server")
    assert said and said[0]["state"] == "started", said


# A call that runs for two minutes unless cancelled.
LONG_CALL = call("c1", "mcp__everything__trigger-long-running-operation", {"duration": 120, "steps": 120})


def call_in_flight(home, session_id: str) -> None:
    """Wait until the session's call is on the recording server's stdin, and its server runs."""
    waited(home, session_id, "tool.call")
    wait_until(lambda: any(m.get("method") == "tools/call" for m in received(home, "everything")), 30,
               "the call on the server's stdin")  # fmt: skip
    assert server_processes(home)  # the server runs (so a scan for its processes can fail)


def assert_cancelled_on_the_wire(home) -> None:
    """The recording server was sent `notifications/cancelled` for its one call, and only for it."""
    (sent,) = [m for m in received(home, "everything") if m.get("method") == "tools/call"]
    cancelled = [m for m in received(home, "everything") if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancelled] == [sent["id"]]


# --- stdio, in the sandbox -----------------------------------------------------------------------------------


def test_the_servers_tools_follow_the_built_in_ones_and_a_calls_result_reaches_the_next_request(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__everything__echo", {"message": "hi from the model"})])
        fake.script(tool_calls=[call("c2", "mcp__everything__get-structured-content", {"location": "New York"})])
        fake.script(text="Done.")
        config(home, fake, stdio_server(), rules(("allow", "mcp:everything/*")))
        result = home.chock("run", "use the server", cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        bodies = fake.calls
    names = tool_names(bodies[0])
    built_in = [name for name in names if not name.startswith("mcp__")]
    served = [name for name in names if name.startswith("mcp__")]
    assert names == built_in + served and served == sorted(served)  # stable: the prompt cache holds
    assert_started(home)
    assert {"mcp__everything__echo", "mcp__everything__trigger-long-running-operation"} <= set(served)
    assert tool_result(bodies[1]) == "Echo: hi from the model"
    assert json.loads(tool_result(bodies[2]))["conditions"] == "Cloudy"  # its structured content
    events = home.events(home.only_session())
    (started,) = of(events, "mcp.server")[:1]
    assert (started["server"], started["state"], started["origin"]) == ("everything", "started", "config")
    first = of(events, "tool.call")[0]
    assert (first["name"], first["server"], first["tool"]) == ("mcp__everything__echo", "everything", "echo")
    assert of(events, "tool.result")[0]["server"] == "everything"
    (asked, *_) = of(events, "approval.answer")
    assert (asked["via"], asked["rule"]) == ("rule", "mcp:everything/*")
    assert server_processes(home) == []


def test_a_progress_reporting_call_completes_and_its_result_reaches_the_model(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        args = {"duration": 2, "steps": 4}
        fake.script(tool_calls=[call("c1", "mcp__everything__trigger-long-running-operation", args)])
        fake.script(text="Done.")
        config(home, fake, stdio_server(recording=True))
        result = home.chock("run", "--yes", "wait for it", cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        told = tool_result(fake.calls[1])
    assert told == "Long running operation completed. Duration: 2 seconds, Steps: 4."
    (sent,) = [m for m in received(home, "everything") if m.get("method") == "tools/call"]
    assert "progressToken" in sent["params"].get("_meta", {})  # the server was asked for progress, and sent it


def test_a_stop_cancels_the_call_in_flight_leaves_no_server_process_and_the_next_owner_starts_it_again(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[LONG_CALL])
        fake.script(tool_calls=[call("c2", "mcp__everything__echo", {"message": "again"})])
        fake.script(text="Done.")
        config(home, fake, stdio_server(recording=True))
        process = home.spawn("run", "--yes", "wait", cwd=project, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        try:
            session_id = new_session(home)
            call_in_flight(home, session_id)
            with SessionClient(home.layout.session_socket(session_id, "handover"), sp.HANDOVER) as client:
                client.ask(sp.SessionStopRequest())
                assert isinstance(client.next_reply(60), sp.Ended)
            assert process.wait(60) == 130, process.stderr.read() if process.stderr else ""
        finally:
            process.kill()
        assert_cancelled_on_the_wire(home)
        events = home.events(session_id)
        assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "interrupted"
        assert not of(events, "tool.result")  # cut off: the next owner gives it its ending
        assert server_processes(home) == []

        continued = home.chock("run", "--continue", session_id, "--yes", cwd=project, timeout=120)
        assert continued.returncode == 0, continued.stdout + continued.stderr
        assert tool_result(fake.calls[2]) == "Echo: again"  # a new process of the server, this owner's
    assert [e["state"] for e in of(home.events(session_id), "mcp.server")].count("started") == 2
    assert server_processes(home) == []


def test_a_projects_servers_start_only_once_trusted_and_a_session_with_nobody_to_ask_logs_the_skip(home, tmp_path):
    declared = f".{{ .servers = .{{ {stdio_server('proj')} }} }}\n"
    project = make_project(tmp_path / "declaring", {"README.md": "# demo\n", ".chock/mcp.zon": declared})
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="Nothing to do.")
        fake.script(tool_calls=[call("c1", "mcp__proj__echo", {"message": "trusted"})])
        fake.script(text="Done.")
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "m" }} }}, '
            '.approvals = .{ .rules = .{ .{ .allow = "mcp:proj/*" } } } }\n'
        )
        first = home.chock("run", "untrusted", cwd=project, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        assert not [name for name in tool_names(fake.calls[0]) if name.startswith("mcp__")]
        (skipped,) = of(home.events(home.only_session()), "mcp.server")
        assert (skipped["server"], skipped["state"], skipped["origin"]) == ("proj", "skipped", "project")
        assert "chock mcp trust" in skipped["reason"]
        trusted = home.chock("mcp", "trust", "--yes", cwd=project)
        assert trusted.returncode == 0, trusted.stdout + trusted.stderr
        second = home.chock("run", "trusted", cwd=project, timeout=120)
        assert second.returncode == 0, second.stdout + second.stderr
        assert tool_result(fake.calls[2]) == "Echo: trusted"
    started = [e for e in home.events(home.sessions_by_start()[1]) if e["type"] == "mcp.server"]
    assert [(e["server"], e["state"], e["origin"]) for e in started][:1] == [("proj", "started", "project")]


def test_a_handover_stops_the_servers_and_the_adopting_owner_starts_them_again(home, project):
    def answer(body: dict) -> dict:
        last = body["messages"][-1]["content"]
        if any(isinstance(c, dict) and c.get("type") == "tool_result" for c in last):
            return {"text": "Done."}
        return {"tool_calls": [call("c1", "mcp__everything__echo", {"message": "handed"})], "pause": 0.2}

    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.answer_with(answer)
        config(home, fake, stdio_server(), rules(("allow", "mcp:everything/*")))
        process = home.spawn("run", "hand me over", cwd=project, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        try:
            session_id = new_session(home)
            waited(home, session_id, "mcp.server")
            assert server_processes(home)
            with SessionClient(home.layout.session_socket(session_id, "handover"), sp.HANDOVER) as client:
                client.ask(sp.HandoverRequest())
                assert isinstance(client.next_reply(60), sp.Ready)
                client.ask(sp.ConfirmRequest())
                assert isinstance(client.next_reply(60), sp.Released)
            assert process.wait(60) == 8
        finally:
            process.kill()
        assert server_processes(home) == []
        events = home.events(session_id)
        assert [e["type"] for e in events[-2:]] == ["mcp.server", "session.end"] and events[-2]["state"] == "stopped"
        adopted = home.chock("run", "--adopt", session_id, cwd=project, timeout=120)
        assert adopted.returncode == 0, adopted.stdout + adopted.stderr
        last = fake.calls[-1]  # the adopting owner sent the echo its server gave
    assert tool_result(last) == "Echo: handed"
    assert [e["state"] for e in of(home.events(session_id), "mcp.server")] == [
        "started",
        "stopped",
        "started",
        "stopped",
    ]
    assert server_processes(home) == []


# --- approvals -----------------------------------------------------------------------------------------------


def test_a_deny_rule_refuses_even_with_yes(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__everything__echo", {"message": "no"})])
        fake.script(text="Done.")
        config(home, fake, stdio_server(recording=True), rules(("deny", "mcp:everything/echo")))
        result = home.chock("run", "--yes", "try", cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        told = tool_result(fake.calls[1])
    assert "denied by rule `mcp:everything/echo`" in told
    assert not [m for m in received(home, "everything") if m.get("method") == "tools/call"]


def test_with_no_rule_a_call_asks_and_nobody_answering_refuses_it_naming_the_rule_that_would_allow_it(home, project):
    """echo says `readOnlyHint: true`: a hint from a server changes nothing, the call still asks."""
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__everything__echo", {"message": "unasked"})])
        fake.script(text="Done.")
        config(home, fake, stdio_server(recording=True), '.shell = "allow", .timeout = "1s"')
        result = home.chock("run", "try", cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        told = tool_result(fake.calls[1])
    assert "nobody answered within 1s" in told and '.allow = "mcp:everything/echo"' in told
    (asked,) = of(home.events(home.only_session()), "approval.request")
    assert asked["propose"] == "mcp:everything/echo" and asked["summary"] == 'everything/echo {"message":"unasked"}'
    assert not [m for m in received(home, "everything") if m.get("method") == "tools/call"]


def test_the_question_at_a_terminal_names_the_server_and_tool_and_shows_the_arguments_safely(home, project):
    hostile = "title\x1b]0;pwned\x07 done"
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__everything__echo", {"message": hostile})])
        fake.script(text="Done.")
        config(home, fake, stdio_server())
        terminal = Terminal.chock(home, "run", "ask me", cwd=project)
        try:
            terminal.wait_for("? [y/N] ", timeout=60)
            assert "Allow mcp__everything__echo: everything/echo" in terminal.text()
            assert "saving the rule `mcp:everything/echo`" in terminal.text()
            assert b"\x1b]0;pwned" not in terminal.screen  # shown escaped, never acted on
            terminal.type("s\n")
            terminal.wait_for("rule to save for the session")
            terminal.type("\n")
            assert terminal.exit_code(60) == 0, terminal.text()
        finally:
            terminal.close()
        assert tool_result(fake.calls[1]) == f"Echo: {hostile}"
    (answer,) = of(home.events(home.only_session()), "approval.answer")
    assert (answer["answer"], answer["scope"], answer["rule"]) == ("yes", "session", "mcp:everything/echo")


def test_a_person_answering_yes_over_the_socket_runs_the_call(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__everything__echo", {"message": "asked"})])
        fake.script(text="Done.")
        config(home, fake, stdio_server())
        process = home.spawn("run", "ask me", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)  # fmt: skip
        try:
            session_id = new_session(home)
            asked = waited(home, session_id, "approval.request")
            with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as client:
                client.call(SessionAnswerWithRequest(asked["request_id"], True, "once", "", ""))
            assert process.wait(60) == 0
        finally:
            process.kill()
        assert tool_result(fake.calls[1]) == "Echo: asked"


def test_an_elicitation_is_asked_of_the_person_and_a_yes_sends_the_schemas_defaults(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__everything__trigger-elicitation-request", {})])
        fake.script(text="Done.")
        config(home, fake, stdio_server(), rules(("allow", "mcp:everything/*")))
        process = home.spawn("run", "ask me", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)  # fmt: skip
        try:
            session_id = new_session(home)
            asked = waited(home, session_id, "approval.request", lambda e: not e.get("by_config"))
            assert asked["summary"].startswith("the MCP server everything asks: Please provide inputs")
            with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as client:
                client.call(SessionAnswerWithRequest(asked["request_id"], True, "once", "", ""))
            assert process.wait(60) == 0
        finally:
            process.kill()
        told = tool_result(fake.calls[1])
    assert "User provided the requested information" in told and "Favorite Integer: 42" in told


def test_a_subagent_calls_the_servers_tools_only_where_a_rule_allows(home, project):
    def answer(body: dict) -> dict:
        if "sub-agent" in json.dumps(body.get("system")):
            results = [
                c for c in body["messages"][-1]["content"] if isinstance(c, dict) and c.get("type") == "tool_result"
            ]
            if not results:
                assert "mcp__everything__echo" in tool_names(body)
                return {"tool_calls": [call("s1", "mcp__everything__echo", {"message": "from the subagent"}),
                                       call("s2", "mcp__everything__get-sum", {"a": 2, "b": 3})]}  # fmt: skip
            return {"text": "found: " + json.dumps([r["content"] for r in results])}
        if len(body["messages"]) == 1:
            return {"tool_calls": [call("t1", "subagent", {"task": "use the server"})]}
        return {"text": "Done."}

    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.answer_with(answer)
        config(home, fake, stdio_server(), rules(("allow", "mcp:everything/echo")))
        result = home.chock("run", "delegate", cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
    assert_started(home)
    (ended,) = of(home.events(home.only_session()), "subagent.end")
    assert "Echo: from the subagent" in ended["result"]
    assert "a subagent cannot ask one" in ended["result"] and "mcp:everything/get-sum" in ended["result"]
    assert server_processes(home) == []


# --- Streamable HTTP, with a stored credential ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_server(tmp_path) -> Iterator[int]:
    """The reference server over Streamable HTTP on a loopback port of its own (started by the test, on the host)."""
    port = free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PORT": str(port)}
    server = subprocess.Popen([SERVER, "streamableHttp"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:

        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening, 30, "the reference server's HTTP port")
        yield port
    finally:
        server.kill()
        server.wait(10)


def login(home, url: str, name: str) -> None:
    done = home.chock("login", "--provider", f"mcp={url}", "--name", name, "--password-method", "stdin", input=TOKEN)
    assert done.returncode == 0, done.stdout + done.stderr


def test_over_http_the_token_goes_to_its_origin_only_and_nowhere_else(home, project, http_server):
    with RecordingProxy("127.0.0.1", http_server) as proxy, RecordingProxy("127.0.0.1", http_server) as other:
        url, elsewhere = proxy.url("/mcp"), other.url("/mcp")
        with FakeProvider(kind="anthropic", key=None) as fake:
            fake.script(tool_calls=[call("c1", "mcp__ev__echo", {"message": "over http"})])
            fake.script(tool_calls=[call("c2", "shell", {"command": "env; cat /proc/self/environ"})])
            fake.script(text="Done.")
            servers = (
                f'.ev = .{{ .url = "{url}", .credential = "ev" }}, '
                f'.other = .{{ .url = "{elsewhere}", .credential = "ev" }}'
            )
            approvals = '.shell = "allow", ' + rules(("allow", "mcp:ev/*"))
            config(home, fake, servers, approvals, extra=' .credentials = .{ .store = "file" }')
            login(home, url, "ev")
            result = home.chock("run", "use it", cwd=project, timeout=120)
            assert result.returncode == 0, result.stdout + result.stderr
            assert tool_result(fake.calls[1]) == "Echo: over http"
            sandbox_env = tool_result(fake.calls[2])
        seen, seen_elsewhere = proxy.seen(), other.seen()
    assert seen and all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in seen)
    assert any(r.method == "DELETE" for r in seen)  # the session's end closed the MCP session
    assert all("authorization" not in r.headers for r in seen_elsewhere) and not seen_elsewhere
    events = home.events(home.only_session())
    failed = [e for e in of(events, "mcp.server") if e["server"] == "other"]
    assert failed and failed[0]["state"] == "failed" and "origin" in failed[0]["reason"]
    log = home.layout.log_path(home.only_session()).read_text()
    assert TOKEN not in log and TOKEN not in sandbox_env and TOKEN not in result.stdout + result.stderr
    assert "HOME=" in sandbox_env  # the shell call's environment was read


# --- stopping, and the subagent relay's bounds ----------------------------------------------------------------


def test_sigterm_cancels_the_call_in_flight_and_leaves_no_server_process(home, project):
    """A `chock run` told to stop by SIGTERM (systemd's stop, `kill`) stops its servers as `stop` does: the server
    is sent `notifications/cancelled` for the call in flight, and no process of it is left."""
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[LONG_CALL])
        config(home, fake, stdio_server(recording=True))
        process = home.spawn("run", "--yes", "wait", cwd=project, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        try:
            session_id = new_session(home)
            call_in_flight(home, session_id)
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        finally:
            process.kill()
    assert_cancelled_on_the_wire(home)
    assert [e["state"] for e in of(home.events(session_id), "mcp.server")] == ["started", "stopped"]
    assert server_processes(home) == []


def test_chock_stop_through_the_daemon_cancels_the_call_in_flight_and_leaves_no_server_process(home, project, daemon):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[LONG_CALL])
        config(home, fake, stdio_server(recording=True), rules(("allow", "mcp:everything/*")))
        session_id = daemon.client.call(dp.StartRequest(project, "wait")).session_id
        call_in_flight(home, session_id)
        stopped = home.chock("stop", session_id, "--daemon", daemon.address, cwd=project)
        assert stopped.returncode == 0, stopped.stderr
        waited(home, session_id, "session.end")
    assert_cancelled_on_the_wire(home)
    end = home.events(session_id)[-1]
    assert (end["type"], end["reason"], end["via"]) == ("session.end", "interrupted", "socket")
    assert server_processes(home) == []  # the servers stop before session.end is logged


def subagent_answering(calls: list[dict[str, Any]]) -> Any:
    """A model whose subagent makes `calls` at once, then reports the results it was given."""

    def answer(body: dict) -> dict:
        if "sub-agent" in json.dumps(body.get("system")):
            results = [
                c for c in body["messages"][-1]["content"] if isinstance(c, dict) and c.get("type") == "tool_result"
            ]
            if not results:
                return {"tool_calls": calls}
            return {"text": "found: " + json.dumps([r["content"] for r in results])}
        if len(body["messages"]) == 1:
            return {"tool_calls": [call("t1", "subagent", {"task": "use the server"})]}
        return {"text": "Done."}

    return answer


def delegated(home, project, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Run a session whose subagent makes `calls` at once (echo allowed by a rule); its `subagent.end`."""
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.answer_with(subagent_answering(calls))
        config(home, fake, stdio_server(recording=True), rules(("allow", "mcp:everything/echo")))
        result = home.chock("run", "delegate", cwd=project, timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
    assert_started(home)
    (ended,) = of(home.events(home.only_session()), "subagent.end")
    return ended


def test_a_subagent_relays_at_most_64_calls(home, project):
    calls = [call(f"s{n}", "mcp__everything__echo", {"message": f"call {n}"}) for n in range(66)]
    ended = delegated(home, project, calls)
    assert "Echo: call 63" in ended["result"] and "Echo: call 64" not in ended["result"]
    assert ended["result"].count("a subagent relays at most 64 MCP calls") == 2
    served = [m for m in received(home, "everything") if m.get("method") == "tools/call"]
    assert len(served) == 64  # the server never saw the calls past the bound
    assert server_processes(home) == []


def test_a_subagent_writing_a_line_past_4_mib_is_killed_and_the_session_goes_on(home, project):
    calls = [call("s1", "mcp__everything__echo", {"message": "x" * (5 * 1024 * 1024)})]
    ended = delegated(home, project, calls)
    assert ended["result"].startswith("the subagent failed")
    assert not [m for m in received(home, "everything") if m.get("method") == "tools/call"]
    assert server_processes(home) == []
