"""The records of the daemon, serve and daemon-spawned sessions: in a real journal, and on stderr without one.

Under a real systemd user manager with a real systemd-journald in the same namespace
(tests/fakes/systemd_user.py, `journal=True`): the units `chock daemon install` writes, socket activation, a
session against a loopback provider with a credential from the file store, and a peer of another uid; then
the journal is read with `journalctl -D`, matching records by SYSLOG_IDENTIFIER and CHOCK_SESSION (as root,
in hand-made cgroups, the unit fields may be empty). Without a journal, the same records reach stderr.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, events_of
from chock.paths import project_key
from chock.platform import journal
from tests.fakes.daemon import short_dir
from tests.fakes.projects import make_project
from tests.fakes.providers import FakeProvider
from tests.fakes.systemd_user import UserManager, user_manager
from tests.fakes.wait import wait_until

CHOCK = str(Path(sys.executable).parent / "chock")
KEY = "sk-planted-credential-5e1a77"
MESSAGE = "the-task-text-that-stays-in-the-log-9b2c"
FILE_TEXT = "tool-output-that-stays-in-the-log-41d0"
ANSWER = "final-answer-that-stays-in-the-log-c3e8"
# Another user: the peer check refuses it (the test opens the socket's modes so only that check stands).
NOBODY = 65534

# Connects as uid NOBODY (under setpriv), greets, and prints what it was answered.
FOREIGN_PEER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
sock.sendall(sys.argv[2].encode())
data = b""
while chunk := sock.recv(65536):
    data += chunk
print(data.decode(errors="replace"))
"""


def as_nobody(manager: UserManager | None, path: Path, request: str) -> str:
    """`request` sent to the unix socket at `path` by a process of uid NOBODY; its answer."""
    if os.getuid() != 0:
        pytest.fail("setpriv --reuid needs root: run the suite as root, as scripts/test and CI do")
    argv = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
            "/usr/bin/python3", "-c", FOREIGN_PEER, str(path), request]  # fmt: skip
    if manager is not None:
        done = manager.run(argv)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/", check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def open_to_others(path: Path, top: Path) -> None:
    """Let another uid reach the socket at `path`: 0777 on it, 0755 on every directory from `top` down."""
    os.chmod(path, 0o777)
    for directory in [top, *reversed(path.parents)]:
        if directory == top or top in directory.parents:
            os.chmod(directory, 0o755)


def fields(entry: dict) -> dict[str, str]:
    """A journal entry's fields whose values are text (journalctl's JSON gives bytes as lists)."""
    return {key: value for key, value in entry.items() if isinstance(value, str)}


def by_event(entries: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for entry in entries:
        grouped.setdefault(entry.get("CHOCK_EVENT", ""), []).append(entry)
    return grouped


def wait_for_records(manager: UserManager, *matches: str, events: set[str]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}

    def arrived() -> bool:
        nonlocal found
        found = by_event(manager.journal(*matches))
        return events <= set(found)

    wait_until(arrived, 20, f"the records {sorted(events)} of {' '.join(matches)}")
    return found


# --- under systemd, in a real journal --------------------------------------------------------------------


@pytest.mark.systemd
def test_the_service_and_its_sessions_record_to_the_journal(tmp_path: Path) -> None:
    with user_manager(journal=True) as manager, FakeProvider(kind="openai", key=KEY) as fake:
        home = manager.home
        project = make_project(home / "project", {"notes.txt": FILE_TEXT + "\n"})
        fake.script(text="Reading.", tool_calls=[{"id": "t1", "name": "read_file", "args": {"path": "notes.txt"}}])
        fake.script(text=ANSWER)
        config = home / ".config" / "chock"
        config.mkdir(parents=True)
        (config / "config.zon").write_text('.{ .credentials = .{ .store = "file" } }\n')
        manager.run([CHOCK, "login", "--provider", f"openai-compat={fake.address}", "--name", "local",
                     "--model", "m1", "--password-method", "stdin"], input=KEY + "\n")  # fmt: skip
        manager.run([CHOCK, "daemon", "install", "--over-package"])
        manager.systemctl("start", "chock.socket", "chock-serve.socket")

        state = home / ".local" / "state" / "chock"
        address = f"unix:{state / 'daemon.sock'}"
        session_id = ControlClient(address).call(dp.StartRequest(str(project), MESSAGE)).session_id  # socket activation
        events = events_of(ControlClient(address).stream(dp.WatchRequest(project, session_id), idle_timeout=None))
        seen = list(events)
        assert seen[-1]["type"] == "session.end" and seen[-1]["reason"] == "completed", seen[-1]
        assert fake.rejections == [] and len(fake.calls) == 2  # the planted credential was used

        open_to_others(state / "daemon.sock", manager.root)
        assert "error forbidden" in as_nobody(manager, state / "daemon.sock", "hello chock-control 1\n")
        open_to_others(state / "serve.sock", manager.root)
        assert " 403 " in as_nobody(manager, state / "serve.sock", "GET /api/health HTTP/1.0\r\n\r\n")

        daemon = wait_for_records(
            manager, "SYSLOG_IDENTIFIER=chock-daemon",
            events={"listening", "start", "session.spawned", "session.ended", "connection.forbidden"},
        )  # fmt: skip
        session = wait_for_records(
            manager, "SYSLOG_IDENTIFIER=chock-session", f"CHOCK_SESSION={session_id}",
            events={"session.running", "session.ended"},
        )  # fmt: skip
        serve = wait_for_records(manager, "SYSLOG_IDENTIFIER=chock-serve", events={"listening", "request.forbidden"})

        # Auto found the journal: the unit's stderr is systemd's journal stream.
        assert f"unix:{state / 'daemon.sock'}" in daemon["listening"][0]["CHOCK_ADDRESSES"]
        assert daemon["listening"][0]["PRIORITY"] == "6"
        key = project_key(project)
        [spawned] = daemon["session.spawned"]
        assert (spawned["CHOCK_SESSION"], spawned["CHOCK_VERB"], spawned["CHOCK_PROJECT_KEY"]) == (
            session_id, "start", key,
        )  # fmt: skip
        assert spawned["PRIORITY"] == "6" and spawned["MESSAGE"].startswith(f"session {session_id} spawned")
        [ended] = daemon["session.ended"]
        assert (ended["CHOCK_SESSION"], ended["CHOCK_EXIT_CODE"]) == (session_id, "0")
        assert ended["CHOCK_REASON"] == "completed"
        [forbidden] = daemon["connection.forbidden"]
        assert (forbidden["CHOCK_PEER_UID"], forbidden["PRIORITY"]) == (str(NOBODY), "4")
        [running] = session["session.running"]
        assert (running["CHOCK_PROJECT_KEY"], running["CHOCK_VERB"], running["PRIORITY"]) == (key, "start", "6")
        [child_ended] = session["session.ended"]
        assert (child_ended["CHOCK_EXIT_CODE"], child_ended["CHOCK_REASON"]) == ("0", "completed")
        assert serve["listening"][0]["CHOCK_ADDRESSES"] == f"unix:{state / 'serve.sock'}"
        assert serve["request.forbidden"][0]["CHOCK_PEER_UID"] == str(NOBODY)
        # Each record names the code that made it (through a helper that records for its caller, that
        # caller), never the journal module that sent it.
        where = {(record["CODE_FILE"].rpartition("/chock/")[2], record["CODE_FUNC"]) for record in (spawned, running)}
        assert where == {("daemon/children.py", "_spawn"), ("commands/run.py", "run")}, where
        assert forbidden["CODE_FILE"].endswith("/chock/daemon/accepted.py"), forbidden["CODE_FILE"]
        assert serve["listening"][0]["CODE_FILE"].endswith("/chock/serve/app.py")
        assert int(spawned["CODE_LINE"]) > 0

        # Nothing of the session's content and no credential, in any record of the journal.
        everything = json.dumps([fields(entry) for entry in manager.journal()])
        for text in (KEY, MESSAGE, FILE_TEXT, ANSWER):
            assert text not in everything, text
        # What chock says in its records names the project by its key, never its path (journald adds the
        # sender's command line, _CMDLINE, on its own).
        said = [
            {key: value for key, value in fields(entry).items() if key == "MESSAGE" or key.startswith("CHOCK_")}
            for entry in manager.journal()
            if entry.get("SYSLOG_IDENTIFIER", "").startswith("chock-")
        ]
        assert len(said) >= 8 and str(project) not in json.dumps(said)


@pytest.mark.systemd
def test_log_target_journal_outside_systemd_and_a_terminal_run_records_nothing(tmp_path: Path) -> None:
    with user_manager(journal=True) as manager:
        home = manager.home
        # A socket path with a byte that is not UTF-8 (kept by Python as a surrogate) reaches the journal as `?`.
        socket_path = Path(os.fsdecode(bytes(short_dir()) + b"/d\xe9.sock"))
        daemon = subprocess.Popen(
            ["nsenter", "-t", str(manager.pid), "-m", "env", f"HOME={home}", CHOCK, "daemon", "--socket",
             str(socket_path), "--log-target", "journal", "--log-level", "debug"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_until(lambda: socket_path.exists(), 30, "the daemon's socket")
            assert (
                ControlClient(f"unix:{socket_path}").collect(
                    dp.ListRequest(str(home / "no-project")), most=dp.MAX_SESSIONS
                )
                == []
            )
        finally:
            daemon.send_signal(signal.SIGTERM)
            _, stderr = daemon.communicate(timeout=30)
        assert daemon.returncode == 0
        assert "listening on" not in stderr  # the records went to the journal instead
        records = wait_for_records(
            manager, "SYSLOG_IDENTIFIER=chock-daemon", events={"listening", "connection.served", "stop"}
        )
        assert records["connection.served"][0]["PRIORITY"] == "7"  # a detail, kept at --log-level debug
        assert records["connection.served"][0]["CHOCK_VERB"] == "list"
        assert records["stop"][0]["CHOCK_REASON"] == "SIGTERM"
        assert records["listening"][0]["CHOCK_ADDRESSES"] == f"unix:{socket_path.parent}/d?.sock"

        # A `chock run` at a terminal (here a pipe), with the journal right there, records nothing.
        project = make_project(home / "project")
        config = home / ".config" / "chock"
        config.mkdir(parents=True)
        (config / "demo.jsonl").write_text(json.dumps({"type": "assistant.message", "text": "Done."}) + "\n")
        (config / "config.zon").write_text('.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }\n')
        done = manager.run([CHOCK, "run", "--project", str(project), MESSAGE])
        assert "chock-session" not in done.stderr
        assert manager.journal("SYSLOG_IDENTIFIER=chock-session") == []


# --- without a journal ------------------------------------------------------------------------------------


def test_without_a_journal_the_same_records_reach_stderr(home, project, daemons) -> None:
    home.write_replay("demo.jsonl", [{"text": "Writing.", "tool_calls": [
        {"call_id": "c1", "name": "write_file", "args": {"path": "notes.txt", "content": FILE_TEXT}}]},
        {"text": ANSWER, "tool_calls": []}])  # fmt: skip
    home.write_config('.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }\n')
    directory = short_dir(0o755)
    daemon = daemons.start(socket_path=directory / "d.sock")
    session_id = daemon.client.call(dp.StartRequest(project, MESSAGE)).session_id
    daemon.client.collect(dp.WatchRequest(project, session_id), most=dp.MAX_SESSIONS)
    os.chmod(daemon.socket, 0o777)
    assert "error forbidden" in as_nobody(None, daemon.socket, "hello chock-control 1\n")
    wait_until(lambda: "ended: completed" in daemon.stderr, 20, "the session's end on stderr")
    assert daemon.stop() == 0
    lines = daemon.stderr.splitlines()
    prefix = f"chock-daemon[{daemon.process.pid}] "
    assert f"{prefix}info: listening on unix:{daemon.socket} (CHOCK_ADDRESSES=unix:{daemon.socket})" in lines
    spawned = [line for line in lines if f"session {session_id} spawned to start it" in line]
    assert len(spawned) == 1 and f"CHOCK_PROJECT_KEY={project_key(project)}" in spawned[0]
    assert any(line.startswith(f"{prefix}info: session {session_id} ended: completed (exit code 0)") for line in lines)
    assert any(line.startswith(f"{prefix}warning: refused a connection from uid {NOBODY}") for line in lines)
    assert lines[-1].startswith(f"{prefix}info: stopped: SIGTERM")
    for text in (MESSAGE, FILE_TEXT, ANSWER, str(project)):
        assert text not in daemon.stderr
    # The session child recorded nothing of its own: the daemon's records went to stderr, not the journal.
    assert "chock-session" not in home.layout.run_log_path(session_id).read_text()


def test_serve_records_to_stderr_and_refusals_say_why(home) -> None:
    serve = home.spawn("serve", "--host", "127.0.0.1", "--port", "0", "--daemon", "unix:/nonexistent/d.sock",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        url = serve.stdout.readline().split()[-1]
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /api/sessions?project=/p HTTP/1.0\r\nHost: evil.example\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.0 421")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"GET /api/sessions?project=/p HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode())
            assert sock.recv(100).startswith(b"HTTP/1.0 502")
    finally:
        serve.send_signal(signal.SIGTERM)
        _, stderr = serve.communicate(timeout=30)
    prefix = f"chock-serve[{serve.pid}] "
    lines = stderr.splitlines()
    assert f"{prefix}info: listening on {url} (CHOCK_ADDRESSES={url})" in lines
    assert f"{prefix}warning: refused a request (421): its Host is not this listener's name" in "\n".join(lines)
    assert any(line.startswith(f"{prefix}err: a request to the daemon failed: unreachable") for line in lines)
    assert lines[-1].startswith(f"{prefix}info: stopped: SIGTERM")
    assert "evil.example" not in stderr  # what a client sent is never recorded


def test_log_target_journal_without_a_journal_is_refused_by_name(home) -> None:
    for command in ("daemon", "serve"):
        done = home.chock(command, "--log-target", "journal", timeout=60)
        assert done.returncode == 2, done.stderr
        assert "--log-target journal" in done.stderr and "--log-target stderr" in done.stderr
    done = home.chock("daemon", "--log-level", "loud", timeout=60)
    assert done.returncode == 2 and "err, warning, info, debug" in done.stderr


# --- the records themselves -------------------------------------------------------------------------------


def test_a_record_is_one_line_of_a_closed_vocabulary(capfd: pytest.CaptureFixture[str]) -> None:
    sink = journal.Sink(journal.DAEMON, "stderr", "info")
    with pytest.raises(ValueError, match="not a record field: message"):
        sink.record("session.spawned", None, {"session": "x", "message": "the task"})
    with pytest.raises(KeyError):
        sink.record("session.said", None, {})
    sink.record("error", None, {"where": "accept\nchock-daemon[1] info: forged", "error": "OSError"})
    sink.record("connection.served", None, {"verb": "list"})  # debug: below --log-level info
    sink.flush()
    lines = capfd.readouterr().err.splitlines()
    assert lines == [
        f"chock-daemon[{os.getpid()}] err: accept?chock-daemon[1] info: forged failed: OSError "
        "(CHOCK_WHERE=accept?chock-daemon[1] info: forged CHOCK_ERROR=OSError)"
    ]


def test_auto_means_the_journal_only_when_stderr_is_the_journal_stream(tmp_path: Path) -> None:
    code = "from chock.platform.journal import stderr_is_journal; print(stderr_is_journal())"
    err = tmp_path / "err"
    with err.open("w") as handle:
        info = os.fstat(handle.fileno())
        for stream, expected in (
            (f"{info.st_dev}:{info.st_ino}", "True"),
            (f"{info.st_dev}:1", "False"),
            ("", "False"),
        ):
            done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=handle, text=True,
                                  env={**os.environ, "JOURNAL_STREAM": stream}, check=True)  # fmt: skip
            assert done.stdout.strip() == expected, stream


def test_the_daemons_activity_lines_become_records_that_say_why(tmp_path: Path, monkeypatch, capfd) -> None:
    """Adopted, handed over, killed, timed out, stopped by an error: each in words, at the priority it needs."""
    from chock.daemon.status import Status

    monkeypatch.setattr(journal, "_sink", journal.Sink(journal.DAEMON, "stderr", "debug"))
    status = Status(tmp_path)
    child = {"session": "20260101-000000-abcdef", "verb": "adopt", "project_key": "0123456789abcdef"}
    status.activity("session.spawned", **child, pid=42)
    status.activity("session.ended", **child, exit_code=8)
    status.activity("session.ended", **child, exit_code=-9)
    status.activity("session.refused", **child, exit_code=None)
    status.activity("session.refused", **child, exit_code=3)
    status.activity("stop", reason="error")
    status.error("accept", OSError(24, "Too many open files"))
    journal.flush()
    prefix = f"chock-daemon[{os.getpid()}] "
    lines = [line.split(" (CHOCK_")[0] for line in capfd.readouterr().err.splitlines()]
    assert lines == [
        f"{prefix}info: session 20260101-000000-abcdef spawned to adopt it (pid 42)",
        f"{prefix}info: session 20260101-000000-abcdef ended: handed over to the daemon (exit code 8)",
        f"{prefix}info: session 20260101-000000-abcdef ended: killed by SIGKILL (exit code -9)",
        f"{prefix}warning: session 20260101-000000-abcdef did not start (adopt): it did not start in time",
        f"{prefix}warning: session 20260101-000000-abcdef did not start (adopt): refused before starting "
        "(nothing was created)",
        f"{prefix}err: stopped: error",
        f"{prefix}err: accept failed: OSError: Too many open files",
    ]
