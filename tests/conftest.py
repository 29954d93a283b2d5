"""Shared fixtures: an isolated Chock home per test, a real git project, `chock` run as a real process, and
real daemons on short socket paths (tests/fakes/daemon.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from chock.paths import Layout
from tests.fakes.daemon import Daemon, Daemons, running_daemons
from tests.fakes.projects import make_project

# The tests send Ctrl-C (SIGINT) to the processes they start and expect what a person's Ctrl-C does. A suite started
# in the background by a shell without job control inherits SIGINT ignored, and so would every child; a handler
# here is reset to the default at each child's exec, so each child starts with Ctrl-C live.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class Home:
    """One person's Chock directories, all under the test's tmp dir."""

    root: Path
    layout: Layout
    env: dict[str, str]

    def write_config(self, text: str, mode: int = 0o600) -> Path:
        self.layout.config.parent.mkdir(parents=True, exist_ok=True)
        self.layout.config.write_text(text)
        os.chmod(self.layout.config, mode)
        return self.layout.config

    def write_replay(self, name: str, entries: list[dict]) -> Path:
        path = self.layout.config.parent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"type": "assistant.message", **e}) + "\n" for e in entries))
        return path

    def replay_instance(self, entries: list[dict], name: str = "demo") -> None:
        self.write_replay(f"{name}.jsonl", entries)
        self.write_config(f'.{{ .instances = .{{ .{name} = .{{ .kind = "replay={name}.jsonl" }} }} }}\n')

    def chock(
        self,
        *args: str,
        input: str | None = None,
        cwd: Path | None = None,
        timeout: float = 120,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-P", "-m", "chock", *args], input=input if input is not None else "",
            capture_output=True, text=True, cwd=cwd, timeout=timeout, env={**self.env, **(env or {})},
        )  # fmt: skip

    def spawn(
        self,
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
        **kwargs,
    ) -> subprocess.Popen[str]:
        """`chock ARGS` in the background (run by `prefix`, a command that runs the rest, when given)."""
        return subprocess.Popen(
            [*prefix, sys.executable, "-P", "-m", "chock", *args],
            cwd=cwd, env={**self.env, **(env or {})}, text=True, **kwargs,
        )  # fmt: skip

    def events(self, session_id: str) -> list[dict]:
        """Every complete line of the log, strictly parsed; what follows the last newline is a write that
        has not finished yet (the session may be appending right now)."""
        complete = self.layout.log_path(session_id).read_bytes().split(b"\n")[:-1]
        return [json.loads(line) for line in complete]

    def sessions_by_start(self) -> list[str]:
        """This home's sessions in the order they started (to the millisecond, then id), as Chock orders them:
        two sessions can share an id's second."""
        ids = os.listdir(self.layout.sessions_dir)
        started = {sid: json.loads(self.layout.log_path(sid).read_bytes().split(b"\n", 1)[0])["at"] for sid in ids}
        return sorted(ids, key=lambda sid: (started[sid], sid))

    def only_session(self) -> str:
        ids = sorted(os.listdir(self.layout.sessions_dir))
        assert len(ids) == 1, ids
        return ids[0]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Home:
    return isolated_home(tmp_path, monkeypatch)


def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """A Chock home under `tmp_path`, and the test's environment (through `monkeypatch`) pointing at it."""
    root = tmp_path / "home"
    root.mkdir()
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("CHOCK_", "XDG_", "GIT_", "LISTEN_", "NOTIFY_SOCKET"))
    }  # fmt: skip
    # A short runtime dir: session sockets fall back to it when the state dir's path is long
    # (docs/protocol.md#session-sockets).
    runtime = Path(tempfile.mkdtemp(prefix="chock-test-", dir="/tmp"))
    env.update(
        HOME=str(root),
        CHOCK_CONFIG=str(root / ".config/chock/config.zon"),
        CHOCK_STATE_DIR=str(root / ".local/state/chock"),
        CHOCK_DATA_DIR=str(root / ".local/share/chock"),
        XDG_RUNTIME_DIR=str(runtime),
        CHOCK_KEYSTORE_TIMEOUT="5",
        GIT_CONFIG_NOSYSTEM="1",
    )
    for key in list(os.environ):
        if key.startswith(("CHOCK_", "XDG_", "GIT_")):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Home(root, Layout.from_env(), env)


@pytest.fixture
def daemons(home, tmp_path) -> Iterator[Daemons]:
    """Start real daemons with `daemons.start()`; all of them, and their sessions, are killed at the end."""
    with running_daemons(home, tmp_path) as running:
        yield running


@pytest.fixture
def daemon(daemons) -> Daemon:
    """One real daemon that answers, on a short socket path."""
    return daemons.start()


@pytest.fixture
def project(tmp_path) -> Path:
    return make_project(tmp_path / "project")


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture
def chromium():  # type: ignore[no-untyped-def]
    if not CHROMIUM.exists():
        pytest.fail("needs Debian's chromium at /usr/bin/chromium: apt-get install chromium (scripts/test does)")
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def root(tmp_path) -> Path:
    """An empty directory a tool's workspace is, for calls made straight to the tools (tests/test_tools.py)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


@pytest.fixture
def no_hang():
    """A tool call that blocks fails the test after 30 s instead of hanging it."""

    def late(signum, frame):
        raise AssertionError("the tool call blocked")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
