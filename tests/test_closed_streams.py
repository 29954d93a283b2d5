"""A standard stream closed, or its reader gone: `chock` says so clearly or carries on, and never shows a
traceback; a session whose terminal view can no longer be written runs on to its end, its log whole."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
