"""A real `chock login` stopped (SIGSTOP) while it holds the login lock: the next login waits 5 s and says
exactly "another chock login is running"; after `kill -9` of the first, the next login succeeds at once
(the lock is the kernel's own, so a login that is killed releases it at once:
docs/credentials.md#the-login-lock)."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import time

from chock.credentials.login_lock import BUSY_MESSAGE
from tests.fakes.keyring_env import keyring_session
from tests.fakes.providers import FakeProvider

KEY = "sk-stopped-login-7e21"


def _login(home, env, address, name, **kwargs) -> subprocess.Popen[str]:
    return home.spawn(
        "login", "--provider", f"openai-compat={address}", "--name", name, "--password-method", "stdin",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, **kwargs,
    )  # fmt: skip


def _held(lock_path) -> bool:
    """Whether another process holds the login lock (probed without keeping it)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _stop_under_the_lock(home, env, address) -> subprocess.Popen[str]:
    """Start logins until one is caught holding the lock, and stop it there."""
    for attempt in range(10):
        first = _login(home, env, address, f"first{attempt}")
        first.stdin.write(KEY + "\n")
        first.stdin.close()
        while first.poll() is None:
            if _held(home.layout.login_lock_path):
                os.kill(first.pid, signal.SIGSTOP)
                if _held(home.layout.login_lock_path):
                    return first
                os.kill(first.pid, signal.SIGCONT)
        first.wait()
    raise AssertionError("no login was caught holding the lock in ten tries")


def test_a_stopped_login_holds_the_lock_and_a_killed_one_frees_it(home):
    home.write_config('.{ .credentials = .{ .store = "secret_service" } }\n')
    with FakeProvider(kind="openai", key=KEY) as fake, keyring_session(home.root / "keyring") as keyring:
        env = {"DBUS_SESSION_BUS_ADDRESS": keyring.address}
        first = _stop_under_the_lock(home, env, fake.address)
        try:
            second = _login(home, env, fake.address, "second")
            started = time.monotonic()
            _, err = second.communicate(KEY + "\n", timeout=60)
            waited = time.monotonic() - started
            assert second.returncode != 0
            assert BUSY_MESSAGE in err and "second" not in err and KEY not in err
            assert 4.5 <= waited < 10, waited
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
        third = _login(home, env, fake.address, "third")
        started = time.monotonic()
        _, err = third.communicate(KEY + "\n", timeout=60)
        assert third.returncode == 0, err
        assert time.monotonic() - started < 4  # no wait for the lock: the kernel let go with the process
        assert keyring.lookup("third") == KEY
        assert "second" not in home.layout.instances_path.read_text()
