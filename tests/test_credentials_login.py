"""`chock login` / `chock logout` with the file store: the checks, the lock, both files or neither.

Logins run for real against the loopback fake provider; concurrent and locked logins run as separate
processes, and the replace question is answered through a real pty.
"""

from __future__ import annotations

import io
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chock import zon
from chock.config import load_config
from chock.credentials import login_lock as lock_module
from chock.credentials.instance_index import IndexEntry, read_index, write_index
from chock.credentials.login import login, logout, replace_question
from chock.credentials.login_lock import BUSY_MESSAGE
from chock.credentials.lookup import lookup
from chock.credentials.refusals import LoginBusy, NameTaken
from chock.errors import UsageError
from chock.providers import ProviderError
from tests.fakes.providers import FakeProvider
from tests.fakes.terminal import Terminal

FILE_STORE = '.{ .credentials = .{ .store = "file" } }\n'
KEY = "sk-test-4f1d9c"
# A remote MCP server's credential: stored by `chock login` with no provider to check it first.
MCP = "mcp=https://tracker.example/mcp"

# One login in a process of its own: the arguments (never the secret) come in argv as JSON; the secret comes
# from stdin or the pty, exactly as `chock login` gets it.
LOGIN_CHILD = """
import json, sys
from chock.paths import Layout
from chock.config import load_config
from chock.credentials.login import login
from chock.errors import ChockError
layout = Layout.from_env()
try:
    result = login(layout, load_config(layout.config), **json.loads(sys.argv[1]))
except ChockError as exc:
    print("ERROR", type(exc).__name__, exc, flush=True)
    sys.exit(exc.exit_code)
print("RESULT", json.dumps(result.__dict__), flush=True)
"""

# Takes the login lock the way login does, says so, and holds it until killed.
LOCK_HOLDER = """
import sys, time
from chock.paths import Layout
from chock.credentials.login_lock import login_lock
with login_lock(Layout.from_env()):
    print("HOLDING", flush=True)
    time.sleep(600)
"""


def no_check(kind: str, address: str, credential: str) -> None:
    pass


def piped(home, provider: str, secret: str = KEY, **kwargs):
    config = load_config(home.layout.config)
    kwargs.setdefault("check", no_check)
    kwargs.setdefault("environ", {})
    return login(
        home.layout, config, provider, password_method="stdin", interactive=False, stdin=io.StringIO(secret + "\n"),
        **kwargs,
    )  # fmt: skip


def tokens(home) -> dict:
    path = home.layout.tokens_path
    return zon.load(path) if path.exists() else {}


def spawn_login(home, args: dict, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", LOGIN_CHILD, json.dumps(args)],
        env=home.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs,
    )  # fmt: skip


# ---- the happy path, and what a login writes ------------------------------------------------------------


def test_login_checks_with_the_provider_and_writes_both_files(home):
    home.write_config(FILE_STORE)
    with FakeProvider(kind="anthropic", key=KEY) as fake:
        result = piped(home, f"anthropic={fake.address}", name="work", model="claude-x", check=None)
        assert [r.path for r in fake.requests] == ["/v1/models"]
        assert fake.requests[0].headers["x-api-key"] == KEY
    assert result.stored and not result.replaced and result.store == "file"
    assert read_index(home.layout) == {
        "work": IndexEntry(kind="anthropic", address=fake.address, model="claude-x", stored="file")
    }
    assert tokens(home) == {"work": KEY}
    for path in (home.layout.tokens_path, home.layout.instances_path):
        assert path.stat().st_mode & 0o777 == 0o600
    assert home.layout.data.stat().st_mode & 0o777 == 0o700
    assert lookup(home.layout, load_config(home.layout.config), "work") == KEY


def test_a_rejected_key_is_not_stored_and_the_index_is_unchanged(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", name="other", secret="sk-other")
    index_before = home.layout.instances_path.read_bytes()
    tokens_before = home.layout.tokens_path.read_bytes()
    with FakeProvider(kind="openai", key="sk-the-right-one") as fake, pytest.raises(ProviderError) as caught:
        piped(home, f"openai-compat={fake.address}", name="local", secret="sk-a-wrong-one", check=None)
    assert "401" in str(caught.value)
    assert "sk-a-wrong-one" not in str(caught.value)
    assert home.layout.instances_path.read_bytes() == index_before
    assert home.layout.tokens_path.read_bytes() == tokens_before


def test_name_defaults_to_the_kind_and_the_default_address(home):
    home.write_config(FILE_STORE)
    seen = []
    result = piped(home, "aiand", check=lambda *args: seen.append(args))
    assert (result.name, result.address) == ("aiand", "https://api.aiand.com/v1")
    assert seen == [("aiand", "https://api.aiand.com/v1", KEY)]


def test_a_login_with_no_store_named_goes_to_the_os_keystore(home, monkeypatch):
    home.write_config(".{}\n")
    opened = []

    class Refusing:
        name = "secret_service"

        def check(self, instance=None):
            raise LoginBusy("stop here")

    def fake_open(name, layout, *, can_prompt=False):
        opened.append(name)
        return Refusing()

    monkeypatch.setattr("chock.credentials.login.open_store", fake_open)
    with pytest.raises(LoginBusy):
        piped(home, "aiand")
    assert opened == ["secret_service"]


@pytest.mark.parametrize(
    ("method", "message"),
    [("prompt", "needs a terminal"), ("sk-pasted-by-mistake", "prompt, stdin or file=PATH"), ("file=", "file=PATH")],
)
def test_bad_password_methods_are_refused_without_echoing_them(home, method, message):
    home.write_config(FILE_STORE)
    config = load_config(home.layout.config)
    with pytest.raises(UsageError) as caught:
        login(home.layout, config, "aiand", password_method=method, interactive=False, check=no_check, environ={})
    assert message in str(caught.value)
    assert "sk-pasted" not in str(caught.value)


def test_password_method_file_reads_the_file(home, tmp_path):
    home.write_config(FILE_STORE)
    secret_file = tmp_path / "key.txt"
    secret_file.write_text(KEY + "\n")
    config = load_config(home.layout.config)
    login(home.layout, config, "aiand", password_method=f"file={secret_file}", interactive=True, check=no_check,
          environ={})  # fmt: skip
    assert tokens(home) == {"aiand": KEY}


@pytest.mark.parametrize("secret", ["", "two words", "line\nbreak"])
def test_an_empty_or_malformed_credential_is_refused(home, secret, tmp_path):
    home.write_config(FILE_STORE)
    secret_file = tmp_path / "key.txt"
    secret_file.write_text(secret)
    config = load_config(home.layout.config)
    with pytest.raises(UsageError) as caught:
        login(home.layout, config, "aiand", password_method=f"file={secret_file}", check=no_check, environ={})
    assert secret.strip() == "" or secret not in str(caught.value)
    assert not home.layout.instances_path.exists()


def test_replay_takes_no_login(home):
    home.write_config(FILE_STORE)
    with pytest.raises(UsageError, match="takes no credential"):
        piped(home, "replay=demo.jsonl")


def mcp_login(home, method: str = "stdin", **kwargs) -> subprocess.CompletedProcess[str]:
    """`chock login --provider mcp=… --name tracker --replace`, for real."""
    return home.chock("login", "--provider", MCP, "--name", "tracker", "--password-method", method, "--replace",
                      **kwargs)  # fmt: skip


def limited_memory() -> None:
    """In a child, before exec: 1 GiB of address space, so a read that never ends fails in it, not the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


def test_a_credential_past_8_kib_is_refused_without_being_read_to_its_end(home, tmp_path):
    home.write_config(FILE_STORE)
    assert mcp_login(home, input="sk-first\n").returncode == 0
    huge = "sk-" + "x" * (20 * 2**20)
    huge_file = tmp_path / "huge.txt"
    huge_file.write_text(huge + "\n")
    with open("/dev/zero", "rb") as zeros:
        endless = subprocess.run(
            [sys.executable, "-P", "-m", "chock", "login", "--provider", MCP, "--name", "tracker", "--replace",
             "--password-method", "stdin"],
            stdin=zeros, capture_output=True, text=True, env=home.env, timeout=120, preexec_fn=limited_memory,
        )  # fmt: skip
    for how, done in (
        ("stdin", mcp_login(home, input=huge + "\n")),
        ("file", mcp_login(home, f"file={huge_file}")),
        ("/dev/zero", endless),
    ):
        assert done.returncode == 2, (how, done.stderr[-3000:])
        assert "is longer than 8 KiB, which no provider's key is" in done.stderr, how
        assert "nothing was stored" in done.stderr
        assert "xxxxxxxx" not in done.stdout + done.stderr
        assert tokens(home) == {"tracker": "sk-first"}


def test_a_credential_no_http_header_can_carry_is_refused_and_the_stored_one_kept(home, tmp_path):
    home.write_config(FILE_STORE)
    assert mcp_login(home, input="sk-first\n").returncode == 0
    for bad in ("sk-caf\u00e9-1", "sk-zero\u200bwidth", "sk-mid\ufeffbom"):
        done = mcp_login(home, input=bad + "\n")
        assert done.returncode == 2, (bad, done.stderr)
        assert "has a character outside printable ASCII in it" in done.stderr
        assert "nothing was stored" in done.stderr
        assert bad not in done.stderr and "sk-" not in done.stderr
        assert tokens(home) == {"tracker": "sk-first"}
    # A byte-order mark before the key is an editor's, not the key's: it is dropped.
    assert mcp_login(home, input="\ufeffsk-second\n").returncode == 0
    assert tokens(home) == {"tracker": "sk-second"}
    key_file = tmp_path / "key.txt"
    key_file.write_bytes("\ufeffsk-third\r\n".encode())
    assert mcp_login(home, f"file={key_file}").returncode == 0
    assert tokens(home) == {"tracker": "sk-third"}


# `chock ARGS` started with standard input closed, as `chock ARGS <&-` in a shell.
CLOSED_STDIN = ("sh", "-c", 'exec "$@" <&-', "sh")


def with_stdin_closed(home, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = home.spawn(*args, cwd=cwd, prefix=CLOSED_STDIN, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_standard_input_closed_is_no_terminal_and_no_credential(home, project, tmp_path):
    home.write_config(FILE_STORE)
    with FakeProvider(kind="openai", key=KEY) as fake:
        provider = f"openai-compat={fake.address}"
        done = with_stdin_closed(home, "login", "--provider", provider, "--name", "work", "--model", "m1")
        assert done.returncode == 2, done.stderr
        # chock opens a closed stream on /dev/null first thing (chock/entry.py): an empty standard input.
        assert "(standard input was empty); nothing was stored" in done.stderr, done.stderr
        assert "--password-method file=PATH" in done.stderr
        assert "Traceback" not in done.stderr and fake.requests == []
        assert not home.layout.instances_path.exists()

        key_file = tmp_path / "key"
        key_file.write_text(KEY + "\n")
        done = with_stdin_closed(home, "login", "--provider", provider, "--name", "work", "--model", "m1",
                                 "--password-method", f"file={key_file}")  # fmt: skip
        assert done.returncode == 0, done.stderr
        fake.script(text="hello")
        done = with_stdin_closed(home, "run", "say hello", cwd=project)  # the session's lookup, stdin closed
        assert done.returncode == 0, done.stderr
        assert fake.rejections == [] and len(fake.calls) == 1

    done = with_stdin_closed(home, "logout", "other")
    assert done.returncode == 1 and 'there is no credential named "other"' in done.stderr, done.stderr
    done = with_stdin_closed(home, "logout", "work")
    assert done.returncode == 0, done.stderr
    assert read_index(home.layout) == {} and tokens(home) == {}


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_a_credential_that_is_not_utf8_is_refused_clearly(home, locale):
    home.write_config(FILE_STORE)
    done = subprocess.run(
        [sys.executable, "-P", "-m", "chock", "login", "--provider", MCP, "--name", "tracker", "--password-method",
         "stdin"],
        input=b"mcpSEC\xe9RET\n", capture_output=True, env={**home.env, "LC_ALL": locale}, timeout=120,
    )  # fmt: skip
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, stderr
    assert "the credential from standard input is not UTF-8 text" in stderr and "nothing was stored" in stderr
    assert "Traceback" not in stderr and "SEC" not in stderr
    assert not home.layout.instances_path.exists() and not home.layout.tokens_path.exists()


def test_a_user_and_password_in_the_provider_address_is_refused_and_never_shown(home):
    home.write_config(FILE_STORE)
    done = home.chock("login", "--provider", "openai-compat=http://me:hunter2pw@127.0.0.1:9/v1", "--name", "box",
                      "--password-method", "stdin", input="sk-box\n")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "has a user name or password in it" in done.stderr and "Basic authentication" in done.stderr
    assert "--provider openai-compat=http://127.0.0.1:9/v1" in done.stderr  # the address to give instead
    assert "hunter2pw" not in done.stdout + done.stderr
    assert not home.layout.instances_path.exists() and not home.layout.tokens_path.exists()


# ---- names: taken, colliding, replaced --------------------------------------------------------------------


def test_piped_login_over_an_existing_name_is_refused_unless_it_says_replace(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    index_before = home.layout.instances_path.read_bytes()
    stdin = io.StringIO("sk-second\n")
    with pytest.raises(NameTaken) as caught:
        login(home.layout, load_config(home.layout.config), "aiand", password_method="stdin", interactive=False,
              stdin=stdin, check=no_check, environ={})  # fmt: skip
    message = str(caught.value)
    assert 'there is already a credential named "aiand", stored as kind aiand' in message
    assert "chock login --provider aiand --replace" in message
    assert "chock login --provider aiand --name <another name>" in message
    assert "sk-" not in message
    assert stdin.read() == "sk-second\n"  # refused before the credential was read
    assert tokens(home) == {"aiand": "sk-first"}
    assert home.layout.instances_path.read_bytes() == index_before

    # --name naming the instance that exists says which one, not that it may be replaced.
    with pytest.raises(NameTaken) as caught:
        piped(home, "aiand", secret="sk-second", name="aiand")
    assert "chock login --provider aiand --name aiand --replace" in str(caught.value)
    assert "--name <another name>" in str(caught.value)
    assert tokens(home) == {"aiand": "sk-first"}

    assert piped(home, "aiand", secret="sk-second", replace=True).replaced
    assert tokens(home) == {"aiand": "sk-second"}
    assert piped(home, "aiand", secret="sk-third", name="aiand", replace=True).replaced
    assert tokens(home) == {"aiand": "sk-third"}
    # And --name <another name> stores beside it.
    assert not piped(home, "aiand", secret="sk-fourth", name="aiand-2").replaced
    assert tokens(home) == {"aiand": "sk-third", "aiand-2": "sk-fourth"}


@pytest.mark.parametrize("why", ["ci", "file"])
@pytest.mark.parametrize("name", [None, "aiand"])
def test_ci_and_file_logins_have_nobody_to_ask(home, tmp_path, why, name):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    secret_file = tmp_path / "key"
    secret_file.write_text("sk-second")
    config = load_config(home.layout.config)
    asked = []
    kwargs = {"password_method": f"file={secret_file}", "environ": {}} if why == "file" else {"environ": {"CI": "1"}}
    with pytest.raises(NameTaken, match="nobody to ask") as caught:
        login(home.layout, config, "aiand", name=name, interactive=True, ask=asked.append, check=no_check,
              read_hidden=lambda prompt: "sk-second", **kwargs)  # fmt: skip
    assert "--replace" in str(caught.value) and "--name <another name>" in str(caught.value)
    assert asked == []
    assert tokens(home) == {"aiand": "sk-first"}
    assert login(home.layout, config, "aiand", name=name, interactive=True, replace=True, check=no_check,
                 read_hidden=lambda prompt: "sk-second", **kwargs).replaced  # fmt: skip
    assert tokens(home) == {"aiand": "sk-second"}


def test_a_name_whose_chock_form_collides_is_refused(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", name="my-work")
    with pytest.raises(NameTaken, match="CHOCK_MY_WORK"):
        piped(home, "aiand", name="my_work")
    assert set(read_index(home.layout)) == {"my-work"}


def test_a_config_instance_of_another_kind_is_refused(home):
    home.write_config('.{ .credentials = .{ .store = "file" }, .instances = .{ .work = .{ .kind = "anthropic" } } }\n')
    with pytest.raises(NameTaken, match="as kind anthropic"):
        piped(home, "aiand", name="work")
    piped(home, "anthropic", name="work")
    assert tokens(home) == {"work": KEY}


def test_replacing_into_another_store_removes_the_old_one(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    entries = read_index(home.layout)
    entries["aiand"] = IndexEntry("aiand", "https://api.aiand.com/v1", None, "secretspec")
    write_index(home.layout, entries)  # as if the first login had gone to SecretSpec
    said = []
    piped(home, "aiand", secret="sk-second", replace=True, say=said.append)
    assert read_index(home.layout)["aiand"].stored == "file"
    assert said and "secretspec" in said[0] and "sk-" not in said[0]  # no `secretspec` CLI here


def test_the_name_check_repeats_under_the_lock(home, monkeypatch):
    """A login that started while another sat at its prompt is told the name is taken."""
    home.write_config(FILE_STORE)
    real_lock = lock_module.login_lock

    def other_login_got_there_first(layout, **kwargs):
        write_index(layout, {"aiand": IndexEntry("aiand", "https://api.aiand.com/v1", None, "file")})
        return real_lock(layout, **kwargs)

    monkeypatch.setattr("chock.credentials.login.login_lock", other_login_got_there_first)
    with pytest.raises(NameTaken, match='the name "aiand" is taken') as caught:
        piped(home, "aiand", name="aiand")
    assert "--name aiand --replace" in str(caught.value) and "--name <another name>" in str(caught.value)
    assert not home.layout.tokens_path.exists()


def test_when_the_index_cannot_be_written_the_credential_is_undone(home, monkeypatch):
    home.write_config(FILE_STORE)
    piped(home, "aiand", name="kept", secret="sk-kept")

    def broken(layout, entries):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("chock.credentials.login.write_index", broken)
    with pytest.raises(Exception, match="No space left on device"):
        piped(home, "aiand", name="new", secret="sk-new")
    assert tokens(home) == {"kept": "sk-kept"}
    # A replacement that fails puts the old credential back.
    with pytest.raises(Exception, match="No space left on device"):
        piped(home, "aiand", name="kept", secret="sk-newer", replace=True)
    assert tokens(home) == {"kept": "sk-kept"}


def test_logout_removes_the_credential_and_the_entry(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", name="one", secret="sk-one")
    piped(home, "aiand", name="two", secret="sk-two")
    config = load_config(home.layout.config)
    assert logout(home.layout, config, "one").stored == "file"
    assert set(read_index(home.layout)) == {"two"}
    assert tokens(home) == {"two": "sk-two"}
    with pytest.raises(Exception, match='no credential named "one"'):
        logout(home.layout, config, "one")


# ---- the lock, for real: separate processes ---------------------------------------------------------------


def test_ten_concurrent_logins_all_land_in_both_files(home):
    home.write_config(FILE_STORE)
    with FakeProvider(kind="openai", key=None) as fake:
        procs = [
            spawn_login(home, {"provider_text": f"openai-compat={fake.address}", "name": f"box{n}",
                               "password_method": "stdin"}, stdin=subprocess.PIPE)
            for n in range(10)
        ]  # fmt: skip
        for n, proc in enumerate(procs):
            assert proc.stdin is not None
            proc.stdin.write(f"sk-token-{n}\n")
            proc.stdin.close()
        outputs = [proc.stdout.read() if proc.stdout else "" for proc in procs]
        for proc in procs:
            proc.wait(timeout=60)
    assert [proc.returncode for proc in procs] == [0] * 10, outputs
    assert set(read_index(home.layout)) == {f"box{n}" for n in range(10)}
    assert tokens(home) == {f"box{n}": f"sk-token-{n}" for n in range(10)}


def test_a_held_lock_makes_the_next_login_fail_after_five_seconds_and_a_kill_frees_it(home):
    home.write_config(FILE_STORE)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER], env=home.env, text=True, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "HOLDING"
        started = time.monotonic()
        with pytest.raises(LoginBusy) as caught:
            piped(home, "aiand", name="secret-instance-name")
        waited = time.monotonic() - started
        assert str(caught.value) == BUSY_MESSAGE
        assert str(caught.value).startswith("another chock login is running")
        assert "secret-instance-name" not in str(caught.value) and "aiand" not in str(caught.value)
        assert 4.8 <= waited < 8, waited
        assert not home.layout.instances_path.exists() and not home.layout.tokens_path.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    started = time.monotonic()
    piped(home, "aiand")
    assert time.monotonic() - started < 2
    assert tokens(home) == {"aiand": KEY}


# ---- the replace question, through a real terminal --------------------------------------------------------


def run_in_pty(home, args: dict, answers: list[tuple[str, str]], timeout: float = 30) -> tuple[int, str]:
    """Run a login with a pty as its terminal (and CI unset); for each (expect, send) wait for `expect` in
    the output, then type `send`. Returns the exit status and everything it printed."""
    env = {key: value for key, value in home.env.items() if key != "CI"}
    terminal = Terminal([sys.executable, "-c", LOGIN_CHILD, json.dumps(args)], env)
    try:
        for expect, send in answers:
            terminal.wait_for(expect, timeout)
            terminal.type(send)
        code = terminal.exit_code(timeout)
    finally:
        terminal.close()
    return code, terminal.text()


@pytest.mark.parametrize("answer", ["n\r", "\r"])
def test_at_a_terminal_no_is_the_default_and_the_secret_is_never_asked_for(home, answer):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    with FakeProvider(kind="openai", key=None) as fake:
        code, output = run_in_pty(home, {"provider_text": f"aiand={fake.address}"}, [("[y/N]", answer)])
        assert fake.requests == []
    assert code == 0, output
    assert replace_question("aiand", read_index(home.layout)["aiand"]).replace("\n", "\r\n") in output
    assert "typing is hidden" not in output
    assert '"stored": false' in output
    assert tokens(home) == {"aiand": "sk-first"}


def test_at_a_terminal_yes_asks_for_the_secret_hidden_and_replaces(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    with FakeProvider(kind="openai", key="sk-second") as fake:
        code, output = run_in_pty(
            home, {"provider_text": f"aiand={fake.address}"}, [("[y/N]", "y\r"), ("typing is hidden", "sk-second\r")]
        )
    assert code == 0, output
    assert "sk-second" not in output  # getpass did not echo it
    assert tokens(home) == {"aiand": "sk-second"}
    assert read_index(home.layout)["aiand"].address == fake.address


def test_replace_skips_the_question_at_a_terminal(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    with FakeProvider(kind="openai", key="sk-second") as fake:
        code, output = run_in_pty(
            home, {"provider_text": f"aiand={fake.address}", "replace": True}, [("typing is hidden", "sk-second\r")]
        )
    assert code == 0, output
    assert "[y/N]" not in output
    assert tokens(home) == {"aiand": "sk-second"}


def test_at_a_terminal_the_question_comes_first_for_a_name_given_too(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", name="local", secret="sk-first")
    with FakeProvider(kind="openai", key="sk-second") as fake:
        code, output = run_in_pty(
            home,
            {"provider_text": f"aiand={fake.address}", "name": "local"},
            [("[y/N]", "y\r"), ("typing is hidden", "sk-second\r")],
        )
    assert code == 0, output
    assert output.index("[y/N]") < output.index("typing is hidden")
    assert tokens(home) == {"local": "sk-second"}


def test_the_login_command_refuses_a_piped_name_that_exists(home, tmp_path):
    """`printf … | chock login --provider … --name local --password-method stdin` when `local` exists."""
    home.write_config(FILE_STORE)
    secret_file = tmp_path / "key"
    secret_file.write_text("sk-second\n")
    with FakeProvider(kind="openai", key=None) as fake:
        provider = f"openai-compat={fake.address}"
        first = home.chock("login", "--provider", provider, "--name", "local", "--password-method", "stdin",
                           input="sk-first\n")  # fmt: skip
        assert first.returncode == 0, first.stderr
        index_before = home.layout.instances_path.read_bytes()
        for method, env in (("stdin", {}), (f"file={secret_file}", {}), ("stdin", {"CI": "true"})):
            done = home.chock("login", "--provider", provider, "--name", "local", "--password-method", method,
                              input="sk-second\n", env=env)  # fmt: skip
            assert done.returncode == 3, (method, env, done.stderr)
            assert "--replace" in done.stderr and "--name <another name>" in done.stderr, done.stderr
            assert "sk-" not in done.stdout + done.stderr
            assert home.layout.instances_path.read_bytes() == index_before
            assert tokens(home) == {"local": "sk-first"}
        assert len(fake.requests) == 1  # the first login's check only: a refused one never reached the provider
        done = home.chock("login", "--provider", provider, "--name", "local", "--password-method", "stdin",
                          "--replace", input="sk-second\n")  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert tokens(home) == {"local": "sk-second"}


def test_a_pipe_is_refused_as_a_real_process(home):
    home.write_config(FILE_STORE)
    piped(home, "aiand", secret="sk-first")
    proc = spawn_login(home, {"provider_text": "aiand"}, stdin=subprocess.PIPE)
    out, _ = proc.communicate("sk-second\n", timeout=30)
    assert proc.returncode == 3, out
    assert "NameTaken" in out and "--replace" in out
    assert tokens(home) == {"aiand": "sk-first"}


def test_index_written_by_login_reads_back_as_zon(home):
    home.write_config(FILE_STORE)
    piped(home, "openai-compat=http://127.0.0.1:5000/v1", name="my-box", model="qwen")
    text = home.layout.instances_path.read_text()
    assert '.@"my-box"' in text
    assert zon.loads(text) == {
        "my-box": {"kind": "openai-compat", "address": "http://127.0.0.1:5000/v1", "model": "qwen", "stored": "file"}
    }


def test_tmp_files_do_not_linger(home):
    home.write_config(FILE_STORE)
    for n in range(3):
        piped(home, "aiand", name=f"n{n}")
    assert sorted(p.name for p in Path(home.layout.data).iterdir()) == ["instances.zon", "login.lock", "tokens.zon"]
