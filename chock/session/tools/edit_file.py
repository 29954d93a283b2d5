"""edit_file: replace one text with another in a file of the workspace.

It holds the whole file to rewrite it, so it refuses a file bigger than `EDIT_LIMIT`, an edit that would make
it bigger than that (a short `old` replaced everywhere by a long `new`), and a file that is not UTF-8 (rewriting
it as text would change its other bytes).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from chock.session.tools import confined, diff
from chock.session.tools.tool import PATH_ARG, Files, Result, Tool, ToolRefused

EDIT_LIMIT = 8 * 1024 * 1024  # bytes; far above any source file a person edits by hand


class EditFile(Tool):
    name = "edit_file"
    description = "Replace the text `old` with `new` in a workspace file (`old` must occur once, unless all is true)."
    parameters: ClassVar[dict[str, Any]] = {
        "path": PATH_ARG,
        "old": {"type": "string"},
        "new": {"type": "string"},
        "all": {"type": "boolean"},
    }
    required = ("path", "old", "new")

    async def run(self, context: Files, args: dict[str, Any]) -> Result:
        workspace = context.workspace
        path = confined.inside(workspace, args.get("path", ""))
        old, new = args.get("old"), args.get("new")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise ToolRefused("edit_file needs `old` (text that is in the file) and `new` (its replacement)")
        if not path.is_file():
            raise ToolRefused(f"{args.get('path')} is not a file")
        name = confined.shown(workspace, path)
        with confined.open_file(workspace, path) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(EDIT_LIMIT + 1) if size <= EDIT_LIMIT else b""
        if size > EDIT_LIMIT or len(data) > EDIT_LIMIT:
            raise ToolRefused(
                f"{name} has {max(size, len(data))} bytes; edit_file edits files up to {EDIT_LIMIT // 2**20} MiB: "
                "change a bigger one with shell (e.g. sed -i)"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolRefused(
                f"{name} is not UTF-8 text, and rewriting it as text would change its other bytes: "
                "change it with shell (e.g. sed -i)"
            ) from None
        count = text.count(old)
        if count == 0:
            raise ToolRefused(f"the text to replace was not found in {args.get('path')}")
        if count > 1 and not args.get("all"):
            raise ToolRefused(
                f"the text to replace occurs {count} times in {args.get('path')}; give more context or all: true"
            )
        replaced = count if args.get("all") else 1
        grown = len(data) + replaced * (
            len(new.encode("utf-8", "surrogatepass")) - len(old.encode("utf-8", "surrogatepass"))
        )
        if grown > EDIT_LIMIT:  # refused before the text is made: `all` can multiply it many times over
            raise ToolRefused(
                f"{name} would have {grown:,} bytes after replacing {replaced:,} occurrence(s); edit_file writes files "
                f"up to {EDIT_LIMIT // 2**20} MiB: replace fewer, or change it with shell (e.g. sed -i)"
            )
        after = text.replace(old, new)
        confined.write(workspace, path, after)
        return Result(f"replaced {replaced} occurrence(s) in {name}", diff=diff.unified(name, text, after))
