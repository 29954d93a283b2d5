"""The secret_service store against a real gnome-keyring on a private D-Bus session bus.

Unlocked: login stores the item where `secret-tool` sees it, lookup finds it, logout removes it. Locked with
nobody to ask: a clear error at once, and nothing written. Locked at a terminal with no display: the prompt
is dismissed. Locked at a terminal with a live prompter nobody answers (gcr-prompter on an Xvfb, reached
through a real pty with CI unset): an error within the bound saying nobody answered.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chock import zon
from chock.config import load_config
from chock.credentials.instance_index import IndexEntry, read_index, write_index
from chock.credentials.login import login, logout
from chock.credentials.lookup import lookup
from chock.credentials.refusals import NobodyAnswered, StoreLocked, StoreUnavailable
from chock.credentials.stores.secret_service import SecretServiceStore
from tests.fakes.keyring_env import keyring_session, xvfb
from tests.fakes.providers import FakeProvider
from tests.fakes.terminal import Terminal

pytestmark = pytest.mark.keyring

KEY = "sk-keyring-7c2e41"
BOUND = 5.0  # CHOCK_KEYSTORE_TIMEOUT, set by the `home` fixture

# A login at a terminal (the pty), with stdin, CI and the store as the environment says.
LOGIN_AT_TERMINAL = """
import json, sys
from chock.paths import Layout
from chock import zon
from chock.config import load_config
from chock.credentials.login import login
from chock.errors import ChockError
layout = Layout.from_env()
try:
    login(layout, load_config(layout.config), **json.loads(sys.argv[1]))
except ChockError as exc:
    print("ERROR", type(exc).__name__, exc, flush=True)
    sys.exit(exc.exit_code)
print("STORED", flush=True)
"""

# secretstorage 3.3 (Debian 12) has no unlock timeout: make this one the same, so only the parent's kill at
# the bound can end a prompt nobody answers.
SECRETSTORAGE_33 = """
import secretstorage.collection as _collection
_unlock = _collection.Collection.unlock
def unlock(self):
    return _unlock(self)
_collection.Collection.unlock = unlock
"""


# The real `chock login`, except that its file store, at its first read of tokens.zon, says PAUSED and waits for
# one more line on stdin before it goes on: a slow disk or a descheduled process, held open for as long as a
# test needs.
PAUSING_LOGIN = """
import sys
import chock.credentials.stores.file as file_store
read = file_store.FileStore.read
def paused_read(self):
    found = read(self)
    file_store.FileStore.read = read
    print("PAUSED", flush=True)
    sys.stdin.readline()
    return found
file_store.FileStore.read = paused_read
from chock.entry import main
sys.argv = ["chock", *sys.argv[1:]]
main()
"""


@pytest.fixture
def keyring(home, tmp_path, monkeypatch):
    with keyring_session(tmp_path / "keyring-home") as session:
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", session.address)
        home.env["DBUS_SESSION_BUS_ADDRESS"] = session.address
        yield session


def piped(home, provider: str, secret: str = KEY, **kwargs):
    return login(
        home.layout, load_config(home.layout.config), provider, password_method="stdin", interactive=False,
        stdin=io.StringIO(secret + "\n"), environ={}, **kwargs,
    )  # fmt: skip


def test_login_lookup_secret_tool_and_logout_for_real(home, keyring):
    home.write_config(".{}\n")  # no store named: the OS keystore, secret_service on Linux
    with FakeProvider(kind="anthropic", key=KEY) as fake:
        result = piped(home, f"anthropic={fake.address}", name="work")
    assert result.store == "secret_service"
    assert read_index(home.layout)["work"].stored == "secret_service"
    assert not home.layout.tokens_path.exists()
    assert keyring.lookup("work") == KEY
    config = load_config(home.layout.config)
    assert lookup(home.layout, config, "work", can_prompt=False) == KEY
    logout(home.layout, config, "work")
    assert keyring.lookup("work") is None
    assert read_index(home.layout) == {}
    assert lookup(home.layout, config, "work", can_prompt=False) is None


def test_store_interface_for_real(keyring):
    store = SecretServiceStore()
    store.check()
    assert store.get("nobody") is None
    store.set("one", "sk-1")
    store.set("one", "sk-2")  # replaces
    assert store.get("one") == "sk-2"
    store.delete("one")
    store.delete("one")  # nothing stored is not an error
    assert store.get("one") is None


def test_locked_with_nobody_to_ask_is_an_error_at_once_and_writes_nothing(home, keyring):
    home.write_config('.{ .credentials = .{ .store = "secret_service" } }\n')
    keyring.lock()
    started = time.monotonic()
    with pytest.raises(StoreLocked) as caught:
        piped(home, "aiand", check=lambda *args: pytest.fail("the provider was asked before the store was checked"))
    assert time.monotonic() - started < 3
    message = str(caught.value)
    assert "locked" in message and "no way to ask" in message
    assert "gnome-keyring-daemon --unlock" in message and '.store = "file"' in message
    assert KEY not in message
    assert not home.layout.instances_path.exists()
    assert not home.layout.tokens_path.exists()


def test_a_locked_indexed_store_fails_the_lookup_rather_than_skipping_to_config(home, keyring):
    home.write_config('.{ .instances = .{ .work = .{ .kind = "anthropic", .token = "sk-config" } } }\n')
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "secret_service")})
    keyring.lock()
    with pytest.raises(StoreLocked):
        lookup(home.layout, load_config(home.layout.config), "work", can_prompt=False)


def test_locked_at_a_terminal_with_no_display_the_prompt_is_dismissed(keyring, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    keyring.lock()
    started = time.monotonic()
    with pytest.raises(StoreLocked) as caught:
        SecretServiceStore(can_prompt=True).get("work")
    assert time.monotonic() - started < 3
    assert "dismissed or could not be shown" in str(caught.value)


def test_no_bus_is_an_error_naming_the_file_store(monkeypatch):
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
    with pytest.raises(StoreUnavailable) as caught:
        SecretServiceStore().check()
    assert "D-Bus" in str(caught.value) and '.store = "file"' in str(caught.value)


def run_in_pty(env: dict[str, str], args: dict, timeout: float) -> tuple[int, str, float]:
    """A login at a real terminal: its exit status, what it printed, and how long it took."""
    started = time.monotonic()
    terminal = Terminal([sys.executable, "-c", LOGIN_AT_TERMINAL, json.dumps(args)], env)
    try:
        code = terminal.exit_code(timeout)
    finally:
        terminal.close()
    return code, terminal.text(), time.monotonic() - started


@pytest.mark.parametrize("secretstorage", ["3.5", "3.3"])
def test_a_live_prompter_nobody_answers_is_an_error_within_the_bound(home, tmp_path, secretstorage):
    home.write_config('.{ .credentials = .{ .store = "secret_service" } }\n')
    env = {key: value for key, value in home.env.items() if key not in ("CI", "DISPLAY")}
    if secretstorage == "3.3":
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SECRETSTORAGE_33)
        env["PYTHONPATH"] = str(site) + os.pathsep + env.get("PYTHONPATH", "")
    with xvfb() as display, keyring_session(tmp_path / "keyring-home", display=display) as keyring:
        keyring.lock()
        env["DBUS_SESSION_BUS_ADDRESS"] = keyring.address
        with FakeProvider(kind="openai", key=None) as fake:
            code, output, took = run_in_pty(env, {"provider_text": f"aiand={fake.address}"}, timeout=BOUND + 20)
            assert fake.requests == []
        assert keyring.is_locked()
    assert code != 0, output
    assert "NobodyAnswered" in output, output
    assert "nobody answered its unlock dialog" in output
    assert "typing is hidden" not in output  # the store is checked before the secret is asked for
    assert took < BOUND + 5, took
    assert not home.layout.instances_path.exists()
    assert NobodyAnswered.kind == "nobody_answered"


def flock_holder(path: Path) -> int | None:
    """The pid holding a flock on `path`, as the kernel lists it in /proc/locks (None: nobody)."""
    inode = str(path.stat().st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()  # 1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF  ("->" after "1:" for a waiter)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == inode:
            return int(fields[4])
    return None


def test_a_replacing_login_removes_the_old_credential_under_the_lock_so_a_concurrent_login_keeps_its_own(
    home, keyring, tmp_path
):
    """Login A moves "work" from the file store to the keyring and then removes it from tokens.zon; login B
    stores "b" in tokens.zon meanwhile. A's removal reads and rewrites tokens.zon: done outside the login lock,
    it would write back the copy it read before B's, and "b" would be lost though the index says it is there."""
    home.write_config('.{ .credentials = .{ .store = "secret_service" } }\n')
    file_config = tmp_path / "file-store.zon"
    file_config.write_text('.{ .credentials = .{ .store = "file" } }\n')
    as_file = {"CHOCK_CONFIG": str(file_config), "DBUS_SESSION_BUS_ADDRESS": keyring.address}
    env = {**home.env, "DBUS_SESSION_BUS_ADDRESS": keyring.address}
    with FakeProvider(kind="openai", key=None) as fake:
        provider = f"openai-compat={fake.address}"
        first = home.chock("login", "--provider", provider, "--name", "work", "--password-method", "stdin",
                           input="sk-work-old\n", env=as_file)  # fmt: skip
        assert first.returncode == 0, first.stderr
        a = subprocess.Popen(
            [sys.executable, "-c", PAUSING_LOGIN, "login", "--provider", provider, "--name", "work", "--replace",
             "--password-method", "stdin"],
            env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        b = None
        try:
            assert a.stdin is not None and a.stdout is not None
            a.stdin.write("sk-work-new\n")
            a.stdin.flush()
            assert a.stdout.readline().strip() == "PAUSED"  # A read tokens.zon to take "work" out of it
            b = home.spawn(
                "login", "--provider", provider, "--name", "b", "--password-method", "stdin", env=as_file,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            assert b.stdin is not None
            b.stdin.write("sk-b\n")
            b.stdin.flush()
            # B finishes, or it waits on the lock A holds: either way, A may go on.
            deadline = time.monotonic() + 60
            while b.poll() is None and flock_holder(home.layout.login_lock_path) != a.pid:
                assert time.monotonic() < deadline, "login B neither finished nor waited on login A's lock"
                time.sleep(0.02)
            a_err = a.communicate("go on\n", timeout=60)[1]
            b_err = b.communicate(timeout=60)[1]
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
    assert (a.returncode, b.returncode) == (0, 0), (a_err, b_err)
    assert keyring.lookup("work") == "sk-work-new"
    assert zon.load(home.layout.tokens_path) == {"b": "sk-b"}
    assert {name: entry.stored for name, entry in read_index(home.layout).items()} == {
        "work": "secret_service",
        "b": "file",
    }
    assert lookup(home.layout, load_config(file_config), "b", can_prompt=False) == "sk-b"
