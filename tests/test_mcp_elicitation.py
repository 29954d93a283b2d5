"""A server's elicitation in a real session (docs/mcp.md#in-a-session): asked at a terminal through the safe
printer, and withdrawn by the server while it waits for an answer (`approval.answer {via: withdrawn}`).

`chock run` is a real process against the loopback provider; the server is tests/fakes/mcp_server.py run by the
system's python3 in its sandbox, copied outside the project and named by its absolute path.
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
from pathlib import Path

from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import new_session
from tests.fakes.terminal import Terminal
from tests.test_mcp_session import call, config, of, rules, server_processes, tool_result, waited

FAKE_SERVER = Path(__file__).parent / "fakes" / "mcp_server.py"


def fake_server(tmp_path: Path) -> str:
    """config.zon's entry for the test MCP server, `fake`, copied outside the project."""
    servers = tmp_path / "servers"
    servers.mkdir(exist_ok=True)
    shutil.copy(FAKE_SERVER, servers / "mcp_server.py")
    return f'.fake = .{{ .command = .{{ "/usr/bin/python3", "{servers / "mcp_server.py"}" }} }}'


def test_an_elicitation_at_a_terminal_shows_the_servers_message_escaped_and_a_yes_accepts(home, project, tmp_path):
    hostile = "Which colour?\x1b]0;pwned\x07\x1b[2J"
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__fake__ask", {"message": hostile})])
        fake.script(text="Done.")
        config(home, fake, fake_server(tmp_path), rules(("allow", "mcp:fake/*")))
        terminal = Terminal.chock(home, "run", "ask me", cwd=project)
        try:
            terminal.wait_for("[y/N] ", timeout=60)
            assert "the MCP server fake asks: Which colour?" in terminal.text()
            assert b"\x1b]0;pwned" not in terminal.screen and b"\x1b[2J" not in terminal.screen
            terminal.type("y\n")
            assert terminal.exit_code(60) == 0, terminal.text()
        finally:
            terminal.close()
        told = json.loads(tool_result(fake.calls[1]))
    assert told == {"action": "accept", "content": {}}  # its schema gives no default: nothing is filled in
    events = home.events(home.only_session())
    (asked,) = [event for event in of(events, "approval.request") if not event.get("by_config")]
    (answer,) = [event for event in of(events, "approval.answer") if event["request_id"] == asked["request_id"]]
    assert (answer["answer"], answer["via"]) == ("yes", "terminal")
    assert server_processes(home) == []


def test_an_elicitation_the_server_withdraws_is_closed_in_the_log_and_the_call_goes_on(home, project, tmp_path):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(tool_calls=[call("c1", "mcp__fake__ask", {"withdraw": True})])
        fake.script(text="Done.")
        config(home, fake, fake_server(tmp_path), rules(("allow", "mcp:fake/*")))
        process = home.spawn("run", "ask me", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)  # fmt: skip
        try:
            session_id = new_session(home)
            asked = waited(home, session_id, "approval.request", lambda e: not e.get("by_config"))
            assert asked["summary"].startswith("the MCP server fake asks: Which colour?")
            (server_home,) = glob.glob(f"{home.env['CHOCK_DATA_DIR']}/mcp/*/fake")
            Path(server_home, "withdraw").touch()  # the server withdraws its question now
            assert process.wait(60) == 0, process.stderr.read() if process.stderr else ""
        finally:
            process.kill()
        assert tool_result(fake.calls[1]) == "withdrawn"
    events = home.events(session_id)
    (answer,) = [event for event in of(events, "approval.answer") if event["request_id"] == asked["request_id"]]
    assert (answer["answer"], answer["via"]) == ("no", "withdrawn")
    assert server_processes(home) == []
