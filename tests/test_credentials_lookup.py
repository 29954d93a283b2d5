"""Where a lookup goes: the index's store, then config.zon's .token, then tokens.zon; first wins. And what it
refuses to read: a data dir, instances.zon or tokens.zon another user owns or may write.

docs/credentials.md#lookup has the rules these tests hold the code to.
"""

from __future__ import annotations

import os
import shlex

import pytest

from chock import zon
from chock.config import load_config
from chock.credentials import lookup as lookup_module
from chock.credentials.files import write_private
from chock.credentials.instance_index import IndexEntry, write_index
from chock.credentials.lookup import Source, lookup, sources
from chock.credentials.refusals import InsecureFile, StoreLocked
from tests.fakes.providers import FakeProvider

NOBODY = 65534
FILE_STORE = '.{ .credentials = .{ .store = "file" } }\n'
LOCAL = '.{ .instances = .{ .local = .{ .kind = "openai-compat=http://127.0.0.1:5000/v1" } } }\n'
WITH_TOKEN = '.{ .instances = .{ .work = .{ .kind = "anthropic", .token = "sk-from-config" } } }\n'


def write_tokens(home, tokens: dict, mode: int = 0o600) -> None:
    write_private(home.layout.tokens_path, zon.dumps(tokens))
    os.chmod(home.layout.tokens_path, mode)


@pytest.fixture
def no_keystore(monkeypatch):
    """Any keystore use fails the test: these sources are files."""

    def refuse(name, layout, *, can_prompt=False):
        raise AssertionError(f"a keystore ({name}) was opened")

    monkeypatch.setattr(lookup_module, "open_store", refuse)


def test_nothing_anywhere_is_no_credential_and_touches_no_keystore(home, no_keystore):
    home.write_config(LOCAL)
    assert lookup(home.layout, load_config(home.layout.config), "local") is None
    assert lookup(home.layout, load_config(home.layout.config), "unknown") is None


def test_config_token_is_used_when_the_file_is_private(home, no_keystore):
    home.write_config(WITH_TOKEN, mode=0o600)
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-from-config"


def test_config_token_is_refused_by_name_when_others_can_read_the_file(home, no_keystore):
    path = home.write_config(WITH_TOKEN, mode=0o644)
    with pytest.raises(InsecureFile) as caught:
        lookup(home.layout, load_config(home.layout.config), "work")
    message = str(caught.value)
    assert str(path) in message and "0644" in message and "chmod 600" in message
    assert "sk-from-config" not in message


def test_tokens_zon_is_the_last_source_and_refused_when_readable(home, no_keystore):
    home.write_config(LOCAL)
    write_tokens(home, {"local": "sk-from-tokens"})
    config = load_config(home.layout.config)
    assert lookup(home.layout, config, "local") == "sk-from-tokens"
    os.chmod(home.layout.tokens_path, 0o640)
    with pytest.raises(InsecureFile) as caught:
        lookup(home.layout, config, "local")
    assert str(home.layout.tokens_path) in str(caught.value)
    assert "sk-from-tokens" not in str(caught.value)


def test_config_token_wins_over_tokens_zon(home, no_keystore):
    home.write_config(WITH_TOKEN)
    write_tokens(home, {"work": "sk-from-tokens"})
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-from-config"


def test_the_indexed_store_comes_first(home):
    home.write_config(WITH_TOKEN)
    write_tokens(home, {"work": "sk-from-the-file-store"})
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "file")})
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-from-the-file-store"


def test_an_indexed_store_with_nothing_falls_through(home):
    home.write_config(WITH_TOKEN)
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "file")})
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-from-config"


def test_an_error_from_the_indexed_store_is_an_error_never_a_skip(home, monkeypatch):
    home.write_config(WITH_TOKEN)
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "secret_service")})

    class Locked:
        def get(self, instance):
            raise StoreLocked("the secret_service store is locked")

    monkeypatch.setattr(lookup_module, "open_store", lambda name, layout, can_prompt=False: Locked())
    with pytest.raises(StoreLocked):
        lookup(home.layout, load_config(home.layout.config), "work")


def test_the_store_the_index_names_is_asked_not_the_configured_one(home, monkeypatch):
    home.write_config('.{ .credentials = .{ .store = "secretspec" } }\n')
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "file")})
    write_tokens(home, {"work": "sk-file"})
    asked = []
    real = lookup_module.open_store
    monkeypatch.setattr(
        lookup_module, "open_store", lambda name, layout, can_prompt=False: asked.append(name) or real(name, layout)
    )
    assert lookup(home.layout, load_config(home.layout.config), "work") == "sk-file"
    assert asked == ["file"]


def test_an_unknown_stored_name_is_refused_naming_the_index(home):
    home.write_config(".{}\n")
    write_index(home.layout, {"work": IndexEntry("anthropic", None, None, "plaintext")})
    with pytest.raises(Exception, match=r"instances\.zon"):
        lookup(home.layout, load_config(home.layout.config), "work")


def test_a_broken_tokens_file_names_its_position_never_its_text(home):
    home.write_config(LOCAL)
    home.layout.data.mkdir(parents=True, exist_ok=True)
    home.layout.tokens_path.write_text(".{ .local = sk-unquoted-token }\n")
    os.chmod(home.layout.tokens_path, 0o600)
    with pytest.raises(Exception) as caught:
        lookup(home.layout, load_config(home.layout.config), "local")
    assert "line 1" in str(caught.value) and "sk-unquoted" not in str(caught.value)


def test_sources_names_where_each_credential_comes_from_and_never_a_value(home):
    home.write_config(
        '.{ .instances = .{ .work = .{ .kind = "anthropic", .token = "sk-config" },'
        ' .local = .{ .kind = "openai-compat=http://127.0.0.1:5000/v1" } } }\n'
    )
    write_index(home.layout, {"box": IndexEntry("aiand", "https://api.aiand.com/v1", None, "secret_service")})
    write_tokens(home, {"orphan": "sk-orphan"})
    found = sources(home.layout, load_config(home.layout.config))
    assert found == [
        Source("box", "aiand", "https://api.aiand.com/v1", "secret_service"),
        Source("local", "openai-compat", "http://127.0.0.1:5000/v1", None),
        Source("orphan", None, None, "tokens.zon"),
        Source("work", "anthropic", "https://api.anthropic.com/v1", "config.zon"),
    ]
    assert "sk-" not in repr(found)


# ---- files another user could have written ------------------------------------------------------------------


def need_root() -> None:
    if os.getuid() != 0:
        pytest.fail("giving a file to another uid needs root: run the suite as root, as scripts/test and CI do")


def login_work(home, address: str) -> None:
    done = home.chock("login", "--provider", f"openai-compat={address}", "--name", "work", "--model", "m1",
                      "--password-method", "stdin", input="sk-mine\n")  # fmt: skip
    assert done.returncode == 0, done.stderr


def refused(done, path, fix: str) -> None:
    """`done` was refused before any credential went anywhere, naming `path` and the command that fixes it."""
    assert done.returncode == 3, done.stderr + done.stdout
    assert str(path) in done.stderr and fix in done.stderr, done.stderr
    assert "sk-" not in done.stdout + done.stderr


def test_a_data_dir_another_user_owns_or_may_write_in_is_refused_at_login_and_lookup(home, project):
    need_root()
    home.write_config(FILE_STORE)
    data = home.layout.data
    with FakeProvider(kind="openai", key="sk-mine") as fake:
        login_work(home, fake.address)
        checks_before = len(fake.requests)
        for spoil, fix in (
            (lambda: os.chmod(data, 0o777), f"chmod 700 {shlex.quote(str(data))}"),
            (lambda: os.chown(data, NOBODY, NOBODY), f"chown 0 {shlex.quote(str(data))}"),
        ):
            spoil()
            refused(home.chock("run", "hello", cwd=project), data, fix)
            refused(
                home.chock("login", "--provider", f"openai-compat={fake.address}", "--name", "other",
                           "--password-method", "stdin", input="sk-other\n"),
                data, fix,
            )  # fmt: skip
            assert len(fake.requests) == checks_before  # nothing was sent anywhere
            os.chown(data, 0, 0)
            os.chmod(data, 0o700)
        fake.script(text="hello")
        done = home.chock("run", "hello", cwd=project)
        assert done.returncode == 0, done.stderr
        assert fake.rejections == [] and len(fake.calls) == 1
    assert set(zon.load(home.layout.tokens_path)) == {"work"}


@pytest.mark.parametrize("how", ["owned by another user", "writable by others"])
def test_an_instance_index_another_user_could_have_written_never_sends_the_credential(home, project, how):
    """instances.zon's .address decides where a credential goes: one another user wrote could send it to them."""
    need_root()
    home.write_config(FILE_STORE)
    index = home.layout.instances_path
    with FakeProvider(kind="openai", key="sk-mine") as mine, FakeProvider(kind="openai", key=None) as thief:
        login_work(home, mine.address)
        index.write_text(index.read_text().replace(mine.address, thief.address))
        if how == "owned by another user":
            os.chown(index, NOBODY, NOBODY)
            fix = f"chown 0 {shlex.quote(str(index))}"
        else:
            os.chmod(index, 0o622)
            fix = f"chmod 600 {shlex.quote(str(index))}"
        thief.script(text="thanks")
        refused(home.chock("run", "hello", cwd=project), index, fix)
        refused(home.chock("credentials"), index, fix)
        assert thief.requests == []


def test_a_tokens_file_another_user_owns_is_refused(home, no_keystore):
    need_root()
    home.write_config(LOCAL)
    write_tokens(home, {"local": "sk-planted"})
    os.chown(home.layout.tokens_path, NOBODY, NOBODY)
    with pytest.raises(InsecureFile) as caught:
        lookup(home.layout, load_config(home.layout.config), "local")
    message = str(caught.value)
    assert str(home.layout.tokens_path) in message and "belongs to another user (uid 65534" in message
    assert "chown 0" in message and "sk-planted" not in message
    os.chown(home.layout.tokens_path, 0, 0)
    os.chmod(home.layout.tokens_path, 0o620)
    with pytest.raises(InsecureFile, match=r"can be written by other users \(mode 0620\).*chmod 600"):
        lookup(home.layout, load_config(home.layout.config), "local")
