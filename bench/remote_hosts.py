"""`chock sessions --all` over 10 hosts against over one (docs/remote.md), and with one host that never answers.

Hosts are made on this machine as the tests make them (tests/fakes/hosts.py: a Unix user with its own daemon behind
Debian's sshd on a loopback address of its own, a client user with a key): it needs root and openssh-server. Every
host holds 5 sessions. Each run is the client's `chock sessions --all` with its SSH masters already up (the cost
of the first login is ssh's, not the list's). The hosts are asked at once, so 10 should cost about what one does:
the target is a ratio of at most 1.5. The silent host is a socket that listens and never accepts (the kernel
completes the TCP handshake, and ssh waits for a banner that never comes): it costs at most that host's
ConnectTimeout (10 s) more, and the others are still listed.

On one machine every host's sshd, `chock dial-stdio` and daemon share its cores, so 10 hosts cost more than one
for reasons that are not the client's. The floor, measured in the same run on the same masters, says how much:
the same 1 and 10 round trips as `ssh HOST python3 -S -c '<copy stdin to stdout>'` (a remote interpreter start and
a pipe, as bench/remote_list.py's floor), run in parallel and echoing each host's rows as `--json` prints them.
Printed: our 10/1, the floor's 10/1, and our 10 hosts over the floor's 10.

    python bench/remote_hosts.py           # prints low / median / high over the runs
    python bench/remote_hosts.py --quick   # asserts every host's rows arrive and the silent host is named
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time

import _common

from chock.paths import Layout

sys.path.insert(0, str(_common.REPO))
from tests.fakes.hosts import PORT, PYTHON, Hosts
from tests.test_catalog import write_session

HOSTS = 10
SESSIONS = 5
CONNECT_TIMEOUT = 10.0


def timed(hosts: Hosts, names: list[str], rounds: int) -> list[float]:
    """`chock sessions --all --daemon NAME…` `rounds` times, each checked: every host's rows, in seconds."""
    args = [word for name in names for word in ("--daemon", name)]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        done = hosts.chock("sessions", "--all", *args)
        times.append(time.perf_counter() - start)
        listed = {line.split()[0] for line in done.stdout.splitlines()}
        assert listed == {name for name in names if name != "silent"}, (done.stdout, done.stderr)
        assert len(done.stdout.splitlines()) == SESSIONS * len(listed), done.stdout
        assert done.returncode == (1 if "silent" in names else 0), done.stderr
        if "silent" in names:
            assert done.stderr.startswith("silent: not listed: "), done.stderr
    return times


# Run as the client user: `rounds` times, the echo on each host of argv's list at once (its payload on stdin, each
# checked), timed from the first start to the last end; the medians for the first host alone and for all, as JSON.
FLOOR = r"""
import json, shlex, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from chock.control.reach import control_dir
from chock.control.ssh import parse_ssh, ssh_argv

rounds, payload, urls = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3:]
COPY = "import os\nwhile d := os.read(0, 65536): os.write(1, d)"
argvs = [ssh_argv(parse_ssh(url), str(control_dir()), ("python3", "-S", "-c", shlex.quote(COPY))) for url in urls]

def echo(argv):
    done = subprocess.run(argv, input=payload, capture_output=True)
    assert done.returncode == 0 and done.stdout == payload, done.stderr

def at_once(chosen):
    with ThreadPoolExecutor(len(chosen)) as pool:
        start = time.perf_counter()
        list(pool.map(echo, chosen))
        return time.perf_counter() - start

at_once(argvs)  # every master up
one, every = [], []
for _ in range(rounds):
    one.append(at_once(argvs[:1]))
    every.append(at_once(argvs))
print(json.dumps({"one": statistics.median(one), "every": statistics.median(every)}))
"""


def floor(hosts: Hosts, urls: list[str], payload: str, rounds: int) -> dict[str, float]:
    """The floor's medians, one host and every host at once, measured as the client user on its masters."""
    assert hosts.client is not None
    done = subprocess.run(
        [*hosts.client.prefix(), PYTHON, "-c", FLOOR, str(rounds), payload, *urls],
        env=hosts.client.env(hosts.chock_dir), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def spread(label: str, times: list[float]) -> str:
    low, median, high = min(times), statistics.median(times), max(times)
    return f"{label}: low {low * 1e3:.0f} ms, median {median * 1e3:.0f} ms, high {high * 1e3:.0f} ms"


def main() -> None:
    options = _common.parse(_common.arguments(__doc__, "one round each; assert the rows and the silent host"))
    rounds = 1 if options.quick else 7
    hosts = Hosts()
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        made = []
        for number in range(2, 2 + HOSTS):
            host = hosts.host(number)
            layout = Layout(config=host.user.home / "config.zon", state=host.state, data=host.user.home / "data")
            for each in range(SESSIONS):
                write_session(layout, number * 100 + each, hosts.project)
            host.user.give(host.user.home)
            host.start_daemon()
            made.append(host)
        silent_ip = f"{hosts.network}.{2 + HOSTS}"
        silent.bind((silent_ip, PORT))
        silent.listen(64)  # never accepted: ssh's TCP connect succeeds, its banner never comes
        names = [f"h{index}" for index in range(HOSTS)]
        entries = ", ".join(f'.{name} = "{host.url}"' for name, host in zip(names, made, strict=True))
        hosts.write_client_config(
            f'.{{ .connections = .{{ {entries}, .silent = "ssh://nobody@{silent_ip}:{PORT}" }} }}\n'
        )
        timed(hosts, names, 1)  # every master up
        one = timed(hosts, names[:1], rounds)
        ten = timed(hosts, names, rounds)
        rows = hosts.chock("sessions", "--all", "--json", "--daemon", names[0]).stdout  # one host's rows, as bytes
        base = floor(hosts, [host.url for host in made], rows, rounds)
        with_silent = timed(hosts, [*names, "silent"], 1 if options.quick else 3)
        hosts.chock("connections", "--close")
    finally:
        silent.close()
        hosts.cleanup()
    if options.quick:
        print(
            f"remote_hosts: quick mode: {HOSTS} hosts listed {SESSIONS} rows each; the silent host named, exit 1; "
            "the floor's echoes came back whole"
        )
        return
    print(spread("1 host", one))
    print(spread(f"{HOSTS} hosts", ten))
    print(spread(f"{HOSTS} hosts and a silent one", with_silent))
    ratio = statistics.median(ten) / statistics.median(one)
    extra = statistics.median(with_silent) - statistics.median(ten)
    print(f"ratio {HOSTS} hosts / 1: {ratio:.2f} (target at most 1.5)")
    print(
        f"floor (ssh echo, in parallel): 1 host {base['one'] * 1e3:.0f} ms, {HOSTS} hosts {base['every'] * 1e3:.0f} ms"
    )
    print(
        f"floor ratio {HOSTS} hosts / 1: {base['every'] / base['one']:.2f} (this machine's cores, shared by every host)"
    )
    print(f"ours over the floor at {HOSTS} hosts: {statistics.median(ten) / base['every']:.2f}")
    print(f"the silent host cost {extra:.1f} s more (target at most its ConnectTimeout, {CONNECT_TIMEOUT:.0f} s)")


if __name__ == "__main__":
    main()
