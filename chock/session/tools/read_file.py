"""read_file: a text file of the workspace, or the lines of it asked for, within the bound of one event.

It reads no more than it returns (and the lines it skips): a 4 GiB file costs what its first lines cost.
"""

from __future__ import annotations

import codecs
import os
from typing import Any, ClassVar

from chock.log.events import TOOL_OUTPUT_LIMIT
from chock.session.tools import confined
from chock.session.tools.tool import PATH_ARG, Files, Tool, ToolRefused

# Bytes of the event's bound left for the note that says where and why the output stops.
NOTE_ROOM = 512


def whole_number(args: dict[str, Any], name: str) -> int | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str) or not str(value).isdigit():
        raise ToolRefused(f"`{name}` must be a whole number, not {value!r}")
    return int(value)


class ReadFile(Tool):
    name = "read_file"
    description = "Read a text file in the workspace."
    parameters: ClassVar[dict[str, Any]] = {
        "path": PATH_ARG,
        "offset": {"type": "integer"},
        "limit": {"type": "integer"},
    }
    required = ("path",)

    async def run(self, context: Files, args: dict[str, Any]) -> str:
        workspace = context.workspace
        path = confined.inside(workspace, args.get("path", ""))
        if not path.is_file():
            raise ToolRefused(f"{args.get('path')} is not a file")
        offset, limit = whole_number(args, "offset") or 0, whole_number(args, "limit")
        name = confined.shown(workspace, path)
        room = TOOL_OUTPUT_LIMIT - NOTE_ROOM
        kept = bytearray()
        note = ""
        scan = confined.Scan()
        with confined.open_file(workspace, path) as handle:
            size = os.fstat(handle.fileno()).st_size
            shown = 0
            for index, (line, whole) in enumerate(scan.lines(handle, room)):
                if index < offset:
                    continue
                part = line[: room - len(kept)]
                kept += part
                if len(part) < len(line) or not (whole or scan.binary):
                    note = (
                        f"[cut: line {index + 1} alone is longer than {room} bytes; use shell for the rest of it]"
                        if index == offset
                        else f"[cut at {room} bytes: {name} has {size} bytes; read on with offset {index}]"
                    )
                    break
                shown += 1
                if shown == limit:
                    break
        if scan.binary:
            note = f"[stopped: {name} is binary ({scan.binary}); read_file shows text, shell shows bytes (xxd)]"
        elif scan.spent:
            note = (
                f"[stopped: read_file reads through at most {confined.SCAN_LIMIT // 2**20} MiB in one call; "
                f"use shell (sed -n) to reach further into {name}]"
            )
        text = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(kept), final=not note)
        return text + ("\n" if note and text and not text.endswith("\n") else "") + note
