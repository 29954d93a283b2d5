"""`chock doctor` tells the truth about each piece, and the fix for one that is broken."""

from __future__ import annotations

import os
import shutil


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
