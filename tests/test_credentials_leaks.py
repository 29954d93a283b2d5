"""No credential in argv, the environment, a file under the state dir, an error message or a repr.

A login and a lookup against a real gnome-keyring, with every child process watched as it starts: its argv,
its environment as given and as the kernel shows it (/proc/<pid>/cmdline, /proc/<pid>/environ), and what it
was sent on stdin, which is where the credential must be and the only place.
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from chock.config import load_config
from chock.credentials.login import LoginResult, login
from chock.credentials.lookup import lookup, sources
from chock.credentials.refusals import CredentialError
from chock.credentials.stores import open_store
from chock.providers import ProviderError
from tests.fakes.keyring_env import keyring_session
from tests.fakes.providers import FakeProvider

SECRET = "sk-leak-canary-91d3f0a7"
REAL_POPEN = subprocess.Popen


class Watched:
    def __init__(self) -> None:
        self.started: list[dict] = []
        self.stdin: list[bytes] = []

    def popen(self):
        watched = self

        class Spy(REAL_POPEN):  # type: ignore[misc, valid-type]
            def __init__(self, args, *rest, **kwargs):
                super().__init__(args, *rest, **kwargs)
                proc = Path(f"/proc/{self.pid}")
                watched.started.append(
                    {
                        "argv": [str(a) for a in args],
                        "env": dict(kwargs.get("env") or {}),
                        "cmdline": (proc / "cmdline").read_bytes(),
                        "environ": (proc / "environ").read_bytes(),
                    }
                )

            def communicate(self, input=None, timeout=None):
                if input:
                    watched.stdin.append(input if isinstance(input, bytes) else input.encode())
                return super().communicate(input, timeout)

        return Spy


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and not path.is_symlink()]


@pytest.fixture
def watched(monkeypatch) -> Watched:
    spy = Watched()
    monkeypatch.setattr(subprocess, "Popen", spy.popen())
    return spy


def test_a_keyring_login_and_lookup_leave_the_credential_nowhere_but_the_keyring(home, tmp_path, monkeypatch, watched):
    home.write_config('.{ .credentials = .{ .store = "secret_service" } }\n')
    with keyring_session(tmp_path / "keyring-home") as keyring, FakeProvider(kind="anthropic", key=SECRET) as fake:
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", keyring.address)
        result = login(
            home.layout, load_config(home.layout.config), f"anthropic={fake.address}", name="work",
            password_method="stdin", interactive=False, stdin=io.StringIO(SECRET + "\n"), environ={},
        )  # fmt: skip
        found = lookup(home.layout, load_config(home.layout.config), "work", can_prompt=False)
        assert found == SECRET
        assert keyring.lookup("work") == SECRET

        # Every child: not in argv, not in its environment (as given, and as the kernel shows it).
        assert len(watched.started) >= 3  # check + set (and the undo probe) + the lookup's get
        canary = SECRET.encode()
        for child in watched.started:
            assert SECRET not in " ".join(child["argv"])
            assert all(SECRET not in value for value in child["env"].values())
            assert canary not in child["cmdline"]
            assert canary not in child["environ"]
        assert SECRET not in os.environ.values()
        # ...but on stdin: that is how it got to the keyring.
        assert any(canary in sent for sent in watched.stdin)

        # No file of Chock's, and no file of the keyring's, holds it in the clear.
        for path in files_under(home.root) + files_under(keyring.home):
            assert canary not in path.read_bytes(), path

        # Nor does any repr that a log line or a traceback might show.
        assert SECRET not in repr(result) and isinstance(result, LoginResult)
        assert SECRET not in repr(open_store("secret_service", home.layout))
        assert SECRET not in repr(sources(home.layout, load_config(home.layout.config)))
        assert SECRET not in repr(load_config(home.layout.config))


def test_error_messages_never_carry_the_credential(home, monkeypatch):
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')

    # The provider rejects it (and a lax one echoes it back).
    with FakeProvider(kind="openai", key="sk-something-else") as fake, pytest.raises(ProviderError) as caught:
        login(home.layout, load_config(home.layout.config), f"openai-compat={fake.address}",
              password_method="stdin", interactive=False, stdin=io.StringIO(SECRET + "\n"), environ={})  # fmt: skip
    assert SECRET not in str(caught.value)

    def echoing_check(kind, address, credential):
        raise ProviderError(f"{address}: HTTP 401: invalid key {credential}")

    with pytest.raises(ProviderError) as caught:
        login(home.layout, load_config(home.layout.config), "aiand", password_method="stdin", interactive=False,
              stdin=io.StringIO(SECRET + "\n"), environ={}, check=echoing_check)  # fmt: skip
    assert SECRET not in str(caught.value) and "[redacted]" in str(caught.value)

    # The index cannot be written after the credential was: the undo's message holds no credential.
    def broken(layout, entries):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("chock.credentials.login.write_index", broken)
    with pytest.raises(CredentialError) as caught:
        login(home.layout, load_config(home.layout.config), "aiand", password_method="stdin", interactive=False,
              stdin=io.StringIO(SECRET + "\n"), environ={}, check=lambda *args: None)  # fmt: skip
    assert SECRET not in str(caught.value)
    assert not (home.layout.tokens_path.exists() and SECRET in home.layout.tokens_path.read_text())


def test_a_file_store_login_leaves_nothing_under_the_state_dir(home):
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')
    login(home.layout, load_config(home.layout.config), "aiand", password_method="stdin", interactive=False,
          stdin=io.StringIO(SECRET + "\n"), environ={}, check=lambda *args: None)  # fmt: skip
    assert lookup(home.layout, load_config(home.layout.config), "aiand") == SECRET
    holding = [path for path in files_under(home.root) if SECRET.encode() in path.read_bytes()]
    assert holding == [home.layout.tokens_path]  # the file store itself, 0600, and nothing else
    assert home.layout.tokens_path.stat().st_mode & 0o077 == 0
