"""write_file: create or replace a file of the workspace."""

from __future__ import annotations

from typing import Any, ClassVar

from chock.session.tools import confined
from chock.session.tools.tool import PATH_ARG, Files, Tool, ToolRefused


class WriteFile(Tool):
    name = "write_file"
    description = "Create or replace a file in the workspace."
    parameters: ClassVar[dict[str, Any]] = {"path": PATH_ARG, "content": {"type": "string"}}
    required = ("path", "content")

    async def run(self, context: Files, args: dict[str, Any]) -> str:
        workspace = context.workspace
        path = confined.inside(workspace, args.get("path", ""))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolRefused("write_file needs the file's content as a string")
        confined.write(workspace, path, content)
        return f"wrote {len(content.encode())} bytes to {confined.shown(workspace, path)}"
