"""scratchpad: the session's own notes, kept in Chock's data dir (outside the workspace) across handovers."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from chock.paths import sync_directory
from chock.session.tools.tool import Context, Tool, ToolRefused


class Scratchpad(Tool):
    name = "scratchpad"
    description = (
        "Your notes for this session, kept across handovers: read them, replace them (write) or append to them."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "action": {"type": "string", "enum": ["read", "write", "append"]},
        "text": {"type": "string"},
    }
    required = ("action",)

    def summary(self, args: dict[str, Any]) -> str:
        return str(args.get("action", ""))

    async def run(self, context: Context, args: dict[str, Any]) -> str:
        path = context.scratchpad
        action = args.get("action")
        if action == "read":
            return path.read_text(encoding="utf-8") if path.exists() else "(the scratchpad is empty)"
        text = args.get("text")
        if action not in ("write", "append") or not isinstance(text, str):
            raise ToolRefused("scratchpad takes action read, or write/append with a `text`")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(path, "a" if action == "append" else "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # before the tool.result that reports it (docs/log.md#durability)
        sync_directory(path.parent)
        return f"scratchpad {action} done ({path.stat().st_size} bytes)"
