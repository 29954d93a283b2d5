"""write_file: create or replace a file of the workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from chock.session.tools import confined, diff
from chock.session.tools.tool import PATH_ARG, Files, Result, Tool, ToolRefused


class WriteFile(Tool):
    name = "write_file"
    description = "Create or replace a file in the workspace."
    parameters: ClassVar[dict[str, Any]] = {"path": PATH_ARG, "content": {"type": "string"}}
    required = ("path", "content")

    async def run(self, context: Files, args: dict[str, Any]) -> str | Result:
        workspace = context.workspace
        path = confined.inside(workspace, args.get("path", ""))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolRefused("write_file needs the file's content as a string")
        name = confined.shown(workspace, path)
        before = _before(workspace, path)
        confined.write(workspace, path, content)
        output = f"wrote {len(content.encode())} bytes to {name}"
        if before is False:
            return output  # what it replaced was not text a diff can show
        return Result(output, diff=diff.unified(name, before, content))


def _before(workspace: Path, path: Path) -> str | Literal[False] | None:
    """What the write replaces, for its diff: the file's text, None when there is no file, False when it is not
    UTF-8 text of at most `diff.READ_LIMIT` bytes, or cannot be read."""
    try:
        with confined.open_file(workspace, path) as handle:
            data = handle.read(diff.READ_LIMIT + 1)
    except FileNotFoundError:
        return None
    except (OSError, ToolRefused):
        return False  # a directory, a FIFO, a symlink: the write refuses it in its own words
    if len(data) > diff.READ_LIMIT:
        return False
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return False
