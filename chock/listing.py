"""The rows `chock sessions` and `chock usage` print: the daemon's when one answers, else the state dir's.

Both are the same rows: the daemon's `list` reads the same catalog of the same state dir
(`chock.log.catalog`), and a daemon that has it warm answers without opening a log. With no daemon socket
in the state dir nothing is tried: the rows are read here at once. A daemon named by `--daemon` or
`$CHOCK_DAEMON` must answer (a person asked for that one); the state dir's own socket is asked only when it
exists, and a daemon that does not answer there is read around.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chock.paths import Layout
from chock.project import find_root


def project_rows(layout: Layout, project: Path | None, daemon: str | None) -> list[dict[str, Any]]:
    """The rows of the project holding `project` (default: the working directory), oldest first."""
    root = str(find_root(project or os.getcwd()))
    if daemon is not None or os.path.exists(layout.daemon_socket):
        rows = _from_daemon(daemon or f"unix:{layout.daemon_socket}", root, named=daemon is not None)
        if rows is not None:
            return rows
    from chock.log.catalog import rows as local_rows

    return local_rows(layout, root)


def _from_daemon(address: str, root: str, *, named: bool) -> list[dict[str, Any]] | None:
    """The daemon's rows; None when the state dir's own daemon does not answer."""
    from chock.control.client import ControlClient
    from chock.control.framing import ProtocolError

    try:
        return [row for _, row in ControlClient(address).list(root)]
    except ProtocolError:
        if named:
            raise
        return None
