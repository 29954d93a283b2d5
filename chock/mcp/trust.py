"""Which `.chock/mcp.zon` the person trusted, per project, on this host (docs/mcp.md#trust).

A project's declaration starts programs on this machine, so it is used only once the person has trusted that
exact declaration: its bytes, compared by their SHA-256. What was trusted is kept whole, as
`<state dir>/mcp-trust/<project>.zon` (the project keyed as the project rules are, chock.paths.path_name of its
real path), so that a changed declaration can be shown as what changed. It is written whole and atomically
(chock.credentials.files.write_private): a reader sees the old declaration or the new, never a torn one, and two
trusts at once leave one of them, each a declaration the person said yes to. Never in the repository, which the
agent writes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from chock.errors import ChockError
from chock.paths import Layout, path_name


def digest(declaration: bytes) -> str:
    """The SHA-256 of a declaration's exact bytes, in hex."""
    return hashlib.sha256(declaration).hexdigest()


def trust_path(layout: Layout, project: str | os.PathLike[str]) -> Path:
    return layout.state / "mcp-trust" / (path_name(os.path.realpath(project)) + ".zon")


def last_trusted(layout: Layout, project: str | os.PathLike[str]) -> bytes | None:
    """The declaration last trusted in `project` on this host, or None when none was."""
    path = trust_path(layout, project)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ChockError(f"{path}: cannot read the trusted MCP declaration: {error.strerror or error}") from None


def trusted(layout: Layout, project: str | os.PathLike[str], declaration: bytes) -> bool:
    """Whether the person trusted exactly these bytes in `project` on this host."""
    before = last_trusted(layout, project)
    return before is not None and digest(before) == digest(declaration)


def trust(layout: Layout, project: str | os.PathLike[str], declaration: bytes) -> None:
    """Keep `declaration` (UTF-8, as every declaration that parses is) as the one trusted in `project`: any
    other is asked about again."""
    from chock.credentials.files import write_private

    write_private(trust_path(layout, project), declaration.decode("utf-8"))
