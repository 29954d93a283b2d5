"""A session waiting on a person holds as little as it can (docs/architecture.md#approvals): no connection to its
provider stays open through the wait (a call reads its stream only to the wire's last event, so its connection is
closed, not pooled) and the call after the answer opens a fresh one; what it freed before the wait goes back to
the kernel."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import new_session, wait_for_event
from tests.fakes.wait import wait_until


def connections_to(pid: int, port: int) -> int:
    """How many of `pid`'s sockets are TCP connections established to 127.0.0.1:`port`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state, inode = fields[2], fields[3], fields[9]
        if inode in inodes and state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


def test_a_session_waiting_for_approval_holds_no_provider_connection_and_calls_again_once_answered(home, project):
    from chock.control.client import SessionClient
    from chock.control.session_protocol import APPROVAL

    with FakeProvider(kind="openai", key=None) as fake:
        fake.script(tool_calls=[{"id": "c1", "name": "shell", "args": {"command": "echo after-the-wait"}}])
        fake.script(text="done")
        home.write_config(
            f'.{{ .instances = .{{ .fake = .{{ .kind = "openai-compat={fake.address}", .model = "fake-model" }} }},\n'
            '   .approvals = .{ .shell = "ask" } }\n'
        )
        port = int(fake.address.split(":")[2].split("/")[0])
        process = home.spawn("run", "one command", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            session_id = new_session(home)
            request = wait_for_event(home, session_id, "approval.request")
            # The fake keeps a connection alive (HTTP/1.1) for as long as its client does: the session let go.
            wait_until(lambda: connections_to(process.pid, port) == 0, 15, "the provider's connection closed")
            with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as client:
                client.answer(request["request_id"], True)
            assert process.wait(60) == 0
        finally:
            process.kill()
        assert len(fake.calls) == 2 and fake.pending == 0, fake.rejections
    events = home.events(session_id)
    assert "after-the-wait" in next(e for e in events if e["type"] == "tool.result")["output"]
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"


# Freed while the session worked, below something still held: glibc keeps such pages unless it is told.
FREED_BELOW_HELD = """
import sys
from chock.session import holding

def heap_rss():
    with open("/proc/self/smaps_rollup") as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Rss:")) // 1024

pieces = [bytes(2048) + bytes([i % 256]) for i in range(40_000)]  # 80 MiB of malloc'd blocks on the heap
held = bytes(4096)  # above them
del pieces
before = heap_rss()
holding.shed()
print(before, heap_rss())
"""


def test_what_a_session_freed_before_it_waits_goes_back_to_the_kernel():
    import sys

    done = subprocess.run([sys.executable, "-c", FREED_BELOW_HELD], capture_output=True, text=True, check=True)
    before, after = map(int, done.stdout.split())
    assert before - after >= 60, f"resident {before} MiB before the wait's shedding, {after} MiB after"
