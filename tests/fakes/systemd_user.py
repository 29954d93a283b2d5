"""A real systemd user manager for tests, on a machine whose PID 1 is not systemd.

    with user_manager() as manager:
        manager.install_unit("demo.service", "[Service]\\nExecStart=/bin/sleep 60\\n")
        manager.systemctl("start", "demo.service")
        assert manager.unit_state("demo.service") == "active"
        manager.run(["systemd-run", "--user", "--scope", "true"])   # anything that needs the manager's mounts
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(manager.runtime_dir))  # chock's own D-Bus code, from here

The recipe (measured on Debian 12, systemd 252, as root):
- The spawner script first moves ITSELF into a cgroup of its own in every hierarchy systemd uses here
  (`/sys/fs/cgroup/systemd`, the named v1 hierarchy, and `/sys/fs/cgroup/unified`, the v2 one, on this
  hybrid machine; `/sys/fs/cgroup` itself on a pure v2 machine); otherwise the manager takes the root cgroup
  for its own and moves everything into its slices. It then becomes `<cgroup>/init.scope`, units land in
  `<cgroup>/app.slice/…`.
- `unshare -m --propagation private`, a tmpfs on /run/systemd and /run/systemd/system in it: what makes a
  manager started by hand believe the machine was booted with systemd, without touching the real /run.
  systemctl's own "booted" check reads that directory, so systemctl runs inside the namespace (`nsenter -m`).
- HOME and a fresh 0700 XDG_RUNTIME_DIR are short temporary directories (socket paths stay far below 108
  bytes). The private socket `$XDG_RUNTIME_DIR/systemd/private` appearing means the manager is up.
- Everything that is a socket in the runtime dir (the private socket, `bus` from dbus-user-session's
  dbus.socket, the notify socket) is reachable from outside the namespace as well, so tests can talk D-Bus
  to the manager directly.
- No journald unless asked (`user_manager(journal=True)`): then a real systemd-journald runs in the same
  namespace, on a tmpfs at /run/log, started before the manager so its units' output reaches it; read it
  with `manager.journal("SYSLOG_IDENTIFIER=…")`. Without it, units meant to say something log with
  `StandardOutput=append:<file>`.
- Close: SIGTERM to the manager by pid (it stops every unit, scopes included), then SIGKILL to whatever is
  still in its cgroups, then rmdir the cgroup tree bottom-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SYSTEMD = "/usr/lib/systemd/systemd"
JOURNALD = "/usr/lib/systemd/systemd-journald"
# Where that journald keeps its (volatile) journal, inside the namespace: `journalctl -D` reads it there.
JOURNAL_DIR = "/run/log/journal"
READY_SECONDS = 20.0
STOP_SECONDS = 20.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The Debian packages these come from, for the message when one is missing: systemd (the manager,
# systemctl, systemd-run, systemd-analyze), util-linux (unshare, nsenter), dbus-user-session (dbus.socket).
PACKAGES = "systemd util-linux dbus-user-session"
# What the manager must not inherit from the test's own environment.
_DROPPED = ("XDG_", "DBUS_", "LISTEN_", "NOTIFY_SOCKET", "WATCHDOG_", "INVOCATION_ID", "JOURNAL_STREAM", "MANAGERPID")

# $1 is the manager binary, $2 journald's or empty, the rest the cgroup directories to create and enter.
_SCRIPT = """
set -e
systemd="$1"; journald="$2"; shift 2
for dir in "$@"; do mkdir -p "$dir"; echo $$ > "$dir/cgroup.procs"; done
mkdir -p /run/systemd /run/log
exec unshare -m --propagation private sh -c '
  set -e
  mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system
  if [ -n "$1" ]; then
    mount -t tmpfs tmpfs /run/log && mkdir -p /run/log/journal
    "$1" </dev/null &
    tries=0
    until [ -S /run/systemd/journal/stdout ] && [ -S /run/systemd/journal/socket ]; do
      tries=$((tries + 1)); [ $tries -lt 1000 ] || { echo "systemd-journald did not start" >&2; exit 1; }
      sleep 0.02
    done
  fi
  exec "$0" --user' "$systemd" "$journald"
"""


def require() -> None:
    """Fail, not skip, when a real component is missing: a skipped real component proves nothing."""
    missing = [tool for tool in ("unshare", "nsenter", "systemctl") if shutil.which(tool) is None]
    if not os.access(SYSTEMD, os.X_OK):
        missing.append(SYSTEMD)
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed; install the Debian packages {PACKAGES}")
    if os.geteuid() != 0:
        pytest.fail("the systemd user manager testbed needs root (it creates cgroups and mount namespaces)")


def cgroup_hierarchies() -> list[Path]:
    """Where a cgroup of our own must be made: the named v1 `systemd` and the v2 `unified` on a hybrid
    machine, only /sys/fs/cgroup on a pure v2 one (read from /proc/self/mounts, not guessed)."""
    mounts: dict[Path, str] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _source, target, fstype, options, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            mounts[Path(target)] = options if fstype == "cgroup" else "cgroup2"
    if mounts.get(CGROUP_ROOT) == "cgroup2":
        return [CGROUP_ROOT]
    found = [path for path, options in mounts.items() if "name=systemd" in options.split(",")]
    found += [path for path, kind in mounts.items() if kind == "cgroup2"]
    if not found:
        pytest.fail("no systemd cgroup hierarchy is mounted (neither name=systemd nor cgroup2)")
    return found


@dataclass
class UserManager:
    """A running `systemd --user`: its pid, its HOME and runtime dir, and helpers that run inside it."""

    pid: int
    home: Path
    runtime_dir: Path
    cgroups: list[Path]
    process: subprocess.Popen[bytes]
    root: Path
    output: Path
    _closed: bool = field(default=False, repr=False)

    @property
    def private_socket(self) -> Path:
        return self.runtime_dir / "systemd" / "private"

    @property
    def bus_address(self) -> str:
        """The session bus that dbus-user-session's dbus.socket starts on demand (the manager joins it)."""
        if not (self.runtime_dir / "bus").exists():
            pytest.fail("the user manager has no dbus.socket; install the Debian package dbus-user-session")
        return f"unix:path={self.runtime_dir / 'bus'}"

    @property
    def unit_dir(self) -> Path:
        return self.home / ".config" / "systemd" / "user"

    @property
    def env(self) -> dict[str, str]:
        """The test's environment as a process under this manager sees it (no session bus named)."""
        base = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED)}
        return {**base, "HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.runtime_dir)}

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 30,
        input: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside the manager's mount namespace with HOME and XDG_RUNTIME_DIR set."""
        variables = [f"{key}={value}" for key, value in {**self.env, **(env or {})}.items()]
        done = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-m", "env", "-i", *variables, *argv],
            input=input if input is not None else "", capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and done.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def systemctl(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return self.run(["systemctl", "--user", "--no-pager", *args], check=check, timeout=timeout)

    def install_unit(self, name: str, text: str, *, reload: bool = True) -> Path:
        """Write a unit (or `name.d/drop-in.conf`) under ~/.config/systemd/user and daemon-reload."""
        path = self.unit_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if reload:
            self.systemctl("daemon-reload")
        return path

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        done = self.systemctl("show", unit, *(f"--property={name}" for name in properties))
        return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)

    def unit_state(self, unit: str) -> str:
        """ActiveState ("active", "inactive", "failed", "activating", …)."""
        return self.show(unit, "ActiveState")["ActiveState"]

    def wait_for_state(self, unit: str, state: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while (current := self.unit_state(unit)) != state:
            if time.monotonic() > deadline:
                status = self.systemctl("status", unit, check=False).stdout
                pytest.fail(f"{unit} is {current}, not {state}, after {timeout:g} s:\n{status}")
            time.sleep(0.05)

    def list_units(self, pattern: str) -> list[str]:
        done = self.systemctl("list-units", "--all", "--plain", "--no-legend", pattern)
        return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]

    def cgroup_of(self, pid: int) -> str:
        """The process's cgroup path as systemd sees it (the `name=systemd` line, else the v2 `0::` line)."""
        lines = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
        return lines.get("name=systemd", lines.get("", "?"))

    def journal(self, *matches: str) -> list[dict[str, str]]:
        """Every journal entry matching `matches` (`FIELD=value`), as journalctl's JSON (a manager started
        with `journal=True`). Binary fields come as lists of bytes: a record of chock's is text."""
        done = self.run(["journalctl", "-D", JOURNAL_DIR, "-o", "json", "--no-pager", *matches], check=False)
        if done.returncode not in (0, 1) or (done.stderr.strip() and not done.stdout):
            pytest.fail(f"journalctl failed ({done.returncode}): {done.stderr}")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait()
        for cgroup in self.cgroups:
            _remove_cgroup(cgroup)
        shutil.rmtree(self.root, ignore_errors=True)


def _remove_cgroup(top: Path) -> None:
    """Kill what is left in the tree (nothing, normally: the manager stops its units) and rmdir it."""
    if not top.exists():
        return
    deadline = time.monotonic() + STOP_SECONDS
    while True:
        left = [int(pid) for procs in top.rglob("cgroup.procs") for pid in procs.read_text().split()]
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {left} are still in {top}")
        time.sleep(0.05)
    for directory in sorted((path for path in top.rglob("*") if path.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()
    top.rmdir()


@contextlib.contextmanager
def user_manager(*, journal: bool = False, prepare: Callable[[Path], None] | None = None) -> Iterator[UserManager]:
    """Start a real `systemd --user` in its own cgroup and mount namespace; always stopped and removed after.

    With `journal`, a real systemd-journald runs in the same namespace first (a tmpfs on /run/log), so the
    manager connects its units' output to it and python-systemd's `journal.send` reaches it. `prepare` is
    called with the manager's HOME before it starts (units enabled there start with the manager).
    """
    require()
    if journal and not os.access(JOURNALD, os.X_OK):
        pytest.fail(f"{JOURNALD} not installed; install the Debian package systemd")
    root = Path(tempfile.mkdtemp(prefix="chock-um-", dir="/tmp"))
    home, runtime = root / "home", root / "run"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    if prepare is not None:
        prepare(home)
    output = root / "manager.log"
    name = f"chock-test-{os.getpid()}-{root.name.removeprefix('chock-um-')}"
    cgroups = [hierarchy / name for hierarchy in cgroup_hierarchies()]
    env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED)}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    with output.open("wb") as log:
        process = subprocess.Popen(
            ["sh", "-c", _SCRIPT, "spawn-user-manager", SYSTEMD, JOURNALD if journal else "", *map(str, cgroups)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=home, start_new_session=True,
        )  # fmt: skip
    # The shell execs unshare, which execs sh, which execs systemd: one pid all the way down.
    manager = UserManager(process.pid, home, runtime, cgroups, process, root, output)
    try:
        _wait_ready(manager)
        yield manager
    finally:
        manager.close()


def _wait_ready(manager: UserManager) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while not manager.private_socket.exists():
        if manager.process.poll() is not None or time.monotonic() > deadline:
            log = manager.output.read_text(errors="replace")
            pytest.fail(
                f"systemd --user did not create {manager.private_socket} (exit {manager.process.poll()}):\n{log}"
            )
        time.sleep(0.02)
    # The socket exists a moment before the manager answers on it: systemctl is the judge.
    while manager.systemctl("is-system-running", check=False).stdout.strip() not in ("running", "degraded"):
        if time.monotonic() > deadline:
            pytest.fail(f"systemd --user did not finish starting:\n{manager.systemctl('status', check=False).stdout}")
        time.sleep(0.05)
