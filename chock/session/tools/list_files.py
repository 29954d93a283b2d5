"""list_files: the files under a directory of the workspace."""

from __future__ import annotations

from typing import Any, ClassVar

from chock.log.events import TOOL_OUTPUT_LIMIT
from chock.session.tools import confined
from chock.session.tools.tool import PATH_ARG, Files, Tool, ToolRefused

LIST_LIMIT = 2000  # entries; enough for a real source tree's overview, bounded for a node_modules
NOTE_ROOM = 1024  # bytes of the event's bound left for the notes at the end


class ListFiles(Tool):
    name = "list_files"
    description = "List the files under a directory of the workspace."
    parameters: ClassVar[dict[str, Any]] = {"path": PATH_ARG}

    async def run(self, context: Files, args: dict[str, Any]) -> str:
        workspace = context.workspace
        root = confined.inside(workspace, args.get("path") or ".")
        if not root.is_dir():
            raise ToolRefused(f"{args.get('path')} is not a directory")
        entries: list[str] = []
        size = 0
        walk = confined.Walk(workspace, root)
        for path in walk:
            entry = confined.shown(workspace, path)
            size += len(entry.encode("utf-8", "surrogateescape")) + 1
            if len(entries) >= LIST_LIMIT or size > TOOL_OUTPUT_LIMIT - NOTE_ROOM:
                entries.append(f"[stopped at {len(entries)} entries; list a subdirectory]")
                break
            entries.append(entry)
        entries.extend(walk.notes("list a subdirectory"))
        return "\n".join(entries) or "(no files)"
