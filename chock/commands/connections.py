"""`chock connections`: the daemons on other machines config.zon names (docs/remote.md), each asked whether it
answers; `--close` ends their SSH masters. Also the click twin of the hidden `chock dial-stdio`
(chock/commands/dial.py), the far end of every `ssh://` connection.

Hosts are asked in parallel, each bounded by ssh's ConnectTimeout and the protocol's own bounds, so one silent
host costs at most its own bound. What a host says (its version, ssh's words) is shown through the safe printer.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import click

from chock.commands import dial
from chock.commands.base import command, pass_layout, table_group
from chock.control.address import Address
from chock.errors import ChockError
from chock.paths import Layout
from chock.terminal import shown

dial_stdio = table_group(
    "dial-stdio", dial, "Join standard input and output to this host's daemon socket (ssh:// runs it).", hidden=True
)

# Each host's bound: ssh's ConnectTimeout, then the protocol's (a greeting on a slow machine).
PROBE_TIMEOUT = 30.0


@dataclass(frozen=True)
class Probe:
    """What asking one connection found: its protocol number, version and round trip, or why it did not answer."""

    name: str
    address: Address
    why: str | None = None
    protocol: int | None = None
    version: str = "-"
    sessions: str = "-"
    rtt: float | None = None

    @property
    def ok(self) -> bool:
        return self.why is None

    @property
    def state(self) -> str:
        return f"reachable: {self.sessions}" if self.ok else f"unreachable: {self.why}"


def _remote_version(address: Address) -> str:
    """`chock --version` on the host, over the same master ("-" for a daemon not reached over ssh)."""
    from chock.control.reach import control_dir
    from chock.control.ssh import ssh_argv

    if address.ssh is None:
        return "-"
    code, line = _first_line(ssh_argv(address.ssh, str(control_dir()), ("chock", "--version")), PROBE_TIMEOUT)
    words = line.decode("utf-8", "replace").strip() if line is not None else ""
    return words.removeprefix("chock, version ")[:40] if code == 0 and words else "?"


# What a host answers to a probe is one short line: at most this much of it is read, then ssh is stopped.
ANSWER_BYTES = 4096


def _first_line(argv: list[str], timeout: float) -> tuple[int | None, bytes | None]:
    """Run `argv` for at most `timeout` as a whole: its exit status (None when it did not exit in time) and the
    first line it wrote (None when there was none within ANSWER_BYTES). Nothing past that line is read: its output
    is closed then, so a host that writes on and on stops (ssh's write fails) or is killed at the deadline."""
    import os
    import selectors

    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None, None
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    held, ended = b"", False
    try:
        with selectors.DefaultSelector() as waiting:
            waiting.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in held and len(held) < ANSWER_BYTES and not ended:
                left = deadline - time.monotonic()
                if left <= 0 or not waiting.select(left):
                    return None, None
                chunk = os.read(process.stdout.fileno(), ANSWER_BYTES - len(held))
                held, ended = held + chunk, not chunk
        process.stdout.close()
        try:
            code: int | None = process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    line, newline, _ = held.partition(b"\n")
    return code, line if newline or ended else None


def _sessions(address: Address) -> str:
    """The host's sessions running and waiting, from its daemon's `sessions` (every project's, at most
    MAX_SESSIONS); "?" when it cannot say (an older daemon's unknown-verb)."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import ControlClient, expect

    try:
        lines = ControlClient(address, timeout=PROBE_TIMEOUT).collect(dp.SessionsRequest(), most=dp.MAX_SESSIONS)
        rows = [expect(line, dp.ListRow).row for line in lines]
    except ChockError:
        return "?"
    running = sum(row.get("status") == "running" for row in rows)
    waiting = sum(row.get("status") == "waiting" for row in rows)
    return f"{running} running, {waiting} waiting"


def probe(name: str, address: Address) -> Probe:
    """Ask one connection: a greeting (its protocol number), its version, then a second greeting timed over the
    warm connection (the round trip a request pays)."""
    from chock.control.client import ControlClient

    client = ControlClient(address, timeout=PROBE_TIMEOUT)
    try:
        number = client.ping()
        version = _remote_version(address)
        start = time.monotonic()
        client.ping()
        rtt = time.monotonic() - start
        sessions = _sessions(address)
    except ChockError as error:
        return Probe(name, address, why=str(error))
    return Probe(name, address, protocol=number, version=version, sessions=sessions, rtt=rtt)


def probe_all(connections: Mapping[str, Address]) -> list[Probe]:
    """Every connection asked at once, in the order config.zon names them."""
    if not connections:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(connections))) as pool:
        return list(pool.map(lambda item: probe(*item), connections.items()))


def close_master(address: Address) -> bool:
    """End the SSH master of `address` (`ssh -O exit`); whether one was running."""
    from chock.control.reach import control_dir
    from chock.control.ssh import control_argv

    if address.ssh is None:
        return False
    code, _ = _first_line(control_argv(address.ssh, str(control_dir()), "exit"), PROBE_TIMEOUT)
    return code == 0


@command()
@click.option("--close", is_flag=True, help="End the SSH master connection of each (they end 60 s after use).")
@pass_layout
def connections(layout: Layout, close: bool) -> None:
    """Each connection config.zon names: reachable or why not, its protocol, version and round trip."""
    from chock.config import load_config

    named = load_config(layout.config).connections
    if not named:
        click.echo('no connections: add .connections = .{ .build = "ssh://me@build.lan" } to ' + str(layout.config))
        return
    if close:
        for name, address in named.items():
            ended = close_master(address)
            click.echo(shown(f"{name}: {'closed its SSH master' if ended else 'no SSH master was open'}"))
        return
    found = probe_all(named)
    click.echo(f"{'NAME':<12} {'PROTOCOL':<8} {'VERSION':<10} {'RTT':>7}  ADDRESS / STATE")
    for each in found:
        rtt = f"{each.rtt * 1000:.0f} ms" if each.rtt is not None else "-"
        protocol = str(each.protocol) if each.protocol is not None else "-"
        line = f"{each.name:<12} {protocol:<8} {each.version:<10} {rtt:>7}  {each.address}"
        click.echo(shown(line, one_line=True))
        click.echo(shown(f"{'':<12} {each.state}", one_line=True))
    sys.exit(0 if all(each.ok for each in found) else 1)
