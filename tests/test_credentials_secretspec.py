"""The secretspec store: reads through the real SecretSpec SDK (dotenv provider), writes through the CLI.

The `secretspec` CLI is a Rust binary that is not packaged here, so writes are tested at the command boundary:
with pytest-subprocess for SecretSpec's refusals, and with a stand-in `secretspec` executable on PATH for a
login that goes all the way through (written by the stand-in, read back by the real SDK).
"""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from chock.config import load_config
from chock.credentials.instance_index import IndexEntry, read_index, write_index
from chock.credentials.login import login
from chock.credentials.lookup import lookup
from chock.credentials.refusals import SecretSpecRefused, StoreUnavailable
from chock.credentials.stores.secretspec import SecretSpecStore, env_name

MANIFEST = """
[project]
name = "chock-test"
revision = "1.0"

[profiles.default]
CHOCK_WORK = { description = "the work instance", required = true }
CHOCK_EMPTY = { description = "declared, never set", required = false }
CHOCK_NEW = { description = "filled by chock login", required = false }
"""

# SecretSpec's own words (secretspec/src/lib.rs and provider/env.rs), as its CLI prints them.
UNDECLARED = (
    "Error: Secret 'Secret 'CHOCK_NOPE' is not defined in profile 'default'. "
    "Available secrets: CHOCK_EMPTY, CHOCK_NEW, CHOCK_WORK' not found\n"
)
READ_ONLY = "Error: Provider operation failed: Provider 'env' is read-only and does not support setting values\n"

# A stand-in for the CLI: `secretspec set NAME` appends NAME=<stdin> to .env, as the dotenv provider would;
# it records its argv so the test can see the value was never there.
STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["STAND_IN_ARGV"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if os.environ.get("STAND_IN_FAIL"):
    sys.stderr.write(os.environ["STAND_IN_FAIL"])
    sys.exit(1)
verb, name = sys.argv[1], sys.argv[2]
lines = [l for l in open(".env").read().splitlines() if not l.startswith(name + "=")]
if verb == "set":
    lines.append(name + "=" + sys.stdin.read().strip())
open(".env", "w").write("".join(l + "\\n" for l in lines))
sys.stderr.write("Secret '%s' saved to dotenv (profile: default)\\n" % name)
"""


@pytest.fixture
def project_secrets(home, tmp_path, monkeypatch):
    """A project with a secretspec.toml and a .env, as the current directory, with the dotenv provider."""
    try:
        import secretspec  # noqa: F401
    except ImportError:
        pytest.fail("the secretspec SDK is not installed: pip install secretspec (the chock[secretspec] extra)")
    project = tmp_path / "project"
    project.mkdir()
    (project / "secretspec.toml").write_text(MANIFEST)
    (project / ".env").write_text("CHOCK_WORK=sk-from-dotenv\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("SECRETSPEC_PROVIDER", "dotenv://.env")
    home.env["SECRETSPEC_PROVIDER"] = "dotenv://.env"
    return project


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "secretspec"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    argv_log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_ARGV", str(argv_log))
    return argv_log


def test_names_are_chock_upper_case_with_underscores():
    assert env_name("work") == "CHOCK_WORK"
    assert env_name("my-box.2") == "CHOCK_MY_BOX_2"


# ---- reading, for real, through the SDK ------------------------------------------------------------------


def test_the_sdk_reads_a_declared_secret(project_secrets):
    assert SecretSpecStore().get("work") == "sk-from-dotenv"


def test_a_declared_secret_with_no_value_is_not_stored_yet(project_secrets):
    assert SecretSpecStore().get("empty") is None


def test_a_required_secret_with_no_value_is_not_stored_yet(project_secrets):
    (project_secrets / ".env").write_text("")
    assert SecretSpecStore().get("work") is None


def test_an_undeclared_secret_is_refused_in_secretspecs_words(project_secrets):
    with pytest.raises(SecretSpecRefused) as caught:
        SecretSpecStore().get("nope")
    assert "Secret 'CHOCK_NOPE' is not defined in profile 'default'" in str(caught.value)


def test_no_manifest_is_refused_in_secretspecs_words(project_secrets, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(SecretSpecRefused, match=r"No secretspec\.toml found"):
        SecretSpecStore().check()


def test_lookup_goes_to_secretspec_when_the_index_says_so(home, project_secrets):
    home.write_config(".{}\n")
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "secretspec")})
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-from-dotenv"


# ---- writing, at the command boundary ---------------------------------------------------------------------


def test_set_sends_the_value_on_stdin_never_argv(fake_process):
    received = []
    fake_process.register(["secretspec", "set", "CHOCK_WORK"], stdin_callable=received.append)
    SecretSpecStore().set("work", "sk-secret-value")
    assert received == [b"sk-secret-value"]
    assert [list(call) for call in fake_process.calls] == [["secretspec", "set", "CHOCK_WORK"]]


def test_an_undeclared_secret_is_refused_repeating_secretspec(fake_process):
    fake_process.register(["secretspec", "set", "CHOCK_NOPE"], returncode=1, stderr=UNDECLARED)
    with pytest.raises(SecretSpecRefused) as caught:
        SecretSpecStore().set("nope", "sk-secret-value")
    message = str(caught.value)
    assert "Secret 'CHOCK_NOPE' is not defined in profile 'default'" in message
    assert "Declare CHOCK_NOPE in your secretspec.toml" in message
    assert "sk-secret-value" not in message


def test_a_read_only_provider_is_refused_repeating_secretspec(fake_process):
    fake_process.register(["secretspec", "set", "CHOCK_WORK"], returncode=1, stderr=READ_ONLY)
    with pytest.raises(SecretSpecRefused) as caught:
        SecretSpecStore().set("work", "sk-secret-value")
    assert "Provider 'env' is read-only and does not support setting values" in str(caught.value)


def test_delete_runs_secretspec_delete(fake_process):
    fake_process.register(["secretspec", "delete", "CHOCK_WORK"])
    SecretSpecStore().delete("work")
    assert [list(call) for call in fake_process.calls] == [["secretspec", "delete", "CHOCK_WORK"]]


def test_no_cli_on_path_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StoreUnavailable, match="not on your PATH"):
        SecretSpecStore().set("work", "sk-secret-value")


# ---- a login all the way through ----------------------------------------------------------------------


def piped(home, provider: str, secret: str, **kwargs):
    return login(
        home.layout, load_config(home.layout.config), provider, password_method="stdin", interactive=False,
        stdin=io.StringIO(secret + "\n"), environ={}, check=lambda *args: None, **kwargs,
    )  # fmt: skip


def test_login_writes_through_the_cli_and_lookup_reads_it_back_through_the_sdk(home, project_secrets, stand_in):
    home.write_config('.{ .credentials = .{ .store = "secretspec" } }\n')
    result = piped(home, "aiand", "sk-logged-in", name="new")
    assert result.store == "secretspec"
    assert read_index(home.layout)["new"].stored == "secretspec"
    assert "CHOCK_NEW=sk-logged-in" in (project_secrets / ".env").read_text()
    assert "sk-logged-in" not in stand_in.read_text()
    assert json.loads(stand_in.read_text().splitlines()[-1]) == ["set", "CHOCK_NEW"]
    assert lookup(home.layout, load_config(home.layout.config), "new") == "sk-logged-in"


def test_login_with_an_undeclared_name_is_refused_before_the_secret_is_read(home, project_secrets, stand_in):
    home.write_config('.{ .credentials = .{ .store = "secretspec" } }\n')
    stdin = io.StringIO("sk-never-read\n")
    with pytest.raises(SecretSpecRefused, match="is not defined in profile"):
        login(home.layout, load_config(home.layout.config), "aiand", name="nope", password_method="stdin",
              interactive=False, stdin=stdin, environ={}, check=lambda *args: pytest.fail("checked"))  # fmt: skip
    assert stdin.tell() == 0
    assert not home.layout.instances_path.exists()


def test_a_read_only_refusal_at_login_stores_nothing(home, project_secrets, stand_in, monkeypatch):
    home.write_config('.{ .credentials = .{ .store = "secretspec" } }\n')
    monkeypatch.setenv("STAND_IN_FAIL", READ_ONLY)
    with pytest.raises(SecretSpecRefused, match="read-only"):
        piped(home, "aiand", "sk-refused", name="new")
    assert not home.layout.instances_path.exists()
    assert "sk-refused" not in (project_secrets / ".env").read_text()
