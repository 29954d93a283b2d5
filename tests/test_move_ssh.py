"""Moving a session between two hosts reached over real OpenSSH (docs/remote.md#moving-a-session): each host a Unix
user with its own daemon behind Debian's sshd (tests/fakes/hosts.py), the client a third user whose config.zon names
both. Every part travels through ssh and `chock dial-stdio` on each side. Needs root and openssh-server, as CI has."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import relay
from tests.fakes.hosts import PYTHON, Hosts
from tests.fakes.wait import wait_until
from tests.test_remote_ssh import _host_with_replay

ONE_FILE = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    *[{"text": "Wrote it.", "tool_calls": []}] * 4,
]  # fmt: skip


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    made = Hosts()
    try:
        yield made
    finally:
        made.cleanup()


def _git(project: os.PathLike[str] | str, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(project), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_chock_move_over_ssh_carries_an_ended_session_from_one_host_to_the_other(hosts: Hosts) -> None:
    a = _host_with_replay(hosts, 13, ONE_FILE)
    b = _host_with_replay(hosts, 14, ONE_FILE)
    there = b.user.home / "there"
    shutil.copytree(a.project, there, symlinks=True)  # a clone of A's project: the same commits
    b.user.give(there)
    hosts.write_client_config(f'.{{ .connections = .{{ .a = "{a.url}", .b = "{b.url}" }} }}\n')
    ran = hosts.chock("run", "--on", "a", "--project", str(a.project), "write a file")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (session_id,) = os.listdir(a.state / "sessions")

    moved = hosts.chock("move", f"a:{session_id}", "--to", "b", "--project", str(there))
    assert moved.returncode == 0, moved.stderr
    assert f"session {session_id} moved to b" in moved.stdout
    assert _git(there, "show", f"chock/{session_id}:a.txt") == "A"
    listed = hosts.chock("sessions", "--all")
    rows = {tuple(line.split()[:3]) for line in listed.stdout.splitlines()}
    assert ("a", session_id, "moved") in rows and ("b", session_id, "ended") in rows, listed.stdout
    assert not (a.state / "moves" / session_id).exists() and not (b.state / "moves" / session_id).exists()


def test_a_move_cut_on_its_way_to_the_target_over_ssh_leaves_one_owner_and_a_second_move_completes(
    hosts: Hosts,
) -> None:
    """The bundle cut after 300 bytes between host b's dial-stdio and its daemon (a relay there, as b's user):
    b holds nothing of the session, a holds it handed over, and the move made again over the whole path completes."""
    a = _host_with_replay(hosts, 15, ONE_FILE)
    b = _host_with_replay(hosts, 16, ONE_FILE)
    there = b.user.home / "there"
    shutil.copytree(a.project, there, symlinks=True)
    b.user.give(there)
    relay_script = hosts.base / "relay.py"
    shutil.copy(Path(relay.__file__), relay_script)
    relay_script.chmod(0o644)
    cutting = b.user.home / "cut.sock"
    relaying = b.spawn(PYTHON, str(relay_script), str(b.socket), str(cutting), "receive", "bundle", "300")
    try:
        wait_until(lambda: cutting.exists() or relaying.poll() is not None, 30, "the relay on b")
        assert relaying.poll() is None, relaying.stderr.read() if relaying.stderr else ""
        hosts.write_client_config(
            f'.{{ .connections = .{{ .a = "{a.url}", .b = "{b.url}", .bcut = "{b.url}{cutting}" }} }}\n'
        )
        ran = hosts.chock("run", "--on", "a", "--project", str(a.project), "write a file")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (session_id,) = os.listdir(a.state / "sessions")

        cut = hosts.chock("move", f"a:{session_id}", "--to", "bcut", "--project", str(there))
        assert cut.returncode == 1, cut.stderr
        assert "sending its bundle" in cut.stderr and f"`chock run --continue {session_id}`" in cut.stderr
    finally:
        relaying.kill()
        relaying.wait(10)
    assert not (b.state / "sessions" / session_id).exists() and not (b.state / "moves" / session_id).exists()
    listed = hosts.chock("sessions", "--all")
    assert ("a", session_id, "handed-over") in {tuple(line.split()[:3]) for line in listed.stdout.splitlines()}

    again = hosts.chock("move", f"a:{session_id}", "--to", "b", "--project", str(there))
    assert again.returncode == 0, again.stderr
    assert _git(there, "show", f"chock/{session_id}:a.txt") == "A"
