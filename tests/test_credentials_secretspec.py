"""The secretspec store: reads through the real SecretSpec SDK (dotenv provider), writes through the CLI.

Chock declares its secrets itself (docs/credentials.md#the-stores): a project's secretspec.toml, in the
working directory or a parent, is never read, never generates anything and never chooses a value.

The `secretspec` CLI is a Rust binary that is not packaged here, so writes are tested at the command boundary:
with pytest-subprocess for SecretSpec's refusals, and with a stand-in `secretspec` executable on PATH for a
login that goes all the way through (the manifest it is given checked by the real SDK, the value written by
the stand-in and read back by the real SDK).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from chock.config import load_config
from chock.credentials.instance_index import IndexEntry, read_index, write_index
from chock.credentials.login import login
from chock.credentials.lookup import lookup
from chock.credentials.refusals import InsecureFile, SecretSpecRefused, StoreUnavailable
from chock.credentials.stores.secretspec import SecretSpecStore, env_name
from tests.fakes.projects import make_project
from tests.fakes.providers import FakeProvider

SECRETSPEC_STORE = '.{ .credentials = .{ .store = "secretspec" } }\n'

# A project's manifest as an adversary writes it: it declares the secret Chock looks up, and a secret whose
# generation runs a command on the host; its .env offers a value of its choosing.
HOSTILE_MANIFEST = """
[project]
name = "cloned"
revision = "1.0"

[profiles.default]
CHOCK_WORK = {{ description = "the work instance", required = true }}
PWN = {{ description = "x", required = false, type = "command", generate = {{ command = "touch {marker}; echo gen" }} }}
"""

# SecretSpec's own words (secretspec/src/lib.rs and provider/env.rs), as its CLI prints them.
READ_ONLY = "Error: Provider operation failed: Provider 'env' is read-only and does not support setting values\n"

# A stand-in for the CLI: `secretspec --file M VERB --profile P NAME` asks the real SDK whether manifest M
# declares NAME in profile P (as the CLI would refuse one it does not), then sets or deletes NAME=<stdin> in
# .env of its working directory, as the dotenv provider would. It records its argv and working directory, so a
# test can see the value was never in argv and where it ran.
STAND_IN = """#!{python}
import json, os, sys
import secretspec
with open(os.environ["STAND_IN_ARGV"], "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd()}}) + "\\n")
if os.environ.get("STAND_IN_FAIL"):
    sys.stderr.write(os.environ["STAND_IN_FAIL"])
    sys.exit(1)
assert sys.argv[1] == "--file" and sys.argv[4] == "--profile", sys.argv
manifest, verb, profile, name = sys.argv[2], sys.argv[3], sys.argv[5], sys.argv[6]
report = secretspec.SecretSpec.builder().with_path(manifest).with_profile(profile).report()
if name not in [secret.name for secret in report.secrets]:
    sys.stderr.write("Error: Secret '%s' is not defined in profile '%s'\\n" % (name, profile))
    sys.exit(1)
lines = [l for l in open(".env").read().splitlines() if not l.startswith(name + "=")] if os.path.exists(".env") else []
if verb == "set":
    lines.append(name + "=" + sys.stdin.read().strip())
open(".env", "w").write("".join(l + "\\n" for l in lines))
sys.stderr.write("Secret '%s' saved to dotenv (profile: default)\\n" % name)
"""


@pytest.fixture
def chock_secrets(home, monkeypatch) -> Path:
    """Chock's own secretspec directory with a .env, and the dotenv provider (`dotenv://.env`, resolved there)."""
    try:
        import secretspec  # noqa: F401
    except ImportError:
        pytest.fail("the secretspec SDK is not installed: pip install secretspec (the chock[secretspec] extra)")
    directory = home.layout.secretspec_dir
    directory.mkdir(parents=True)
    (directory / ".env").write_text("CHOCK_WORK=sk-from-dotenv\n")
    monkeypatch.setenv("SECRETSPEC_PROVIDER", "dotenv://.env")
    home.env["SECRETSPEC_PROVIDER"] = "dotenv://.env"
    return directory


@pytest.fixture
def hostile_project(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A cloned project with its own secretspec.toml and .env, as the current directory; and the file its
    manifest's generator would create on the host."""
    marker = tmp_path / "generated-on-the-host"
    project = make_project(
        tmp_path / "cloned",
        {
            "README.md": "# cloned\n",
            "secretspec.toml": HOSTILE_MANIFEST.format(marker=marker),
            ".env": "CHOCK_WORK=sk-chosen-by-the-project\n",
        },
    )
    monkeypatch.chdir(project)
    return project, marker


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


def store(home) -> SecretSpecStore:
    return SecretSpecStore(home.layout.secretspec_dir)


def test_names_are_chock_upper_case_with_underscores():
    assert env_name("work") == "CHOCK_WORK"
    assert env_name("my-box.2") == "CHOCK_MY_BOX_2"


# ---- reading, for real, through the SDK ------------------------------------------------------------------


def test_the_sdk_reads_a_stored_secret(home, chock_secrets):
    assert store(home).get("work") == "sk-from-dotenv"


def test_a_secret_never_stored_is_not_stored_yet(home, chock_secrets):
    assert store(home).get("never-stored") is None  # Chock declares every CHOCK_<NAME> itself
    store(home).check("never-stored")
    store(home).check()


def test_a_projects_secretspec_toml_neither_runs_nor_chooses_anything(home, chock_secrets, hostile_project):
    """A project (written by the agent, or cloned) is the working directory of a session's lookup: its
    manifest's generator never runs on the host, and its .env never decides the value."""
    project, marker = hostile_project
    assert Path.cwd() == project
    assert store(home).get("work") == "sk-from-dotenv"
    store(home).check("work")
    assert not marker.exists()


def test_a_chock_run_in_a_hostile_project_sends_the_stored_credential_and_runs_nothing(
    home, chock_secrets, hostile_project
):
    """`chock run` in a cloned project: the lookup in the session gets the credential stored for the instance,
    not one the project offers, and the project's generator never runs on the host."""
    project, marker = hostile_project
    (chock_secrets / ".env").write_text("CHOCK_WORK=sk-stored-by-chock\n")
    home.write_config(SECRETSPEC_STORE)
    with FakeProvider(kind="openai", key="sk-stored-by-chock") as fake:
        fake.script(text="hello")
        write_index(home.layout, {"work": IndexEntry("openai-compat", fake.address, "m1", "secretspec")})
        result = home.chock("run", "say hello", cwd=project)
        assert not marker.exists(), "the project's manifest ran a command on the host"
        assert result.returncode == 0, result.stderr + result.stdout
        assert fake.rejections == [] and len(fake.calls) == 1


def test_a_broken_dotenv_file_is_named_but_the_line_it_quotes_is_never_shown(home, chock_secrets, project):
    """SecretSpec's dotenv parser quotes the line it failed on, credential and all: `chock doctor`, `chock login`
    and `chock run` say what is wrong and where, and never show that line."""
    canary = "sk-dotenv-canary-6b1f0e"
    (chock_secrets / ".env").write_text(f'CHOCK_OTHER=sk-fine\nCHOCK_WORK="{canary}\n')
    home.write_config(SECRETSPEC_STORE)
    write_index(home.layout, {"work": IndexEntry("openai-compat", "http://127.0.0.1:9/v1", "m1", "secretspec")})
    said = {
        "doctor": home.chock("doctor"),
        "login": home.chock("login", "--provider", "aiand", "--name", "new", "--password-method", "stdin",
                            input="sk-new-key\n"),
        "run": home.chock("run", "hello", cwd=project),
    }  # fmt: skip
    for command, done in said.items():
        shown = done.stdout + done.stderr
        assert "dotenv syntax error at line 2, column 12: unterminated" in shown, (command, shown)
        assert canary not in shown and "CHOCK_WORK=" not in shown, (command, shown)
    assert said["login"].returncode != 0 and said["run"].returncode != 0
    assert set(read_index(home.layout)) == {"work"}  # the refused login stored nothing


def test_its_directory_is_refused_when_others_may_write_in_it(home, chock_secrets, fake_process):
    """Whoever can write there could swap the manifest the CLI is given for one that generates by a command."""
    chock_secrets.chmod(0o777)
    for use in (lambda: store(home).get("work"), lambda: store(home).set("work", "sk-new")):
        with pytest.raises(InsecureFile) as caught:
            use()
        assert f"{chock_secrets} can be written by other users (mode 0777)" in str(caught.value)
        assert "chmod 700" in str(caught.value)
    assert not fake_process.calls and not (chock_secrets / "secretspec.toml").exists()


def test_lookup_goes_to_secretspec_when_the_index_says_so(home, chock_secrets):
    home.write_config(".{}\n")
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "secretspec")})
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-from-dotenv"


# ---- writing, at the command boundary ---------------------------------------------------------------------


def cli(home, verb: str, secret: str) -> list[str]:
    manifest = home.layout.secretspec_dir / "secretspec.toml"
    return ["secretspec", "--file", str(manifest), verb, "--profile", "default", secret]


def test_set_sends_the_value_on_stdin_never_argv_with_chocks_own_manifest(home, fake_process):
    import secretspec

    received = []
    fake_process.register(cli(home, "set", "CHOCK_WORK"), stdin_callable=received.append)
    store(home).set("work", "sk-secret-value")
    assert received == [b"sk-secret-value"]
    assert [list(call) for call in fake_process.calls] == [cli(home, "set", "CHOCK_WORK")]
    # The manifest it named is Chock's, private, and declares the secret (as the real resolver reads it).
    manifest = home.layout.secretspec_dir / "secretspec.toml"
    assert manifest.stat().st_mode & 0o777 == 0o600
    builder = secretspec.SecretSpec.builder().with_path(str(manifest)).with_profile("default")
    report = builder.with_provider("dotenv://.env").report()
    assert [(s.name, s.required, s.generated) for s in report.secrets] == [("CHOCK_WORK", False, False)]


def test_a_read_only_provider_is_refused_repeating_secretspec(home, fake_process):
    fake_process.register(cli(home, "set", "CHOCK_WORK"), returncode=1, stderr=READ_ONLY)
    with pytest.raises(SecretSpecRefused) as caught:
        store(home).set("work", "sk-secret-value")
    assert "Provider 'env' is read-only and does not support setting values" in str(caught.value)
    assert "sk-secret-value" not in str(caught.value)


def test_delete_runs_secretspec_delete(home, fake_process):
    fake_process.register(cli(home, "delete", "CHOCK_WORK"))
    store(home).delete("work")
    assert [list(call) for call in fake_process.calls] == [cli(home, "delete", "CHOCK_WORK")]


def test_no_cli_on_path_says_so(home, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StoreUnavailable, match="not on your PATH"):
        store(home).set("work", "sk-secret-value")


# ---- a login all the way through ----------------------------------------------------------------------


def piped(home, provider: str, secret: str, **kwargs):
    return login(
        home.layout, load_config(home.layout.config), provider, password_method="stdin", interactive=False,
        stdin=io.StringIO(secret + "\n"), environ={}, check=lambda *args: None, **kwargs,
    )  # fmt: skip


def test_login_writes_through_the_cli_and_lookup_reads_it_back_through_the_sdk(
    home, chock_secrets, hostile_project, stand_in
):
    home.write_config(SECRETSPEC_STORE)
    project, marker = hostile_project
    result = piped(home, "aiand", "sk-logged-in", name="new")
    assert result.store == "secretspec"
    assert read_index(home.layout)["new"].stored == "secretspec"
    assert "CHOCK_NEW=sk-logged-in" in (chock_secrets / ".env").read_text()
    assert "sk-logged-in" not in (project / ".env").read_text()
    assert "sk-logged-in" not in stand_in.read_text()
    written = json.loads(stand_in.read_text().splitlines()[-1])
    assert written == {"argv": cli(home, "set", "CHOCK_NEW")[1:], "cwd": str(chock_secrets)}
    assert lookup(home.layout, load_config(home.layout.config), "new") == "sk-logged-in"
    assert not marker.exists()


def test_a_read_only_refusal_at_login_stores_nothing(home, chock_secrets, stand_in, monkeypatch):
    home.write_config(SECRETSPEC_STORE)
    monkeypatch.setenv("STAND_IN_FAIL", READ_ONLY)
    with pytest.raises(SecretSpecRefused, match="read-only"):
        piped(home, "aiand", "sk-refused", name="new")
    assert not home.layout.instances_path.exists()
    assert "sk-refused" not in (chock_secrets / ".env").read_text()
