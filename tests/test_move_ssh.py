"""Moving a session between two hosts reached over real OpenSSH (docs/remote.md#moving-a-session): each host a Unix
user with its own daemon behind Debian's sshd (tests/fakes/hosts.py), the client a third user whose config.zon names
both. Every part travels through ssh and `chock dial-stdio` on each side; each host holds the person's key, as
their machines do, so a host asks another over ssh whether it adopted a session. Needs root and openssh-server, as
CI has: without them these tests fail saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes import ssh_cut
from tests.fakes.hosts import PYTHON, SYSTEM_PATH, Host, Hosts
from tests.fakes.projects import make_project
from tests.fakes.wait import wait_until

ONE_FILE = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    *[{"text": "Wrote it.", "tool_calls": []}] * 6,
]  # fmt: skip
# A conversation `chock move` asks in the middle of: the second model call takes long enough for the move to reach
# it over ssh on a loaded machine, and the third runs on whichever host then holds the session.
SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "", "delay": 20,
     "tool_calls": [{"call_id": "c2", "name": "write_file", "args": {"path": "b.txt", "content": "B"}}]},
    {"text": "", "tool_calls": [{"call_id": "c3", "name": "shell", "args": {"command": "cat a.txt b.txt > both.txt"}}]},
    *[{"text": "All three written.", "tool_calls": []}] * 3,
]  # fmt: skip
INSTANCES = (
    '.instances = .{ .demo = .{ .kind = "replay=demo.jsonl" }, .slow = .{ .kind = "replay=slow.jsonl" } }, '
    '.approvals = .{ .shell = "allow" }'
)

START = """
import sys
from chock.control import daemon_protocol as dp
from chock.control.address import Address
from chock.control.client import ControlClient
print(ControlClient(Address(path=sys.argv[1])).call(dp.StartWithRequest(sys.argv[2], sys.argv[3], "go")).session_id)
"""


@dataclass
class Pair:
    hosts: Hosts
    a: Host
    b: Host
    there: Path  # on b: a clone of a's project
    cut_bin: Path  # `ssh` that cuts (tests/fakes/ssh_cut.py)


def _replays(home: Path, connections: str = "") -> None:
    config = home / ".config/chock"
    config.mkdir(parents=True, exist_ok=True)
    for name, replies in (("demo", ONE_FILE), ("slow", SLOW)):
        (config / f"{name}.jsonl").write_text(
            "".join(json.dumps({"type": "assistant.message", **e}) + "\n" for e in replies)
        )
    (config / "config.zon").write_text(f".{{ {INSTANCES}{connections} }}\n")


def _host(hosts: Hosts, number: int) -> Host:
    host = hosts.host(number)
    _replays(host.user.home)
    host.project = make_project(host.user.home / "project")
    return host


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    made = Hosts()
    try:
        a, b = _host(made, 13), _host(made, 14)
        there = b.user.home / "there"
        shutil.copytree(a.project, there, symlinks=True)  # a clone of A's project: the same commits
        client = made.client
        assert client is not None
        for host in (a, b):  # the person's key and known hosts, on each of their machines
            shutil.copytree(client.home / ".ssh", host.user.home / ".ssh", dirs_exist_ok=True)
            host.user.give(host.user.home)
            host.start_daemon()
        _replays(client.home, f', .connections = .{{ .a = "{a.url}", .b = "{b.url}" }}')
        client.give(client.home)
        yield Pair(made, a, b, there, ssh_cut.install(made.base / "cutbin"))
    finally:
        made.cleanup()


def _git(project: os.PathLike[str] | str, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(project), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _start(host: Host, instance: str) -> str:
    """A session started by `host`'s daemon on its project (daemon-owned), on `instance`."""
    started = subprocess.run(
        [*host.user.prefix(), PYTHON, "-c", START, str(host.socket), str(host.project), instance],
        env=host.user.env(host.hosts.chock_dir), cwd=host.user.home, capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    return started.stdout.strip()


def _on(host: Host, *args: str) -> subprocess.CompletedProcess[str]:
    """`chock ARGS` as `host`'s user, on that host (a terminal there)."""
    return subprocess.run(
        [*host.user.prefix(), PYTHON, "-m", "chock", *args], env=host.user.env(host.hosts.chock_dir),
        cwd=host.user.home, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _log(host: Host, session_id: str) -> Path:
    return host.state / "sessions" / session_id / "log.jsonl"


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _rows(hosts: Hosts, session_id: str) -> dict[str, tuple[str, ...]]:
    """What `chock sessions --all` says of the session on each host: its status words."""
    listed = hosts.chock("sessions", "--all")
    assert listed.returncode == 0, listed.stderr
    return {
        f[0]: tuple(f[2:3]) for f in (line.split() for line in listed.stdout.splitlines()) if f[1:2] == [session_id]
    }


def _ended(host: Host, session_id: str) -> None:
    def done() -> bool:
        events = _events(_log(host, session_id)) if _log(host, session_id).exists() else []
        return bool(events) and events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"

    wait_until(done, 120, f"session {session_id} to complete on {host.user.name}")


def test_a_daemon_session_moved_mid_conversation_with_uncommitted_edits_completes_on_the_other_host(
    pair: Pair,
) -> None:
    hosts, a, b, there = pair.hosts, pair.a, pair.b, pair.there
    session_id = _start(a, "slow")
    log = _log(a, session_id)
    wait_until(lambda: b'"call_id": "c1"' in log.read_bytes() and b'"tool.result"' in log.read_bytes(), 60, "a.txt")
    assert b'"call_id": "c2"' not in log.read_bytes()  # it waits in its second model call

    moved = hosts.chock("move", f"a:{session_id}", "--to", "b", "--project", str(there))
    assert moved.returncode == 0, moved.stderr
    assert f"session {session_id} moved to b" in moved.stdout and "it goes on there" in moved.stdout

    # B's log is the log A sent — A's, through its handover end — and B's adopt.
    held = log.read_bytes().splitlines()
    handover = next(i for i, line in enumerate(held) if json.loads(line).get("to"))  # the move-out's end
    _ended(b, session_id)
    theirs = _log(b, session_id).read_bytes().splitlines()
    assert theirs[: handover + 1] == held[: handover + 1]
    adopt = json.loads(theirs[handover + 1])
    assert (adopt["type"], adopt["via"], adopt["from"], adopt["project"]) == ("session.adopt", "move", "vm", str(there))
    # A's edit, never committed there, was in B's worktree: B's own command read it; the branch holds all three.
    assert _git(there, "show", f"chock/{session_id}:a.txt") == "A"
    assert _git(there, "show", f"chock/{session_id}:b.txt") == "B"
    assert _git(there, "show", f"chock/{session_id}:both.txt") == "AB"
    ran_on_b = [e for e in _events(_log(b, session_id))[handover + 1 :] if e["type"] == "tool.result"]
    assert ran_on_b, "no tool ran on B"

    assert _rows(hosts, session_id) == {"a": ("moved",), "b": ("ended",)}
    again = hosts.chock("run", "--on", "a", "--continue", session_id, "more")
    assert again.returncode != 0
    assert f"session {session_id} moved to vm" in again.stderr, again.stderr
    assert not (a.state / "moves" / session_id).exists() and not (b.state / "moves" / session_id).exists()


def test_a_terminal_session_moved_while_it_waits_in_a_model_call_exits_8_and_finishes_on_the_host(
    pair: Pair,
) -> None:
    hosts, a = pair.hosts, pair.a
    client = hosts.client
    assert client is not None
    here = make_project(client.home / "here")
    there = a.user.home / "from-client"
    shutil.copytree(here, there, symlinks=True)
    client.give(client.home)
    a.user.give(there)
    daemon = hosts.spawn("daemon")  # the client machine's own daemon: the move's source there
    running = None
    try:
        socket = client.home / ".local/state/chock/daemon.sock"
        wait_until(lambda: socket.exists() or daemon.poll() is not None, 30, "the client's daemon")
        running = subprocess.Popen(
            [*client.prefix(), PYTHON, "-m", "chock", "run", "--instance", "slow", "--project", str(here), "go"],
            env=client.env(hosts.chock_dir), cwd=client.home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        sessions = client.home / ".local/state/chock/sessions"
        wait_until(lambda: sessions.exists() and os.listdir(sessions), 60, "the terminal session")
        (session_id,) = os.listdir(sessions)
        log = sessions / session_id / "log.jsonl"
        wait_until(lambda: b'"tool.result"' in log.read_bytes(), 60, "its first edit")

        moved = hosts.chock("move", session_id, "--to", "a", "--project", str(there))
        assert moved.returncode == 0, moved.stderr
        _, stderr = running.communicate(timeout=120)
        assert running.returncode == 8, stderr  # handed over at its turn boundary
    finally:
        for process in (running, daemon):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
    _ended(a, session_id)
    assert _git(there, "show", f"chock/{session_id}:both.txt") == "AB"
    assert _events(log)[-1]["reason"] == "moved"


@pytest.mark.parametrize(
    ("verb", "part", "frames"),
    [
        ("send", "log", -1),
        ("receive", "log", 1),
        ("send", "bundle.0", -1),
        ("receive", "bundle.0", 1),
        ("move-in", "-", -1),
    ],
    ids=["before-the-log", "in-the-log", "before-the-bundle", "in-the-bundle", "between-the-bundle-and-the-adopt"],
)
def test_a_move_cut_over_ssh_leaves_one_owner_that_continues_it_and_a_second_move_replaces_any_leftover(
    pair: Pair, verb: str, part: str, frames: int
) -> None:
    """The client's ssh cuts one connection after its Nth frame: the target holds nothing of the session; the
    source, handed over to nobody, asks the target over ssh (at the address the move reached it), hears it does not
    hold it, and `chock run --continue` completes it there; a second move then carries it over."""
    hosts, a, b, there = pair.hosts, pair.a, pair.b, pair.there
    session_id = _start(a, "demo")
    _ended(a, session_id)
    cuts = hosts.base / f"cuts-{session_id}"
    cuts.write_text("")
    cuts.chmod(0o666)
    env = {"PATH": f"{pair.cut_bin}:{SYSTEM_PATH}", "CHOCK_TEST_CUT": f"{verb} {part} {frames}"}
    hosts.chock("connections", "--close")  # each ssh of the move starts under the cutting `ssh`
    cut = hosts.chock("move", f"a:{session_id}", "--to", "b", "--project", str(there),
                      env={**env, "CHOCK_TEST_CUT_LOG": str(cuts)})  # fmt: skip
    hosts.chock("connections", "--close")
    assert cut.returncode == 1, cut.stdout + cut.stderr
    assert cuts.read_text().startswith(f"cut {verb} ") and len(cuts.read_text().splitlines()) == 1
    assert f"`chock run --continue {session_id}`" in cut.stderr
    assert not (b.state / "sessions" / session_id).exists()
    if verb != "move-in":  # what b received for a move-in it never heard waits there for the next move
        assert not (b.state / "moves" / session_id).exists()
    assert _rows(hosts, session_id) == {"a": ("handed-over",)}

    taken = _on(a, "run", "--continue", session_id, "carry on")  # at a terminal on a
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert "Wrote it." in taken.stdout
    assert _rows(hosts, session_id) == {"a": ("ended",)}
    end = _events(_log(a, session_id))[-1]
    assert (end["type"], end["reason"]) == ("session.end", "completed")

    again = hosts.chock("move", f"a:{session_id}", "--to", "b", "--project", str(there))
    assert again.returncode == 0, again.stderr
    assert _rows(hosts, session_id) == {"a": ("moved",), "b": ("ended",)}
    assert _git(there, "show", f"chock/{session_id}:a.txt") == "A"
    assert not (b.state / "moves" / session_id).exists()


def test_a_session_moved_there_and_back_over_ssh_ends_where_it_began_with_one_log_telling_it_all(pair: Pair) -> None:
    hosts, a, b, there = pair.hosts, pair.a, pair.b, pair.there
    session_id = _start(a, "demo")
    _ended(a, session_id)
    went = hosts.chock("move", f"a:{session_id}", "--to", "b", "--project", str(there))
    assert went.returncode == 0, went.stderr
    said = hosts.chock("say", f"b:{session_id}", "once more on b")
    assert said.returncode == 0, said.stderr

    def answered_on_b() -> bool:
        events = _events(_log(b, session_id))
        told = [i for i, e in enumerate(events) if e["type"] == "user.message" and e["text"] == "once more on b"]
        return bool(told) and events[-1]["type"] == "session.end" and events[-1]["id"] > told[0] + 1

    wait_until(answered_on_b, 60, "its turn on b")
    came = hosts.chock("move", f"b:{session_id}", "--to", "a", "--project", str(a.project))
    assert came.returncode == 0, came.stderr

    events = _events(_log(a, session_id))
    assert [event["id"] for event in events] == list(range(1, len(events) + 1))
    story = [
        (e["type"], e.get("reason") or e.get("via"), e.get("text"))
        for e in events
        if e["type"] in ("session.start", "session.adopt", "session.end", "user.message")
    ]
    assert story[0][0] == "session.start" and story[-1][:2] == ("session.end", "completed")
    moves = [(kind, how) for kind, how, _ in story if kind != "user.message" and how in ("move", "handover")]
    out, into = [("session.adopt", "move"), ("session.end", "handover")], [("session.adopt", "move")]
    assert moves == out + into + out + into  # A's move-out, B's move-in, B's move-out, A's move-in
    said_on_b = [i for i, (kind, _, text) in enumerate(story) if kind == "user.message" and text == "once more on b"]
    assert said_on_b and story.index(("session.adopt", "move", None)) < said_on_b[0]
    assert (a.state / "sessions" / session_id / "log.jsonl.moved-1").exists()  # what A held before it came back
    assert _rows(hosts, session_id) == {"a": ("ended",), "b": ("moved",)}
    on_b = hosts.chock("sessions", "--daemon", "b", "--project", str(there))
    assert on_b.returncode == 0, on_b.stderr
    assert ["moved" in line.split() for line in on_b.stdout.splitlines() if session_id in line] == [True], on_b.stdout
