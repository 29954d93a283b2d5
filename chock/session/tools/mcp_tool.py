"""One MCP server's tool as a session tool: the model calls `mcp__<server>__<tool>`, the supervisor carries it out.

Every call asks for approval (the rules decide `mcp:<server>/<tool>`; a server's `readOnlyHint` changes nothing:
a hint from a server is not a promise). A person judges a call by `<server>/<tool> <args as compact JSON>`.
The session builds one `ServerTool` per tool of `McpServers.tools()` and dispatches through them as through
`SESSION_TOOLS` (chock.session.tools.dispatch).
"""

from __future__ import annotations

import json
from typing import Any

from chock.mcp.server_link import ProgressCallback
from chock.mcp.supervisor import McpServers, McpTool
from chock.session.tools.tool import Context, Result, Tool


class ServerTool(Tool):
    """A tool of an MCP server, by the name the model was given."""

    asks_approval = True

    def __init__(self, servers: McpServers, tool: McpTool, *, on_progress: ProgressCallback | None = None) -> None:
        self.servers, self.tool, self.on_progress = servers, tool, on_progress
        self.name = tool.model_name
        self.description = tool.description

    def schema(self) -> dict[str, Any]:
        """The server's own input schema, whole (it was bounded when listed), as an object schema."""
        return {
            "name": self.tool.model_name,
            "description": self.tool.description,
            "parameters": {**self.tool.input_schema, "type": "object"},
        }

    def summary(self, args: dict[str, Any]) -> str:
        shown = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        return f"{self.tool.server}/{self.tool.tool} {shown}"

    async def run(self, context: Context, args: dict[str, Any]) -> Result:
        return await self.servers.call(self.tool, args, on_progress=self.on_progress)
