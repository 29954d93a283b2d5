"""`chock doctor` tells the truth about each piece, and the fix for one that is broken."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.systemd_user import user_manager

CHOCK = str(Path(sys.executable).parent / "chock")


def _doctor(home, **env):
    return home.chock("doctor", env=env)


def _line(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line[4:].startswith(name))


def test_doctor_reports_working_pieces_as_ok(home):
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')
    result = _doctor(home)
    for name in ("python", "bwrap", "git", "credential store"):
        assert _line(result.stdout, name).startswith("ok "), result.stdout
    assert _line(result.stdout, "daemon").startswith("no "), result.stdout  # none runs yet


def test_doctor_names_a_missing_bwrap_and_its_fix(home, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "systemctl", "loginctl"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bin_dir / tool)
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')
    result = _doctor(home, PATH=str(bin_dir))
    assert result.returncode == 1
    line = _line(result.stdout, "bwrap")
    assert line.startswith("no ") and "not installed" in line
    assert "apt install bubblewrap" in result.stdout


def test_doctor_sees_a_running_daemon(home, daemon):
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')
    result = _doctor(home, CHOCK_DAEMON=daemon.address)
    line = _line(result.stdout, "daemon")
    assert line.startswith("ok ") and "chock-control 1" in line, result.stdout


def test_doctor_says_there_is_no_journal_here_and_where_records_go(home):
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')
    output = _doctor(home).stdout
    line = _line(output, "journal")
    assert line.startswith("no ") and "/run/systemd/journal/socket" in line and "go to stderr" in line, output
    assert "journalctl" not in output  # nothing to read where there is no journal


@pytest.mark.systemd
def test_doctor_finds_the_journal_and_prints_the_lines_that_read_chocks_records():
    with user_manager(journal=True) as manager:
        output = manager.run([CHOCK, "doctor"], check=False).stdout
    line = _line(output, "journal")
    assert line.startswith("ok ") and "systemd-journald listens at /run/systemd/journal/socket" in line, output
    lines = output.splitlines()
    after = lines[lines.index(line) + 1 : lines.index(line) + 4]
    assert [text.split("(")[0].strip() for text in after] == [
        "journalctl --user -u chock.service",
        "journalctl --user -u chock-serve.service",
        "journalctl --user -t chock-session CHOCK_SESSION=<id>",
    ]


def test_doctor_checks_serve_where_it_listens_and_gives_the_fix_that_fits(home, daemon):
    """A serve on TCP says where in serve-status.json, and doctor asks it there; once it stopped, doctor is back
    to the socket unit's path and fix."""
    home.write_config('.{ .credentials = .{ .store = "file" } }\n')
    serve = subprocess.Popen(
        [sys.executable, "-m", "chock", "serve", "--daemon", daemon.address, "--host", "127.0.0.1", "--port", "0"],
        env=home.env, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = serve.stdout.readline().split()[-1]
        assert url.startswith("http://127.0.0.1:"), url
        line = _line(_doctor(home, CHOCK_DAEMON=daemon.address).stdout, "serve")
        assert line.startswith("ok ") and f"{url}: HTTP/1.1 200" in line, line
    finally:
        serve.terminate()
        assert serve.wait(20) == 0
    output = _doctor(home, CHOCK_DAEMON=daemon.address).stdout
    line = _line(output, "serve")
    assert line.startswith("no ") and "serve.sock" in line and url not in line, output
    assert "systemctl --user start chock-serve.socket" in output
