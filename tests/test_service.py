"""The daemon as a real user service: `chock daemon install` for a pip install, socket activation, readiness,
sessions in their own scopes that outlive a daemon restart, and idle exit (docs/architecture.md#running-as-a-service).
A real systemd user manager runs for each test (tests/fakes/systemd_user.py)."""

from __future__ import annotations

import json
import os
import plistlib
import signal
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, events_of
from chock.control.framing import ProtocolError
from tests.fakes.projects import make_project
from tests.fakes.systemd_user import user_manager
from tests.fakes.wait import wait_until

CHOCK = str(Path(sys.executable).parent / "chock")
PACKAGED = Path(__file__).resolve().parent.parent / "packaging" / "systemd"
LONG_SESSION = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "", "tool_calls": [{"call_id": "c2", "name": "shell", "args": {"command": "sleep 6"}}]},
    {"text": "Done after the daemon restarted.", "tool_calls": []},
]  # fmt: skip


@pytest.fixture
def manager():
    with user_manager() as running:
        yield running


def _prepare_home(home: Path, entries: list[dict]) -> Path:
    config = home / ".config" / "chock"
    config.mkdir(parents=True, exist_ok=True)
    (config / "demo.jsonl").write_text("".join(json.dumps({"type": "assistant.message", **e}) + "\n" for e in entries))
    (config / "config.zon").write_text(
        '.{ .approvals = .{ .shell = "allow" }, .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }\n'
    )
    return make_project(home / "project")


def _events(home: Path, session_id: str) -> list[dict]:
    log = home / ".local/state/chock/sessions" / session_id / "log.jsonl"
    return [json.loads(line) for line in log.read_bytes().split(b"\n")[:-1]]  # complete lines only


def test_installed_units_start_the_daemon_on_first_connect_and_sessions_outlive_its_restart(manager):
    home = manager.home
    project = _prepare_home(home, LONG_SESSION)
    installed = manager.run([CHOCK, "daemon", "install", "--over-package"])
    assert "chock.socket" in installed.stdout
    unit = (manager.unit_dir / "chock.service").read_text()
    assert f'ExecStart="{CHOCK}" daemon --idle-exit 600' in unit  # this installation's chock, not /usr/bin's
    manager.systemctl("start", "chock.socket")
    manager.wait_for_state("chock.socket", "active")
    assert manager.unit_state("chock.service") == "inactive"  # nothing runs until somebody connects

    address = f"unix:{home}/.local/state/chock/daemon.sock"
    assert ControlClient(address).ping() == 1  # the first connect starts it, by socket activation
    manager.wait_for_state("chock.service", "active")  # Type=notify: active only after READY=1
    assert manager.show("chock.service", "Type")["Type"] == "notify"

    session_id = ControlClient(address).call(dp.StartRequest(str(project), "outlive the daemon")).session_id
    scope = f"chock-session-{session_id}.scope"
    assert scope in manager.list_units("chock-session-*")
    assert manager.show(scope, "Slice")["Slice"] == "app-chock.slice"
    wait_until(
        lambda: any(e["type"] == "tool.call" and e["name"] == "shell" for e in _events(home, session_id)),
        what="the long tool call",
    )

    manager.systemctl("restart", "chock.service")
    manager.wait_for_state("chock.service", "active")
    rows = {
        line.row["id"]: line.row
        for line in ControlClient(address).collect(dp.ListRequest(str(project)), most=dp.MAX_SESSIONS)
    }
    assert rows[session_id]["status"] == "running"  # the restarted daemon found it in the state dir
    events = events_of(ControlClient(address).stream(dp.WatchRequest(project, session_id), idle_timeout=None))
    seen = [event["id"] for event in events]  # the watch runs to the session's end, then closes
    assert seen == list(range(1, len(seen) + 1))
    final = _events(home, session_id)
    assert final[-1]["type"] == "session.end" and final[-1]["reason"] == "completed"
    assert seen[-1] == final[-1]["id"]

    status = manager.run([CHOCK, "daemon", "status"]).stdout
    assert "chock.socket" in status and "active" in status and "daemon-status.json" in status


def test_an_idle_daemon_exits_and_the_next_connect_starts_it_again(manager):
    home = manager.home
    _prepare_home(home, LONG_SESSION)
    manager.run([CHOCK, "daemon", "install", "--over-package"])
    manager.install_unit(
        "chock.service.d/idle.conf", f"[Service]\nExecStart=\nExecStart={CHOCK} daemon --idle-exit 2\n"
    )
    manager.systemctl("start", "chock.socket")
    address = f"unix:{home}/.local/state/chock/daemon.sock"
    assert ControlClient(address).ping() == 1
    manager.wait_for_state("chock.service", "active")
    wait_until(lambda: manager.unit_state("chock.service") == "inactive", timeout=20, what="the idle exit")
    assert manager.show("chock.service", "Result")["Result"] == "success"  # exit 0, not a failure
    assert ControlClient(address).ping() == 1  # the socket brings it back
    manager.wait_for_state("chock.service", "active")


def test_uninstall_removes_what_install_wrote(manager):
    manager.run([CHOCK, "daemon", "install", "--over-package"])
    manager.run([CHOCK, "daemon", "start"])
    manager.wait_for_state("chock.socket", "active")
    removed = manager.run([CHOCK, "daemon", "uninstall"]).stdout
    assert "chock.socket" in removed
    assert not (manager.unit_dir / "chock.socket").exists()
    with pytest.raises(ProtocolError):
        ControlClient(f"unix:{manager.home}/.local/state/chock/daemon.sock", timeout=2).ping()


def _interrupted_by_a_reboot(home: Path, project: Path) -> str:
    """A daemon-owned session whose owner ran in a boot before this one, as a power cut leaves it (no end)."""
    session_id = "20261201-070000-abcdef"
    directory = home / ".local/state/chock/sessions" / session_id
    directory.mkdir(parents=True, mode=0o700)
    machine = Path("/etc/machine-id").read_text().strip()
    owner = {"pid": 4242, "pid_start": 17, "machine_id": machine, "boot_id": str(uuid.uuid4()), "host": "here"}
    lines = [
        {"id": 1, "at": "2026-12-01T07:00:00.000Z", "type": "session.start", "session": session_id,
         "project": str(project), "message": "finish after the reboot", "instance": "demo", "model": "",
         "owner": "daemon", "approve_all": True, **owner},
        {"id": 2, "at": "2026-12-01T07:00:00.100Z", "type": "user.message", "text": "finish after the reboot"},
    ]  # fmt: skip
    (directory / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return session_id


def test_chock_resume_service_starts_the_daemon_with_the_manager_and_it_carries_on_what_a_reboot_cut(tmp_path):
    """chock-resume.service, enabled, connects once when the user manager starts; the daemon it starts carries
    the session a reboot interrupted on (`.after_reboot = "resume"`, docs/architecture.md#after-a-reboot)."""
    made: dict[str, object] = {}

    def prepare(home: Path) -> None:
        project = _prepare_home(home, [{"text": "Carried on after the reboot.", "tool_calls": []}])
        config = home / ".config/chock/config.zon"
        config.write_text(config.read_text().replace(".{ ", '.{ .after_reboot = "resume", ', 1))
        made["session"] = _interrupted_by_a_reboot(home, project)
        units = home / ".config/systemd/user"
        for target in ("default.target.wants", "sockets.target.wants"):
            (units / target).mkdir(parents=True)
        for name in ("chock.socket", "chock.service", "chock-resume.service"):
            text = (PACKAGED / name).read_text().replace("/usr/bin/chock", CHOCK)
            (units / name).write_text(text)
        (units / "default.target.wants/chock-resume.service").symlink_to(units / "chock-resume.service")
        (units / "sockets.target.wants/chock.socket").symlink_to(units / "chock.socket")

    with user_manager(prepare=prepare) as manager:
        session_id = str(made["session"])

        def ran() -> bool:
            return manager.show("chock-resume.service", "ExecMainExitTimestampMonotonic")[
                "ExecMainExitTimestampMonotonic"
            ] not in ("", "0")

        wait_until(ran, what="chock-resume.service to run")
        assert manager.show("chock-resume.service", "Result")["Result"] == "success"
        assert manager.show("chock-resume.service", "ExecMainStatus")["ExecMainStatus"] == "0"
        manager.wait_for_state("chock.service", "active")  # started by the resume unit's one connect
        wait_until(
            lambda: any(e["type"] == "session.end" for e in _events(manager.home, session_id)[2:]),
            timeout=60, what="the interrupted session to be carried on to its end",
        )  # fmt: skip
        events = _events(manager.home, session_id)
        adopt = next(e for e in events if e["type"] == "session.adopt")
        assert (adopt["via"], adopt["after"], adopt["approve_all"]) == ("daemon", "reboot", False)
        assert events[-1]["reason"] == "completed"


def test_uninstall_reads_a_relative_enablement_link_as_the_unit_it_names(tmp_path: Path) -> None:
    """An enablement link a dotfiles manager (GNU stow) or a person wrote relative names the package's unit as
    much as systemctl's absolute one: `chock daemon uninstall` must see that the person enabled the package's
    unit, so as not to disable it (systemd resolves the link from its own directory)."""
    from chock.platform.install import _enabled_from

    tmp_path = tmp_path.resolve()
    package = tmp_path / "usr/lib/systemd/user"
    package.mkdir(parents=True)
    (package / "chock.socket").write_text((PACKAGED / "chock.socket").read_text())
    units = tmp_path / "home/.config/systemd/user"
    (units / "sockets.target.wants").mkdir(parents=True)
    (units / "sockets.target.wants/chock.socket").symlink_to("../../../../../usr/lib/systemd/user/chock.socket")
    assert (units / "sockets.target.wants/chock.socket").resolve() == package / "chock.socket"
    assert _enabled_from(units, "chock.socket") == {package / "chock.socket"}


# What pip writes for a script whose python's path holds a space: a shebang cannot, so sh runs the python.
SCRIPT_FOR_A_SPACED_PATH = """#!/bin/sh
'''exec' "{python}" "$0" "$@"
' '''
from chock.entry import main
main()
"""


def _chock_at(directory: Path) -> Path:
    """A Python environment at `directory` (which may hold spaces and `%`) running this checkout's chock, with a
    `chock` executable beside its python, as pip writes one there."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=60)
    python = directory / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    here = [sysconfig.get_paths()["purelib"], str(Path(__file__).resolve().parent.parent)]
    Path(site, "checkout.pth").write_text("\n".join(here) + "\n")
    chock = directory / "bin" / "chock"
    chock.write_text(SCRIPT_FOR_A_SPACED_PATH.format(python=python))
    chock.chmod(0o755)
    return chock


def test_units_for_paths_with_spaces_and_percent_signs_start_the_daemon_they_name(manager):
    """The executable, the config, the state and the data dir written into the units are each one word as systemd
    reads it: a venv under "My 100% Tools" and a state dir "state 50%n" start the daemon at that socket."""
    home = manager.home
    chock = _chock_at(home / "My 100% Tools" / "venv")
    state = home / "state 50%n"
    config = home / "my config" / "config.zon"
    manager.run([str(chock), "daemon", "install", "--over-package"],
                env={"CHOCK_STATE_DIR": str(state), "CHOCK_CONFIG": str(config)})  # fmt: skip
    units = ["chock.socket", "chock.service", "chock-serve.socket", "chock-serve.service", "chock-resume.service"]
    verified = manager.run(
        ["systemd-analyze", "--user", "verify", *(str(manager.unit_dir / name) for name in units)], check=False
    )
    assert verified.returncode == 0 and "chock" not in verified.stderr, verified.stderr
    manager.systemctl("start", "chock.socket")
    assert manager.show("chock.socket", "Listen")["Listen"] == f"{state}/daemon.sock (Stream)"
    assert ControlClient(f"unix:{state}/daemon.sock").ping() == 1  # the socket starts the daemon it names
    manager.wait_for_state("chock.service", "active")
    pid = int(manager.show("chock.service", "MainPID")["MainPID"])
    entries = Path(f"/proc/{pid}/environ").read_text().split("\0")
    environ = dict(entry.split("=", 1) for entry in entries if "=" in entry)
    assert (environ["CHOCK_STATE_DIR"], environ["CHOCK_CONFIG"]) == (str(state), str(config))
    assert str(chock) in Path(f"/proc/{pid}/cmdline").read_text()


def test_install_keeps_a_units_edits_and_uninstall_leaves_what_it_did_not_write(manager):
    manager.run([CHOCK, "daemon", "install", "--over-package"])
    manager.run([CHOCK, "daemon", "install", "--over-package"])  # as it wrote them: written again
    service = manager.unit_dir / "chock.service"
    edited = service.read_text().replace("Restart=on-failure", "Restart=on-failure\nMemoryMax=2G")
    service.write_text(edited)
    refused = manager.run([CHOCK, "daemon", "install", "--over-package"], check=False)
    assert refused.returncode != 0 and f"not replacing {service}" in refused.stderr, refused.stderr
    assert "systemctl --user edit chock.service" in refused.stderr and "--force" in refused.stderr
    assert service.read_text() == edited  # nothing written
    manager.run([CHOCK, "daemon", "install", "--over-package", "--force"])
    assert (manager.unit_dir / "chock.service.bak").read_text() == edited  # the edit is kept beside
    assert "MemoryMax" not in service.read_text()

    own = "[Service]\nExecStart=/opt/my-own-chock\n"
    service.write_text(own)  # written by hand over chock's
    said = manager.run([CHOCK, "daemon", "uninstall"]).stdout
    assert f"left {service}" in said and f"removed {manager.unit_dir / 'chock.socket'}" in said, said
    assert service.read_text() == own and not (manager.unit_dir / "chock.socket").exists()


def _answers(address: str) -> bool:
    try:
        return ControlClient(address, timeout=2).ping() == 1
    except ProtocolError:
        return False


def test_start_is_refused_while_a_daemon_started_by_hand_holds_the_state_dir(manager):
    address = f"unix:{manager.home}/.local/state/chock/daemon.sock"
    manager.run([CHOCK, "daemon", "install", "--over-package"])
    variables = [f"{key}={value}" for key, value in manager.env.items()]
    by_hand = subprocess.Popen(
        ["nsenter", "-t", str(manager.pid), "-m", "env", "-i", *variables, CHOCK, "daemon"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: _answers(address), what="the daemon started by hand")
        refused = manager.run([CHOCK, "daemon", "start"], check=False)
        assert refused.returncode != 0 and "started another way" in refused.stderr, refused.stderr
        assert manager.unit_state("chock.socket") == "inactive"  # nothing bound over its address
        assert ControlClient(address).ping() == 1  # the daemon by hand still answers there
    finally:
        by_hand.send_signal(signal.SIGTERM)
        by_hand.wait(30)
    manager.run([CHOCK, "daemon", "start"])  # once it is gone, the socket takes over
    assert ControlClient(address).ping() == 1


def test_launch_agents_are_valid_plists_naming_this_terminals_paths(tmp_path, monkeypatch):
    """On macOS the LaunchAgents are written the same way (read back here as launchd reads a plist): an `&` or a
    `<` in a path stays XML, and the state, config and data dirs are this terminal's, as for systemd."""
    from chock.paths import Layout
    from chock.platform.install import Platform, install

    home = tmp_path / "Users" / "ann--b"  # `--` cannot stand in an XML comment
    bin_dir = tmp_path / "R&D <tools>" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "chock").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))  # where install looks for its chock
    monkeypatch.setenv("HOME", str(home))
    state = home / "state & more"
    layout = Layout(config=home / "cfg" / "config.zon", state=state, data=home / "data")
    written = install(layout, Platform(darwin=True))
    agent = plistlib.loads((home / "Library/LaunchAgents/dev.chock.daemon.plist").read_bytes())
    assert len(written) == 2 and agent["ProgramArguments"][0] == str(bin_dir / "chock")
    assert agent["EnvironmentVariables"] == {
        "CHOCK_CONFIG": str(home / "cfg" / "config.zon"), "CHOCK_STATE_DIR": str(state),
        "CHOCK_DATA_DIR": str(home / "data"),
    }  # fmt: skip
    assert agent["Sockets"]["control"]["SockPathName"] == str(state / "daemon.sock")
    assert agent["StandardErrorPath"] == str(state / "daemon.log")
    assert state.is_dir() and os.stat(state).st_mode & 0o777 == 0o700  # before launchd binds in it
    assert install(layout, Platform(darwin=True)) == written  # as written: written again


def _as_an_earlier_install_wrote(manager, name: str) -> None:
    """`name` as `chock daemon install` wrote it before the stamps: its paths put in as they are."""
    home = manager.home
    text = (PACKAGED / name).read_text().replace("/usr/bin/chock", CHOCK)
    for packaged in ("%h/.config/chock/config.zon", "%h/.local/state/chock", "%h/.local/share/chock"):
        text = text.replace(packaged, packaged.replace("%h", str(home)))
    manager.install_unit(name, text, reload=False)


def test_units_an_install_before_the_stamps_wrote_are_replaced_and_removed_as_its_own(manager):
    """An upgrade: the units a `chock daemon install` of an earlier version wrote (no stamp, paths put in as they
    were) are this installation's own, replaced by `install` and removed by `uninstall` without --force."""
    units = ["chock.socket", "chock.service", "chock-serve.socket", "chock-serve.service", "chock-resume.service"]
    for name in units:
        _as_an_earlier_install_wrote(manager, name)
    manager.run([CHOCK, "daemon", "install", "--over-package"])  # no refusal, no --force
    assert not list(manager.unit_dir.glob("*.bak"))
    assert (manager.unit_dir / "chock.service").read_text().startswith("# Written by `chock daemon install`")
    for name in units:  # and the other way: an earlier install's units, removed by this uninstall
        _as_an_earlier_install_wrote(manager, name)
    said = manager.run([CHOCK, "daemon", "uninstall"]).stdout
    assert "left " not in said and not any((manager.unit_dir / name).exists() for name in units), said
