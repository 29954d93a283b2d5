"""The keychain store at its command boundary (macOS is not here): `security` and the keystore child are faked
with pytest-subprocess, and keyring's macOS failures are mapped from the shapes keyring raises them in."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from chock.credentials import _child
from chock.credentials.refusals import NoLoginKeychain, StoreLocked, StoreTimeout, StoreUnavailable
from chock.credentials.stores.keychain import KeychainStore, keychain_error

CHILD = [sys.executable, "-P", "-m", "chock.credentials._child"]


@pytest.fixture
def mac_home(tmp_path):
    keychains = tmp_path / "Library" / "Keychains"
    keychains.mkdir(parents=True)
    (keychains / "login.keychain-db").write_bytes(b"")
    return tmp_path


def show_info(home) -> list[str]:
    return ["security", "show-keychain-info", str(home / "Library" / "Keychains" / "login.keychain-db")]


def test_unlocked_keychain_reads_through_the_child(fake_process, mac_home):
    fake_process.register(show_info(mac_home), returncode=0)
    requests = []
    fake_process.register(
        CHILD, stdout=json.dumps({"ok": True, "value": "sk-mac"}) + "\n", stdin_callable=requests.append
    )
    assert KeychainStore(home=mac_home).get("work") == "sk-mac"
    request = json.loads(requests[0])
    assert (request["store"], request["op"], request["name"]) == ("keychain", "get", "work")


def test_a_value_to_store_goes_on_stdin_never_argv(fake_process, mac_home):
    fake_process.register(show_info(mac_home), returncode=0)
    requests = []
    fake_process.register(CHILD, stdout=json.dumps({"ok": True}) + "\n", stdin_callable=requests.append)
    KeychainStore(home=mac_home).set("work", "sk-secret-value")
    assert json.loads(requests[0])["value"] == "sk-secret-value"
    assert all("sk-secret-value" not in " ".join(map(str, call)) for call in fake_process.calls)


def test_locked_and_cannot_ask_is_refused_at_once_naming_unlock_keychain(fake_process, mac_home):
    fake_process.register(show_info(mac_home), returncode=36, stderr="security: SecKeychainCopySettings: ...\n")
    with pytest.raises(StoreLocked) as caught:
        KeychainStore(home=mac_home).get("work")
    message = str(caught.value)
    assert "security unlock-keychain" in message and "-p" not in message.split()
    assert len(fake_process.calls) == 1  # the keychain itself was never touched


def test_no_login_keychain_file_is_its_own_message(fake_process, tmp_path):
    with pytest.raises(NoLoginKeychain) as caught:
        KeychainStore(home=tmp_path).check()
    assert "no login keychain" in str(caught.value) and "unlocking cannot help" in str(caught.value)
    assert len(fake_process.calls) == 0


def test_security_saying_no_default_keychain_is_no_login_keychain(fake_process, mac_home):
    words = "security: SecKeychainCopyDefault: A default keychain could not be found.\n"
    fake_process.register(show_info(mac_home), returncode=50, stderr=words)
    with pytest.raises(NoLoginKeychain):
        KeychainStore(home=mac_home).check()


def test_other_failures_repeat_what_security_said(fake_process, mac_home):
    fake_process.register(show_info(mac_home), returncode=51, stderr="security: something else entirely\n")
    with pytest.raises(StoreUnavailable, match="something else entirely"):
        KeychainStore(home=mac_home).check()


def test_security_that_hangs_is_stopped_at_the_bound(mac_home, tmp_path, monkeypatch):
    """A real process this time (pytest-subprocess does not time out a communicate): a `security` that
    never answers, on PATH, with its own helper holding stdout open."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "security").write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")
    (bin_dir / "security").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv(_child.TIMEOUT_ENV, "0.5")
    started = time.monotonic()
    with pytest.raises(StoreTimeout, match=r"0\.5 s"):
        KeychainStore(home=mac_home).check()
    assert time.monotonic() - started < 3


def test_security_runs_with_stdin_closed(mac_home, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Exit 0 only when stdin is /dev/null: nothing the person types can reach it, and it cannot wait on it.
    (bin_dir / "security").write_text('#!/bin/sh\n[ "$(readlink /proc/self/fd/0)" = /dev/null ]\n')
    (bin_dir / "security").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    KeychainStore(home=mac_home).check()


def test_a_locked_answer_from_the_child_is_raised_as_locked(fake_process, mac_home):
    fake_process.register(show_info(mac_home), returncode=0)
    fake_process.register(CHILD, stdout=json.dumps({"error": {"kind": "locked", "message": "it is locked"}}) + "\n")
    with pytest.raises(StoreLocked, match="it is locked"):
        KeychainStore(home=mac_home).get("work")


# keyring's macOS backend wraps api.Error(status, "Unknown Error") in KeyringError / PasswordSetError.
class ApiError(Exception):
    pass


class KeyringError(Exception):
    pass


class KeyringLocked(KeyringError):
    pass


def raised_by_keyring(status: int, words: str = "Unknown Error") -> BaseException:
    try:
        try:
            raise ApiError(status, words)
        except ApiError as api:
            raise KeyringError(f"Can't get password from keychain: {api}") from api
    except KeyringError as exc:
        return exc


def test_interaction_not_allowed_arrives_as_unknown_error_and_is_locked():
    assert isinstance(keychain_error(raised_by_keyring(-25308)), StoreLocked)


def test_no_default_keychain_is_recognised_by_code_and_by_words():
    assert isinstance(keychain_error(raised_by_keyring(-25307)), NoLoginKeychain)
    no_keychain = KeyringError("A default keychain could not be found.")
    assert isinstance(keychain_error(no_keychain), NoLoginKeychain)


def test_keyring_locked_is_locked_and_anything_else_is_the_stores_own_words():
    assert isinstance(keychain_error(KeyringLocked("Can't get password from keychain")), StoreLocked)
    other = keychain_error(raised_by_keyring(-61, "Write permissions error"))
    assert type(other) is StoreUnavailable and "Write permissions error" in str(other)
