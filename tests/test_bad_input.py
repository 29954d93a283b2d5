"""Input a person (or a file they were handed) gets wrong is refused with a clear `chock:` line naming it, never a
traceback: a number too long for config.zon, a socket path that names no directory, an answer or a task that is
not UTF-8 text, a state directory that cannot be one, a project that cannot be read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chock.control import daemon_protocol as dp
from tests.fakes.sessions import wait_for_event
from tests.fakes.wait import wait_until
from tests.test_approve_waiting import ASKS, answers


def refused(done, *words: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0 and done.stderr.startswith("chock: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_a_number_too_long_in_config_is_a_refusal_at_its_line_and_column(home, tmp_path):
    for form in ("1" * 5000, "0x" + "f" * 4000):
        home.write_config(f".{{\n    .instances = {form},\n}}\n")
        done = home.chock("config", cwd=tmp_path)
        refused(done, "line 2, column 18: number too long")


@pytest.mark.parametrize("command", ["daemon", "serve"])
def test_a_relative_socket_path_is_bound_in_the_working_directory(home, tmp_path, command):
    here = tmp_path / "here"
    here.mkdir()
    done = home.chock(command, "--socket", "x.sock", "--idle-exit", "0.5", cwd=here)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", ["daemon", "serve"])
@pytest.mark.parametrize("under", ["file", "file/deeper"])
def test_a_socket_path_under_a_file_is_refused(home, tmp_path, command, under):
    (tmp_path / "file").write_text("not a directory\n")
    socket = tmp_path / under / "x.sock"
    done = home.chock(command, "--socket", str(socket), cwd=tmp_path)
    refused(done, f"cannot listen on {socket}: Not a directory; choose another path with --socket")


def test_an_answer_that_is_not_utf8_is_refused_and_the_next_line_answers(home, daemon, project):
    home.replay_instance(ASKS)
    session = daemon.client.call(dp.StartRequest(str(project), "task")).session_id
    wait_for_event(home, session, "approval.request")
    done = subprocess.run(
        [sys.executable, "-P", "-m", "chock", "approve", session], input=b"n \xff\xfe bad\ny\n",
        capture_output=True, cwd=project, env=home.env, timeout=120,
    )  # fmt: skip
    assert b"Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert b"that answer is not UTF-8 text; nothing was answered" in done.stdout, done.stdout
    wait_until(lambda: answers(home, session) == [("yes", "socket")])


@pytest.mark.parametrize("where", ["file", "file/under", "x" * 300])
def test_a_state_directory_that_cannot_be_one_is_named_in_one_refusal(home, tmp_path, project, where):
    (tmp_path / "file").write_text("not a directory\n")
    for args in (["sessions"], ["run", "a task"], ["daemon"], ["approve"]):
        done = home.chock(*args, cwd=project, env={"CHOCK_STATE_DIR": str(tmp_path / where)})
        refused(done, "$CHOCK_STATE_DIR is ", "which cannot be Chock's directory")
        assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr


def test_a_project_path_that_cannot_be_read_is_named(home, project):
    # In a user namespace of its own, chock may not follow /proc/1/cwd (another's process, as for any user).
    if subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode != 0:
        pytest.fail("unshare -U failed: the sandbox (bubblewrap) needs user namespaces too; enable them")
    home.replay_instance(ASKS)
    for args in (["sessions"], ["rules"], ["run", "--yes", "x"]):
        done = home.spawn(
            *args, "--project", "/proc/1/cwd", cwd=project, prefix=["unshare", "-U"], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        _, err = done.communicate(timeout=120)
        assert "Traceback" not in err, err
        assert done.returncode == 3 and "/proc/1/cwd is not readable (Permission denied)" in err, err


def test_a_malformed_session_id_is_a_usage_error_for_every_command(home, project):
    home.replay_instance(ASKS)
    for args in (["run", "--continue", "bogus", "more"], ["detach", "bogus"], ["stop", "bogus"],
                 ["attach", "bogus"], ["export", "bogus"], ["approve", "bogus"], ["plan", "bogus"],
                 ["sessions", "prune", "--ended-before", "garbage"]):  # fmt: skip
        done = home.chock(*args, cwd=project)
        said = done.stderr.replace("'garbage'", "'bogus'")
        assert done.returncode == 2 and ("'bogus' is not a" in said or "'bogus': that is not a" in said), said
    assert not home.layout.sessions_dir.exists()
