"""Daemons on other machines over real OpenSSH (docs/remote.md): hosts made on this machine, each a Unix user with
its own daemon behind Debian's sshd on its own loopback address, and a client that is a Unix user too
(tests/fakes/hosts.py). Needs root and openssh-server, as CI has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from urllib.parse import quote

import pytest

import chock
from chock.control import daemon_protocol as dp
from chock.paths import Layout
from tests.fakes.hosts import PYTHON, Host, Hosts, listening_tcp, listening_unix
from tests.fakes.projects import make_project
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until
from tests.test_catalog import write_session

MUX = "[mux]"  # what OpenSSH calls its master process


@pytest.fixture(scope="session")
def hosts() -> Iterator[Hosts]:
    made = Hosts()
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture(scope="session")
def host_a(hosts: Hosts) -> Host:
    """Host 2 (127.X.Y.2): a host with a daemon and one session of the shared project."""
    host = hosts.host(2)
    layout = Layout(config=host.user.home / "config.zon", state=host.state, data=host.user.home / "data")
    host.session_id = write_session(layout, 1, hosts.project)
    host.user.give(host.user.home)
    host.start_daemon()
    return host


def _uids(hosts: Hosts) -> set[int]:
    assert hosts.client is not None
    return {hosts.client.uid, *(each.user.uid for each in hosts.made)}


def test_sessions_through_an_ssh_address_lists_that_hosts_sessions(hosts: Hosts, host_a: Host) -> None:
    before = listening_tcp(_uids(hosts))
    done = hosts.chock("sessions", "--daemon", host_a.url, "--project", str(hosts.project))
    assert done.returncode == 0, done.stderr
    assert host_a.session_id in done.stdout and "task 1" in done.stdout
    # The log lives only on the host: the client's state directory holds no session.
    assert not (hosts.client.home / ".local/state/chock/sessions").exists()
    # Nothing listens on TCP for the client or the hosts' users: ssh's own connection is the only way in.
    assert listening_tcp(_uids(hosts)) == before == set()


def test_a_named_connection_works_as_its_address_does_and_shares_one_master(hosts: Hosts, host_a: Host) -> None:
    hosts.chock("connections", "--close")
    hosts.write_client_config(f'.{{ .connections = .{{ .build = "{host_a.url}" }} }}\n')
    by_option = hosts.chock("sessions", "--daemon", "build", "--project", str(hosts.project))
    by_variable = hosts.chock("sessions", "--project", str(hosts.project), env={"CHOCK_DAEMON": "build"})
    assert by_option.returncode == by_variable.returncode == 0, by_option.stderr + by_variable.stderr
    assert host_a.session_id in by_option.stdout and host_a.session_id in by_variable.stdout
    assert len(hosts.client.processes(MUX)) == 1  # both requests went through one master
    # The client listens nowhere but on the master's control socket; the host only on its daemon's socket.
    control = hosts.client.runtime / "chock/ssh"
    mine = listening_unix(hosts.client.home) | listening_unix(hosts.client.runtime)
    assert len(mine) == 1 and all(path.startswith(f"{control}/") for path in mine), mine
    assert listening_unix(host_a.user.home) | listening_unix(host_a.user.runtime) == {str(host_a.socket)}

    listed = hosts.chock("connections")
    assert listed.returncode == 0, listed.stderr
    assert "build" in listed.stdout and "reachable: 0 running, 0 waiting" in listed.stdout
    assert f" {dp.CONTROL.number} " in listed.stdout  # the remote protocol number

    closed = hosts.chock("connections", "--close")
    assert closed.returncode == 0 and "closed" in closed.stdout, closed.stdout + closed.stderr
    wait_until(lambda: not hosts.client.processes(MUX), 10, "the master to end")
    assert listening_tcp(_uids(hosts)) == set()


GET = """
import socket, sys
with socket.socket(socket.AF_UNIX) as sock:
    sock.settimeout(60)
    sock.connect(sys.argv[1])
    sock.sendall(b"GET " + sys.argv[2].encode() + b" HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n")
    while chunk := sock.recv(65536):
        sys.stdout.buffer.write(chunk)
"""


def _get(hosts: Hosts, path: str, target: str) -> tuple[str, bytes]:
    """GET `target` from serve at the unix socket `path`, as the client user (serve answers only its own user):
    the status line and the body."""
    assert hosts.client is not None
    done = subprocess.run(
        [*hosts.client.prefix(), PYTHON, "-c", GET, path, target], capture_output=True, timeout=120, check=True
    )
    head, _, body = done.stdout.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), body


def test_serve_through_an_ssh_address_shows_that_hosts_sessions(hosts: Hosts, host_a: Host) -> None:
    path = hosts.client.runtime / "serve.sock"
    serve = hosts.spawn("serve", "--daemon", host_a.url, "--socket", str(path))
    try:
        wait_until(lambda: path.exists() or serve.poll() is not None, 60, "serve's socket")
        assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
        status, body = _get(hosts, str(path), f"/api/sessions?project={quote(str(hosts.project))}")
    finally:
        serve.terminate()
        serve.wait(30)
    assert " 200 " in f"{status} ", body
    assert [row["id"] for row in json.loads(body)["sessions"]] == [host_a.session_id]


def test_a_changed_host_key_is_refused_with_nothing_sent(hosts: Hosts, host_a: Host) -> None:
    host = hosts.host(3)
    host.start_daemon()
    hosts.trust(host, host_a.public_key_line().replace(host_a.ip, host.ip))  # another machine's key
    done = hosts.chock("sessions", "--daemon", host.url, "--project", str(hosts.project))
    assert done.returncode != 0
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in done.stderr, done.stderr
    assert f"ssh-keygen -R '[{host.ip}]:2222'" in done.stderr
    assert "nothing was sent" in done.stderr
    assert host.accepted_logins() == 0  # no login: not one byte reached the host's daemon


def test_a_host_with_no_daemon_says_how_to_enable_one(hosts: Hosts) -> None:
    host = hosts.host(4)
    done = hosts.chock("sessions", "--daemon", host.url, "--project", str(hosts.project))
    assert done.returncode != 0
    assert f"{host.user.name}@{host.ip} has no chock daemon answering" in done.stderr, done.stderr
    assert "systemctl --user enable --now chock.socket" in done.stderr


def test_a_host_with_no_chock_on_its_path_says_so(hosts: Hosts) -> None:
    host = hosts.host(5, chock_on_path=False)
    done = hosts.chock("sessions", "--daemon", host.url, "--project", str(hosts.project))
    assert done.returncode != 0
    assert "has no `chock` on its non-interactive PATH" in done.stderr, done.stderr


SERVER = """
import os, socket, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    conn.recv(4096)
    conn.sendall(b"ok chock-control %d\\n" % int(sys.argv[2]))
    conn.close()
"""


def test_a_remote_daemon_of_another_protocol_number_is_refused_naming_both(hosts: Hosts) -> None:
    host = hosts.host(6)
    theirs = dp.CONTROL.number + 1
    server = subprocess.Popen(
        [*host.user.prefix(), PYTHON, "-c", SERVER, str(host.socket), str(theirs)],
        env=host.user.env(hosts.chock_dir), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        done = hosts.chock("sessions", "--daemon", host.url, "--project", str(hosts.project))
    finally:
        server.kill()
        server.wait()
    assert done.returncode != 0
    assert f"chock-control {dp.CONTROL.number}" in done.stderr and f"chock-control {theirs}" in done.stderr, done.stderr
    assert "update the client" in done.stderr


LONG = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 60"}}]},
    *[{"text": "Carried on.", "tool_calls": []}] * 4,
]


def _host_with_replay(hosts: Hosts, number: int, replies: list[dict] = LONG, approvals: str = "allow") -> Host:
    """A host whose daemon runs sessions on a replay instance (`replies`; a shell command `allow`ed or asked
    about), with a project of its own user's."""
    host = hosts.host(number)
    config = host.user.home / ".config/chock"
    config.mkdir(parents=True)
    (config / "demo.jsonl").write_text("".join(json.dumps({"type": "assistant.message", **e}) + "\n" for e in replies))
    (config / "config.zon").write_text(
        '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }, '
        f'.approvals = .{{ .shell = "{approvals}" }} }}\n'
    )
    host.project = make_project(host.user.home / "project")
    host.user.give(host.user.home)
    host.start_daemon()
    return host


def test_a_session_run_on_a_named_host_is_listed_steered_and_continued_from_the_client(hosts: Hosts) -> None:
    a = _host_with_replay(hosts, 7)
    down = hosts.host(8)
    down.stop_daemon()
    down.sshd.terminate()
    down.sshd.wait(10)
    hosts.write_client_config(f'.{{ .connections = .{{ .a = "{a.url}", .down = "{down.url}" }} }}\n')
    client = hosts.client
    assert client is not None
    setpriv, *rest = client.prefix()
    chock = [shutil.which(setpriv) or setpriv, *rest, PYTHON, "-m", "chock"]  # a pty's child is exec'd by path

    started = Terminal(
        [*chock, "run", "--on", "a", "--project", str(a.project), "sleep a while"],
        client.env(hosts.chock_dir), client.home,
    )  # fmt: skip
    try:
        started.wait_for("sleep 60", timeout=60)
        started.type("\x03")
        assert started.exit_code() == 0
    finally:
        started.close()
    (session_id,) = os.listdir(a.state / "sessions")
    said = " ".join(started.text().split())
    assert f"started session {session_id} on a" in said and f"`chock attach a:{session_id}` comes back" in said

    listed = hosts.chock("sessions", "--all")
    assert listed.returncode == 1, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [["a", session_id, "running"]]
    assert listed.stderr.startswith("down: not listed: ssh could not reach"), listed.stderr

    attached = Terminal([*chock, "attach", f"a:{session_id}"], client.env(hosts.chock_dir), client.home)
    try:
        attached.wait_for(f"attached to session {session_id} on a", timeout=60)
        attached.wait_for("sleep 60")  # the session's events, replayed from the host's log
        attached.type("\x03")
        assert attached.exit_code() == 0
    finally:
        attached.close()

    told = hosts.chock("say", f"a:{session_id}", "also this")
    assert told.returncode == 0 and f"said to session {session_id} on a" in told.stdout, told.stderr
    stopped = hosts.chock("stop", f"a:{session_id}")
    assert stopped.returncode == 0 and f"session {session_id} stopped on a" in stopped.stdout, stopped.stderr
    more = hosts.chock("run", "--on", "a", "--continue", session_id, "carry on")
    assert more.returncode == 0, more.stdout + more.stderr
    assert "Carried on." in more.stdout

    # The log lives only on A: the client's state directory holds nothing of it.
    assert (a.state / "sessions" / session_id / "log.jsonl").exists()
    assert not (client.home / ".local/state/chock/sessions").exists()
    assert not list(client.home.rglob(f"*{session_id}*"))


ASKS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo '\x1b]0;owned\x07'"}}]},
    {"text": "", "tool_calls": [{"call_id": "c2", "name": "shell", "args": {"command": "echo second-ran"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip

START = """
import sys
from chock.control import daemon_protocol as dp
from chock.control.address import Address
from chock.control.client import ControlClient
print(ControlClient(Address(path=sys.argv[1])).call(dp.StartRequest(sys.argv[2], "two commands")).session_id)
"""


def _asked(host: Host, session_id: str, count: int) -> list[dict]:
    """The session's approval requests in the host's log, once it holds `count` of them."""
    log = host.state / "sessions" / session_id / "log.jsonl"

    def asked() -> list[dict] | None:
        events = [json.loads(line) for line in log.read_text().splitlines(True) if line.endswith("\n")]
        found = [event for event in events if event["type"] == "approval.request"]
        return found if len(found) >= count else None

    return wait_until(asked, 60, f"{count} approval requests on the host")


def test_a_session_waiting_on_a_host_is_approved_and_denied_from_the_client(hosts: Hosts) -> None:
    a = _host_with_replay(hosts, 9, ASKS, approvals="ask")
    hosts.write_client_config(f'.{{ .connections = .{{ .a = "{a.url}" }} }}\n')
    started = subprocess.run(
        [*a.user.prefix(), PYTHON, "-c", START, str(a.socket), str(a.project)], env=a.user.env(hosts.chock_dir),
        cwd=a.user.home, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    session_id = started.stdout.strip()

    first = _asked(a, session_id, 1)[0]
    assert "\x1b]0;owned\x07" in first["summary"]  # the agent's words, as the host's log holds them
    approved = hosts.chock("approve", f"a:{session_id}", input="y\n")
    assert approved.returncode == 0, approved.stderr
    assert f"{first['request_id']}: approved on a" in approved.stdout
    assert "\x1b" not in approved.stdout and "\x07" not in approved.stdout and "owned" in approved.stdout

    second = _asked(a, session_id, 2)[1]
    denied = hosts.chock("approve", "--daemon", a.url, session_id, input="n\n")
    assert denied.returncode == 0, denied.stderr
    assert f"{second['request_id']}: denied through the daemon at {a.url}" in denied.stdout, denied.stdout

    log = a.state / "sessions" / session_id / "log.jsonl"
    wait_until(lambda: '"session.end"' in log.read_text(), 60, "the session's end on the host")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    answers = [(e["request_id"], e["answer"], e["via"]) for e in events if e["type"] == "approval.answer"]
    assert answers == [(first["request_id"], "yes", "socket"), (second["request_id"], "no", "socket")]
    again = hosts.chock("approve", f"a:{session_id}")
    assert again.returncode == 0 and f"session {session_id} on a is not waiting for an answer" in again.stdout
    assert not (hosts.client.home / ".local/state/chock/sessions").exists()  # the log lives only on A


# Runs `argv` and says on standard error the largest resident set any process it started reached (KiB).
PEAK = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr + f"\\npeak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n")
sys.exit(done.returncode)
"""


def test_connections_reads_one_line_of_a_hosts_version_however_much_it_writes(hosts: Hosts, host_a: Host) -> None:
    """A host whose `chock --version` writes 256 MiB with no newline (a hostile or broken host): `chock
    connections` reads one line's worth of it, shows no version for that host, and the others' as they are."""
    host = hosts.host(10)
    host.start_daemon()
    script = host.dir / "answers.sh"
    script.write_text(
        '#!/bin/sh\ncase "$SSH_ORIGINAL_COMMAND" in\n'
        '  "chock --version") exec head -c 268435456 /dev/zero;;\n'
        '  *) exec /bin/sh -c "$SSH_ORIGINAL_COMMAND";;\nesac\n'
    )
    script.chmod(0o755)
    host.authorized.write_text(f'command="{script}" {hosts.client_key_pub}')
    hosts.write_client_config(f'.{{ .connections = .{{ .good = "{host_a.url}", .endless = "{host.url}" }} }}\n')
    assert hosts.client is not None
    done = subprocess.run(
        [PYTHON, "-c", PEAK, *hosts.client.prefix(), PYTHON, "-m", "chock", "connections"],
        env=hosts.client.env(hosts.chock_dir), cwd=hosts.client.home, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    peak_kib = int(done.stderr.rsplit("peak ", 1)[1])
    assert peak_kib < 160 * 1024, f"chock connections held {peak_kib // 1024} MiB"
    rows = {words[0]: words for words in map(str.split, done.stdout.splitlines()) if words[0] in ("good", "endless")}
    assert rows["good"][2] == chock.__version__ and rows["endless"][2] == "?", done.stdout
    assert done.stdout.count("reachable: 0 running, 0 waiting") == 2, done.stdout
