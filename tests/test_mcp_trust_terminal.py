"""A project's `.chock/mcp.zon` at a terminal `chock run` (docs/mcp.md#trust): the first run asks, showing the
declaration through the safe printer; a yes starts its server and is remembered for that exact declaration; a
changed declaration (a new commit) asks again showing what changed, and a no skips the server with a log entry.

`chock run` is a real process on a real pty against the loopback provider; the server is
tests/fakes/mcp_server.py run by the system's python3 in its sandbox, copied outside the project.
"""

from __future__ import annotations

from pathlib import Path

from chock.mcp.session_specs import DECLINED
from tests.fakes.projects import git, make_project
from tests.fakes.providers import FakeProvider
from tests.fakes.terminal import Terminal
from tests.test_mcp_elicitation import FAKE_SERVER
from tests.test_mcp_session import of, server_processes

HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J"  # sets the clipboard, clears the screen


def declaration(server: Path, *more: str) -> str:
    argv = ", ".join(f'"{arg}"' for arg in ("/usr/bin/python3", str(server), *more))
    return f"// the project's tools {HOSTILE}\n.{{ .servers = .{{ .proj = .{{\n  .command = .{{ {argv} }},\n}} }} }}\n"


def run_at_a_terminal(home, project: Path, answer: str | None) -> str:
    """`chock run` on a pty; `answer`: what to type at the trust question (None: there must be none)."""
    terminal = Terminal.chock(home, "run", "hello", cwd=project)
    try:
        if answer is not None:
            terminal.wait_for("[y/N] ", timeout=60)
            terminal.type(answer + "\n")
        assert terminal.exit_code(90) == 0, terminal.text()
        return terminal.text()
    finally:
        terminal.close()


def test_a_projects_declaration_is_asked_about_at_the_terminal_once_and_again_when_it_changes(home, tmp_path):
    servers = tmp_path / "servers"
    servers.mkdir()
    server = servers / "mcp_server.py"
    server.write_bytes(FAKE_SERVER.read_bytes())
    project = make_project(tmp_path / "p", {"README.md": "# demo\n", ".chock/mcp.zon": declaration(server)})
    with FakeProvider(kind="anthropic", key=None) as fake:
        for _ in range(3):
            fake.script(text="Done.")
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "m" }} }} }}\n'
        )
        first = run_at_a_terminal(home, project, "y")
        assert "declares MCP servers in .chock/mcp.zon" in first and str(server) in first, first
        assert "\\x1b" in first and "]52;c;cm0gLXJmIH4=" in first and "\\x07" in first  # shown escaped
        assert "\x1b]52" not in first and "\x07" not in first and "\x1b[2J" not in first
        second = run_at_a_terminal(home, project, None)
        assert "[y/N]" not in second, second

        (project / ".chock/mcp.zon").write_text(declaration(server, "--page-size", "3"))
        git(project, "commit", "-q", "-am", "page the tools")
        third = run_at_a_terminal(home, project, "n")
        assert "changed its MCP servers since you trusted them" in third, third
        assert f'-  .command = .{{ "/usr/bin/python3", "{server}" }},' in third
        assert f'+  .command = .{{ "/usr/bin/python3", "{server}", "--page-size", "3" }},' in third
        bodies = fake.calls
    first_id, second_id, third_id = home.sessions_by_start()
    told = [[tool["name"] for tool in body["tools"] if tool["name"].startswith("mcp__")] for body in bodies]
    assert "mcp__proj__echo" in told[0] and told[0] == told[1] and told[2] == []
    for session_id, state in ((first_id, "started"), (second_id, "started"), (third_id, "skipped")):
        (said,) = of(home.events(session_id), "mcp.server")[:1]
        assert (said["server"], said["state"], said["origin"]) == ("proj", state, "project"), said
    assert of(home.events(third_id), "mcp.server")[0]["reason"] == DECLINED
    assert server_processes(home) == []
