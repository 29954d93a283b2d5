"""Facts about this machine and its processes that prove a dead owner gone (docs/log.md#ownership-the-lock).

The owner of a session records where it runs in its `session.start` or `session.adopt`: this machine's id
(`/etc/machine-id`, else `/var/lib/dbus/machine-id`; on macOS the platform UUID), this boot's id
(`/proc/sys/kernel/random/boot_id`; on macOS `kern.bootsessionuuid`), its pid and the pid's start time (clock
ticks since boot, field 22 of `/proc/<pid>/stat`). A reader compares them with the same facts now. Every fact is
read at its first use, never at import (the daemon's start is import-time-tested: docs/architecture.md#start-up),
and the machine's and the boot's ids are read once per process: neither changes while a process lives.
"""

from __future__ import annotations

import functools
import os
import socket
import sys

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def _command(*argv: str) -> str:
    import subprocess

    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpus() -> float:
    """How many CPUs this process may keep busy: those it may run on, at most its cgroup's quota (cgroup v2's
    `cpu.max` of its own cgroup: `<quota> <period>`, or `max`)."""
    found: float = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open("/proc/self/cgroup") as handle:
            group = next(line[3:].strip() for line in handle if line.startswith("0::"))
        quota, period = _first_line(f"/sys/fs/cgroup{group}/cpu.max").split()
        if quota != "max":
            found = min(found, int(quota) / int(period))
    except (OSError, StopIteration, ValueError, ZeroDivisionError):
        pass
    return found


@functools.cache
def machine_id() -> str:
    """This machine's id, or "" when it has none to read (then nothing recorded is provably this machine's)."""
    if sys.platform == "darwin":
        for line in _command("ioreg", "-rd1", "-c", "IOPlatformExpertDevice").splitlines():
            if "IOPlatformUUID" in line:
                return line.rpartition("=")[2].strip().strip('"').lower()
        return ""
    for path in MACHINE_ID_FILES:
        found = _first_line(path)
        if found:
            return found
    return ""


@functools.cache
def boot_id() -> str:
    """This boot's id, or "" when it cannot be read."""
    if sys.platform == "darwin":
        return _command("sysctl", "-n", "kern.bootsessionuuid").strip().lower()
    return _first_line(BOOT_ID_FILE)


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None when there is no such live process (a zombie
    holds nothing: its descriptors, its lock and its children's ties to it are gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name may hold spaces and parentheses
    if len(fields) < 20 or fields[0] in (b"Z", b"X", b"x"):
        return None
    try:
        return int(fields[19])  # field 22 of the whole line; the state, field 3, is fields[0]
    except ValueError:
        return None


def owner() -> dict[str, Any]:
    """What an owner records of itself in `session.start` and `session.adopt`."""
    pid = os.getpid()
    return {
        "pid": pid,
        "pid_start": process_start(pid),
        "machine_id": machine_id(),
        "boot_id": boot_id(),
        "host": socket.gethostname(),
    }


def process_alive(pid: int, start: int | None) -> bool:
    """Whether the process `pid` that started at `start` may still live. Without a recorded start time (macOS,
    where it is not read) any process of that pid may be it."""
    if start is None or not sys.platform.startswith("linux"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return process_start(pid) == start


def scope_alive(session_id: str) -> bool:
    """Whether a process still runs in the session's scope, `chock-session-<id>.scope` (docs/architecture.md
    #running-as-a-service): every process the session started is in it, sandboxes included, and an empty scope
    is gone. Looked for in every process's cgroup, so it holds whichever user manager made the scope."""
    if not sys.platform.startswith("linux"):
        return False
    wanted = f"/chock-session-{session_id}.scope".encode()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True  # no way to look: nothing is proved
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cgroup", "rb") as handle:
                groups = handle.read()
        except OSError:
            continue  # gone since the listing
        if any(line.endswith(wanted) or (wanted + b"/") in line for line in groups.splitlines()):
            return True
    return False


_GONE: set[tuple[str, int, int | None]] = set()


def owner_gone(session_id: str, pid: int, start: int | None) -> bool:
    """Whether the owner `pid` (started at `start`) of session `session_id` is gone from this boot with every
    process it started: it no longer lives, and no process is left in the session's scope (its sandboxes and
    subagents die with it: docs/architecture.md#steering). Once true it stays true for this boot (a scope of
    that session comes back only with a new owner, who writes the log first), so it is looked up once."""
    key = (session_id, pid, start)
    if key in _GONE:
        return True
    if process_alive(pid, start) or scope_alive(session_id):
        return False
    _GONE.add(key)
    return True
