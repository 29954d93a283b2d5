"""Sessions a reboot or another machine left behind (docs/log.md#ownership-the-lock, docs/architecture.md
#after-a-reboot). A reboot is a private mount namespace whose boot id is another (`unshare -m`, then a bind
mount over /proc/sys/kernel/random/boot_id); another machine is one whose /etc/machine-id is another."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from chock.paths import new_session_id
from tests.fakes.daemon import kill_sessions
from tests.fakes.projects import git
from tests.fakes.sessions import new_session, wait_for_end, wait_for_event
from tests.fakes.wait import wait_until

MOUNT = 'mount --bind "$1" /proc/sys/kernel/random/boot_id && mount --bind "$2" /etc/machine-id && shift 2 && exec "$@"'


def _require_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("these tests need root and unshare (util-linux) to make a private mount namespace")


def _elsewhere(tmp_path: Path, *, machine: str | None = None) -> list[str]:
    """A command prefix that runs the rest after a reboot (a new boot id), on this machine or on `machine`."""
    _require_namespaces()
    boot = tmp_path / f"boot-{uuid.uuid4().hex[:6]}"
    boot.write_text(f"{uuid.uuid4()}\n")
    ident = tmp_path / f"machine-{uuid.uuid4().hex[:6]}"
    ident.write_text((machine or Path("/etc/machine-id").read_text().strip()) + "\n")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", MOUNT, "sh", str(boot), str(ident)]


def _chock(home, prefix: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "chock", *args],
        cwd=cwd, env=home.env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _entries(marker: str) -> list[dict]:
    return [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "w.txt", "content": "x"}},
                                    {"call_id": "c2", "name": "shell", "args": {"command": marker}}]},
        {"text": "done", "tool_calls": []},
    ]  # fmt: skip


def _config(home, entries: list[dict], after_reboot: str | None) -> None:
    home.write_replay("demo.jsonl", entries)
    setting = f', .after_reboot = "{after_reboot}"' if after_reboot else ""
    home.write_config(
        f'.{{ .instances = .{{ .demo = .{{ .kind = "replay=demo.jsonl" }} }}, .approvals = .{{ .shell = "allow" }}'
        f"{setting} }}\n"
    )


def _next_second(session_id: str) -> None:
    """Wait until a new session's id sorts after `session_id`'s."""
    wait_until(lambda: new_session_id()[:15] > session_id[:15], 5, "the clock's next second")


def _interrupted_daemon_session(home, daemons, project: Path, after_reboot: str | None) -> str:
    """A session the daemon owns, killed with its daemon and its sandbox mid-command (as a power cut would)."""
    _config(home, _entries(f"sleep 60 # {uuid.uuid4().hex}"), after_reboot)
    daemon = daemons.start()
    session_id, _ = daemon.client.start(str(project), "work until the power goes")
    wait_for_event(home, session_id, "tool.call", lambda e: e["name"] == "shell")
    daemon.kill()
    kill_sessions(home)  # SIGKILL to the session's process group: the owner and its sandbox
    return session_id


def test_after_a_reboot_a_daemon_session_is_listed_free_and_one_continue_away(home, project, daemons, tmp_path):
    session_id = _interrupted_daemon_session(home, daemons, project, None)  # the default: list
    rebooted = _elsewhere(tmp_path)
    daemons.start(prefix=rebooted)  # .after_reboot = "list": the daemon carries nothing on
    row = json.loads(_chock(home, rebooted, "sessions", "--json", cwd=project).stdout)
    assert (row["status"], row["free"], row["interrupted_by"]) == ("abandoned", True, "reboot")
    assert row["workspace_kept"] is True
    text = _chock(home, rebooted, "sessions", cwd=project).stdout
    assert f"interrupted by reboot — `chock run --continue {session_id}`" in text
    assert not [e for e in home.events(session_id) if e["type"] == "session.adopt"]

    done = _chock(home, rebooted, "run", "--continue", session_id, "go on", cwd=project)
    assert done.returncode == 0, done.stderr
    events = home.events(session_id)
    adopt = next(e for e in events if e["type"] == "session.adopt")
    assert (adopt["via"], adopt["after"]) == ("terminal", "reboot")
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"
    assert git(project, "show", f"chock/{session_id}:w.txt") == "x"


def test_after_a_reboot_resume_has_the_daemon_carry_its_session_on(home, project, daemons, tmp_path):
    session_id = _interrupted_daemon_session(home, daemons, project, "resume")
    daemons.start(prefix=_elsewhere(tmp_path))  # it carries the session on at its start, unasked
    end = wait_for_end(home, session_id)
    assert end["reason"] == "completed"
    events = home.events(session_id)
    adopts = [e for e in events if e["type"] == "session.adopt"]
    assert len(adopts) == 1
    assert (adopts[0]["via"], adopts[0]["after"], adopts[0]["approve_all"]) == ("daemon", "reboot", False)
    cut = next(e for e in events if e["type"] == "tool.result" and e["call_id"] == "c2")
    assert cut["is_error"] and "cut off" in cut["output"]
    assert git(project, "show", f"chock/{session_id}:w.txt") == "x"


def test_a_session_of_another_machine_is_never_free_here(home, project, daemons, tmp_path):
    session_id = _interrupted_daemon_session(home, daemons, project, "resume")
    recorded = home.events(session_id)[0]["machine_id"]
    other = _elsewhere(tmp_path, machine="0123456789abcdef0123456789abcdef")
    daemons.start(prefix=other)  # "resume" too: but nothing proves another machine's process gone
    row = json.loads(_chock(home, other, "sessions", "--json", cwd=project).stdout)
    assert (row["status"], row["free"], row["interrupted_by"]) == ("abandoned", False, "")
    before = home.layout.log_path(session_id).read_bytes()
    refused = _chock(home, other, "run", "--continue", session_id, "go on", cwd=project)
    assert refused.returncode == 3
    assert f"machine id {recorded}" in refused.stderr and "another machine" in refused.stderr
    assert home.layout.log_path(session_id).read_bytes() == before  # nothing was written


def test_resume_carries_on_only_the_daemons_sessions_and_each_interrupted_span_once(home, project, daemons, tmp_path):
    """A terminal's session is left to its person; a span the daemon already tried (`sessions/<id>/after-reboot`
    names it) is not tried again; the other is carried on. The older ones come first, so a wrong carry-on of
    either would be logged before the right one ends."""
    _config(home, _entries(f"sleep 60 # {uuid.uuid4().hex}"), "resume")
    terminal = home.spawn("run", "--yes", "mine", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        by_terminal = new_session(home)
        wait_for_event(home, by_terminal, "tool.call", lambda e: e["name"] == "shell")
    finally:
        terminal.kill()
        terminal.wait(10)
    _next_second(by_terminal)  # ids sort by their start's second, then by chance
    tried = _interrupted_daemon_session(home, daemons, project, "resume")
    start = home.events(tried)[0]
    (home.layout.session_dir(tried) / "after-reboot").write_text(
        f"{start['boot_id']} {start['pid']} {start['pid_start']}\n"
    )
    _next_second(tried)
    carried = _interrupted_daemon_session(home, daemons, project, "resume")
    assert by_terminal < tried < carried

    daemons.start(prefix=_elsewhere(tmp_path))
    assert wait_for_end(home, carried)["reason"] == "completed"
    for session_id in (by_terminal, tried):
        assert not [e for e in home.events(session_id) if e["type"] == "session.adopt"], session_id
