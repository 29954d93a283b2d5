"""`chock sessions --all`: every project's sessions on every host, in one list with a HOST column (docs/remote.md).

The hosts are this machine (`local`: its daemon when one answers, else its state directory, as `chock sessions`
reads it) and each connection config.zon names; a `--daemon` given once or more (names, `local` or addresses),
`--port` or `$CHOCK_DAEMON` narrows the list to those. Hosts are asked at once, one thread each, each bounded by
ssh's ConnectTimeout and the protocol's own bounds, so a silent host costs at most its own bound and never hides
the others: it is one line saying why (ssh's or dial-stdio's reason), and the exit code is 1. A host's rows are
untrusted, as chock/commands/listing.py takes them: at most MAX_SESSIONS a host, every field shown as text.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from chock.control.address import LOCAL, Address, configured_connections, named_hosts
from chock.control.daemon_protocol import MAX_SESSIONS
from chock.errors import ChockError
from chock.paths import Layout
from chock.terminal import shown

# At most this many hosts are asked at the same moment.
MOST_AT_ONCE = 16
# How a host's rows are read (chock.commands.listing.every_row: None is this machine) and how rows are printed
# (chock.commands.listing.print_rows); passed in by chock/commands/listing.py, which imports this module.
Read = Callable[[Layout, Address | None], list[dict[str, Any]]]
Show = Callable[[list[dict[str, Any]]], None]


@dataclass
class Listed:
    """What one host answered: its rows (newest first), or why it did not; its address (None: this machine, read
    as `chock sessions` reads it)."""

    host: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    why: str | None = None
    address: Address | None = None


def hosts_to_list(daemon: tuple[str, ...], port: int | None) -> list[tuple[str, Address | None]]:
    """The hosts named (`named_hosts`), else this machine (None: read as `chock sessions` reads it) and every
    connection of config.zon, in the order it names them."""
    named = named_hosts(daemon, port=port)
    if named is None:
        return [(LOCAL, None), *configured_connections().items()]
    return [(name, None if name == LOCAL else address) for name, address in named]


def list_one(layout: Layout, read: Read, host: str, address: Address | None) -> Listed:
    """One host's rows; a host that does not answer (or refuses) is its reason."""
    try:
        return Listed(host, read(layout, address)[:MAX_SESSIONS], address=address)
    except ChockError as error:
        return Listed(host, why=str(error), address=address)


def list_every_host(layout: Layout, read: Read, hosts: list[tuple[str, Address | None]]) -> list[Listed]:
    """Every host asked at once; their answers in the order the hosts were given."""
    with ThreadPoolExecutor(max_workers=max(1, min(MOST_AT_ONCE, len(hosts)))) as pool:
        return list(pool.map(lambda host: list_one(layout, read, *host), hosts))


def run_all(layout: Layout, values: dict[str, object], read: Read, show: Show) -> int:
    """`chock sessions --all`: every host's rows, newest first, each with its host; 1 when a host did not answer."""
    hosts = hosts_to_list(values["daemon_address"], values["port"])  # type: ignore[arg-type]
    listed = list_every_host(layout, read, hosts)
    rows = [{**row, "host": each.host} for each in listed for row in each.rows]
    rows.sort(key=lambda row: (str(row.get("started_at") or ""), str(row.get("id") or "")), reverse=True)
    show(rows)
    for each in listed:
        if len(each.rows) >= MAX_SESSIONS:
            print(
                shown(f"({each.host}: its newest {MAX_SESSIONS:,} sessions; older ones are left out)"), file=sys.stderr
            )
    failed = [each for each in listed if each.why is not None]
    for each in failed:
        print(shown(f"{each.host}: not listed: {each.why}", sys.stderr, one_line=True), file=sys.stderr)
    if not rows and not failed and not values["as_json"]:
        print('no sessions yet: start one with `chock run "…"`')
    return 1 if failed else 0
