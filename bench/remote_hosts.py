"""`chock sessions --all` over 10 hosts against over one (docs/remote.md), and with one host that never answers.

Hosts are made on this machine as the tests make them (tests/fakes/hosts.py: a Unix user with its own daemon behind
Debian's sshd on a loopback address of its own, a client user with a key): it needs root and openssh-server. Every
host holds 5 sessions. Each run is the client's `chock sessions --all` with its SSH masters already up (the cost
of the first login is ssh's, not the list's). The hosts are asked at once, so 10 should cost about what one does:
the target is a ratio of at most 1.5. The silent host is a socket that listens and never accepts (the kernel
completes the TCP handshake, and ssh waits for a banner that never comes): it costs at most that host's
ConnectTimeout (10 s) more, and the others are still listed.

    python bench/remote_hosts.py           # prints low / median / high over the runs
    python bench/remote_hosts.py --quick   # asserts every host's rows arrive and the silent host is named
"""

from __future__ import annotations

import socket
import statistics
import sys
import time

import _common

from chock.paths import Layout

sys.path.insert(0, str(_common.REPO))
from tests.fakes.hosts import PORT, Hosts
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
        with_silent = timed(hosts, [*names, "silent"], 1 if options.quick else 3)
        hosts.chock("connections", "--close")
    finally:
        silent.close()
        hosts.cleanup()
    if options.quick:
        print(f"remote_hosts: quick mode: {HOSTS} hosts listed {SESSIONS} rows each; the silent host named, exit 1")
        return
    print(spread("1 host", one))
    print(spread(f"{HOSTS} hosts", ten))
    print(spread(f"{HOSTS} hosts and a silent one", with_silent))
    ratio = statistics.median(ten) / statistics.median(one)
    extra = statistics.median(with_silent) - statistics.median(ten)
    print(f"ratio {HOSTS} hosts / 1: {ratio:.2f} (target at most 1.5)")
    print(f"the silent host cost {extra:.1f} s more (target at most its ConnectTimeout, {CONNECT_TIMEOUT:.0f} s)")


if __name__ == "__main__":
    main()
