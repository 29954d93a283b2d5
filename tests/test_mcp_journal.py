"""A remote MCP server's credential never reaches the journal (docs/credentials.md, docs/mcp.md#credentials): a
session the daemon starts under a real systemd user manager with a real systemd-journald
(tests/fakes/systemd_user.py, `journal=True`) uses the reference server over Streamable HTTP behind the recording
proxy, with a token stored by `chock login --provider mcp=URL`; the token is in the proxy's recorded
Authorization header and in no byte of the journal (`journalctl -o export`: every field, binary ones too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, events_of
from tests.fakes.projects import make_project
from tests.fakes.providers import FakeProvider
from tests.fakes.recording_proxy import RecordingProxy
from tests.fakes.systemd_user import JOURNAL_DIR, user_manager
from tests.test_journal import wait_for_records
from tests.test_mcp_session import TOKEN, call, http_server, of, rules, tool_result  # noqa: F401 (a fixture)

CHOCK = str(Path(sys.executable).parent / "chock")


@pytest.mark.systemd
def test_a_remote_servers_token_reaches_its_server_and_no_journal_field(http_server):  # noqa: F811
    with user_manager(journal=True) as manager, RecordingProxy("127.0.0.1", http_server) as proxy:
        home = manager.home
        project = make_project(home / "project", {"README.md": "# demo\n"})
        url = proxy.url("/mcp")
        with FakeProvider(kind="anthropic", key=None) as fake:
            fake.script(tool_calls=[call("c1", "mcp__ev__echo", {"message": "over http"})])
            fake.script(text="Done.")
            config = home / ".config" / "chock"
            config.mkdir(parents=True)
            (config / "config.zon").write_text(
                f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "m" }} }},\n'
                f'  .mcp = .{{ .servers = .{{ .ev = .{{ .url = "{url}", .credential = "ev" }} }} }},\n'
                f'  .approvals = .{{ {rules(("allow", "mcp:ev/*"))} }}, .credentials = .{{ .store = "file" }} }}\n'
            )
            manager.run([CHOCK, "login", "--provider", f"mcp={url}", "--name", "ev", "--password-method", "stdin"],
                        input=TOKEN)  # fmt: skip
            manager.run([CHOCK, "daemon", "install", "--over-package"])
            manager.systemctl("start", "chock.socket")
            address = f"unix:{home / '.local' / 'state' / 'chock' / 'daemon.sock'}"
            session_id = ControlClient(address).call(dp.StartRequest(str(project), "use it")).session_id
            seen = list(
                events_of(ControlClient(address).stream(dp.WatchRequest(project, session_id), idle_timeout=None))
            )
            assert seen[-1]["type"] == "session.end" and seen[-1]["reason"] == "completed", seen[-1]
            assert tool_result(fake.calls[1]) == "Echo: over http", of(seen, "mcp.server")
        recorded = proxy.seen()
        assert recorded and all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in recorded)

        wait_for_records(
            manager, "SYSLOG_IDENTIFIER=chock-session", f"CHOCK_SESSION={session_id}",
            events={"session.running", "session.ended"},
        )  # fmt: skip
        variables = [f"{key}={value}" for key, value in manager.env.items()]
        everything = subprocess.run(
            ["nsenter", "-t", str(manager.pid), "-m", "env", "-i", *variables,
             "journalctl", "-D", JOURNAL_DIR, "-o", "export", "--no-pager"],
            capture_output=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert b"CHOCK_SESSION=" + session_id.encode() in everything  # the session's records are in this export
        assert TOKEN.encode() not in everything
