"""`ssh://` addresses and named connections without a host (docs/remote.md): parsed strictly, refused before
anything runs, printed back as written, the ssh argv built from them, config.zon's `.connections` checked when
the file is read, and ssh's or dial-stdio's failures read into one line a person can act on. Real hosts over
real OpenSSH are tests/test_remote_ssh.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from chock.config import ConfigError, load_config
from chock.control import daemon_protocol as dp
from chock.control.address import BadAddress, host_address, parse_address
from chock.control.ssh import NO_DAEMON, SshTarget, explain, parse_ssh, ssh_argv
from chock.errors import EXIT_USAGE

GOOD = [
    "ssh://build.lan",
    "ssh://me@build.lan",
    "ssh://dev@[fd00::5]:2222",
    "ssh://u@127.0.0.2:2222/home/u/.local/state/chock/daemon.sock",
    "ssh://_x.y-z@h-1.example:65535",
    "ssh://[::1]",
]

# Each refused, and the part named in the refusal.
BAD = [
    ("ssh://-oProxyCommand=touch${IFS}/tmp/x@h", "the host '-oProxyCommand=touch${IFS}'"),
    ("ssh://h/$(touch x)", "the socket path '/$(touch x)'"),
    ("ssh://-h", "the host '-h'"),
    ("ssh://h:0", "the port '0'"),
    ("ssh://h:65536", "the port '65536'"),
    ("ssh://h:22x", "the port '22x'"),
    ("ssh://h:", "the port ''"),
    ("ssh://my host", "the host 'my host'"),
    ("ssh://-u@h", "the user '-u'"),
    ("ssh://a;b@h", "the user 'a;b'"),
    ("ssh://[nope]:22", "the host [nope]"),
    ("ssh://fd00::5", "goes in brackets"),
    ("ssh://h/a b", "the socket path '/a b'"),
    ("ssh://h/../x\n", "the socket path"),
    # An IPv6 literal's zone is any text to Python's ipaddress: it would reach ssh's hostname (and a `%h` of a
    # ProxyCommand or `Match exec` in the person's ~/.ssh/config) as written.
    ("ssh://[fe80::1%$(touch${IFS}x)]", "the host [fe80::1%$(touch${IFS}x)]"),
    ("ssh://[fe80::1%-oProxyCommand=x]:22", "the host [fe80::1%-oProxyCommand=x]"),
    ("ssh://[fe80::1%a b]", "the host [fe80::1%a b]"),
]


@pytest.mark.parametrize("text", GOOD)
def test_an_ssh_address_prints_back_as_written(text: str) -> None:
    assert str(parse_address(text)) == text
    assert parse_address(text) == parse_address(text) and parse_address(text).ssh is not None


@pytest.mark.parametrize(("text", "part"), BAD)
def test_a_bad_ssh_address_is_refused_naming_the_bad_part(text: str, part: str) -> None:
    with pytest.raises(BadAddress) as info:
        parse_address(text)
    assert part in str(info.value) and info.value.exit_code == EXIT_USAGE


def test_ssh_runs_from_an_argv_that_asks_nothing_forwards_nothing_and_shares_a_master() -> None:
    target = parse_ssh("ssh://dev@[fd00::5]:2222/run/d.sock")
    assert ssh_argv(target, "/run/user/1000/chock/ssh") == [
        "ssh", "-T", "-e", "none",
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ClearAllForwardings=yes",
        "-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "PermitLocalCommand=no", "-o", "ConnectTimeout=10",
        "-o", "ControlMaster=auto", "-o", "ControlPersist=60", "-o", "ControlPath=/run/user/1000/chock/ssh/%C",
        "-l", "dev", "-p", "2222", "--", "fd00::5", "chock", "dial-stdio", "--socket", "/run/d.sock",
    ]  # fmt: skip
    assert ssh_argv(parse_ssh("ssh://h"), "/d")[-4:] == ["--", "h", "chock", "dial-stdio"]


TARGET = SshTarget("build.lan", user="me", port=2222)


@pytest.mark.parametrize(
    ("code", "stderr", "said"),
    [
        (
            255,
            b"@@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\nHost key verification failed.\r\n",
            "ssh refused me@build.lan: its host key changed (ssh: REMOTE HOST IDENTIFICATION HAS CHANGED); nothing "
            "was sent. if the change is expected, run `ssh-keygen -R '[build.lan]:2222'` and then "
            "`ssh -p 2222 me@build.lan` once by hand to check and accept the new key",
        ),
        (
            255,
            b"No ED25519 host key is known for [build.lan]:2222 and you have requested strict checking.\r\n"
            b"Host key verification failed.\r\n",
            "ssh refused me@build.lan: ssh: Host key verification failed.; nothing was sent. run "
            "`ssh -p 2222 me@build.lan` once by hand to check and accept its host key",
        ),
        (
            NO_DAEMON,
            b"no chock daemon answers at /h/daemon.sock (there is no socket at that path): enable it with x\n",
            "me@build.lan has no chock daemon answering: no chock daemon answers at /h/daemon.sock (there is no "
            "socket at that path): enable it with x",
        ),
        (127, b"sh: 1: chock: not found\n", "me@build.lan has no `chock` on its non-interactive PATH (sh: 1: chock"),
        (
            2,
            b"Usage: chock [OPTIONS] COMMAND [ARGS]...\nTry 'chock -h' for help.\n\nError: No such command "
            b"'dial-stdio'.\n",
            "the Chock on me@build.lan is too old to be reached over ssh (it has no `chock dial-stdio`)",
        ),
        (255, b"me@build.lan: Permission denied (publickey).\r\n", "ssh could not log in to me@build.lan (me@"),
        (255, b"ssh: connect to host build.lan port 2222: Connection refused\r\n", "ssh could not reach me@build"),
        (0, b"", None),
    ],
)
def test_why_a_connection_ended_is_one_line_saying_what_to_do(code: int, stderr: bytes, said: str | None) -> None:
    found = explain(TARGET, code, stderr)
    if said is None:
        assert found is None
    else:
        assert found is not None and found.startswith(said), found
        assert "\n" not in found


def _shim(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose `ssh` only records that it ran."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "ssh-ran"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 255\n')
    (bin_dir / "ssh").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, marker


@pytest.mark.parametrize("text", [text for text, _ in BAD[:5]] + ["my host"])
def test_an_adversarial_address_is_refused_and_nothing_runs(home, project, tmp_path, text: str) -> None:
    env, marker = _shim(tmp_path)
    control = Path(home.env["XDG_RUNTIME_DIR"]) / "chock/ssh"
    done = home.chock("sessions", "--daemon", text, cwd=project, env=env)
    assert done.returncode == 2, done.stderr
    assert "is not" in done.stderr
    by_variable = home.chock("sessions", cwd=project, env={**env, "CHOCK_DAEMON": text})
    assert by_variable.returncode == 2, by_variable.stderr
    assert not marker.exists() and not control.exists()  # no ssh started, no master's socket made
    assert not (project / "x").exists()


def test_a_good_address_does_run_ssh(home, project, tmp_path) -> None:
    """The shim above records a run: the refusals are what kept it from running."""
    env, marker = _shim(tmp_path)
    done = home.chock("sessions", "--daemon", "ssh://me@build.lan", cwd=project, env=env)
    assert done.returncode != 0
    assert marker.read_text().split()[-4:] == ["--", "build.lan", "chock", "dial-stdio"]


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.zon"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('.{ .connections = .{ .@"my host" = "ssh://h" } }', '.connections.@"my host": a connection\'s name is'),
        ('.{ .connections = .{ .Build = "ssh://h" } }', ".connections.Build: a connection's name is"),
        ('.{ .connections = .{ .local = "ssh://h" } }', ".connections.local: `local` is this machine's own daemon"),
        ('.{ .connections = .{ .vm = "ssh://-oProxyCommand=x@h" } }', ".connections.vm: 'ssh://-oProxyCommand=x"),
        (".{ .connections = .{ .vm = 3 } }", ".connections.vm must be a string"),
        ('.{ .connections = "ssh://h" }', ".connections must be a struct of named addresses"),
    ],
)
def test_a_bad_connection_in_config_is_refused_naming_its_key(tmp_path: Path, text: str, said: str) -> None:
    path = _config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {said}"), str(info.value)


def test_a_connection_name_stands_for_its_address_and_local_for_this_machines_daemon(tmp_path: Path) -> None:
    config = load_config(
        _config(tmp_path, '.{ .connections = .{ .build = "ssh://me@build.lan", .vm = "ssh://dev@[fd00::5]:2222" } }')
    )
    assert host_address("build", config.connections) == ("build", parse_address("ssh://me@build.lan"))
    assert str(host_address("vm", config.connections)[1]) == "ssh://dev@[fd00::5]:2222"
    local = parse_address("unix:/run/d.sock")
    assert host_address("local", config.connections, local=local) == ("local", local)
    assert host_address("ssh://h:22", config.connections)[0] == "ssh://h:22"
    with pytest.raises(BadAddress) as info:
        host_address("nas", config.connections)
    assert str(info.value).startswith("'nas' is not a connection in config.zon (connections: build, vm;")


def test_a_name_works_wherever_an_address_does(home, project) -> None:
    """`--daemon NAME` and `$CHOCK_DAEMON=NAME` reach the address config.zon gives the name."""
    path = Path(home.env["XDG_RUNTIME_DIR"]) / "d.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))  # a socket that never answers: the error names the address reached
        home.write_config(f'.{{ .connections = .{{ .here = "unix:{path}" }} }}\n')
        for done in (
            home.chock("sessions", "--daemon", "here", cwd=project, timeout=60),
            home.chock("sessions", cwd=project, env={"CHOCK_DAEMON": "here"}, timeout=60),
        ):
            assert done.returncode != 0 and f"unix:{path}" in done.stderr, done.stderr


@pytest.mark.parametrize("named", ["build", "ssh://me@build.lan"])
def test_detach_refuses_another_machines_daemon_before_asking(home, project, tmp_path, named: str) -> None:
    env, marker = _shim(tmp_path)
    home.write_config('.{ .connections = .{ .build = "ssh://me@build.lan" } }\n')
    for done in (
        home.chock("detach", "--daemon", named, "20260101-000001-000001", cwd=project, env=env),
        home.chock("detach", "20260101-000001-000001", cwd=project, env={**env, "CHOCK_DAEMON": named}),
    ):
        assert done.returncode == 2, done.stderr
        assert "detach hands a session to this machine's daemon" in done.stderr
    assert not marker.exists()


def test_dial_stdio_with_no_daemon_exits_with_its_own_code_and_says_how_to_enable_one(home) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chock", "dial-stdio", "--socket", str(home.root / "none.sock")],
        capture_output=True, text=True, env=home.env, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert done.returncode == NO_DAEMON
    assert done.stderr.count("\n") == 1 and "systemctl --user enable --now chock.socket" in done.stderr


def test_dial_stdio_joins_its_input_and_output_to_the_daemon(home, daemon) -> None:
    """The bytes of a greeting go in, the daemon's answer comes out: dial-stdio speaks no protocol itself."""
    done = subprocess.run(
        [sys.executable, "-m", "chock", "dial-stdio", "--socket", str(daemon.socket)],
        input=f"hello chock-control {dp.CONTROL.number}\n".encode(), capture_output=True, env=home.env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"ok chock-control ")


def test_dial_stdio_is_hidden_from_help(home) -> None:
    assert "dial-stdio" not in home.chock("--help").stdout
    assert "connections" in home.chock("--help").stdout


def test_dial_stdio_starts_without_click_and_imports_little(home) -> None:
    """Every remote request pays dial-stdio's start (docs/architecture.md#start-up)."""
    from tests.test_start_up import chock_loading

    done, loaded = chock_loading(home, "dial-stdio", "--socket", str(home.root / "none.sock"))
    assert done.returncode == NO_DAEMON, done.stderr
    assert not {"click", "chock.commands.cli", "socket"} & loaded
    assert {name for name in loaded if name.startswith("chock.")} <= {
        "chock.argv", "chock.commands", "chock.commands.dial", "chock.entry", "chock.errors", "chock.paths",
    }  # fmt: skip
