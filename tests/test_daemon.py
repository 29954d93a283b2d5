"""`chock daemon` end to end: real daemon processes, real `chock run` children, real sockets.

Every test starts its own daemons through the `daemons` fixture (tests/fakes/daemon.py: a short socket path
each, and whatever sessions the test left running killed at the end).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import chock
from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, SessionClient, events_of
from chock.control.framing import ProtocolError
from chock.control.session_protocol import HANDOVER, ConfirmRequest, HandoverRequest
from chock.log.reader import owner_alive
from tests.fakes.daemon import Daemon, short_dir
from tests.fakes.notify import NotifySocket
from tests.fakes.projects import make_project
from tests.fakes.sessions import new_session
from tests.fakes.wait import wait_until

UNKNOWN = "20260101-000000-abcdef"

# Finishes on its own: a file written (no approval needed), then the last answer.
QUICK = [
    {"text": "Writing.", "tool_calls": [
        {"call_id": "c1", "name": "write_file", "args": {"path": "notes.txt", "content": "one\ntwo\n"}},
    ]},
    {"text": "All done.", "tool_calls": []},
]  # fmt: skip

# Waits for an approval (a daemon child has no terminal: it waits on approval.sock alone), then finishes.
ASKS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo approved-run"}}]},
    {"text": "done", "tool_calls": []},
]  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# Helpers


def exchange(path: Path | str, data: bytes, *, half_close: bool = True, timeout: float = 20) -> list[bytes]:
    """Send raw bytes to a daemon socket (a unix path, or host:port), read to end of file, return the lines."""
    if isinstance(path, Path) or str(path).startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
    else:
        host, port = str(path).rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
    sock.settimeout(timeout)

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send, daemon=True)  # a 2 MiB line is refused before it is all sent
    sender.start()
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    sock.close()
    return received.splitlines(keepends=True)


def hello(line: str) -> bytes:
    return b"hello chock-control 1\n" + line.encode() + b"\n"


def event_of(home, session_id: str, kind: str) -> dict | None:
    log = home.layout.log_path(session_id)
    if not log.exists():
        return None
    return next((e for e in home.events(session_id) if e["type"] == kind), None)


def pending_request(home, session_id: str) -> str:
    request = wait_until(lambda: event_of(home, session_id, "approval.request"), what="an approval request")
    return request["request_id"]


class Watch:
    """A `watch` read on a thread, so a test can act while events arrive."""

    def __init__(self, client: ControlClient, project: Path, session_id: str, after: int = 0) -> None:
        stream = client.stream(dp.WatchRequest(project, session_id, after), idle_timeout=None)
        self.row, self._events = stream.header.row, events_of(stream)
        self.events: list[dict] = []
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._events:
                self.events.append(event)
        except BaseException as error:
            self.error = error
        finally:
            self.closed.set()

    def wait_closed(self, timeout: float = 30.0) -> list[dict]:
        assert self.closed.wait(timeout), f"the watch did not close; it has {[e['type'] for e in self.events]}"
        return self.events

    def wait_for(self, kind: str, timeout: float = 30.0) -> dict:
        return wait_until(lambda: next((e for e in self.events if e["type"] == kind), None), timeout, f"a {kind} event")


def replay_config(home, entries: list[dict], extra: str = "") -> None:
    home.write_replay("demo.jsonl", entries)
    home.write_config(f'.{{ .instances = .{{ .demo = .{{ .kind = "replay=demo.jsonl" }} }}{extra} }}\n')


# --------------------------------------------------------------------------------------------------------
# The protocol


def test_every_malformed_request_gets_its_error_and_the_daemon_still_answers(home, project, daemons):
    daemon = daemons.start()
    path = daemon.socket
    tab = "\t"
    cases = [
        # (what is sent, the reply's first line starts with, and a text it must contain)
        (b"hello chock-control 2\n", "error protocol", "chock-control 1"),
        (b"list /tmp\n", "error greeting", "chock-control 1"),
        (hello("frobnicate now"), "error unknown-verb", "frobnicate"),
        (hello("hello chock-control 1"), "error unknown-verb", "greeting"),
        (b"hello chock-control 1\nlist /" + b"x" * (2 * 1024 * 1024) + b"\n", "error too-large", "8 KiB"),
        (b"hello chock-control 1\nlist /caf\xe9\n", "error bad-request", "UTF-8"),
        (b"hello chock-control 1\nlist /a\x00b\n", "error bad-request", "NUL"),
        (hello("read ../../etc/passwd 0"), "error bad-request", "not a session id"),
        (hello(f"watch {project}{tab}../../etc/passwd{tab}0"), "error bad-request", "not a session id"),
        (hello(f"read {UNKNOWN} five"), "error bad-request", "whole number"),
        (hello(f"read {UNKNOWN}{tab}0"), "error bad-request", "space"),
        (hello("list relative/path"), "error bad-request", "absolute"),
        (hello(f"answer {project}{tab}{UNKNOWN}{tab}r1{tab}maybe"), "error bad-request", "yes or no"),
        (hello(f"read {UNKNOWN} 0"), "error not-found", UNKNOWN),
        (hello(f"watch {project}{tab}{UNKNOWN}{tab}0"), "error not-found", UNKNOWN),
        (hello(f"adopt {project}{tab}{UNKNOWN}"), "error not-found", UNKNOWN),
        (hello(f"answer {project}{tab}{UNKNOWN}{tab}r1{tab}yes"), "error not-found", UNKNOWN),
    ]
    for sent, code, text in cases:
        lines = exchange(path, sent)
        replies = [line.decode() for line in lines]
        expected_lines = 1 if code in ("error protocol", "error greeting") else 2
        assert len(replies) == expected_lines, (sent[:80], replies)
        if expected_lines == 2:
            assert replies[0] == "ok chock-control 1\n"
        assert replies[-1].startswith(code + " "), (sent[:80], replies)
        assert text in replies[-1], (sent[:80], replies)
    # An unknown project is not an error: no rows, then the end.
    assert exchange(path, hello("list /no/such/project")) == [b"ok chock-control 1\n"]
    # Half a line, then gone; a greeting alone; nothing at all: each is dropped, with nothing sent.
    assert exchange(path, b"hello chock-control 1\nlis") == [b"ok chock-control 1\n"]
    assert exchange(path, b"hel") == []
    assert exchange(path, b"") == []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.sendall(b"hello chock-control 1\nread 2026")
    sock.close()  # mid-request
    # ... and the daemon is unharmed.
    assert daemon.client.ping() == 1
    assert exchange(path, b"hello chock-control 1\n") == [b"ok chock-control 1\n"]
    status = json.loads((home.layout.state / "daemon-status.json").read_text())
    assert status["connections"]["internal"] == 0


def test_a_peer_of_another_uid_is_refused_by_the_peer_check_and_served_over_tcp(home, daemons):
    if os.getuid() != 0:
        pytest.fail("setpriv --reuid needs root: run the suite as root, as scripts/test and CI do")
    directory = short_dir(0o755)  # reachable, so the kernel lets the other uid connect ...
    daemon = daemons.start("--host", "127.0.0.1", "--port", "0", socket_path=directory / "d.sock")
    os.chmod(daemon.socket, 0o777)  # ... and only the peer check stands in its way
    assert daemon.tcp and daemon.tcp.startswith("127.0.0.1:") and not daemon.tcp.endswith(":0")
    script = (
        "import socket, sys\n"
        "def talk(sock):\n"
        "    sock.sendall(b'hello chock-control 1\\nlist /no/such/project\\n')\n"
        "    data = b''\n"
        "    while chunk := sock.recv(65536):\n"
        "        data += chunk\n"
        "    return data.decode()\n"
        "unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "unix.connect(sys.argv[1])\n"
        "print('uid', __import__('os').getuid(), 'connected')\n"
        "print('unix', repr(talk(unix)))\n"
        "host, port = sys.argv[2].rsplit(':', 1)\n"
        "print('tcp', repr(talk(socket.create_connection((host, int(port))))))\n"
    )
    result = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
         "/usr/bin/python3", "-c", script, str(daemon.socket), daemon.tcp],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == "uid 65534 connected"  # the kernel did not refuse the connect: the daemon did
    assert out[1].startswith("unix 'error forbidden ") and "uid 65534" in out[1], out[1]
    assert "ok chock-control" not in out[1]
    assert out[2] == "tcp 'ok chock-control 1\\n'", out[2]  # served, and an unknown project has no rows
    status = json.loads((home.layout.state / "daemon-status.json").read_text())
    wait_until(
        lambda: json.loads((home.layout.state / "daemon-status.json").read_text())["connections"]["forbidden"] == 1,
        5, "the forbidden count",
    )  # fmt: skip
    assert status["pid"] == daemon.process.pid


def test_a_uid_past_2_to_the_31_is_its_own_peer():
    """uid_t is unsigned: a uid of 3,000,000,000 (idmapped containers give such) is named as itself, not refused
    by its own daemon as a negative stranger. The module is loaded by that uid from a copy it can read."""
    import chock.platform.peer

    if os.getuid() != 0:
        pytest.fail("setpriv --reuid needs root: run the suite as root, as scripts/test and CI do")
    directory = short_dir(0o755)
    copy = directory / "peer.py"
    copy.write_bytes(Path(chock.platform.peer.__file__).read_bytes())
    copy.chmod(0o644)
    script = (
        "import importlib.util, os, socket, sys\n"
        "spec = importlib.util.spec_from_file_location('peer', sys.argv[1])\n"
        "peer = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(peer)\n"
        "ours, theirs = socket.socketpair()\n"
        "print(os.getuid(), peer.peer_uid(ours), peer.is_own_user(ours))\n"
    )
    result = subprocess.run(
        ["setpriv", "--reuid", "3000000000", "--regid", "3000000000", "--clear-groups",
         "/usr/bin/python3", "-S", "-c", script, str(copy)],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3000000000", "3000000000", "True"]


def test_at_the_cap_the_longest_waiting_connection_makes_room_and_is_told_why(home, daemons):
    from chock.daemon.server import MAX_WAITING

    daemon = daemons.start()
    held = []
    try:
        for _ in range(MAX_WAITING):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(daemon.socket))
            sock.sendall(b"hello chock-control 1\n")
            sock.settimeout(10)
            assert sock.recv(100) == b"ok chock-control 1\n"  # greeted, then silent: it holds a slot
            held.append(sock)
        # A client that finishes its request is served all the same…
        assert exchange(daemon.socket, b"hello chock-control 1\nlist /nowhere\n") == [b"ok chock-control 1\n"]
        # …and the connection that had waited longest was cut with the refusal, delivered before the close.
        assert held[0].recv(200) == b"error refused too many connections; try again shortly\n"
        assert held[0].recv(200) == b""
    finally:
        for sock in held:
            sock.close()
    wait_until(daemon.answers, 10, "the daemon to serve again")


def test_300_trickling_clients_cannot_starve_the_daemon(home, daemons):
    """Slowloris: clients that send a byte every few seconds are cut at the line bound (a whole request line
    within LINE_SECONDS of its first byte), and a well-behaved client is served at once meanwhile."""
    from chock.control.framing import LINE_SECONDS

    daemon = daemons.start()
    tricklers = []
    try:
        for _ in range(300):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(daemon.socket))
            sock.sendall(b"hello chock-control 1\nli")  # greeted, and a request line begun
            tricklers.append(sock)
        began = time.monotonic()
        for _ in range(3):
            start = time.monotonic()
            assert exchange(daemon.socket, b"hello chock-control 1\nlist /nowhere\n") == [b"ok chock-control 1\n"]
            assert time.monotonic() - start < 3, "a well-behaved client waited"
            for sock in tricklers:  # one more byte each, as a trickler does
                with contextlib.suppress(OSError):
                    sock.send(b"s")
            time.sleep(1)
        # The begun lines never finish: each trickler is cut at the bound, told so, and closed.
        for sock in tricklers:
            sock.settimeout(LINE_SECONDS + 10)
            received = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(4096):
                    received += chunk
            assert b"error " in received, received  # cut at the bound (or, at the cap, made room), and told why
        assert time.monotonic() - began < LINE_SECONDS + 15
    finally:
        for sock in tricklers:
            sock.close()
    assert daemon.answers()


# --------------------------------------------------------------------------------------------------------
# Sessions


def test_start_watch_read_and_list_a_replay_session(home, project, daemons):
    replay_config(home, QUICK)
    daemon = daemons.start()
    client = daemon.client
    started = client.call(dp.StartRequest(project, "tidy up\nthe notes"))
    session_id, log_path = started.session_id, started.log_path
    assert log_path == str(home.layout.log_path(session_id))
    assert event_of(home, session_id, "session.start")["owner"] == "daemon"  # logged before the reply
    watch = Watch(client, project, session_id, 0)
    events = watch.wait_closed()
    assert watch.error is None
    assert watch.row["id"] == session_id and watch.row["project"] == str(project)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "session.start" and events[-1]["type"] == "session.end"
    assert events[-1]["reason"] == "completed"
    assert events == home.events(session_id)  # every event, through session.end, then the close
    # Resuming from 5: 6 onward, no gap, no repeat.
    again = Watch(client, project, session_id, 5).wait_closed()
    assert [e["id"] for e in again] == list(range(6, len(events) + 1))
    # read is the log's own lines, byte for byte.
    raw = exchange(daemon.socket, hello(f"read {session_id} 0"))
    assert raw[0] == b"ok chock-control 1\n"
    assert b"".join(raw[1:]) == home.layout.log_path(session_id).read_bytes()
    assert list(events_of(client.stream(dp.ReadRequest(session_id, 3)))) == home.events(session_id)[3:]
    assert list(events_of(client.stream(dp.ReadRequest(session_id, len(events))))) == []
    # list: the session's row, keyed by its start time; the project compared by its real path.
    link = project.parent / "link-to-project"
    link.symlink_to(project)
    for name in (project, link):
        rows = [(line.started_at, line.row) for line in client.collect(dp.ListRequest(name), most=dp.MAX_SESSIONS)]
        assert [(started, row["id"]) for started, row in rows] == [(events[0]["at"], session_id)]
        assert rows[0][1]["status"] == "ended" and rows[0][1]["message"] == "tidy up\nthe notes"
    run_log = home.layout.run_log_path(session_id)
    # The child's own output, never a pipe; it prints the end just after logging it, so it may be a moment later.
    wait_until(lambda: "session ended: completed" in run_log.read_text(), 10, "the child's last line in run.log")
    assert [p.name for p in home.layout.sessions_dir.iterdir()] == [session_id]  # nothing else left


def test_a_live_watch_follows_the_log_and_answer_goes_through_the_approval_socket(home, project, daemons):
    replay_config(home, ASKS)
    daemon = daemons.start()
    client = daemon.client
    session_id = client.call(dp.StartRequest(project, "run a command")).session_id
    watch = Watch(client, project, session_id, 0)
    request_id = watch.wait_for("approval.request")["request_id"]
    assert not watch.closed.is_set()  # waiting, so still open
    rows = [(line.started_at, line.row) for line in client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)]
    assert rows[0][1]["status"] == "waiting" and rows[0][1]["pending_approvals"] == 1
    with pytest.raises(ProtocolError) as refused:
        client.call(dp.AnswerRequest(project, session_id, "no-such-request", True))
    assert refused.value.code == "not-pending"  # relayed from the session
    with pytest.raises(ProtocolError) as owned:
        client.call(
            dp.AdoptRequest(project, session_id)
        )  # the child refuses a log someone holds; its words are relayed
    assert owned.value.code == "refused" and "running in another process" in owned.value.text
    other = make_project(project.parent / "other")
    with pytest.raises(ProtocolError) as elsewhere:
        client.call(dp.AnswerRequest(other, session_id, request_id, True))
    assert elsewhere.value.code == "not-found"
    client.call(dp.AnswerRequest(project, session_id, request_id, True))
    events = watch.wait_closed()
    assert events == home.events(session_id)
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"
    answer = next(e for e in events if e["type"] == "approval.answer")
    assert (answer["answer"], answer["via"]) == ("yes", "socket")
    assert "approved-run" in next(e for e in events if e["type"] == "tool.result")["output"]
    # The session has gone: nobody can take an answer, and the daemon never says it was given.
    with pytest.raises(ProtocolError) as unreachable:
        client.call(dp.AnswerRequest(project, session_id, request_id, False))
    assert unreachable.value.code == "unreachable"


def test_a_start_the_instance_refuses_is_error_refused_and_leaves_nothing(home, project, daemons, tmp_path):
    home.write_config('.{ .instances = .{ .demo = .{ .kind = "replay=nowhere.jsonl" } } }\n')
    daemon = daemons.start()
    with pytest.raises(ProtocolError) as refused:
        daemon.client.call(dp.StartRequest(project, "task"))
    assert refused.value.code == "refused"
    assert "cannot be read" in refused.value.text and "chock:" not in refused.value.text
    replay_config(home, QUICK)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ProtocolError) as not_git:
        daemon.client.call(dp.StartRequest(plain, "task"))
    assert not_git.value.code == "refused" and "is not a git repository" in not_git.value.text
    home.write_config(".{}\n")  # no instance: the child's refusal names the config file, which the reply does not
    with pytest.raises(ProtocolError) as no_instance:
        daemon.client.call(dp.StartRequest(project, "task"))
    assert "or name one in the daemon's config file under .instances" in no_instance.value.text
    assert str(home.layout.config) not in no_instance.value.text
    sessions = home.layout.sessions_dir
    assert not sessions.exists() or os.listdir(sessions) == []  # no session dir, no stray run.log
    assert daemon.client.ping() == 1


def test_kill_9_of_a_session_child_takes_down_only_that_session(home, project, daemons):
    replay_config(home, ASKS)
    daemon = daemons.start()
    client = daemon.client
    doomed = client.call(dp.StartRequest(project, "first")).session_id
    survivor = client.call(dp.StartRequest(project, "second")).session_id
    doomed_watch = Watch(client, project, doomed, 0)
    survivor_watch = Watch(client, project, survivor, 0)
    doomed_watch.wait_for("approval.request")
    survivor_watch.wait_for("approval.request")
    pid = event_of(home, doomed, "session.start")["pid"]
    os.kill(pid, signal.SIGKILL)
    doomed_watch.wait_closed(10)
    assert doomed_watch.error is None
    rows = {line.row["id"]: line.row for line in client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)}
    assert rows[doomed]["status"] == "abandoned" and rows[survivor]["status"] == "waiting"
    # A watch of the abandoned session sends what the log holds and closes.
    assert Watch(client, project, doomed, 0).wait_closed(10) == home.events(doomed)
    client.call(dp.AnswerRequest(project, survivor, pending_request(home, survivor), True))
    assert survivor_watch.wait_closed()[-1]["reason"] == "completed"
    assert daemon.process.poll() is None
    # Our children are reaped: none is left a zombie.
    wait_until(lambda: not _zombies(daemon.process.pid), 10, "the daemon to reap its children")


def _zombies(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == parent:
            found.append(int(entry))
    return found


def test_a_daemon_restart_loses_no_running_session(home, project, daemons):
    replay_config(home, ASKS)
    first = daemons.start()
    session_id = first.client.call(dp.StartRequest(project, "survive a restart")).session_id
    watch = Watch(first.client, project, session_id, 0)
    watch.wait_for("approval.request")
    assert first.stop() == 0  # SIGTERM: listeners closed, exit 0
    watch.wait_closed(10)  # the daemon went away; the session did not
    assert not first.socket.exists()  # it removed its own socket
    log = home.layout.log_path(session_id)
    assert owner_alive(log)
    second = daemons.start(socket_path=first.socket)
    rows = [
        (line.started_at, line.row) for line in second.client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)
    ]
    assert [row["id"] for _, row in rows] == [session_id] and rows[0][1]["status"] == "waiting"
    seen = len(watch.events)
    resumed = Watch(second.client, project, session_id, seen)
    second.client.call(dp.AnswerRequest(project, session_id, pending_request(home, session_id), True))
    events = resumed.wait_closed()
    assert watch.events + events == home.events(session_id)  # no gap, no repeat across the restart
    assert events[-1]["reason"] == "completed"
    status = json.loads((home.layout.state / "daemon-status.json").read_text())
    assert status["sessions_owned"] == []  # found in the state dir, not a child of this daemon


def test_adopt_carries_a_handed_over_session_on_and_a_watch_follows_the_handover(home, project, daemons):
    replay_config(
        home,
        [
            {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 2"}}]},
            {"text": "carried on", "tool_calls": []},
        ],
        extra=', .approvals = .{ .shell = "allow" }',
    )
    daemon = daemons.start()
    client = daemon.client
    terminal = home.spawn(
        "run", "hand me over", cwd=project,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        session_id = new_session(home)  # its log, not only its directory: its events are read next
        wait_until(lambda: event_of(home, session_id, "tool.call"), what="the shell call")
        watch = Watch(client, project, session_id, 0)
        with SessionClient(home.layout.session_socket(session_id, "handover"), HANDOVER, timeout=30) as handover:
            handover.ask(HandoverRequest())
            while True:
                reply = handover.next_reply(30)
                if type(reply).__name__ == "Ready":
                    break
                assert type(reply).__name__ == "Busy", reply
            handover.call(ConfirmRequest())
        assert terminal.wait(30) == 8
        wait_until(lambda: any(e["type"] == "session.end" for e in watch.events), what="the handover end")
        assert not watch.closed.is_set()  # a handover is not an end: the log goes on under the new owner
        started = client.call(dp.AdoptRequest(project, session_id))
        adopted, log_path = started.session_id, started.log_path
        assert adopted == session_id and log_path == str(home.layout.log_path(session_id))
        adopt_event = next(e for e in home.events(session_id) if e["type"] == "session.adopt")
        assert adopt_event["via"] == "daemon"
        events = watch.wait_closed()
        assert events == home.events(session_id)
        assert [e["reason"] for e in events if e["type"] == "session.end"] == ["handover", "completed"]
        # A session is adopted only by naming its own project.
        with pytest.raises(ProtocolError) as elsewhere:
            client.call(dp.AdoptRequest(make_project(project.parent / "elsewhere"), session_id))
        assert elsewhere.value.code == "not-found"
    finally:
        terminal.kill()


# --------------------------------------------------------------------------------------------------------
# Hygiene


def test_a_second_daemon_on_the_same_state_dir_is_refused_naming_the_first(home, daemons):
    first = daemons.start()
    second = daemons.spawn()
    assert second.process.wait(30) == 1
    stderr = second.stderr
    assert f"pid {first.process.pid}" in stderr and str(home.layout.state) in stderr
    assert first.client.ping() == 1


def test_a_stale_socket_is_replaced_and_a_path_that_is_not_a_socket_is_refused(home, daemons):
    directory = short_dir()
    stale = directory / "d.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(stale))  # a socket file with nobody listening: a daemon that died uncleanly
    leftover.close()
    daemon = daemons.start(socket_path=stale)
    assert daemon.client.ping() == 1
    assert daemon.stop() == 0 and not stale.exists()
    plain = directory / "plain"
    plain.write_text("not a socket\n")
    refused = daemons.spawn(socket_path=plain)
    assert refused.process.wait(30) == 1
    assert str(plain) in refused.stderr and "not a socket" in refused.stderr
    assert plain.read_text() == "not a socket\n"  # never replaced


def test_a_socket_path_past_the_platform_limit_is_a_clear_error(home, daemons):
    path = short_dir() / ("s" * 120 + ".sock")
    refused = daemons.spawn(socket_path=path)
    assert refused.process.wait(30) == 1
    stderr = refused.stderr
    assert str(path) in stderr and "at most 107" in stderr


def test_a_silent_client_is_closed_at_the_idle_bound_and_a_trickling_one_at_the_line_bound(home, daemons):
    from chock.control.framing import LINE_SECONDS
    from chock.daemon.accepted import IDLE_SECONDS

    daemon = daemons.start()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(daemon.socket))
    silent.sendall(b"hello chock-control 1\n")
    trickle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trickle.connect(str(daemon.socket))
    trickle.sendall(b"hello chock-control 1\nlist /tm")
    started = time.monotonic()
    for sock, bound, said in ((trickle, LINE_SECONDS, b"must arrive whole"), (silent, IDLE_SECONDS, b"no verb came")):
        sock.settimeout(IDLE_SECONDS + 15)
        assert sock.recv(100) == b"ok chock-control 1\n"
        if sock is trickle:
            time.sleep(LINE_SECONDS / 2)
            sock.sendall(b"p")  # a byte now and then does not move the line's deadline
        refusal = sock.recv(200)
        assert refusal.startswith(b"error bad-request ") and said in refusal, refusal
        assert sock.recv(100) == b""  # then closed by the daemon
        assert bound - 1 <= time.monotonic() - started <= bound + 5
        sock.close()
    assert daemon.client.ping() == 1


def test_port_without_host_is_refused_by_name(home):
    result = home.chock("daemon", "--port", "7890", timeout=60)
    assert result.returncode == 2
    assert "--port" in result.stderr and "--host" in result.stderr


def test_sigint_and_sigterm_exit_0_removing_only_our_own_socket(home, daemons):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        daemon = daemons.start()
        assert daemon.socket.exists()
        assert daemon.stop(sig) == 0
        assert not daemon.socket.exists()
    activity = [json.loads(line) for line in (home.layout.state / "daemon-activity.jsonl").read_text().splitlines()]
    assert [(a["event"], a.get("reason")) for a in activity] == [
        ("start", None), ("stop", "SIGINT"), ("start", None), ("stop", "SIGTERM"), ("start", None), ("stop", "SIGHUP"),
    ]  # fmt: skip


def test_idle_exit_waits_for_open_connections_then_exits_0(home, daemons):
    daemon = daemons.start("--idle-exit", "1")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(daemon.socket))
    sock.sendall(b"hello chock-control 1\n")
    time.sleep(2.0)
    assert daemon.process.poll() is None  # a connection is open: not idle
    sock.close()
    assert daemon.process.wait(10) == 0
    assert not daemon.socket.exists()


def test_status_and_activity_hold_no_message_text_and_no_user_paths(home, project, daemons):
    replay_config(home, QUICK)
    daemon = daemons.start()
    secret = "the-task-text-that-must-stay-in-the-log-only"
    session_id = daemon.client.call(dp.StartRequest(project, secret)).session_id
    Watch(daemon.client, project, session_id, 0).wait_closed()
    wait_until(
        lambda: '"session.ended"' in (home.layout.state / "daemon-activity.jsonl").read_text(),
        10, "the child to be reaped",
    )  # fmt: skip
    assert daemon.stop() == 0
    status_text = (home.layout.state / "daemon-status.json").read_text()
    activity_text = (home.layout.state / "daemon-activity.jsonl").read_text()
    for text in (status_text, activity_text):
        assert secret not in text and str(project) not in text and "notes.txt" not in text
    status = json.loads(status_text)
    assert status["protocol"] == 1 and status["listeners"] == [daemon.address] and status["started_at"]
    assert status["connections"]["served"] >= 2 and status["state"] == "stopped"
    events = [json.loads(line) for line in activity_text.splitlines()]
    assert [(e["event"], e.get("session")) for e in events] == [
        ("start", None), ("session.spawned", session_id), ("session.ended", session_id), ("stop", None),
    ]  # fmt: skip
    assert secret in home.layout.log_path(session_id).read_text()  # (it was there to be found)


class RawWatch(threading.Thread):
    """A `watch` read as raw lines, as fast as a socket gives them, resumed from the last id it has whenever
    the daemon closes it before `session.end` (a watcher that falls behind is cut, and comes back). Its
    first connection reads nothing past the header until `go` is set."""

    def __init__(self, daemon: Daemon, project: Path, session_id: str) -> None:
        super().__init__(daemon=True)
        self.request = f"watch {project}\t{session_id}\t"
        self.socket = daemon.socket
        self.ids: list[int] = []
        self.connections = 0
        self.ended = False
        self.go = threading.Event()

    def run(self) -> None:
        while not self.ended:
            self.connections += 1
            last = self.ids[-1] if self.ids else 0
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(str(self.socket))
                sock.sendall(hello(f"{self.request}{last}"))
                buffer = sock.recv(4096)
                self.go.wait()
                while data := sock.recv(1 << 20):
                    lines = (buffer + data).split(b"\n")
                    buffer = lines.pop()
                    for line in lines:
                        if not line.startswith(b"ok "):
                            self.ids.append(int(line[len(b'{"id": ') : line.index(b",")]))
                            self.ended = b'"type": "session.end"' in line[:80]


def _vm(pid: int, name: str) -> int:
    """A `VmXXX:` figure of /proc/PID/status, in MiB."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(name))
    return int(line.split()[1]) // 1024


def test_a_watch_of_a_log_grown_to_256_mb_leaves_the_daemons_memory_where_it_was(home, project, daemons):
    """The follower keeps the session's row, not what the log says: its memory does not grow with the log
    (it grew by about 1 MiB per MB watched when it kept the conversation). The watcher stops reading for
    the first 64 MB, so the daemon cuts it (it holds at most 32 MiB for one watcher) and it resumes."""
    from chock.log.writer import SessionLog

    daemon = daemons.start()
    session_id = "20260101-000000-3e3e3e"
    log = home.layout.log_path(session_id)
    log.parent.mkdir(parents=True)
    output = "o" * (64 * 1024)
    with SessionLog.create(log) as owner:
        owner.append("session.start", session=session_id, project=str(project), message="m", owner="terminal")
        at_rest = _vm(daemon.process.pid, "VmRSS")
        watch = RawWatch(daemon, project, session_id)
        watch.start()
        while log.stat().st_size < 256 * 1000 * 1000:
            owner.append("tool.result", call_id="c", name="read_file", output=output, is_error=False)
            if log.stat().st_size > 64 * 1000 * 1000:
                watch.go.set()
        owner.append("session.end", reason="completed", exit_code=0)
        last = owner.last_id
    watch.join(120)
    assert watch.ended and watch.ids == list(range(1, last + 1))  # every event once, in order, then the close
    assert watch.connections > 1  # cut once, and resumed with no gap and no repeat
    grown = _vm(daemon.process.pid, "VmHWM") - at_rest
    assert grown < 64, f"the daemon grew by {grown} MiB watching a log of 256 MB"


def test_a_watch_closes_30_s_after_a_handover_nobody_adopted(home, project, daemons):
    from chock.log.events import timestamp

    daemon = daemons.start()
    for age, closes in ((45, True), (0, False)):
        session_id = f"20260101-0000{age:02d}-abcdef"
        directory = home.layout.session_dir(session_id)
        directory.mkdir(parents=True)
        at = timestamp(time.time() - age)
        events = [
            {"type": "session.start", "session": session_id, "project": str(project), "message": "m", "pid": 1},
            {"type": "user.message", "text": "m"},
            {"type": "session.end", "reason": "handover", "exit_code": 8},
        ]
        lines = [json.dumps({"id": n, "at": at, **e}) + "\n" for n, e in enumerate(events, 1)]
        (directory / "log.jsonl").write_text("".join(lines))
        watch = Watch(daemon.client, project, session_id, 0)
        assert watch.row["status"] == "handed-over"
        if closes:  # its 30 s are long over: everything the log holds, then the close
            assert [e["id"] for e in watch.wait_closed(5)] == [1, 2, 3]
        else:  # a handover is not an end: the next owner may yet adopt it
            wait_until(lambda watch=watch: len(watch.events) == 3, 5, "the backlog")
            time.sleep(1.5)
            assert not watch.closed.is_set()


def test_socket_activation_readiness_and_the_watchdog(home, project, daemons):
    """LISTEN_FDS and NOTIFY_SOCKET as a service manager sets them (the manager itself is not needed)."""
    replay_config(home, ASKS)
    directory = short_dir()
    path = directory / "activated.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    notifications = NotifySocket(directory)
    wrapper = (
        "import os, sys\n"
        "fd = int(sys.argv[1])\n"
        "if fd != 3:\n"
        "    os.dup2(fd, 3)\n"
        "    os.close(fd)\n"
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1', LISTEN_FDNAMES='control')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'chock', 'daemon'])\n"
    )
    env = {**home.env, **notifications.env()}
    stderr_path = daemons.tmp / "activated.err"
    process = subprocess.Popen(
        [sys.executable, "-c", wrapper, str(listener.fileno())], pass_fds=(listener.fileno(),), env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr_path, "w"),  # noqa: SIM115
    )  # fmt: skip
    daemon = daemons.add(Daemon(process, path, stderr_path))

    ready = notifications.next()
    assert ready[0] == "READY=1" and ready[1].startswith(f"STATUS=serving unix:{path}"), ready
    assert daemon.client.ping() == 1  # served on the socket it was handed
    assert not home.layout.daemon_socket.exists()  # and nothing else was bound
    assert "WATCHDOG=1" in notifications.next()  # at half of WATCHDOG_USEC
    session_id = daemon.client.call(dp.StartRequest(project, "activated")).session_id
    pid = event_of(home, session_id, "session.start")["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert not names & {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_USEC"}
    assert names >= {"CHOCK_CONFIG", "CHOCK_STATE_DIR", "CHOCK_DATA_DIR"}
    process.send_signal(signal.SIGTERM)
    notifications.until_stopping()
    assert process.wait(15) == 0
    assert path.exists()  # a socket that activation handed over is never unlinked by the daemon
    assert owner_alive(home.layout.log_path(session_id))  # and the session lives on
    listener.close()
    notifications.close()


def test_a_state_dir_whose_name_is_not_utf8_is_served_and_told_to_the_manager(home, daemons):
    """A path's undecodable bytes (kept by Python as surrogates) reach sd_notify's UTF-8 as `?`: the READY=1
    of a Type=notify unit is sent, not a crash that the manager restarts in a loop."""
    directory = short_dir()
    state = Path(os.fsdecode(bytes(directory) + b"/st\xe9te"))
    notifications = NotifySocket(directory)
    env = {**notifications.env(), "CHOCK_STATE_DIR": str(state)}
    daemon = daemons.start(socket_path=state / "daemon.sock", env=env)
    ready = notifications.next()
    assert ready[0] == "READY=1" and ready[1] == f"STATUS=serving unix:{directory}/st?te/daemon.sock (chock-control 1)"
    assert daemon.client.ping() == 1
    daemon.process.send_signal(signal.SIGTERM)
    notifications.until_stopping()
    assert daemon.process.wait(15) == 0
    notifications.close()


def _ended_log(home, project, session_id: str, *, results: int) -> int:
    """An ended session's log holding `results` tool results of 20 kB; its last id."""
    from chock.log.writer import SessionLog

    log = home.layout.log_path(session_id)
    log.parent.mkdir(parents=True)
    with SessionLog.create(log) as owner:
        owner.append("session.start", session=session_id, project=str(project), message="m", owner="terminal")
        for _ in range(results):
            owner.append("tool.result", call_id="c", name="read_file", output="o" * 20_000, is_error=False)
        owner.append("session.end", reason="completed", exit_code=0)
        return owner.last_id


def test_a_tcp_watcher_that_closes_is_let_go_while_its_session_is_quiet(home, project, daemons):
    """Over TCP a close is only a FIN, as a half-close is: a watcher that goes away from a session that writes
    nothing must not hold a thread (and one of the daemon's connection slots) until the session next writes."""
    from chock.log.writer import SessionLog

    daemon = daemons.start("--host", "127.0.0.1", "--port", "0")
    host, port = daemon.tcp.rsplit(":", 1)
    session_id = "20260101-000000-8d8d8d"
    log = home.layout.log_path(session_id)
    log.parent.mkdir(parents=True)
    status = home.layout.state / "daemon-status.json"
    with SessionLog.create(log) as owner:
        owner.append("session.start", session=session_id, project=str(project), message="m", owner="terminal")
        watchers = [socket.create_connection((host, int(port))) for _ in range(5)]
        for sock in watchers:
            sock.sendall(f"hello chock-control 1\nwatch {project}\t{session_id}\t0\n".encode())
        watching = lambda: json.loads(status.read_text())["connections"]["watching"]  # noqa: E731
        wait_until(lambda: watching() == 5, 30, "five watches")
        for sock in watchers:
            sock.close()
        wait_until(lambda: watching() == 0, 30, "the closed TCP watchers to be let go")


def _slow_reader(daemon, session_id: str) -> socket.socket:
    """A client that asked to `read` the whole log through a 4 KiB receive buffer (so the reply waits on it)."""
    client = socket.socket(socket.AF_UNIX)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(str(daemon.socket))
    client.sendall(f"hello chock-control 1\nread {session_id} 0\n".encode())
    return client


def _cpu_seconds(pid: int) -> float:
    """User and system time the process has used (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_client_that_shuts_its_side_still_reads_its_reply_and_costs_the_daemon_nothing_meanwhile(
    home, project, daemons
):
    """`read` of a big log, then shutdown(SHUT_WR), then nothing read for a while: the daemon must not spin on
    the end of file while the reply waits for room in the socket, and the reply still arrives whole."""
    daemon = daemons.start()
    session_id = "20260101-000000-5a5a5a"
    last = _ended_log(home, project, session_id, results=200)
    with _slow_reader(daemon, session_id) as client:
        client.shutdown(socket.SHUT_WR)
        before = _cpu_seconds(daemon.process.pid)
        time.sleep(3)
        spent = _cpu_seconds(daemon.process.pid) - before
        received = bytearray()
        client.settimeout(30)
        while chunk := client.recv(1 << 20):
            received += chunk
    assert spent < 0.5, f"the daemon used {spent:.2f} s of CPU in 3 s while a half-closed reply waited"
    lines = received.decode().splitlines()
    assert lines[0] == "ok chock-control 1"
    assert [json.loads(line)["id"] for line in lines[1:]] == list(range(1, last + 1))


def test_a_watcher_that_shuts_its_sending_side_keeps_its_watch_and_one_that_closes_is_let_go(home, project, daemons):
    """`nc -N` and socat shut their sending side after the request and go on reading: the watch is theirs
    until the session ends. A watcher that closes its connection is let go within a moment."""
    from chock.log.writer import SessionLog

    daemon = daemons.start()
    session_id = "20260101-000000-6b6b6b"
    log = home.layout.log_path(session_id)
    log.parent.mkdir(parents=True)
    status = home.layout.state / "daemon-status.json"

    def watching() -> int:
        return json.loads(status.read_text())["connections"]["watching"]

    with SessionLog.create(log) as owner:
        owner.append("session.start", session=session_id, project=str(project), message="m", owner="terminal")
        half, gone = (socket.socket(socket.AF_UNIX) for _ in range(2))
        for sock in (half, gone):
            sock.connect(str(daemon.socket))
            sock.sendall(f"hello chock-control 1\nwatch {project}\t{session_id}\t0\n".encode())
        half.shutdown(socket.SHUT_WR)
        wait_until(lambda: watching() == 2, 30, "both watches")
        gone.close()
        wait_until(lambda: watching() == 1, 30, "the closed watcher to be let go")
        time.sleep(3)  # past the daemon's checks of its peers
        owner.append("assistant.message", text="still watched")
        owner.append("session.end", reason="completed", exit_code=0)
    half.settimeout(30)
    received = bytearray()
    while chunk := half.recv(65536):
        received += chunk
    half.close()
    types = [json.loads(line)["type"] for line in received.decode().splitlines()[2:]]
    assert types == ["session.start", "assistant.message", "session.end"]


def test_a_daemon_told_to_stop_finishes_the_read_it_is_writing(home, project, daemons):
    """A restart (SIGTERM) while a client reads a long log: the client still gets every line, then the close."""
    daemon = daemons.start()
    session_id = "20260101-000000-7c7c7c"
    last = _ended_log(home, project, session_id, results=400)
    with _slow_reader(daemon, session_id) as client:
        client.settimeout(30)
        received = bytearray(client.recv(4096))  # the reply has begun
        daemon.process.send_signal(signal.SIGTERM)
        while chunk := client.recv(1 << 20):
            received += chunk
    assert daemon.process.wait(15) == 0
    lines = received.decode().splitlines()
    assert [json.loads(line)["id"] for line in lines[1:]] == list(range(1, last + 1))


def _imported(importtime: str) -> set[str]:
    """The modules an `-X importtime` report names."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines() if line.startswith("import time:")}


# The interpreter the Debian package runs under, given this checkout: what it imports at its start is what an
# installed daemon's start pays anyway (a venv's would not do: its editable install's finder imports pathlib).
DEBIAN_PYTHON = "/usr/bin/python3"
CHECKOUT = str(Path(chock.__file__).resolve().parents[1])


def test_a_relative_state_dir_is_made_below_the_working_directory(home, tmp_path):
    """`CHOCK_STATE_DIR=state chock daemon` makes ./state (0700) and serves from it, as a person who set it so
    expects."""
    where = tmp_path / "here"
    where.mkdir()
    done = home.chock("daemon", "--idle-exit", "1", cwd=where, env={"CHOCK_STATE_DIR": "state/nested"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (where / "state" / "nested").is_dir() and (where / "state" / "nested").stat().st_mode & 0o777 == 0o700


def test_a_socket_activated_start_imports_no_command_line_machinery(home):
    """The start a client waits on after every idle exit (docs/architecture.md#start-up): through
    systemd-socket-activate, as the .socket unit does it, the daemon answers the greeting having imported
    neither click nor what only other commands or its verbs use."""
    path = short_dir() / "activated.sock"
    process = subprocess.Popen(
        ["systemd-socket-activate", f"-l{path}", "--fdname=control",
         # it passes the daemon only what -E names: the test home's whole environment (its PYTHONPATH too)
         *(f"-E{name}={value}" for name, value in {**home.env, "PYTHONPATH": CHECKOUT}.items()),
         DEBIAN_PYTHON, "-X", "importtime", "-m", "chock", "daemon", "--idle-exit", "1"],
        env=home.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(path.exists, 10, "systemd-socket-activate to listen")
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
            client.sendall(b"hello chock-control 1\n")
            client.settimeout(30)
            assert client.recv(100) == b"ok chock-control 1\n"
        _, stderr = process.communicate(timeout=30)  # it exits at its idle bound
    finally:
        process.kill()
    at_start = subprocess.run([DEBIAN_PYTHON, "-X", "importtime", "-c", "pass"], capture_output=True, text=True)
    imported = _imported(stderr) - _imported(at_start.stderr)
    assert "chock.daemon.server" in imported
    unwanted = {"click", "chock.commands.cli", "typing", "dataclasses", "inspect", "subprocess", "hashlib", "secrets"}
    unwanted |= {"shutil", "datetime", "asyncio", "chock.session.runner", "chock.providers"}
    unwanted |= {"pathlib", "urllib.parse", "ipaddress", "fnmatch"}  # a Layout keeps its roots as text
    unwanted |= {"chock.daemon.verbs", "chock.log.catalog", "chock.daemon.watch"}  # the first verb imports them
    assert not imported & unwanted, sorted(imported & unwanted)
