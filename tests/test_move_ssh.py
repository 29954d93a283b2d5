"""Moving a session between two hosts reached over real OpenSSH (docs/remote.md#moving-a-session): each host a Unix
user with its own daemon behind Debian's sshd (tests/fakes/hosts.py), the client a third user whose config.zon names
both. Every part travels through ssh and `chock dial-stdio` on each side. Needs root and openssh-server, as CI has."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.fakes.hosts import Hosts
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
