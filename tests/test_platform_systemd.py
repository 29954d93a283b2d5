"""chock.platform.systemd and packaging/systemd, for real (docs/architecture.md#running-as-a-service).

- listen_fds under `systemd-socket-activate` (python-systemd's parser and our own), and refusals of fds that
  are not listening stream sockets;
- notify against a datagram socket the test binds (a path and an abstract name);
- move_to_scope against a scripted peer on the wire (timeouts, failed jobs, D-Bus errors), then against a real
  `systemd --user` (tests/fakes/systemd_user.py) over both transports;
- the packaged units in that manager: socket activation with the modes and names they set, Type=notify, a
  session scope that outlives `systemctl stop chock.service`, the serve pair with the TCP example, the drop-in;
- `systemd-analyze verify --user` on each unit, with ExecStart pointed at an executable that exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chock.errors import ChockError
from chock.platform import systemd
from chock.platform.systemd import listen_fds, move_to_scope, notify, under_user_manager, watchdog_interval
from tests.fakes.systemd_user import UserManager, user_manager
from tests.fakes.wait import wait_until

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "packaging" / "systemd"
PYTHON = sys.executable
needs_manager = pytest.mark.systemd


@pytest.fixture
def manager() -> Iterator[UserManager]:
    with user_manager() as running:
        yield running


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-c", code, *args], capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )  # fmt: skip


# --- listen_fds ---------------------------------------------------------------------------------------

# Runs as the activated process: reports what listen_fds made of the fds, then proves each one listens.
ACTIVATED = """
import fcntl, json, os, socket, subprocess, sys
if sys.argv[1] == "own-parser":
    sys.modules["systemd"] = None  # as on a machine without python-systemd
from chock.platform.systemd import listen_fds
found = listen_fds(("control", "http"))
report = {
    "groups": {name: [s.getsockname() for s in socks] for name, socks in found.items()},
    "cloexec": [bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC) for g in found.values() for s in g],
    "environ": sorted(k for k in os.environ if k.startswith("LISTEN_")),
    "child_environ": sorted(k for k in subprocess.run(["env"], capture_output=True, text=True).stdout.split()
                            if k.startswith("LISTEN_")),
}
for sock in found["control"]:
    conn, _ = sock.accept()
    conn.close()
print(json.dumps(report), flush=True)
"""


@pytest.mark.parametrize("parser", ["python-systemd", "own-parser"])
def test_listen_fds_groups_by_name_sets_cloexec_and_pops_the_environment(tmp_path: Path, parser: str) -> None:
    if shutil.which("systemd-socket-activate") is None:
        pytest.fail("systemd-socket-activate not installed; install the Debian package systemd")
    paths = [tmp_path / "a.sock", tmp_path / "b.sock", tmp_path / "c.sock"]
    process = subprocess.Popen(
        ["systemd-socket-activate", *(f"-l{path}" for path in paths), "--fdname=control:http:http",
         PYTHON, "-c", ACTIVATED, parser],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        wait_until(paths[0].exists, 10, "systemd-socket-activate to listen")
        # systemd-socket-activate execs the command on the first connection.
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(paths[0]))
            out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0, err
    report = json.loads(out)
    assert report["groups"] == {"control": [str(paths[0])], "http": [str(paths[1]), str(paths[2])]}
    assert report["cloexec"] == [True, True, True]
    assert report["environ"] == [] and report["child_environ"] == []


def test_listen_fds_refuses_a_datagram_socket_from_systemd_socket_activate(tmp_path: Path) -> None:
    path = tmp_path / "dgram.sock"
    code = (
        "from chock.errors import ChockError\nfrom chock.platform.systemd import listen_fds\n"
        "try:\n    listen_fds(('control',))\nexcept ChockError as exc:\n    print(exc)\n"
    )
    process = subprocess.Popen(
        ["systemd-socket-activate", "--datagram", f"-l{path}", "--fdname=control", PYTHON, "-c", code],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        wait_until(path.exists, 10, "systemd-socket-activate to listen")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as client:
            client.sendto(b"wake", str(path))  # a datagram is what makes it exec the command
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert out.strip() == "socket activation passed fd 3 ('control'), which is a datagram socket, not a stream socket"


# Puts one fd of the given kind at 3 and says it was socket-activated, as a manager would.
CRAFTED = """
import os, socket, sys
kind, name, parser, scratch = sys.argv[1:5]
if parser == "own-parser":
    sys.modules["systemd"] = None
keep = []
if kind == "pipe":
    keep = os.pipe(); fd = keep[0]
elif kind == "file":
    fd = os.open(scratch + ".file", os.O_CREAT | os.O_RDWR)
elif kind == "stream":
    keep = socket.socketpair(); fd = keep[0].fileno()
elif kind == "datagram":
    keep = [socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)]; fd = keep[0].fileno()
else:
    keep = [socket.socket(socket.AF_UNIX)]; keep[0].bind(scratch + ".sock"); keep[0].listen(); fd = keep[0].fileno()
if fd != 3:
    os.dup2(fd, 3)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1", LISTEN_FDNAMES=name)
from chock.errors import ChockError
from chock.platform.systemd import listen_fds
try:
    print("ok", sorted(listen_fds(("control",))))
except ChockError as exc:
    print(exc)
print(sorted(k for k in os.environ if k.startswith("LISTEN_")))
"""


@pytest.mark.parametrize("parser", ["python-systemd", "own-parser"])
@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("listening", "control", "ok ['control']"),
        ("pipe", "control", "fd 3 ('control'), which is a pipe, not a listening socket"),
        ("file", "control", "fd 3 ('control'), which is a regular file, not a listening socket"),
        ("datagram", "control", "fd 3 ('control'), which is a datagram socket, not a stream socket"),
        ("stream", "control", "fd 3 ('control'), a stream socket that is not listening"),
        ("listening", "http", "passed fd 3 named 'http'; expected 'control'"),
    ],
)
def test_listen_fds_refuses_what_is_not_a_listening_stream_socket(
    tmp_path: Path, kind: str, name: str, expected: str, parser: str
) -> None:
    done = run_python(CRAFTED, kind, name, parser, str(tmp_path / "scratch"))
    assert done.returncode == 0, done.stderr
    message, leftover = done.stdout.splitlines()
    assert expected in message
    assert leftover == "[]"  # popped even when refused


def test_listen_fds_for_another_process_is_not_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTEN_PID", str(os.getpid() + 100_000))
    monkeypatch.setenv("LISTEN_FDS", "1")
    monkeypatch.setenv("LISTEN_FDNAMES", "control")
    assert listen_fds(("control",)) == {}
    assert not [key for key in os.environ if key.startswith("LISTEN_")]


def test_listen_fds_without_activation_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in systemd.LISTEN_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    assert listen_fds() == {}


@pytest.mark.parametrize(
    ("environ", "result"),
    [
        ({"LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "control:http"}, {3: "control", 4: "http"}),
        ({"LISTEN_PID": "42", "LISTEN_FDS": "1"}, {3: "unknown"}),
        ({"LISTEN_PID": "41", "LISTEN_FDS": "1"}, {}),
        ({"LISTEN_FDS": "1"}, {}),
    ],
)
def test_own_parser_follows_sd_listen_fds(environ: dict[str, str], result: dict[int, str]) -> None:
    assert systemd._parse_listen_variables(environ, 42) == result


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"LISTEN_PID": "42", "LISTEN_FDS": "x"}, "LISTEN_FDS='x' is not a number"),
        ({"LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "control"}, "names 1 descriptors but LISTEN_FDS"),
    ],
)
def test_own_parser_refuses_malformed_variables(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ChockError, match=message):
        systemd._parse_listen_variables(environ, 42)


# --- notify and the watchdog ------------------------------------------------------------------------------


def test_notify_sends_every_state_in_one_datagram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(path))
        receiver.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        notify("READY=1", "STATUS=2 sessions, café\nREADY=0")
        notify("WATCHDOG=1")
        notify("STOPPING=1")
        received = [receiver.recv(4096) for _ in range(3)]
    # UTF-8, and a newline inside a state cannot smuggle in another assignment.
    assert received == ["READY=1\nSTATUS=2 sessions, café READY=0".encode(), b"WATCHDOG=1", b"STOPPING=1"]


def test_notify_goes_through_sdnotify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sdnotify

    path = tmp_path / "notify"
    sent: list[str] = []
    real = sdnotify.SystemdNotifier.notify

    def spy(self: sdnotify.SystemdNotifier, state: str) -> None:
        sent.append(state)
        real(self, state)

    monkeypatch.setattr(sdnotify.SystemdNotifier, "notify", spy)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(path))
        receiver.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        notify("READY=1", "STATUS=ok")
        assert receiver.recv(4096) == b"READY=1\nSTATUS=ok"
    assert sent == ["READY=1\nSTATUS=ok"]
    # No hand-written sd_notify is left anywhere in chock: no datagram socket is opened outside sdnotify.
    datagram = re.compile(r"AF_UNIX,\s*socket\.SOCK_DGRAM|\.sendto\(")
    sources = [path for path in (REPO / "chock").rglob("*.py") if datagram.search(path.read_text())]
    assert sources == []


def test_notify_reaches_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"chock-test-notify-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        receiver.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        notify("READY=1")
        assert receiver.recv(4096) == b"READY=1"


def test_notify_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notify("READY=1")  # not under a manager: nothing to do
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    notify("STOPPING=1")  # the manager's socket vanished
    (tmp_path / "plain").write_text("")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "plain"))
    notify("STOPPING=1")
    monkeypatch.setenv("NOTIFY_SOCKET", "vsock:2:1234")
    notify("READY=1")


@pytest.mark.parametrize(
    ("usec", "pid", "interval"),
    [
        ("3000000", "self", 3.0),
        ("500000", None, 0.5),
        ("3000000", "other", None),
        ("0", "self", None),
        ("soon", "self", None),
        (None, "self", None),
    ],
)
def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, interval) -> None:
    for key, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, {"self": str(os.getpid()), "other": str(os.getpid() + 1)}.get(value, value))
    assert watchdog_interval() == interval


# --- under_user_manager and move_to_scope without a manager -------------------------------------------------


def test_under_user_manager_looks_for_the_private_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert not under_user_manager()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert not under_user_manager()
    (tmp_path / "systemd").mkdir()
    (tmp_path / "systemd" / "private").write_text("")
    assert not under_user_manager()  # not a socket
    (tmp_path / "systemd" / "private").unlink()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "systemd" / "private"))
        assert under_user_manager()


def test_move_to_scope_needs_a_scope_name_and_a_manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ChockError, match=r"must end in \.scope"):
        move_to_scope(os.getpid(), "chock-session-x.service", description="x")
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(ChockError, match=r"no systemd user manager to start chock-session-x\.scope"):
        move_to_scope(os.getpid(), "chock-session-x.scope", description="x")


class ScriptedManager:
    """The wire of the manager's peer-to-peer socket, for one StartTransientUnit: EXTERNAL auth, then the
    reply and JobRemoved signals in the order a test asks for (a real manager cannot be made to misbehave)."""

    JOB = "/org/freedesktop/systemd1/job/7"

    def __init__(self, runtime: Path, behaviour: str) -> None:
        (runtime / "systemd").mkdir(parents=True)
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(runtime / "systemd" / "private"))
        self.listener.listen()
        self.behaviour = behaviour
        self.calls: list[tuple] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        from jeepney import DBusAddress, Parser, new_error, new_method_return, new_signal

        conn, _ = self.listener.accept()
        with conn:
            buffer, answered = b"", False
            while b"BEGIN\r\n" not in buffer:
                data = conn.recv(4096)
                if not data:
                    return
                buffer += data
                if b"AUTH EXTERNAL" in buffer and not answered:
                    conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
                    answered = True
            parser = Parser()
            parser.add_data(buffer.split(b"BEGIN\r\n", 1)[1])
            while (call := parser.get_next_message()) is None:
                parser.add_data(conn.recv(4096))
            self.calls.append(call.body)
            manager = DBusAddress("/org/freedesktop/systemd1", interface="org.freedesktop.systemd1.Manager")
            unit = call.body[0]

            def removed(job: str, result: str) -> bytes:
                return new_signal(manager, "JobRemoved", "uoss", (7, job, unit, result)).serialise(serial=100)

            reply = new_method_return(call, "o", (self.JOB,)).serialise(serial=1)
            script = {
                "done": [removed("/org/freedesktop/systemd1/job/6", "failed"), reply, removed(self.JOB, "done")],
                "done-before-reply": [removed(self.JOB, "done"), reply],
                "failed": [reply, removed(self.JOB, "failed")],
                "silent": [reply],
                "error": [
                    new_error(call, "org.freedesktop.systemd1.UnitExists", "s", (f"Unit {unit} exists.",)).serialise(
                        serial=1
                    )
                ],
            }[self.behaviour]
            for data in script:
                conn.sendall(data)
            conn.recv(4096)  # hold the connection until the client closes it

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=5)


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("done", None),
        ("done-before-reply", None),
        ("failed", "could not start chock-session-w.scope: its start job ended 'failed'"),
        ("silent", "did not start chock-session-w.scope within 0.5 s"),
        ("error", "org.freedesktop.systemd1.UnitExists: Unit chock-session-w.scope exists."),
    ],
)
def test_move_to_scope_on_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str, error: str | None
) -> None:
    runtime = tmp_path / "run"
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setattr(systemd, "SCOPE_TIMEOUT", 0.5)
    peer = ScriptedManager(runtime, behaviour)
    try:
        if error is None:
            move_to_scope(4242, "chock-session-w.scope", description="wire test")
        else:
            with pytest.raises(ChockError, match=error):
                move_to_scope(4242, "chock-session-w.scope", description="wire test")
    finally:
        peer.close()
    assert peer.calls == [
        (
            "chock-session-w.scope",
            "fail",
            [
                ("PIDs", ("au", [4242])),
                ("Description", ("s", "wire test")),
                ("Slice", ("s", "app-chock.slice")),
                ("CollectMode", ("s", "inactive-or-failed")),
            ],
            [],
        )
    ]


# --- a real systemd user manager --------------------------------------------------------------------------


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)


def assert_in_scope(manager: UserManager, pid: int, unit: str) -> None:
    assert manager.cgroup_of(pid).endswith(f"/app.slice/app-chock.slice/{unit}")
    assert unit in manager.list_units("chock-session-*")
    assert manager.show(unit, "Slice", "CollectMode", "ActiveState") == {
        "Slice": "app-chock.slice",
        "CollectMode": "inactive-or-failed",
        "ActiveState": "active",
    }


def wait_gone(manager: UserManager, unit: str, timeout: float = 10) -> None:
    wait_until(lambda: unit not in manager.list_units("chock-session-*"), timeout, f"{unit} to be collected")


@needs_manager
def test_move_to_scope_over_the_private_socket(manager: UserManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(manager.runtime_dir))
    assert under_user_manager()
    child = sleeper()
    try:
        move_to_scope(child.pid, "chock-session-test.scope", description="chock session test")
        assert_in_scope(manager, child.pid, "chock-session-test.scope")
        assert manager.show("chock-session-test.scope", "Description")["Description"] == "chock session test"
        with pytest.raises(ChockError, match=r"org\.freedesktop\.systemd1\.UnitExists"):
            move_to_scope(child.pid, "chock-session-test.scope", description="again")
    finally:
        child.kill()
        child.wait()
    wait_gone(manager, "chock-session-test.scope")  # CollectMode: no failed unit is left behind


@needs_manager
def test_move_to_scope_over_the_session_bus(manager: UserManager, monkeypatch: pytest.MonkeyPatch) -> None:
    # No XDG_RUNTIME_DIR: the bus (dbus-user-session's dbus.socket, which the manager joins) is the only way.
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", manager.bus_address)
    child = sleeper()
    try:
        move_to_scope(child.pid, "chock-session-bus.scope", description="over the bus")
        assert_in_scope(manager, child.pid, "chock-session-bus.scope")
        with pytest.raises(ChockError, match=r"UnixProcessIdUnknown"):
            move_to_scope(2**22 + 1, "chock-session-nopid.scope", description="no such process")
    finally:
        child.kill()
        child.wait()


@needs_manager
def test_move_to_scope_falls_back_from_a_bus_without_the_manager(
    manager: UserManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(manager.runtime_dir))
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1", f"--address=unix:path={tmp_path}/bus"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = sleeper()
    try:
        assert bus.stdout is not None and bus.stdout.readline().startswith("unix:")
        # A bus the manager never joined (its auto-start of org.freedesktop.systemd1 fails), then no bus at all.
        for address, unit in ((f"unix:path={tmp_path}/bus", "one"), (f"unix:path={tmp_path}/nobody", "two")):
            monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
            move_to_scope(child.pid, f"chock-session-{unit}.scope", description=unit)
            assert_in_scope(manager, child.pid, f"chock-session-{unit}.scope")
    finally:
        child.kill()
        child.wait()
        bus.terminate()
        bus.wait()


@needs_manager
def test_notify_under_a_type_notify_unit(manager: UserManager) -> None:
    code = (
        "from chock.platform.systemd import notify; import time; notify('READY=1', 'STATUS=serving'); time.sleep(300)"
    )
    for name, script in (("ready", code), ("silent", "import time; time.sleep(300)")):
        manager.install_unit(
            f"{name}.service",
            f'[Service]\nType=notify\nEnvironment=PYTHONPATH={REPO}\nExecStart={PYTHON} -c "{script}"\n',
        )
        manager.systemctl("start", "--no-block", f"{name}.service")
    manager.wait_for_state("ready.service", "active")
    assert manager.show("ready.service", "SubState", "StatusText") == {"SubState": "running", "StatusText": "serving"}
    assert "active (running)" in manager.systemctl("status", "ready.service").stdout
    # The control: a Type=notify unit that never says READY=1 is still starting.
    assert manager.unit_state("silent.service") == "activating"


@needs_manager
def test_watchdog_interval_under_a_unit(manager: UserManager) -> None:
    report = manager.root / "watchdog.txt"
    code = (
        "import time; from chock.platform.systemd import notify, watchdog_interval as w; "
        f"open('{report}', 'w').write(repr(w())); notify('READY=1'); "
        "[(notify('WATCHDOG=1'), time.sleep(w() / 2)) for _ in range(1000)]"
    )
    manager.install_unit(
        "dog.service",
        f'[Service]\nType=notify\nWatchdogSec=1\nEnvironment=PYTHONPATH={REPO}\nExecStart={PYTHON} -c "{code}"\n',
    )
    manager.systemctl("start", "dog.service")
    time.sleep(2.5)  # past two watchdog periods: the pings are what keeps it alive
    assert manager.show("dog.service", "ActiveState", "NRestarts")["ActiveState"] == "active"
    assert report.read_text() == "1.0"


# --- the packaged units in that manager ---------------------------------------------------------------------

# Stands in for `chock daemon` / `chock serve` where the units say /usr/bin/chock: takes its sockets by
# name, says READY=1, and per connection reports what it sees; the daemon also starts one "session".
STUB = """
import json, os, selectors, subprocess, sys
sys.path.insert(0, {repo!r})
from chock.platform.systemd import listen_fds, move_to_scope, notify, under_user_manager
role = sys.argv[1]
found = listen_fds(("control",) if role == "daemon" else ("http",))
notify("READY=1", f"STATUS={{role}} stub serving")
report = {{
    "argv": sys.argv[1:],
    "fds": {{name: [s.getsockname() for s in socks] for name, socks in found.items()}},
    "env": {{k: os.environ.get(k) for k in ("CHOCK_CONFIG", "CHOCK_STATE_DIR", "CHOCK_DATA_DIR", "LISTEN_FDS")}},
    "under_user_manager": under_user_manager(),
    "sessions": [],
}}
selector = selectors.DefaultSelector()
for sock in (sock for socks in found.values() for sock in socks):
    selector.register(sock, selectors.EVENT_READ)
while True:
    ready = selector.select()
    conn, _ = ready[0][0].fileobj.accept()
    if role == "daemon":
        child = subprocess.Popen(["/bin/sleep", "300"], stdin=subprocess.DEVNULL, start_new_session=True)
        unit = f"chock-session-{{os.getpid()}}-{{len(report['sessions'])}}.scope"
        move_to_scope(child.pid, unit, description="stub session")
        report["sessions"].append([child.pid, unit])
    conn.sendall(json.dumps(report).encode() + b"\\n")
    conn.close()
"""


def packaged(name: str, stub: Path) -> str:
    """A packaged unit with /usr/bin/chock replaced by the stub (the real binary is the .deb's business)."""
    text = (UNITS / name).read_text()
    assert "ExecStart=/usr/bin/chock " in text or not name.endswith(".service")
    return text.replace("ExecStart=/usr/bin/chock ", f"ExecStart={PYTHON} {stub} ")


def install_packaged(manager: UserManager, *names: str) -> None:
    stub = manager.root / "chock-stub.py"
    stub.write_text(STUB.format(repo=str(REPO)))
    for name in names:
        manager.install_unit(name, packaged(name, stub), reload=False)
    manager.systemctl("daemon-reload")


def ask(address: str | tuple[str, int]) -> dict:
    """Connect to a stub listener and read its one-line JSON report."""
    if isinstance(address, str):
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(20)
        sock.connect(address)
    else:
        sock = socket.create_connection(address, timeout=20)
    with sock, sock.makefile() as lines:
        return json.loads(lines.readline())


@needs_manager
def test_chock_socket_activates_the_daemon_and_sessions_outlive_it(manager: UserManager) -> None:
    install_packaged(manager, "chock.socket", "chock.service")
    manager.systemctl("enable", "--now", "chock.socket")  # the whole set-up, as the README says
    assert (manager.unit_dir / "sockets.target.wants" / "chock.socket").is_symlink()
    state = manager.home / ".local" / "state" / "chock"
    sock = state / "daemon.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert manager.unit_state("chock.service") == "inactive"  # nothing runs until someone connects

    first = ask(str(sock))
    assert first["argv"] == ["daemon", "--idle-exit", "600"]
    assert first["fds"] == {"control": [str(sock)]}
    assert first["env"] == {
        "CHOCK_CONFIG": f"{manager.home}/.config/chock/config.zon",
        "CHOCK_STATE_DIR": str(state),
        "CHOCK_DATA_DIR": f"{manager.home}/.local/share/chock",
        "LISTEN_FDS": None,
    }
    assert first["under_user_manager"] is True
    manager.wait_for_state("chock.service", "active")
    assert manager.show("chock.service", "StatusText")["StatusText"] == "daemon stub serving"
    [(pid, unit)] = first["sessions"]
    assert_in_scope(manager, pid, unit)

    # A daemon stop (and so a restart) leaves the session in its scope: no PartOf=, KillMode=process.
    manager.systemctl("stop", "chock.service")
    assert manager.unit_state("chock.service") == "inactive"
    os.kill(pid, 0)
    assert_in_scope(manager, pid, unit)
    assert manager.unit_state("chock.socket") == "active"  # still listening: the next connect starts it again
    second = ask(str(sock))
    assert second["sessions"][0][1] != unit
    assert sorted(manager.list_units("chock-session-*")) == sorted([unit, second["sessions"][0][1]])


@needs_manager
def test_serve_socket_and_the_tcp_example_reach_one_service(manager: UserManager) -> None:
    with socket.socket() as probe:  # a free port stands in for 7891, which may be taken on this machine
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    install_packaged(manager, "chock.socket", "chock.service", "chock-serve.socket", "chock-serve.service")
    tcp = (UNITS / "examples" / "chock-serve-tcp.socket").read_text().replace("127.0.0.1:7891", f"127.0.0.1:{port}")
    manager.install_unit("chock-serve-tcp.socket", tcp)
    manager.systemctl("start", "chock-serve.socket", "chock-serve-tcp.socket")
    serve_sock = manager.home / ".local" / "state" / "chock" / "serve.sock"
    assert stat.S_IMODE(serve_sock.stat().st_mode) == 0o600

    report = ask(str(serve_sock))
    assert report["argv"] == ["serve", "--idle-exit", "600"]
    # Two socket units, one name: both fds come grouped under `http` (their order is the manager's).
    assert sorted(report["fds"]["http"], key=str) == sorted([str(serve_sock), ["127.0.0.1", port]], key=str)
    assert list(report["fds"]) == ["http"]
    assert ask(("127.0.0.1", port))["fds"] == report["fds"]  # the same process answers on TCP
    manager.wait_for_state("chock-serve.service", "active")
    assert manager.unit_state("chock.socket") == "active"  # Requires=chock.socket pulled the daemon's socket in


@needs_manager
def test_headless_drop_in_points_the_daemon_at_its_own_config(manager: UserManager) -> None:
    install_packaged(manager, "chock.socket", "chock.service")
    drop_in = (UNITS / "examples" / "headless-file-store.conf").read_text()
    manager.install_unit("chock.service.d/headless-file-store.conf", drop_in)
    manager.systemctl("start", "chock.socket")
    report = ask(str(manager.home / ".local" / "state" / "chock" / "daemon.sock"))
    assert report["env"]["CHOCK_CONFIG"] == f"{manager.home}/.config/chock/headless.zon"
    assert report["env"]["CHOCK_STATE_DIR"] == f"{manager.home}/.local/state/chock"


# --- systemd-analyze verify -------------------------------------------------------------------------------


def test_every_packaged_unit_verifies(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze not installed; install the Debian package systemd")
    units = tmp_path / "units"
    units.mkdir()
    names = sorted(path.name for path in UNITS.iterdir() if path.is_file())
    assert names == [
        "chock-resume.service",
        "chock-serve.service",
        "chock-serve.socket",
        "chock.service",
        "chock.socket",
    ]
    # ExecStart must name an executable that exists; the .deb's real /usr/bin/chock is checked elsewhere.
    for name in names:
        (units / name).write_text((UNITS / name).read_text().replace("/usr/bin/chock", "/bin/true"))
    (units / "chock-serve-tcp.socket").write_text((UNITS / "examples" / "chock-serve-tcp.socket").read_text())
    (units / "chock.service.d").mkdir()
    shutil.copy(UNITS / "examples" / "headless-file-store.conf", units / "chock.service.d")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path / "home"), "SYSTEMD_LOG_LEVEL": "notice"}
    for name in [*names, "chock-serve-tcp.socket"]:
        # --man=no: the pages Documentation= names are the .deb's (tests/test_debian.py verifies them installed).
        done = subprocess.run(
            ["systemd-analyze", "verify", "--user", "--man=no", str(units / name)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        # verify exits 0 on an unknown key or a bad value: anything it says is a finding.
        assert (done.returncode, done.stdout + done.stderr) == (0, ""), name


def test_units_have_the_settings_the_service_design_needs() -> None:
    """Private sockets under %h, every path explicit, notify and idle exit, no mount-namespace hardening and no
    PartOf= (docs/architecture.md#running-as-a-service)."""

    def keys(name: str) -> list[str]:
        return [line for line in (UNITS / name).read_text().splitlines() if line and not line.startswith("#")]

    assert {
        "ListenStream=%h/.local/state/chock/daemon.sock", "SocketMode=0600", "DirectoryMode=0700",
        "FileDescriptorName=control", "Service=chock.service",
    } <= set(keys("chock.socket"))  # fmt: skip
    service = set(keys("chock.service"))
    assert {
        "Type=notify", "ExecStart=/usr/bin/chock daemon --idle-exit 600", "After=chock.socket dbus.socket",
        "Environment=CHOCK_CONFIG=%h/.config/chock/config.zon", "Environment=CHOCK_STATE_DIR=%h/.local/state/chock",
        "Environment=CHOCK_DATA_DIR=%h/.local/share/chock", "Restart=on-failure", "KillMode=process",
    } <= service  # fmt: skip
    for name in ("chock.service", "chock-serve.service"):
        settings = {line.split("=", 1)[0] for line in keys(name) if "=" in line}
        assert not settings & {"ProtectHome", "ProtectSystem", "PrivateTmp", "PartOf"}, name
    assert {
        "ListenStream=%h/.local/state/chock/serve.sock", "SocketMode=0600", "DirectoryMode=0700",
        "FileDescriptorName=http", "Service=chock-serve.service",
    } <= set(keys("chock-serve.socket"))  # fmt: skip
    assert {
        "Type=notify", "ExecStart=/usr/bin/chock serve --idle-exit 600", "Requires=chock.socket", "After=chock.socket",
    } <= set(keys("chock-serve.service"))  # fmt: skip
    assert {
        "Type=oneshot", "ExecStart=/usr/bin/chock daemon wake", "WantedBy=default.target", "After=chock.socket",
        "Environment=CHOCK_CONFIG=%h/.config/chock/config.zon", "Environment=CHOCK_STATE_DIR=%h/.local/state/chock",
    } <= set(keys("chock-resume.service"))  # fmt: skip
    for name in ("chock.socket", "chock-serve.socket"):
        assert not any("%S" in line for line in keys(name)), name
    for name, page in (("chock.socket", "chock-daemon"), ("chock.service", "chock-daemon"),
                       ("chock-serve.socket", "chock-serve"), ("chock-serve.service", "chock-serve")):  # fmt: skip
        assert f"Documentation=man:{page}(1) man:chock(1)" in keys(name), name
