"""Each configured MCP server tried as a session would start it, for `chock mcp list` and `chock doctor`.

config.zon's servers and the project's trusted ones are started in their sandboxes (chock.mcp.supervisor) over an
empty temporary directory, never the project, each with a temporary HOME of its own, never its project's: a server
is asked for its tools, not given anything to read, and nothing of it is left behind. A
project's server that is not trusted on this host is listed without being started, and so is each server of a
declaration that cannot be read. Nothing is asked and nothing is trusted here.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chock.mcp import trust
from chock.mcp.declarations import CONFIG, PROJECT, ServerSpec
from chock.mcp.session_specs import WHOLE, Declaration, read_declaration, untrusted_reason
from chock.paths import Layout

if TYPE_CHECKING:
    from chock.config import Config
    from chock.session.workspace import Project

STARTED, FAILED, NOT_STARTED = "started", "failed", "not started"


@dataclass(frozen=True)
class ServerReport:
    """One server as `chock mcp list` shows it: where it came from, what it runs, and what came of starting it."""

    name: str  # "" for a whole declaration that cannot be used
    origin: str  # config | project
    what: str  # its argv as a shell would show it, or its URL
    state: str  # started | failed | not started
    reason: str = ""
    tools: tuple[tuple[str, str], ...] = ()  # (the model's name, the description's first line)


def describe(spec: ServerSpec) -> str:
    """What a server runs: its argv as a shell would read it back, or its URL."""
    return shlex.join(spec.command) if spec.command else spec.url


def reports(layout: Layout, config: Config, project: Project | None) -> list[ServerReport]:
    """config.zon's servers, then the project's (when `project` is given), each started when it may be."""
    specs = [config.mcp[name] for name in sorted(config.mcp)]
    held: list[ServerReport] = []
    if project is not None:
        found = read_declaration(project.repo, project.head)
        specs_there, held = _project_side(layout, config, found)
        specs += specs_there
    started = asyncio.run(_start(layout, config, specs, project.root if project is not None else None))
    return started + held


def _project_side(layout: Layout, config: Config, found: Declaration) -> tuple[list[ServerSpec], list[ServerReport]]:
    """The project's servers that may start, and a report for each that may not."""
    if found.problem:
        return [], [ServerReport(WHOLE, PROJECT, found.source, NOT_STARTED, found.problem)]
    if found.data is None:
        return [], []
    wanted = [found.servers[name] for name in sorted(found.servers)]
    held = [
        ServerReport(spec.name, PROJECT, describe(spec), NOT_STARTED, f"config.zon declares {spec.name!r} already")
        for spec in wanted
        if spec.name in config.mcp
    ]
    wanted = [spec for spec in wanted if spec.name not in config.mcp]
    if trust.trusted(layout, found.project, found.data):
        return wanted, held
    why = f"{untrusted_reason(found, trust.last_trusted(layout, found.project))}: `chock mcp trust` shows it and asks"
    return [], held + [ServerReport(spec.name, PROJECT, describe(spec), NOT_STARTED, why) for spec in wanted]


async def _start(layout: Layout, config: Config, specs: list[ServerSpec], project: Path | None) -> list[ServerReport]:
    """Start `specs` as a session would, over an empty directory; collect what each said; stop them all."""
    if not specs:
        return []
    from chock.credentials.lookup import mcp_credential
    from chock.mcp.supervisor import McpServers

    said: dict[str, dict[str, Any]] = {}

    def emit(type: str, **fields: Any) -> dict[str, Any]:
        if type == "mcp.server" and fields.get("state") in (STARTED, FAILED):
            said[str(fields["server"])] = fields
        return {"type": type, **fields}

    with tempfile.TemporaryDirectory(prefix="chock-mcp-list-") as scratch:
        empty, homes = Path(scratch, "workspace"), Path(scratch, "homes")
        empty.mkdir()
        servers = McpServers(
            specs,
            layout=layout,
            workspace=empty,
            project=project or empty,
            emit=emit,
            credentials=lambda spec: mcp_credential(layout, config, spec),
            homes=homes,
        )
        try:
            await servers.start()
            tools = servers.tools()
        finally:
            await servers.stop()
    found = []
    for spec in specs:
        fields = said.get(spec.name, {})
        own = tuple((tool.model_name, _first_line(tool.description)) for tool in tools if tool.server == spec.name)
        state = STARTED if fields.get("state") == STARTED else FAILED
        reason = str(fields.get("reason") or ("" if state == STARTED else "it did not start"))
        found.append(ServerReport(spec.name, spec.origin or CONFIG, describe(spec), state, reason, own))
    return found


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0]
