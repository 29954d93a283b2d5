"""list_files: the files under a directory of the workspace."""

from __future__ import annotations

from typing import Any, ClassVar

from chock.session.tools import confined
from chock.session.tools.tool import PATH_ARG, Files, Tool, ToolRefused

LIST_LIMIT = 2000  # entries; enough for a real source tree's overview, bounded for a node_modules


class ListFiles(Tool):
    name = "list_files"
    description = "List the files under a directory of the workspace."
    parameters: ClassVar[dict[str, Any]] = {"path": PATH_ARG}

    async def run(self, context: Files, args: dict[str, Any]) -> str:
        workspace = context.workspace
        root = confined.inside(workspace, args.get("path") or ".")
        if not root.is_dir():
            raise ToolRefused(f"{args.get('path')} is not a directory")
        entries = []
        walk = confined.Walk(workspace, root)
        for path in walk:
            entries.append(confined.shown(workspace, path))
            if len(entries) >= LIST_LIMIT:
                entries.append(f"[stopped at {LIST_LIMIT} entries]")
                break
        if walk.stopped:
            entries.append(f"[stopped after reading {confined.WALK_LIMIT} directory entries; list a subdirectory]")
        return "\n".join(entries) or "(no files)"
