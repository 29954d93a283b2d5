"""The README's main job (scripts/demo-run, what scripts/demo ends with): daemon, serve, a replay demo
session started through serve, and the URL of the page. A person approves its shell command there."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.fakes.wait import wait_until

REPO = Path(__file__).resolve().parent.parent


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_demo_serves_a_running_session_and_stops_cleanly(home):
    env = {**home.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "CHOCK_DEMO_PORT": "0"}
    demo = subprocess.Popen(
        [str(REPO / "scripts/demo-run")], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        printed = ""
        deadline = time.monotonic() + 60
        while "Ctrl-C" not in printed and time.monotonic() < deadline:
            printed += demo.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+)/#project=(\S+)&session=(\S+)", printed)
        assert match, printed
        base, project, session_id = match.groups()
        assert _get(f"{base}/api/health")["protocol"] == 1

        def status() -> str:
            rows = {row["id"]: row for row in _get(f"{base}/api/sessions?project={project}")["sessions"]}
            return rows[session_id]["status"]

        # Its shell command asks first, as a person would see.
        wait_until(lambda: status() == "waiting", 60, "the session to wait for an approval")
        events = _get(f"{base}/api/sessions/{session_id}/events?after=0")["events"]
        request = next(e for e in events if e["type"] == "approval.request")
        assert request["tool"] == "shell"
        _post(
            f"{base}/api/sessions/{session_id}/answer",
            {"project": project, "request_id": request["request_id"], "answer": "yes"},
        )
        wait_until(lambda: status() == "ended", 60, "the session to end")
        row = {r["id"]: r for r in _get(f"{base}/api/sessions?project={project}")["sessions"]}[session_id]
        assert row["end_reason"] == "completed" and row["exit_code"] == 0
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(20)
    assert demo.returncode == 0
    workdir = Path(re.search(r"Everything lives in (\S+);", printed).group(1))
    # The daemon stopped and removed its own socket.
    wait_until(lambda: not (workdir / "state/daemon.sock").exists(), 10, "the daemon to remove its socket")
    assert not (workdir / "state/serve.sock").exists()
