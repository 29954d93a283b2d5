"""A real gnome-keyring Secret Service on a private D-Bus session bus, for tests.

    with keyring_session(tmp_path / "keyring") as keyring:
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", keyring.address)
        ...                          # chock's secret_service store now talks to this keyring
        keyring.lock()               # Collection(conn).lock(): the collection is locked, as after a screen lock
        keyring.lookup("work")       # what `secret-tool lookup service chock username work` sees

`dbus-run-session` runs a small shell script that unlocks a fresh `login` collection with a known password
(`--unlock` exits 0 even on a wrong password, so readiness is checked with `is_locked()`), prints the bus
address, and holds the bus open until its stdin closes. Closing it ends the bus, and gnome-keyring with it.
`display` puts DISPLAY in the bus's activation environment, so a D-Bus-activated gcr-prompter draws its
unlock dialog there (on an Xvfb nobody looks at).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PASSWORD = "pw"
READY_SECONDS = 15.0
TOOLS = ("dbus-run-session", "gnome-keyring-daemon", "secret-tool")
# The Debian packages these come from, for the message when one is missing.
PACKAGES = "dbus gnome-keyring libsecret-tools gcr xvfb"

_SCRIPT = """
export HOME="$1"
printf %s "$2" | gnome-keyring-daemon --unlock --components=secrets >/dev/null
echo "$DBUS_SESSION_BUS_ADDRESS"
exec cat >/dev/null
"""


def require(*tools: str) -> None:
    """Fail, not skip, when a real component is missing: a skipped real component proves nothing."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed; install the Debian packages {PACKAGES}")


@dataclass
class KeyringSession:
    address: str
    home: Path
    process: subprocess.Popen[str]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DBUS_SESSION_BUS_ADDRESS": self.address}

    @contextlib.contextmanager
    def collection(self) -> Iterator[object]:
        from jeepney.io.blocking import open_dbus_connection
        from secretstorage.collection import Collection

        connection = open_dbus_connection(bus=self.address)
        try:
            yield Collection(connection)
        finally:
            connection.close()

    def is_locked(self) -> bool:
        with self.collection() as collection:
            return bool(collection.is_locked())  # type: ignore[attr-defined]

    def lock(self) -> None:
        with self.collection() as collection:
            collection.lock()  # type: ignore[attr-defined]
        assert self.is_locked()

    def lookup(self, name: str, service: str = "chock") -> str | None:
        """`secret-tool lookup service chock username NAME`: None when there is no such item."""
        done = subprocess.run(
            ["secret-tool", "lookup", "service", service, "username", name],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
        return done.stdout if done.returncode == 0 else None

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@contextlib.contextmanager
def keyring_session(home: Path, *, display: str | None = None) -> Iterator[KeyringSession]:
    require(*TOOLS)
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY")}
    if display is not None:
        env["DISPLAY"] = display
    process = subprocess.Popen(
        ["dbus-run-session", "--", "sh", "-c", _SCRIPT, "keyring", str(home), PASSWORD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert process.stdout is not None
    address = process.stdout.readline().strip()
    session = KeyringSession(address, home, process)
    try:
        if not address:
            pytest.fail("dbus-run-session printed no bus address")
        _wait_unlocked(session)
        yield session
    finally:
        session.close()


def _wait_unlocked(session: KeyringSession) -> None:
    deadline = time.monotonic() + READY_SECONDS
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if not session.is_locked():
                return
            last = RuntimeError("the login collection is still locked")
        except Exception as exc:  # not on the bus yet
            last = exc
        time.sleep(0.05)
    pytest.fail(f"gnome-keyring did not come up unlocked within {READY_SECONDS:g} s: {last}")


@contextlib.contextmanager
def xvfb() -> Iterator[str]:
    """A virtual X display nobody looks at; yields its DISPLAY (":N")."""
    require("Xvfb")
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_end), "-nolisten", "tcp", "-screen", "0", "640x480x24"],
        pass_fds=(write_end,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(write_end)
    try:
        with os.fdopen(read_end) as numbers:
            number = numbers.readline().strip()
        if not number:
            pytest.fail("Xvfb did not say which display it took")
        yield f":{number}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
