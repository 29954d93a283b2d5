"""MCP servers as a person declares them (config.zon's `.mcp`) and as a project does (`.chock/mcp.zon`, used only
once trusted on this host), and the credential of a remote server, bound to its origin (docs/mcp.md).

Real git projects, real `chock` processes (a real pty for the trust question), the file credential store.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from chock.config import KEYS, ConfigError, children, load_config
from chock.credentials.instance_index import read_index
from chock.credentials.login import login
from chock.credentials.lookup import mcp_credential
from chock.credentials.refusals import CredentialError
from chock.errors import UsageError
from chock.instances import available
from chock.mcp import trust
from chock.mcp.declarations import SERVER_KEYS, ServerSpec, project_declaration
from chock.mcp.session_specs import WHOLE, read_declaration, servers_for_session
from chock.session.workspace import open_project
from tests.fakes.projects import git, make_project
from tests.fakes.sessions import no_process_left
from tests.fakes.terminal import Terminal

DECLARATION = '.{ .servers = .{ .build = .{ .command = .{ "/usr/bin/build-mcp", "--stdio" } } } }\n'
CHANGED = '.{ .servers = .{ .build = .{ .command = .{ "/usr/bin/build-mcp", "--stdio" }, .network = true } } }\n'
FAKE_SERVER = Path(__file__).parent / "fakes" / "mcp_server.py"
FILE_STORE = '.{ .credentials = .{ .store = "file" } }\n'
KEY = "mcp-secret-7a0e"


def configured(home, servers: str) -> object:
    home.write_config(f".{{ .mcp = .{{ .servers = .{{ {servers} }} }} }}\n")
    return load_config(home.layout.config)


def refusal(home, servers: str) -> str:
    with pytest.raises(ConfigError) as refused:
        configured(home, servers)
    return str(refused.value).split(": ", 1)[1]


def test_config_declares_stdio_and_remote_servers(home) -> None:
    config = configured(
        home,
        '.docs = .{ .command = .{ "docs-mcp", "--stdio" }, .timeout = 30 }, '
        '.tracker = .{ .url = "https://tracker.example/mcp", .credential = "tracker" }, '
        '.@"local-db" = .{ .url = "http://127.0.0.1:8931/mcp" }',
    )
    assert config.mcp == {
        "docs": ServerSpec("docs", "config", command=("docs-mcp", "--stdio"), timeout=30.0),
        "tracker": ServerSpec("tracker", "config", url="https://tracker.example/mcp", credential="tracker"),
        "local-db": ServerSpec("local-db", "config", url="http://127.0.0.1:8931/mcp"),
    }


def test_every_server_key_is_a_row_of_the_config_table() -> None:
    assert children(".mcp.servers.NAME") == SERVER_KEYS
    assert all(key.meaning for key in KEYS if key.path.startswith(".mcp."))


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ('.Docs = .{ .command = .{ "x" } }', ".mcp.servers.Docs: a server's name is 1 to 16 lowercase letters"),
        ('.@"a-very-long-server-name" = .{ .command = .{ "x" } }', '.mcp.servers.@"a-very-long-server-name": a'),
        ('.docs = .{ .command = "docs-mcp --stdio" }', ".mcp.servers.docs.command is a string, and no shell ever "
         'reads it: write the argv as a list, as .command = .{ "docs-mcp", "--stdio" }'),
        (".docs = .{ .command = .{} }", ".mcp.servers.docs.command is empty"),
        ('.docs = .{ .command = .{ "" } }', ".mcp.servers.docs.command[0] must not be empty"),
        (".docs = .{}", ".mcp.servers.docs needs exactly one of .command"),
        ('.docs = .{ .command = .{ "x" }, .url = "https://a.example/" }', ".mcp.servers.docs needs exactly one of"),
        ('.docs = .{ .command = .{ "x" }, .workspace = "write", .network = true }',
         '.mcp.servers.docs: .workspace = "write" cannot be combined with .network = true'),
        ('.docs = .{ .command = .{ "x" }, .workspace = "all" }', '.mcp.servers.docs.workspace must be "read" or'),
        ('.docs = .{ .command = .{ "x" }, .network = "yes" }', ".mcp.servers.docs.network must be true or false"),
        ('.docs = .{ .command = .{ "x" }, .credential = "t" }', ".mcp.servers.docs.credential: a stdio server is "
         "sent no credential"),
        ('.t = .{ .url = "http://tracker.example/mcp" }', ".mcp.servers.t.url: plain http is allowed only to this "
         "machine"),
        ('.t = .{ .url = "ftp://tracker.example/" }', '.mcp.servers.t.url: "ftp://tracker.example/" is not an https'),
        ('.t = .{ .url = "https://me:pw@tracker.example/" }', ".mcp.servers.t.url: a URL carries no user or "
         "password"),
        ('.t = .{ .url = "https://t.example/", .network = true }', ".mcp.servers.t.network: a remote server"),
        ('.docs = .{ .command = .{ "x" }, .timeout = 0 }', ".mcp.servers.docs.timeout must be a number of seconds "
         "from 1 to 3600 (got 0)"),
        ('.docs = .{ .command = .{ "x" }, .timeout = 86400 }', ".mcp.servers.docs.timeout must be a number"),
        ('.docs = .{ .command = .{ "x" }, .env = 1 }', "unknown key .mcp.servers.docs.env (known keys in "
         ".mcp.servers.docs: command, url, credential, network, workspace, timeout)"),
    ],
)  # fmt: skip
def test_each_mistake_is_refused_naming_its_key_path(home, servers: str, message: str) -> None:
    assert refusal(home, servers).startswith(message)


def test_the_declaration_is_read_from_the_start_commit_not_the_checkout(tmp_path) -> None:
    project = make_project(tmp_path / "p", {"README.md": "x\n", ".chock/mcp.zon": DECLARATION})
    found = open_project(project)
    (project / ".chock/mcp.zon").write_text(CHANGED)  # uncommitted: not what the session starts from
    assert project_declaration(found.repo, found.head) == DECLARATION.encode()
    assert read_declaration(found.repo, found.head).servers["build"].network is False


def test_a_symlinked_or_oversized_declaration_is_refused_unread(tmp_path) -> None:
    project = make_project(tmp_path / "p")
    (project / ".chock").mkdir()
    os.symlink("/etc/passwd", project / ".chock/mcp.zon")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "link")
    found = open_project(project)
    assert "symlink" in read_declaration(found.repo, found.head).problem
    (project / ".chock/mcp.zon").unlink()
    (project / ".chock/mcp.zon").write_text("// " + "x" * 70_000 + "\n" + DECLARATION)
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "big")
    found = open_project(project)
    assert "at most 64 KiB" in read_declaration(found.repo, found.head).problem


def test_a_project_cannot_name_a_credential(tmp_path) -> None:
    text = '.{ .servers = .{ .t = .{ .url = "https://t.example/mcp", .credential = "work" } } }\n'
    project = make_project(tmp_path / "p", {".chock/mcp.zon": text})
    found = open_project(project)
    problem = read_declaration(found.repo, found.head).problem
    assert ".servers.t.credential: a project's declaration cannot name a credential" in problem


def _session_servers(home, project: Path, ask=None):
    found = open_project(project)
    return servers_for_session(load_config(home.layout.config), found.repo, found.head, home.layout, ask)


def test_untrusted_servers_are_skipped_when_nobody_can_be_asked_and_asked_about_again_when_changed(home, tmp_path):
    home.write_config('.{ .mcp = .{ .servers = .{ .docs = .{ .command = .{ "/usr/bin/docs" } } } } }\n')
    project = make_project(tmp_path / "p", {".chock/mcp.zon": DECLARATION})
    started, skipped = _session_servers(home, project)
    assert [spec.name for spec in started] == ["docs"]
    assert skipped == [("build", skipped[0][1])] and "not trusted on this host" in skipped[0][1]
    assert "`chock mcp trust`" in skipped[0][1]

    questions: list[str] = []
    started, skipped = _session_servers(home, project, lambda q: questions.append(q) or False)
    assert [spec.name for spec in started] == ["docs"] and skipped[0][0] == "build"
    assert DECLARATION.strip() in questions[0] and questions[0].endswith("[y/N] ")

    started, skipped = _session_servers(home, project, lambda q: True)  # yes: trusted from now on
    assert [(spec.name, spec.origin) for spec in started] == [("docs", "config"), ("build", "project")]
    assert _session_servers(home, project, lambda q: pytest.fail("asked again")) == (started, [])

    (project / ".chock/mcp.zon").write_text(CHANGED)
    git(project, "commit", "-q", "-am", "network")
    started, skipped = _session_servers(home, project)
    assert "changed since it was trusted" in skipped[0][1]
    questions.clear()
    _session_servers(home, project, lambda q: questions.append(q) or False)
    assert "+.{ .servers = .{ .build = .{" in questions[0] and ".network = true" in questions[0]
    assert "-.{ .servers" in questions[0]


def test_the_question_shows_the_declaration_through_the_safe_printer(home, tmp_path) -> None:
    hostile = "// \x1b]52;c;cm0gLXJmIH4=\x07 \u202eevil\n" + DECLARATION
    project = make_project(tmp_path / "p", {".chock/mcp.zon": hostile})
    questions: list[str] = []
    _session_servers(home, project, lambda q: questions.append(q) or False)
    assert "\x1b" not in questions[0] and "\x07" not in questions[0] and "\u202e" not in questions[0]
    assert "\\x1b]52;c;cm0gLXJmIH4=" in questions[0]


def test_a_broken_declaration_or_a_name_config_has_skips_without_stopping_anything(home, tmp_path) -> None:
    home.write_config('.{ .mcp = .{ .servers = .{ .build = .{ .command = .{ "/usr/bin/mine" } } } } }\n')
    project = make_project(tmp_path / "p", {".chock/mcp.zon": DECLARATION})
    started, skipped = _session_servers(home, project, lambda q: True)
    assert [spec.command for spec in started] == [("/usr/bin/mine",)]
    assert skipped[0][0] == "build" and "the person's own entry wins" in skipped[0][1]

    (project / ".chock/mcp.zon").write_text(".{ .servers = .{ .x = .{ .command = 1 } } }\n")
    git(project, "commit", "-q", "-am", "broken")
    started, skipped = _session_servers(home, project, lambda q: pytest.fail("a broken file is not asked about"))
    assert [spec.name for spec in started] == ["build"]
    assert skipped[0][0] == WHOLE and ".servers.x.command must be a list of strings" in skipped[0][1]


def test_chock_mcp_trust_shows_asks_and_refuses_with_nobody_to_ask(home, tmp_path) -> None:
    project = make_project(tmp_path / "p", {".chock/mcp.zon": DECLARATION})
    piped = home.chock("mcp", "trust", cwd=project)
    assert piped.returncode == 3 and "nobody to ask" in piped.stderr and "chock mcp trust --yes" in piped.stderr
    assert trust.last_trusted(home.layout, project) is None

    terminal = Terminal.chock(home, "mcp", "trust", cwd=project)
    terminal.wait_for("[y/N] ")
    assert b"/usr/bin/build-mcp" in terminal.screen
    terminal.type("n\n")
    assert terminal.exit_code() == 0 and trust.last_trusted(home.layout, project) is None

    terminal = Terminal.chock(home, "mcp", "trust", cwd=project)
    terminal.wait_for("[y/N] ")
    terminal.type("y\n")
    assert terminal.exit_code() == 0
    assert trust.trusted(home.layout, project, DECLARATION.encode())
    again = home.chock("mcp", "trust", cwd=project)
    assert again.returncode == 0 and "trusted here already" in again.stdout

    (project / ".chock/mcp.zon").write_text(CHANGED)
    git(project, "commit", "-q", "-am", "network")
    yes = home.chock("mcp", "trust", "--yes", cwd=project)
    assert yes.returncode == 0 and "+.{ .servers" in yes.stderr, yes.stderr
    assert trust.trusted(home.layout, project, CHANGED.encode())


def test_chock_mcp_list_shows_an_untrusted_project_server_without_starting_it(home, tmp_path) -> None:
    marker = tmp_path / "started"
    text = f'.{{ .servers = .{{ .build = .{{ .command = .{{ "/usr/bin/touch", "{marker}" }} }} }} }}\n'
    project = make_project(tmp_path / "p", {".chock/mcp.zon": text})
    listed = home.chock("mcp", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert "build" in listed.stdout and "project" in listed.stdout and "not started" in listed.stdout
    assert "not trusted on this host" in listed.stdout
    assert not marker.exists()


# ---- the credential of a remote server ------------------------------------------------------------------


def mcp_login(home, url: str, name: str = "tracker", secret: str = KEY):
    def never(kind: str, address: str, credential: str) -> None:
        pytest.fail("an MCP credential is not checked against a model provider")

    return login(
        home.layout, load_config(home.layout.config), f"mcp={url}", name=name, password_method="stdin",
        interactive=False, stdin=io.StringIO(secret + "\n"), check=never, environ={},
    )  # fmt: skip


def test_login_stores_an_mcp_credential_under_its_origin_and_it_is_no_instance(home) -> None:
    home.write_config(FILE_STORE)
    result = mcp_login(home, "https://tracker.example/mcp")
    assert (result.kind, result.address, result.stored) == ("mcp", "https://tracker.example:443", True)
    entry = read_index(home.layout)["tracker"]
    assert (entry.kind, entry.address) == ("mcp", "https://tracker.example:443")
    assert KEY not in home.layout.instances_path.read_text()
    assert "tracker" not in available(home.layout, load_config(home.layout.config))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://tracker.example/mcp", "plain http is allowed only to this machine"),
        ("https://me:pw@tracker.example/mcp", "a URL carries no user or password"),
        ("", "needs the server's URL"),
    ],
)
def test_login_refuses_a_url_a_credential_must_not_go_to(home, url: str, message: str) -> None:
    home.write_config(FILE_STORE)
    with pytest.raises(UsageError, match=message):
        mcp_login(home, url)
    assert read_index(home.layout) == {}


def test_the_credential_is_given_only_to_the_origin_it_was_stored_for(home) -> None:
    home.write_config(FILE_STORE)
    mcp_login(home, "https://tracker.example/mcp")
    config = load_config(home.layout.config)
    same = ServerSpec("t", "config", url="https://tracker.example:443/other/path", credential="tracker")
    assert mcp_credential(home.layout, config, same, can_prompt=False) == KEY
    assert (
        mcp_credential(home.layout, config, ServerSpec("t", "config", url="https://x.example/"), can_prompt=False)
        is None
    )
    for elsewhere in ("https://evil.example/mcp", "https://tracker.example:8443/mcp", "http://127.0.0.1/mcp"):
        spec = ServerSpec("t", "config", url=elsewhere, credential="tracker")
        with pytest.raises(CredentialError) as refused:
            mcp_credential(home.layout, config, spec, can_prompt=False)
        assert "stored for https://tracker.example:443" in str(refused.value) and KEY not in str(refused.value)


def test_a_model_instance_credential_is_never_an_mcp_servers(home) -> None:
    home.write_config(FILE_STORE)
    login(
        home.layout, load_config(home.layout.config), "openai-compat=http://127.0.0.1:9/v1", name="work",
        password_method="stdin", interactive=False, stdin=io.StringIO(KEY + "\n"), check=lambda *a: None, environ={},
    )  # fmt: skip
    spec = ServerSpec("t", "config", url="http://127.0.0.1:9/v1", credential="work")
    with pytest.raises(CredentialError, match="a openai-compat instance's credential, not an MCP server's"):
        mcp_credential(home.layout, load_config(home.layout.config), spec, can_prompt=False)
    missing = ServerSpec("t", "config", url="https://t.example/", credential="nobody")
    with pytest.raises(CredentialError, match="chock login stored no credential by that name"):
        mcp_credential(home.layout, load_config(home.layout.config), missing, can_prompt=False)


# ---- chock mcp list and chock doctor, with real servers in their sandboxes --------------------------------


def fake_server(tmp_path: Path, marker: str, *switches: str) -> str:
    """A server's argv as config.zon writes it: the test MCP server copied outside the home, marked."""
    servers = tmp_path / "servers"
    servers.mkdir(exist_ok=True)
    shutil.copy(FAKE_SERVER, servers / "mcp_server.py")
    argv = ["/usr/bin/python3", str(servers / "mcp_server.py"), "--stderr", marker, *switches]
    return "{ " + ", ".join(f'"{arg}"' for arg in argv) + " }"


def test_chock_mcp_list_and_doctor_start_each_server_and_leave_none_running(home, tmp_path) -> None:
    with no_process_left() as marker:
        argv = fake_server(tmp_path, marker)
        broken = fake_server(tmp_path, marker, "--die-initialize")
        hostile = fake_server(tmp_path, marker, "--hostile-description")
        home.write_config(
            f".{{ .mcp = .{{ .servers = .{{ .docs = .{{ .command = .{argv} }}, .broken = .{{ .command = .{broken} }}, "
            f".hostile = .{{ .command = .{hostile} }} }} }} }}\n"
        )
        project = make_project(
            tmp_path / "p", {".chock/mcp.zon": f".{{ .servers = .{{ .build = .{{ .command = .{argv} }} }} }}\n"}
        )
        trust.trust(home.layout, project, (project / ".chock/mcp.zon").read_bytes())
        listed = home.chock("mcp", "list", cwd=project)
        assert listed.returncode == 1, listed.stderr  # one failed to start
        lines = listed.stdout.splitlines()
        assert lines[0].split()[:3] == ["broken", "config", "failed"] and "exit status 4" in lines[1]
        docs = lines.index(next(line for line in lines if line.startswith("docs ")))
        assert lines[docs].split()[:3] == ["docs", "config", "started"]
        assert "    mcp__docs__echo  Say the text back" in lines
        assert any(line.split()[:3] == ["build", "project", "started"] for line in lines)
        assert "    mcp__build__echo  Say the text back" in lines
        assert "\x1b" not in listed.stdout  # the failing server's stderr and a tool's description are shown escaped
        assert "    mcp__hostile__echo  Say the text back\\x1b]0;pwned\\x07\\x1b[2J" in lines

        doctor = home.chock("doctor", cwd=project)
        assert "ok  mcp docs" in doctor.stdout and "config: 13 tools" in doctor.stdout, doctor.stdout
        assert "no  mcp broken" in doctor.stdout and "ok  mcp build" in doctor.stdout
        outside = tmp_path / "outside"
        outside.mkdir()
        assert home.chock("mcp", "list", cwd=outside).stdout.startswith("broken ")
        assert not (home.layout.data / "mcp").exists()  # no HOME of a server is left behind, in a project or not


def test_chock_login_stores_an_mcp_credential_that_chock_credentials_lists_by_origin(home) -> None:
    home.write_config(FILE_STORE)
    stored = home.chock("login", "--provider", "mcp=https://tracker.example/mcp", "--name", "tracker", input=KEY + "\n")
    assert stored.returncode == 0, stored.stderr
    assert "stored the credential of 'tracker' (mcp at https://tracker.example:443)" in stored.stdout
    listed = home.chock("credentials")
    assert "tracker" in listed.stdout and "https://tracker.example:443" in listed.stdout
    assert KEY not in listed.stdout + stored.stdout + stored.stderr
    model = home.chock("login", "--provider", "mcp=https://t.example/", "--name", "t", "--model", "m", input=KEY)
    assert model.returncode == 2 and "an MCP server's credential (mcp=URL) has no model" in model.stderr
