"""search: the lines of the workspace's files that match a regular expression, as path:line:text.

It streams through each file holding at most `LINE_LIMIT` bytes of a line, shows at most `HIT_LIMIT`
characters of a match, and stops at `SEARCH_LIMIT` matches, the event's bound, or the call's read bound.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from chock.log.events import TOOL_OUTPUT_LIMIT
from chock.session.tools import confined
from chock.session.tools.tool import PATH_ARG, Files, Tool, ToolRefused

SEARCH_LIMIT = 500  # matching lines
LINE_LIMIT = 1024 * 1024  # bytes of one line searched: a minified bundle's single line is searched in its first MiB
HIT_LIMIT = 400  # characters of a matching line shown, around the match: enough to judge it by
NOTE_ROOM = 1024  # bytes of the event's bound left for the notes at the end
NAMED = 3  # binary files named in the note; the rest are counted


def excerpt(text: str, match: re.Match[str]) -> str:
    """The line, or `HIT_LIMIT` characters of it around the match, marked where it is cut."""
    if len(text) <= HIT_LIMIT:
        return text
    start = max(0, min(match.start() - HIT_LIMIT // 4, len(text) - HIT_LIMIT))
    return ("…" if start else "") + text[start : start + HIT_LIMIT] + ("…" if start + HIT_LIMIT < len(text) else "")


class Search(Tool):
    name = "search"
    description = "Search the workspace's files for a regular expression; prints path:line:text."
    parameters: ClassVar[dict[str, Any]] = {"pattern": {"type": "string"}, "path": PATH_ARG}
    required = ("pattern",)

    def summary(self, args: dict[str, Any]) -> str:
        return f"{args.get('pattern', '')} in {args.get('path') or '.'}"

    async def run(self, context: Files, args: dict[str, Any]) -> str:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ToolRefused("search needs a `pattern` (a regular expression)")
        try:
            regex = re.compile(pattern)
        except re.error as error:
            raise ToolRefused(f"the pattern {pattern!r} is not a valid regular expression: {error}") from None
        workspace = context.workspace
        root = confined.inside(workspace, args.get("path") or ".")
        walk = confined.Walk(workspace, root) if root.is_dir() else None
        scan = confined.Scan()
        hits: list[str] = []
        size, long_lines, binary = 0, 0, []
        for path in walk if walk is not None else [root]:
            name = confined.shown(workspace, path)
            try:
                with walk.open_file(path) if walk is not None else confined.open_file(workspace, path) as handle:
                    for number, (line, whole) in enumerate(scan.lines(handle, LINE_LIMIT), 1):
                        long_lines += not (whole or scan.binary)
                        text = line.decode("utf-8", "replace")
                        match = regex.search(text[:-2] + "\n" if text.endswith("\r\n") else text)
                        if match is None:
                            continue
                        hit = f"{name}:{number}:{excerpt(text.rstrip(), match)}"
                        size += len(hit.encode()) + 1
                        if len(hits) == SEARCH_LIMIT or size > TOOL_OUTPUT_LIMIT - NOTE_ROOM:
                            hits.append("[stopped: too many matches; narrow the pattern or the path]")
                            return "\n".join(hits)
                        hits.append(hit)
            except (OSError, ToolRefused):
                continue  # unreadable, special, or swapped for a symlink: not searched
            if scan.binary:
                binary.append(name)
            if scan.spent:
                break
        notes = []
        if long_lines:
            notes.append(f"[{long_lines} line(s) longer than {LINE_LIMIT // 2**20} MiB searched in their first MiB]")
        if binary:
            more = f" and {len(binary) - NAMED} more" if len(binary) > NAMED else ""
            notes.append(f"[binary, not searched from their first NUL byte on: {', '.join(binary[:NAMED])}{more}]")
        if scan.spent:
            notes.append(f"[stopped after reading {confined.SCAN_LIMIT // 2**20} MiB; narrow the path]")
        if walk is not None and walk.stopped:
            notes.append(f"[stopped after reading {confined.WALK_LIMIT} directory entries; narrow the path]")
        return "\n".join((hits or ["(no matches)"]) + notes)
