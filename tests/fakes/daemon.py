"""A real `chock daemon` for tests, on a short socket path, and the end of whatever sessions a test left.

A unix socket path must stay under 108 bytes and a pytest tmp dir is long, so every daemon listens in a
directory of its own under /tmp. `Daemons.start()` returns once the daemon answers a ping (or fails naming
its exit code and stderr); `Daemons.spawn()` starts one without waiting, for a daemon meant to refuse.

    def test_something(home, project, daemons):     # the fixture is in tests/conftest.py
        daemon = daemons.start()
        daemon.client.call(dp.StartRequest(project, "a task"))

At the end every daemon is killed, then every session still holding its log's lock, with its process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chock.control.client import ControlClient
from chock.control.framing import ProtocolError
from chock.log.reader import owner_alive
from tests.fakes.wait import wait_until

READY_SECONDS = 30.0


def short_dir(mode: int = 0o700) -> Path:
    """A fresh directory under /tmp, short enough for any socket a test puts in it."""
    directory = Path(tempfile.mkdtemp(prefix="chockd-", dir="/tmp"))
    os.chmod(directory, mode)
    return directory


@dataclass
class Daemon:
    process: subprocess.Popen[str]
    socket: Path
    stderr_path: Path
    tcp: str | None = None  # host:port, when started with --host

    @property
    def address(self) -> str:
        return f"unix:{self.socket}"

    @property
    def client(self) -> ControlClient:
        return ControlClient(self.address, timeout=30)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def answers(self) -> bool:
        """Whether a ping is answered now; a daemon that exited is an AssertionError carrying its stderr."""
        if self.process.poll() is not None:
            raise AssertionError(f"the daemon exited {self.process.returncode}: {self.stderr}")
        try:
            return self.client.ping() == 1
        except ProtocolError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(15)

    def kill(self) -> None:
        """SIGKILL: the daemon goes away without a word (its sessions live on)."""
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.wait(10)


@dataclass
class Daemons:
    home: Any  # tests.conftest.Home
    tmp: Path
    started: list[Daemon] = field(default_factory=list)
    state_dirs: list[Path] = field(default_factory=list)  # other than the home's, from a daemon's env

    def spawn(
        self, *args: str, socket_path: Path | None = None, prefix: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> Daemon:
        """`chock daemon --socket PATH ARGS` (run by `prefix`, when given; `env` over the home's), not waited for;
        killed at the end like every other."""
        path = socket_path or short_dir() / "d.sock"
        if env and env.get("CHOCK_STATE_DIR"):
            self.state_dirs.append(Path(env["CHOCK_STATE_DIR"]))
        stderr_path = self.tmp / f"daemon-{len(self.started)}-{time.monotonic_ns()}.err"
        process = self.home.spawn(
            "daemon", "--socket", str(path), *args, prefix=prefix, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(stderr_path, "w"),  # noqa: SIM115
        )  # fmt: skip
        return self.add(Daemon(process, path, stderr_path))

    def add(self, daemon: Daemon) -> Daemon:
        """A daemon the test started its own way (socket activation), to be killed at the end."""
        self.started.append(daemon)
        return daemon

    def start(
        self, *args: str, socket_path: Path | None = None, prefix: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> Daemon:
        """A daemon that answers: waited for until it does; with --host, its TCP address read from stdout."""
        daemon = self.spawn(*args, socket_path=socket_path, prefix=prefix, env=env)
        wait_until(daemon.answers, READY_SECONDS, f"the daemon at {daemon.address} to answer")
        if "--host" in args:
            line = daemon.process.stdout.readline()
            assert line.startswith("listening on "), line
            daemon.tcp = line.split()[-1]
        return daemon

    def cleanup(self) -> None:
        for daemon in self.started:
            daemon.kill()
        kill_sessions(self.home)
        for state in self.state_dirs:
            kill_sessions(self.home, state / "sessions")


@contextlib.contextmanager
def running_daemons(home: Any, tmp: Path) -> Iterator[Daemons]:
    daemons = Daemons(home, tmp)
    try:
        yield daemons
    finally:
        daemons.cleanup()


def kill_sessions(home: Any, sessions: Path | None = None) -> None:
    """Every session still holding its log's lock (in the home's state dir, or `sessions`) is killed, with its
    process group."""
    sessions = sessions or home.layout.sessions_dir
    if not sessions.exists():
        return
    for name in os.listdir(sessions):
        log = sessions / name / "log.jsonl"
        if not log.exists() or not owner_alive(log):
            continue
        events = [json.loads(line) for line in log.read_bytes().split(b"\n")[:-1]]
        pids = [e.get("pid") for e in events if e["type"] in ("session.start", "session.adopt")]
        for pid in filter(None, pids[-1:]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
