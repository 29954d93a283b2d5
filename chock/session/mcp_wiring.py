"""A session's MCP servers as its loop sees them (docs/mcp.md): the tools table the model is told and calls are
dispatched through — the built-in tools, then each server's tools in `McpServers.tools()` order (server, then
tool name: stable, so the prompt cache holds) — rebuilt only at a turn boundary, when a server said its list
changed; what an elicitation shows a person and what a yes to it sends; and the calls a subagent relays.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chock.session import tools
from chock.session.tools.tool import Tool

if TYPE_CHECKING:
    from chock.config import Config
    from chock.log.events import Event
    from chock.mcp.server_link import Elicit
    from chock.mcp.supervisor import McpTool
    from chock.paths import Layout
    from chock.session.hostgit import Repo
    from chock.session.ports import McpFactory, McpPort
    from chock.session.workspace import Worktree

# The longest a server's question waits for a person when `.approvals.timeout` says nothing: a call's own timeout.
ELICITATION_SECONDS = 120.0
# What of a server's requested schema a person is shown with its message.
SHOWN_SCHEMA_BYTES = 2048


class McpTable:
    """The tools the session's model may call, and the servers behind its MCP ones."""

    def __init__(self, servers: McpPort, on_progress: Callable[[str, float, float | None, str], None]) -> None:
        self._servers = servers
        self._on_progress = on_progress  # (model name, progress, total, message)
        self.table: dict[str, Tool] = dict(tools.SESSION_TOOLS)
        self._served: dict[str, McpTool] = {}
        self._stopping: asyncio.Future[None] | None = None

    async def start(self) -> None:
        await self._servers.start()
        self._build()

    def _build(self) -> None:
        listed = self._servers.tools()
        self._served = {tool.model_name: tool for tool in listed}
        self.table = dict(tools.SESSION_TOOLS)
        if listed:  # a session with no server never loads the MCP modules
            from chock.session.tools.mcp_tool import ServerTool

            for tool in listed:
                progress = functools.partial(self._on_progress, tool.model_name)
                self.table[tool.model_name] = ServerTool(self._servers, tool, on_progress=progress)  # type: ignore[arg-type]

    def take_changes(self) -> list[tuple[str, list[str]]]:
        """The servers whose list changed since the last boundary, with their tools' model names; the table holds
        the new lists from here on."""
        changes = self._servers.take_changes()
        if changes:
            self._build()
        return changes

    def served(self, name: str) -> dict[str, str]:
        """`{server, tool}` of the MCP tool the model calls `name` ({} for a built-in tool)."""
        tool = self._served.get(name)
        return {"server": tool.server, "tool": tool.tool} if tool is not None else {}

    def summary(self, name: str, args: dict[str, Any]) -> str:
        tool = self.table.get(name)
        return tool.summary(args) if tool is not None else tools.summary(name, args)

    def specs(self) -> list[dict[str, Any]]:
        """The MCP tools' specs alone (what a subagent is told beside its read-only tools)."""
        return [self.table[name].schema() for name in self._served]

    async def stop(self) -> None:
        """Stop every server once, whoever asks first; a stop that lands meanwhile cannot cut it short."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._servers.stop())
        await asyncio.shield(self._stopping)


def factory(
    layout: Layout,
    config: Config,
    repo: Repo,
    worktree: Worktree,
    project: Path,
    interactive: bool,
    emit: Callable[..., Event],
) -> McpFactory:
    """The session's servers: those config.zon names, and those the project's `.chock/mcp.zon` at the session's
    base declares once the person trusted that exact declaration (asked at a terminal; with nobody to ask they
    are skipped, and the log says so). They start with the session's loop, over its workspace (docs/mcp.md)."""
    from chock.mcp.session_specs import ask_at_terminal, servers_for_session
    from chock.session.ports import no_mcp_servers

    ask = ask_at_terminal if interactive else None
    specs, skipped = servers_for_session(config, repo, worktree.base, layout, ask)
    for server, reason in skipped:
        emit("mcp.server", server=server, state="skipped", origin="project", reason=reason)
    if not specs:
        return no_mcp_servers
    from chock.credentials.lookup import mcp_credential
    from chock.mcp.supervisor import McpServers

    def servers(emit: Callable[..., Event], elicit: Elicit) -> McpServers:
        return McpServers(
            specs,
            layout=layout,
            workspace=worktree.directory,
            project=project,
            emit=emit,
            credentials=functools.partial(mcp_credential, layout, config),
            on_elicit=elicit,
        )

    return servers


def elicitation_summary(server: str, message: str, schema: dict[str, Any]) -> str:
    """What a person is shown of a server's question: the server, its message, and what it asks for."""
    fields = json.dumps(schema.get("properties", {}), ensure_ascii=False, sort_keys=True)
    if len(fields) > SHOWN_SCHEMA_BYTES:
        fields = fields[:SHOWN_SCHEMA_BYTES] + " …"
    return (
        f"the MCP server {server} asks: {message}\n(yes sends the defaults of what it asks for: {fields}; no declines)"
    )


def defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """What a yes sends: the default of each field the requested schema gives one for."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {
        name: field["default"] for name, field in properties.items() if isinstance(field, dict) and "default" in field
    }
