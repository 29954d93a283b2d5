"""`list` of a project with 100 sessions over SSH (docs/remote.md), against the floor of any request over SSH.

A host is made on this machine as the tests make one (tests/fakes/hosts.py: a Unix user with its own daemon,
Debian's sshd on a loopback address of its own, a client user with a key): it needs root and openssh-server. Both
figures are taken by the client user, on the same warm SSH master: a `list` through `ControlClient` (a channel,
`chock dial-stdio` started on the host, the greeting, the rows), and the floor — `ssh HOST python3 -S -c '<copy
stdin to stdout>'` echoing the same bytes the list's reply holds: a remote interpreter start and a pipe, which no
change to Chock can go below. The target is a ratio of at most 2.

    python bench/remote_list.py           # prints the figures
    python bench/remote_list.py --quick   # under a minute: asserts every row arrives, every time
"""

from __future__ import annotations

import json
import subprocess
import sys

import _common

from chock.paths import Layout

sys.path.insert(0, str(_common.REPO))
from tests.fakes.hosts import PYTHON, Hosts
from tests.test_catalog import write_session

SESSIONS = 100

# Run as the client user: times `rounds` lists and as many echoes of the reply's bytes, as JSON.
MEASURE = r"""
import json, shlex, socket, statistics, subprocess, sys, time
from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient
from chock.control.reach import control_dir, dial_ssh
from chock.control.ssh import parse_ssh, ssh_argv

url, project, rounds, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = ControlClient(url)
assert len(client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)) == expected  # the master is up from here on
sock = dial_ssh(parse_ssh(url))
sock.sendall(f"hello chock-control {dp.CONTROL.number}\nlist {project}\n".encode())
reply = bytearray()
while chunk := sock.recv(1 << 20):
    reply += chunk
sock.close()
COPY = "import os\nwhile d := os.read(0, 65536): os.write(1, d)"
floor = ssh_argv(parse_ssh(url), str(control_dir()), ("python3", "-S", "-c", shlex.quote(COPY)))
lists, echoes = [], []
for _ in range(rounds):
    start = time.perf_counter()
    rows = client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)
    lists.append(time.perf_counter() - start)
    assert len(rows) == expected, len(rows)
    start = time.perf_counter()
    done = subprocess.run(floor, input=bytes(reply), capture_output=True)
    echoes.append(time.perf_counter() - start)
    assert done.stdout == reply, done.stderr
print(json.dumps({"list": statistics.median(lists), "echo": statistics.median(echoes), "bytes": len(reply)}))
"""


def main() -> None:
    options = _common.parse(_common.arguments(__doc__, "fewer rounds; assert delivery only"))
    rounds = 5 if options.quick else 40
    hosts = Hosts()
    try:
        host = hosts.host(2)
        layout = Layout(config=host.user.home / "config.zon", state=host.state, data=host.user.home / "data")
        for number in range(SESSIONS):
            write_session(layout, number, hosts.project)
        host.user.give(host.user.home)
        host.start_daemon()
        assert hosts.client is not None
        done = subprocess.run(
            [*hosts.client.prefix(), PYTHON, "-c", MEASURE, host.url, str(hosts.project), str(rounds), str(SESSIONS)],
            env=hosts.client.env(hosts.chock_dir), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        figures = json.loads(done.stdout)
        hosts.chock("connections", "--close")
    finally:
        hosts.cleanup()
    if options.quick:
        print(f"remote_list: quick mode: {rounds} lists over SSH delivered all {SESSIONS} rows")
        return
    ratio = figures["list"] / figures["echo"]
    echo = figures["echo"] * 1e3
    print(f"ssh echo of the reply's {figures['bytes']} bytes (python3 -S on the host): median {echo:.1f} ms")
    print(f"list of {SESSIONS} sessions over ssh (dial-stdio, greeting, rows): median {figures['list'] * 1e3:.1f} ms")
    print(f"ratio {ratio:.2f} (target at most 2)")


if __name__ == "__main__":
    main()
