"""No process of a session outlives it: each command's sandbox is killed whole, and a sandbox left behind by
its bwrap is adopted by the session and killed too (docs/architecture.md#steering).

A shell command runs as two bwrap processes: the outer one, our child, leads a process group of its own, and
the inner one it clones is pid 1 of the sandbox's PID namespace, so killing it kills everything in the
sandbox. But the inner bwrap starts a session of its own (`--new-session`), out of the group's reach, and binds
its life to the outer one's (`--die-with-parent`) only after it has set the sandbox up: a kill of the group in
between leaves the sandbox running, reparented. So the outer bwrap is stopped first (a stopped process cannot
clone), its children are killed, and only then its group. And the session is a child subreaper: a sandbox whose
outer bwrap died some other way is reparented to the session, which finds it among its own children.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

# A process stops, and a killed one is gone with the pipes it held, within milliseconds; these bound the waits
# for it, so a process the kernel cannot finish (stuck in a device's I/O) never holds a session up.
STOP_SECONDS = 1.0
KILLED_SECONDS = 5.0


def _prctl(option: int, value: int) -> None:
    """Set one of this process's attributes (Linux). Both set here are safety nets, so a refusal (a seccomp
    filter) costs the net, never the session."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent(parent: int | None = None) -> None:
    """This process lives only as long as the one that started it (`parent`, its pid, when the caller knows it),
    however that one ends (Linux)."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # The parent was already gone before the line above: the orphan went to pid 1, or to a subreaper (the
        # session is one, and so is a user manager).
        if os.getppid() == 1 or (parent is not None and os.getppid() != parent):
            sys.exit(1)


def adopt_orphans() -> None:
    """Make this process the one its descendants are reparented to when their parent dies (Linux), so a
    sandbox whose outer bwrap died is still found below the session, by `kill_orphaned_sandboxes`."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_CHILD_SUBREAPER, 1)


def kill_sandbox(pid: int) -> None:
    """Kill the sandbox whose outer bwrap is `pid` (our child, not yet waited for), with everything in it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
        _wait_stopped(pid)
        for child in _children(str(pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # the outer bwrap, and an inner one that has not left its group yet


def kill_orphaned_sandboxes() -> None:
    """Kill every sandbox this process adopted (pid 1 of a PID namespace below ours whose parent we became),
    and wait for each, boundedly, so it is not left a zombie."""
    killed = []
    for child in _children("self"):
        if _is_namespace_init(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
                killed.append(child)
    deadline = time.monotonic() + KILLED_SECONDS
    while killed and time.monotonic() < deadline:
        for child in list(killed):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(child, os.WNOHANG)[0] == 0:
                    continue
            killed.remove(child)
        if killed:
            time.sleep(0.001)


async def wait_killed(process: asyncio.subprocess.Process) -> None:
    """Wait for a killed process to be reaped and its pipes to close, for KILLED_SECONDS at most."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), KILLED_SECONDS)


def _wait_stopped(pid: int) -> None:
    """Return once `pid` is stopped or dead (a signal takes effect when the process next runs), or at the bound."""
    deadline = time.monotonic() + STOP_SECONDS
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in "TtZX":
            return
        time.sleep(0.0001)


def _children(pid: str) -> list[int]:
    """The children of `pid` ("self" for ours), from every thread of it."""
    found = []
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [int(child) for child in Path(task.path, "children").read_text().split()]
    return found


def _is_namespace_init(pid: int) -> bool:
    """Whether `pid` is pid 1 of a PID namespace below ours: the inner bwrap of a sandbox."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                ids = line.split()[1:]
                return len(ids) > 1 and ids[-1] == "1"
    return False
