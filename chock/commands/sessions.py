"""`chock sessions` (and its `remove` and `prune`), `chock usage` and `chock plan`: what a project's sessions are,
cost and plan, read through the daemon named or in the state dir.

`chock sessions` alone is chock/commands/listing.py's, which the executable also runs without click
(docs/architecture.md#start-up); this is its click command, built from the same table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from chock.commands import listing
from chock.commands.base import command, options, pass_layout, project_root, table_group
from chock.commands.completion import session_ids
from chock.commands.shared_options import EVERY_HOST, PROJECT, PROJECT_OPTIONS
from chock.control.address import named_address, named_hosts
from chock.errors import Refused, UsageError
from chock.paths import Layout
from chock.terminal import shown

sessions = table_group(
    "sessions",
    listing,
    "This project's sessions (every project's, with --all), newest first: status, owner, how each ended, and its task.",
)


@sessions.command("remove")
@click.argument("session_ids", nargs=-1, required=True, metavar="SESSION...", shell_complete=session_ids)
@click.option(
    "--with-workspace", is_flag=True, help="Also remove a kept workspace (its work goes to its branch first)."
)
@options(PROJECT_OPTIONS)
@pass_layout
def sessions_remove(
    layout: Layout,
    session_ids: tuple[str, ...],
    with_workspace: bool,
    project: Path | None,
    daemon_address: tuple[str, ...],
    port: int | None,
) -> None:
    """Delete ended sessions: their logs and scratchpads (their branches stay). Through the daemon named by
    --daemon, --port or $CHOCK_DAEMON; with none named, in this machine's state dir. Every id must name a
    session, or nothing is removed."""
    if named_hosts(daemon_address, port=port) is not None or any(":" in word for word in session_ids):
        from chock.commands.targets import ask, target
        from chock.control import daemon_protocol as dp

        found = [
            target(layout, word, project, daemon_address, port, running=False, acting="chock sessions remove")
            for word in session_ids
        ]
        for each in found:
            verb = dp.RemoveWithWorkspaceRequest if with_workspace else dp.RemoveRequest
            ask(each.client, verb(str(each.project), each.session_id), dp.Removed)
            click.echo(shown(f"removed session {each.session_id} {each.where}"))
        return
    from chock.log import removal
    from chock.paths import is_session_id
    from chock.session import keep

    unknown = [i for i in session_ids if not (is_session_id(i) and layout.log_path(i).exists())]
    if unknown:
        raise UsageError(f"no session {unknown[0]!r} in this machine's state dir; nothing was removed")
    for session_id in session_ids:
        removal.remove_session(layout, session_id, keep.remove if with_workspace else None)
        click.echo(f"removed session {session_id} from this machine's state dir")


@sessions.command("prune")
@click.option("--ended-before", "before", required=True, metavar="DATE", help="UTC date or time, e.g. 2026-11-30.")
@click.option("--with-workspace", is_flag=True, help="Also remove kept workspaces (their work goes to their branches).")
@options((PROJECT,))
@pass_layout
def sessions_prune(layout: Layout, before: str, with_workspace: bool, project: Path | None) -> None:
    """Delete this project's sessions that ended before DATE (on this machine)."""
    from chock.log import removal
    from chock.session import keep

    removed, kept = removal.prune(
        layout, project_root(project), removal.ended_before(before), keep.remove if with_workspace else None
    )
    for session_id in removed:
        click.echo(f"removed session {session_id}")
    for session_id, why in kept:
        click.echo(shown(f"kept session {session_id}: {why}"))
    if not removed and not kept:
        click.echo(f"no session of this project ended before {before}")


@command()
@options((*PROJECT_OPTIONS, EVERY_HOST))
@pass_layout
def usage(
    layout: Layout, project: Path | None, daemon_address: tuple[str, ...], port: int | None, all_hosts: bool
) -> None:
    """Tokens used by each session of this project (and read from or written to the prompt cache), and in
    total; with the cost, in its currency, when the instance has a `.price` in config.zon, and the budget a session
    is held to (`, past it` when it ended there). Read through the daemon named (its
    host's `--project` given absolute, as a path there), else the state dir's when it answers, else the state dir
    itself; with --all, every project's on every host (or each --daemon), a HOST column first."""
    if all_hosts:
        if project is not None:
            raise UsageError("--all counts every project's sessions; leave out --project (or leave out --all)")
        from chock.commands.every_host import hosts_to_list, list_every_host

        listed = list_every_host(layout, listing.every_row, hosts_to_list(daemon_address, port))
        rows = [{**row, "host": each.host} for each in listed for row in each.rows]
        rows.sort(key=lambda row: (str(row.get("started_at") or ""), str(row.get("id") or "")))
        _print_usage(rows, len(listed) > 1)
        failed = [each for each in listed if each.why is not None]
        for each in failed:
            click.echo(shown(f"{each.host}: not counted: {each.why}", one_line=True), err=True)
        if failed:
            raise SystemExit(1)
        return
    address = named_address(daemon_address, port=port, acting="chock usage")
    rows = listing.project_rows(layout, project, address)
    on = None
    if address is not None:  # one host: its name on the total line, the rows as this machine's
        hosts = named_hosts(daemon_address, port=port)
        on = hosts[0][0] if hosts else str(address)
    _print_usage(rows, False, on=on)


def _print_usage(rows: list[dict[str, Any]], per_host: bool, *, on: str | None = None) -> None:
    """Each row's counts (after its host, when it has one) and the total; with `per_host`, each host's total too;
    `on` names the one host all the rows came from. Every field is taken as text or a number, whatever a daemon
    sent (`_count`)."""
    from chock.log.events import USAGE_FIELDS

    width = max((len(str(row.get("host", ""))) for row in rows), default=0)
    priced = any(_cost(row) is not None for row in rows)
    totals: dict[str, dict[str, int]] = {}
    costs: dict[str, dict[str, float]] = {}  # by host ("" for all), by currency
    for row in rows:
        counts = {name: _count(row.get(name)) for name in USAGE_FIELDS}
        host = f"{row['host']!s:<{width}}  " if "host" in row else ""
        spent = _spent(row)
        line = f"{host}{row.get('id')!s}  {_usage_columns(counts, spent, priced)}{_against_budget(row)}"
        click.echo(shown(f"{line}  {listing.preview(str(row.get('message') or ''))}", one_line=True))
        for key in {"", *([str(row["host"])] if "host" in row else [])}:
            total = totals.setdefault(key, dict.fromkeys(USAGE_FIELDS, 0))
            for name in USAGE_FIELDS:
                total[name] += counts[name]
            for currency, amount in spent.items():
                by_currency = costs.setdefault(key, {})
                by_currency[currency] = by_currency.get(currency, 0.0) + amount
    hosts = sorted({str(row["host"]) for row in rows if "host" in row})
    label = 22 + (width + 2 if width else 0)  # under the host and the session id
    for host in hosts if per_host else ():
        click.echo(shown(f"{'total on ' + host:<{label}}  {_usage_columns(totals[host], costs.get(host, {}), priced)}"))
    named = f" on {on or hosts[0]}" if on or len(hosts) == 1 else ""
    total = totals.get("", dict.fromkeys(USAGE_FIELDS, 0))
    click.echo(shown(f"{'total' + named:<{label}}  {_usage_columns(total, costs.get('', {}), priced)}"))


def _count(value: object) -> int:
    """A token count from a row: a whole number as it is, anything else (a daemon's row is untrusted) as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _cost(row: dict[str, Any]) -> float | None:
    value = row.get("cost")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _currency(row: dict[str, Any]) -> str:
    """The row's currency when it is an ISO 4217 code (a daemon's row is untrusted); a priced row from before
    currencies is in USD (chock.config.DEFAULT_CURRENCY)."""
    value = row.get("currency")
    if isinstance(value, str) and len(value) == 3 and value.isascii() and value.isalpha() and value.isupper():
        return value
    return "USD"


def _spent(row: dict[str, Any]) -> dict[str, float]:
    """What the row's session cost, by currency (empty when no call was priced)."""
    cost = _cost(row)
    return {} if cost is None else {_currency(row): cost}


def _against_budget(row: dict[str, Any]) -> str:
    """`  budget 10.00 EUR` (`, past it` when the session ended by it) for a session held to a budget."""
    budget = _cost({"cost": row.get("budget")})
    if budget is None:
        return ""
    past = ", past it" if row.get("end_reason") == "budget" else ""
    return f"  budget {budget:.2f} {_currency(row)}{past}"


def _usage_columns(counts: dict[str, int], spent: dict[str, float], priced: bool) -> str:
    text = (
        f"in {counts['input_tokens']:>9}  out {counts['output_tokens']:>9}  "
        f"cache read {counts['cache_read_tokens']:>9}  write {counts['cache_write_tokens']:>9}"
    )
    if priced:
        amounts = " + ".join(f"{amount:>9.4f} {currency}" for currency, amount in sorted(spent.items()))
        text += f"  cost {amounts or '-'.rjust(9)}"
    return text


@command()
@click.argument("session", required=False, shell_complete=session_ids)
@options(PROJECT_OPTIONS)
@pass_layout
def plan(
    layout: Layout, session: str | None, project: Path | None, daemon_address: tuple[str, ...], port: int | None
) -> None:
    """The plan a session keeps (its latest `plan` tool call); default: this project's newest session. Read
    through the daemon named, else from the state dir."""
    from chock.log.fold import fold
    from chock.session.render import plan_lines

    if named_hosts(daemon_address, port=port) is not None or ":" in (session or ""):
        from chock.commands.targets import target
        from chock.control import daemon_protocol as dp
        from chock.control.client import events_of

        found = target(layout, session, project, daemon_address, port, running=False, acting="chock plan")
        session = found.session_id
        state = fold(events_of(found.client.stream(dp.ReadRequest(session))))
    else:
        from chock.log import catalog
        from chock.log.reader import read_events
        from chock.paths import check_session_id

        if session is None:
            session = catalog.newest(layout, project_root(project))
            if session is None:
                raise Refused('no sessions in this project yet: start one with `chock run "…"`')
        if not layout.log_path(check_session_id(session)).exists():
            raise Refused(f"there is no session {session}")
        state = fold(read_events(layout.log_path(session)))  # the plan is the conversation fold's
    if not state.plan:
        click.echo(shown(f"session {session} has no plan (the agent has not called its plan tool)", one_line=True))
        return
    for line in plan_lines(state.plan):
        click.echo(shown(line, one_line=True))
