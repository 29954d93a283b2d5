"""`chock sessions`, and the rows it and `chock usage` print: the daemon's when one answers, else the state dir's.

`chock sessions` is one of the commands read without click (chock/argv.py): its options are `OPTIONS` and `run` does
what it does, whichever way it was started. Both ways print the same rows: the daemon's `list` reads the same
catalog of the same state dir (`chock.log.catalog`), and a daemon that has it warm answers without opening a log.
With no daemon socket in the state dir nothing is tried: the rows are read here at once. A daemon named by
`--daemon`, `--port` or `$CHOCK_DAEMON` (`chock.control.address.named_address`) must answer (a person asked for
that one); the state dir's own socket is asked only when it exists, and a daemon that does not answer there is
read around.

`--all` lists every project's sessions on every host (chock/commands/every_host.py): a daemon's `sessions` (the same
rows, with HOST and PROJECT columns), else, for this machine, the whole state dir. A daemon's rows are untrusted:
each field is taken as text and shown through the safe printer, nothing in a row is opened, and at most
`MAX_SESSIONS` rows of a host are kept (chock/control/daemon_protocol.py: the daemon sends no more).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from chock.argv import Option
from chock.commands.shared_options import JSON, PROJECT_OPTIONS
from chock.control.address import Address, named_address
from chock.paths import Layout
from chock.terminal import shown

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

_SPACES = re.compile(r"[ \t\n]+")

ALL = Option("--all", "all_projects", bool, "", "Every project's sessions, with a PROJECT column.")

OPTIONS = (*PROJECT_OPTIONS, ALL, JSON)


def run(layout: Layout, values: dict[str, object]) -> int:
    """`chock sessions`: this project's sessions (every project's on every host, with --all), newest first; the
    exit code."""
    if values["all_projects"]:
        if values["project"] is not None:
            from chock.errors import UsageError

            raise UsageError("--all lists every project's sessions; leave out --project (or leave out --all)")
        from chock.commands.every_host import run_all

        return run_all(layout, values, every_row, lambda rows: print_rows(rows, values, with_project=True))
    daemon = named_address(values["daemon_address"], port=values["port"], acting="chock sessions")  # type: ignore[arg-type]
    rows = project_rows(layout, values["project"], daemon)[::-1]  # type: ignore[arg-type]
    print_rows(rows, values, with_project=False)
    if not rows and not values["as_json"]:
        print('no sessions in this project yet: start one with `chock run "…"`')
    return 0


def print_rows(rows: list[dict[str, Any]], values: dict[str, object], *, with_project: bool) -> None:
    """The rows as JSON lines (`--json`) or as lines through the safe printer; a row's `host`, when it has one, is
    its first column."""
    import json

    width = max((len(str(row.get("host", ""))) for row in rows), default=0)
    for row in rows:
        if values["as_json"]:
            print(json.dumps(row))  # ASCII: every other character is a `\uXXXX` escape
        else:
            host = f"{row['host']!s:<{width}}  " if "host" in row else ""
            print(shown(host + _line(row, with_project=with_project), one_line=True))
            if row.get("free"):
                print(shown(f"    {interrupted(row)}", one_line=True))
            elif row.get("status") == "moved":
                print(shown(f"    moved to {row.get('end_to') or 'another host'}", one_line=True))
            elif row.get("status") == "handed-over" and row.get("end_to"):
                print(shown(_moved_out(row), one_line=True))


def _moved_out(row: dict[str, Any]) -> str:
    """What a session handed over to another host, whose move's answer is unknown here, needs next."""
    from chock.log.row import moved_out_next

    there = str(row.get("end_to"))
    return f"    moved out to {there}, which may hold it: {moved_out_next(str(row.get('id')), there)}"


def _line(row: dict[str, Any], *, with_project: bool) -> str:
    """One row as a line: id, status, owner, how it ended, (its project,) its task. Every field is taken as text,
    whatever a daemon sent in it."""
    field = {key: str(row.get(key) or "-") for key in ("id", "status", "owner", "end_reason", "project")}
    project = f"{field['project']}  " if with_project else ""
    task = preview(str(row.get("message") or ""), 40 if with_project else 60)
    return f"{field['id']}  {field['status']:<11}  {field['owner']:<8}  {field['end_reason']:<11}  {project}{task}"


def interrupted(row: dict[str, Any]) -> str:
    """What a free session's row says of it: what interrupted it, and the command that takes it."""
    return f"interrupted by {row.get('interrupted_by') or 'a crash'} — `chock run --continue {row['id']}`"


def preview(text: str, width: int = 60) -> str:
    """A task's text on one line, cut to `width`: runs of spaces, tabs and newlines are one space; every other
    character stays, for `chock.terminal.safe` to show (a U+2028 or an escape is shown escaped, not hidden)."""
    line = " ".join(part for part in _SPACES.split(text) if part)
    return line if len(line) <= width else line[: width - 1] + "…"


def project_rows(layout: Layout, project: Path | None, daemon: Address | None) -> list[dict[str, Any]]:
    """The rows of the project holding `project` (default: the working directory), oldest first: through the
    daemon named (`chock.control.address.named_address`), which must answer, else as the module says. With a
    daemon named, an absolute `project` is a path on that daemon's machine: sent as typed, never looked at here."""
    from chock.project import find_root

    if daemon is not None and project is not None and project.is_absolute():
        root = str(project)
    else:
        root = str(find_root(project or os.getcwd()))
    if daemon is not None or os.path.exists(layout.daemon_socket):
        rows = _from_daemon(daemon or Address(path=str(layout.daemon_socket)), root, named=daemon is not None)
        if rows is not None:
            return rows
    from chock.log.catalog import rows as local_rows

    return local_rows(layout, root)


def every_row(layout: Layout, daemon: Address | None) -> list[dict[str, Any]]:
    """Every project's rows, newest first: the daemon's `sessions` as `project_rows` asks a daemon, else every
    session of the state dir."""
    if daemon is not None or os.path.exists(layout.daemon_socket):
        rows = _sessions_from_daemon(daemon or Address(path=str(layout.daemon_socket)), named=daemon is not None)
        if rows is not None:
            return rows
    from chock.log.catalog import states

    found = sorted(states(layout), key=lambda found: (found[0].started_at, found[0].id), reverse=True)
    return [state.row(alive) for state, alive in found]


def _sessions_from_daemon(address: Address, *, named: bool) -> list[dict[str, Any]] | None:
    """The daemon's `sessions` rows (every project's); None when the state dir's own daemon does not answer."""
    from chock.control import daemon_protocol as dp

    return _rows_from_daemon(address, dp.SessionsRequest(), named=named)


def _from_daemon(address: Address, root: str, *, named: bool) -> list[dict[str, Any]] | None:
    """The daemon's `list` rows of `root`; None when the state dir's own daemon does not answer."""
    from chock.control import daemon_protocol as dp

    return _rows_from_daemon(address, dp.ListRequest(root), named=named)


def _rows_from_daemon(address: Address, request: Any, *, named: bool) -> list[dict[str, Any]] | None:
    """A listing verb's rows, at most dp.MAX_SESSIONS of them; None when the state dir's own daemon does not
    answer (`named`: a daemon a person named must answer, and its refusal is raised)."""
    from chock.control import daemon_protocol as dp
    from chock.control.client import ControlClient, expect
    from chock.control.framing import ProtocolError

    try:
        lines = ControlClient(address).collect(request, most=dp.MAX_SESSIONS)
    except ProtocolError:
        if named:
            raise
        return None
    return [expect(line, dp.ListRow).row for line in lines]
