"""A standard stream closed, or its reader gone: `chock` says so clearly or carries on, and never shows a
traceback; a session whose terminal view can no longer be written runs on to its end, its log whole."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chock.control import daemon_protocol as dp
from tests.conftest import Home
from tests.fakes.sessions import wait_for_event
from tests.test_approve_waiting import ASKS, answers
from tests.test_run import DEMO


@pytest.mark.parametrize("view", [[], ["--json"]])
def test_a_reader_that_stops_reading_leaves_the_session_running_to_its_end(home, project, view):
    home.replay_instance(DEMO)
    read, write = os.pipe()
    os.close(read)  # `| head -1` after its line: every write to the view fails
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "chock", "run", *view, "--yes", "tidy up"],
            stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=project, env=home.env, text=True,
            timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    events = home.events(home.only_session())
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed", events[-1]
    assert "the session carries on" in done.stderr


def closed(home: Home, streams: str, *args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    """`chock ARGS` with the shell's redirection `streams` (`<&-`, `>&-`, `2>&-`) closing some of its streams;
    what it wrote to those left open."""
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {streams}', "sh", sys.executable, "-P", "-m", "chock", *args],
        capture_output=True, text=True, cwd=cwd, env=home.env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize(
    "streams, args",
    [
        (">&-", ["--help"]),
        (">&-", ["sessions"]),
    ],
)
def test_a_closed_stream_is_no_traceback(home, project, streams, args):
    done = closed(home, streams, *args, cwd=project)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr


def test_a_task_from_a_closed_input_is_refused_clearly(home, project):
    home.replay_instance(DEMO)
    done = closed(home, "<&-", "run", cwd=project)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0 and "chock:" in done.stderr and not home.layout.sessions_dir.exists()


def test_a_refusal_with_standard_error_closed_never_lands_in_standard_output(home, project):
    done = closed(home, "2>&-", "export", "20260101-000099-000063", cwd=project)
    assert done.returncode != 0 and done.stdout == "", done.stdout


def test_approve_and_export_with_a_stream_closed_answer_nothing_and_show_no_traceback(home, daemon, project):
    home.replay_instance(ASKS)
    session = daemon.client.call(dp.StartRequest(str(project), "task")).session_id
    wait_for_event(home, session, "approval.request")
    for streams, args in (("<&-", ["approve"]), (">&-", ["approve"]), ("<&-", ["approve", session]),
                          (">&-", ["export", session])):  # fmt: skip
        done = closed(home, streams, *args, cwd=project)
        assert "Traceback" not in done.stderr, (args, done.stderr)
    assert answers(home, session) == []  # nothing was answered for the person


def test_a_task_that_is_not_utf8_is_refused_and_starts_nothing(home, project):
    """Bytes no character is made of, as an argument or piped in: refused in words (`chock say` refuses them the
    same way), never stored as `?` and sent to the model."""
    home.replay_instance(DEMO)
    for args, piped in ((["run", "inv \udcff\udcfe"], b""), (["run"], b"inv \xff\xfe")):
        done = subprocess.run(
            [sys.executable, "-P", "-m", "chock", *args], input=piped, capture_output=True, cwd=project,
            env=home.env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.decode() == (
            "chock: the task is not UTF-8 text (a byte no character is made of); nothing was started\n"
        )
    assert not home.layout.sessions_dir.exists()


def test_approve_whose_input_ends_before_an_answer_says_so(home, daemon, project):
    home.replay_instance(ASKS)
    session = daemon.client.call(dp.StartRequest(str(project), "task")).session_id
    wait_for_event(home, session, "approval.request")
    done = subprocess.run(
        [sys.executable, "-P", "-m", "chock", "approve", session], stdin=subprocess.DEVNULL, capture_output=True,
        text=True, cwd=project, env=home.env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "Aborted" not in done.stderr, done.stderr
    assert done.stderr.endswith("chock: standard input ended before an answer; nothing was answered\n"), done.stderr
    assert answers(home, session) == []
