"""Steering names its target or refuses (docs/architecture.md#steering): `chock say`'s session and message, a
mistyped id, the daemon `$CHOCK_DAEMON` names, and every command's `--daemon`, `--port` and `$CHOCK_DAEMON`.

Real daemons, real `chock run` sessions on a `replay` instance, `chock` run as a process.
"""

from __future__ import annotations

import os
import shutil

import click

from chock.commands.base import through_daemon
from chock.commands.cli import main
from tests.fakes.sessions import replay_config
from tests.fakes.wait import wait_until

DONE = [{"text": "Done.", "tool_calls": []}] * 8


def said(home, session_id: str) -> list[str]:
    return [e["text"] for e in home.events(session_id) if e["type"] == "user.message"]


def ended_sessions(home, project, *messages: str) -> list[str]:
    """A completed session per message, oldest first."""
    replay_config(home, DONE)
    ids = []
    for message in messages:
        assert home.chock("run", message, cwd=project).returncode == 0
        ids.append(next(i for i in os.listdir(home.layout.sessions_dir) if i not in ids and not i.startswith(".")))
    return ids


def continued(home, session_id: str) -> None:
    ends = lambda: [e for e in home.events(session_id) if e["type"] == "session.end"]  # noqa: E731
    wait_until(lambda: len(ends()) == 2, 60, f"session {session_id}'s second end")


def test_a_piped_message_goes_to_the_session_named_and_a_mistyped_id_reaches_nobody(home, project, daemon):
    older, newest = ended_sessions(home, project, "first", "second")
    piped = home.chock("say", older, "--daemon", daemon.address, input="also this\n", cwd=project)
    assert piped.returncode == 0, piped.stderr
    continued(home, older)
    assert said(home, older) == ["first", "also this"]
    assert said(home, newest) == ["second"]
    assert older in piped.stdout and daemon.address in piped.stdout  # names the session and the daemon

    logs = {i: home.layout.log_path(i).read_bytes() for i in (older, newest)}
    flipped = older[:-1] + ("0" if older[-1] != "0" else "1")
    for mistyped in (flipped, older[:-1], older + "0", "20261201-101010-word"):
        for args, piped_text in (((mistyped, "hello"), ""), ((mistyped,), "hello\n")):
            refused = home.chock("say", *args, "--daemon", daemon.address, input=piped_text, cwd=project)
            assert refused.returncode == 2, (mistyped, refused.stdout, refused.stderr)
            assert "no session" in refused.stderr and mistyped in refused.stderr, refused.stderr
    assert {i: home.layout.log_path(i).read_bytes() for i in (older, newest)} == logs  # nothing said to anyone


def test_a_message_beginning_with_an_id_goes_after_dashes_and_one_given_twice_is_refused(home, project, daemon):
    (session_id,) = ended_sessions(home, project, "first")
    text = "20261201-101010-word is a message"
    done = home.chock("say", "--daemon", daemon.address, "--", *text.split(), cwd=project)
    assert done.returncode == 0, done.stderr
    assert session_id in done.stdout and daemon.address in done.stdout
    continued(home, session_id)
    assert said(home, session_id) == ["first", text]

    log = home.layout.log_path(session_id).read_bytes()
    for args in ((session_id, "from args"), ("from", "args")):
        twice = home.chock("say", *args, "--daemon", daemon.address, input="from stdin\n", cwd=project)
        assert twice.returncode == 2, twice.stderr
        assert "both as arguments and on standard input" in twice.stderr
    assert home.layout.log_path(session_id).read_bytes() == log


def test_remove_with_chock_daemon_set_removes_through_that_daemon_and_leaves_the_local_session(
    home, project, daemons, tmp_path
):
    (session_id,) = ended_sessions(home, project, "first")
    other_state = tmp_path / "other-state"
    shutil.copytree(home.layout.session_dir(session_id), other_state / "sessions" / session_id)
    other = daemons.start(env={"CHOCK_STATE_DIR": str(other_state)})
    removed = home.chock("sessions", "remove", session_id, env={"CHOCK_DAEMON": other.address}, cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert home.layout.log_path(session_id).exists() and said(home, session_id) == ["first"]
    assert not (other_state / "sessions" / session_id).exists()
    assert session_id in removed.stdout and other.address in removed.stdout

    # --with-workspace goes through the daemon too (`remove-with-workspace`): there, and only there.
    shutil.copytree(home.layout.session_dir(session_id), other_state / "sessions" / session_id)
    workspace = home.chock(
        "sessions", "remove", "--with-workspace", session_id, env={"CHOCK_DAEMON": other.address}, cwd=project
    )
    assert workspace.returncode == 0, workspace.stderr
    assert not (other_state / "sessions" / session_id).exists()
    assert home.layout.log_path(session_id).exists()

    mistyped = session_id[:-1] + ("0" if session_id[-1] != "0" else "1")
    for daemon_env in ({"CHOCK_DAEMON": other.address}, {}):  # through the daemon, and on this machine
        some = home.chock("sessions", "remove", session_id, mistyped, env=daemon_env, cwd=project)
        assert some.returncode == 2 and "no session '" in some.stderr, some.stderr
        assert home.layout.log_path(session_id).exists()  # every id is checked before any is removed


# Every command that can act through a daemon, and what it is asked in the walk; a command that gains --daemon
# must be added here.
THROUGH_DAEMON = {
    "sessions": ("sessions", "--json"),
    "sessions remove": ("sessions", "remove", "{local}"),
    "usage": ("usage",),
    "plan": ("plan",),
    "stop": ("stop", "{local}"),
    "say": ("say", "{local}", "hello"),
    "attach": ("attach", "{local}"),
    "approve": ("approve", "{local}"),
    "export": ("export", "{local}"),
    "rules": ("rules",),
    "rules remove": ("rules", "remove", "p0a1b2c3d"),
    "detach": ("detach",),
    "move": ("move", "{local}", "--to", "local"),
    "doctor": ("doctor",),
    "serve": ("serve",),
}


def commands(group: click.Group = main, path: tuple[str, ...] = ()):
    """Every command below `chock`, groups included, with its path."""
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def test_every_command_takes_daemon_port_and_chock_daemon_alike_or_refuses_them_by_name(home, project, daemons):
    (local,) = ended_sessions(home, project, "here only")
    other = daemons.start("--host", "127.0.0.1", "--port", "0", env={"CHOCK_STATE_DIR": str(home.root / "other")})
    port = other.tcp.rpartition(":")[2]
    clients = {" ".join(path) for path, command in commands() if through_daemon(command)}
    assert clients == set(THROUGH_DAEMON)

    for name, args in THROUGH_DAEMON.items():
        args = tuple(arg.format(local=local) for arg in args)
        # One resolution: a bad address is refused in the same words whichever way it came.
        ways = [("--daemon", "127.0.0.1:0"), ({"CHOCK_DAEMON": "127.0.0.1:0"},)]
        if name != "serve":  # serve's --port is the port it listens on
            ways.append(("--port", "0"))
        refusals = {_run(home, project, args, way).stderr for way in ways}
        assert len(refusals) == 1 and "'127.0.0.1:0' is not a daemon address" in refusals.pop(), (name, refusals)
        # --daemon is repeatable in the option table (chock/commands/shared_options.py): a command given a session
        # looks for it on each (and says which did not answer); the others act through one, and say so by name.
        twice = _run(home, project, args, ("--daemon", other.tcp, "--daemon", "127.0.0.1:9"))
        if "{local}" in THROUGH_DAEMON[name]:
            assert twice.returncode == 1 and "127.0.0.1:9" in twice.stderr, (name, twice.stderr)
        elif name == "serve":  # one page over several daemons, each named so the page can name its host
            assert twice.returncode == 2 and f"--daemon '{other.tcp}': serve over several daemons names" in twice.stderr
        else:
            assert twice.returncode == 2, (name, twice.stderr)
            assert f"--daemon was given 2 times ({other.tcp}, 127.0.0.1:9); " in twice.stderr, (name, twice.stderr)
            assert f"; chock {name} acts through one daemon" in twice.stderr, (name, twice.stderr)
        if name in ("detach", "serve"):
            continue  # detach hands over a running terminal session, serve serves: tests/test_detach.py, test_serve
        # And a real daemon on TCP, which does not know this machine's session, is the one asked each way.
        ways = [("--daemon", other.tcp), ("--port", port), ({"CHOCK_DAEMON": other.tcp},)]
        results = [_run(home, project, args, way) for way in ways]
        outputs = {(r.returncode, r.stdout, r.stderr) for r in results}
        assert len(outputs) == 1, (name, outputs)
        code, stdout, stderr = outputs.pop()
        assert local not in stdout, (name, stdout)  # not this machine's state dir
        if "{local}" in THROUGH_DAEMON[name]:
            assert code == 2 and f"no session '{local}'" in stderr and other.tcp in stderr, (name, stderr)
    assert home.layout.log_path(local).exists()

    for path, command in commands():
        if through_daemon(command):
            continue
        own_port = any(param.name == "port" for param in command.params)
        for flag in ("--daemon",) if own_port else ("--daemon", "--port"):
            refused = home.chock(*path, flag, "1", cwd=project)
            assert refused.returncode == 2 and f"takes no {flag}" in refused.stderr, (path, refused.stderr)
        shown = home.chock(*path, "--help", cwd=project)
        assert "ignores $CHOCK_DAEMON" in " ".join(shown.stdout.split()), (path, shown.stdout)


def _run(home, project, args: tuple[str, ...], way: tuple):
    """`chock ARGS` with the daemon named one way: options after ARGS, or the environment."""
    if isinstance(way[0], dict):
        return home.chock(*args, env=way[0], cwd=project, timeout=60)
    return home.chock(*args, *way, cwd=project, timeout=60)
