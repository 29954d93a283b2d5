"""search: the lines of the workspace's files that match a regular expression, as path:line:text.

It streams through each file holding at most `LINE_LIMIT` bytes of a line, shows at most `HIT_LIMIT`
characters of a match, and stops at `SEARCH_LIMIT` matches, the event's bound, or the call's read bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from io import BufferedReader
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
        scanner = _scanner(pattern)
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
                    if scanner is None:
                        found = _line_by_line(scan, handle, regex)
                    else:
                        found = _in_runs(scan, handle, regex, scanner)
                    for number, text, match in found:
                        hit = f"{name}:{number}:{excerpt(text.rstrip(), match)}"
                        size += len(hit.encode()) + 1
                        if len(hits) == SEARCH_LIMIT or size > TOOL_OUTPUT_LIMIT - NOTE_ROOM:
                            hits.append("[stopped: too many matches; narrow the pattern or the path]")
                            return "\n".join(hits)
                        hits.append(hit)
                    long_lines += scan.long_lines
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


# What a pattern can match only at a line's start or end (`\A`, `\Z`) or by looking back (`(?<`), or with its
# multi-line flag turned off (`(?-m`), is searched line by line: elsewhere searching a whole run of lines finds
# what searching each line would.
_LINE_ONLY = ("\\A", "\\Z", "(?<", "(?-")


def _scanner(pattern: str) -> re.Pattern[str] | None:
    """The pattern compiled to search many lines at once (`^` and `$` at each line), or None when only a search
    of each line alone finds what it means."""
    if any(sign in pattern for sign in _LINE_ONLY):
        return None
    return re.compile(pattern, re.MULTILINE)


Found = Iterator[tuple[int, str, re.Match[str]]]


def _line_by_line(scan: confined.Scan, handle: BufferedReader, regex: re.Pattern[str]) -> Found:
    """Each line's number, text and match, searching each line alone."""
    scan.long_lines = 0
    for number, (line, whole) in enumerate(scan.lines(handle, LINE_LIMIT), 1):
        scan.long_lines += not (whole or scan.binary)
        text = line.decode("utf-8", "replace")
        match = regex.search(text[:-2] + "\n" if text.endswith("\r\n") else text)
        if match is not None:
            yield number, text, match


def _in_runs(scan: confined.Scan, handle: BufferedReader, regex: re.Pattern[str], scanner: re.Pattern[str]) -> Found:
    """What `_line_by_line` finds, with one search of the scanner over each run of lines.

    Each newline of the run is doubled, so that after a line's own newline the text looks, to `$`, as the end of
    that line alone does. Where the scanner finds a match, the line it starts in is searched alone with the
    pattern (a match across lines is not one), and the scan goes on from the next line: a line's own match is
    never passed over, since the scan from the line's start finds one starting no later."""
    scan.long_lines = 0
    for first, run, cut in scan.runs(handle, LINE_LIMIT):
        scan.long_lines += cut
        text = run.decode("utf-8", "replace")
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        text = text.replace("\n", "\n\n")
        newlines, counted, at = 0, 0, 0  # the newlines of `text` before `counted`
        while at < len(text) and (candidate := scanner.search(text, at)) is not None:
            where = candidate.start()
            newlines += text.count("\n", counted, where)
            counted = where
            if newlines % 2:  # the doubled newline after a line: the match starts at that line's end
                where -= 1
            if where >= len(text) and text.endswith("\n"):
                break  # an empty match at the run's very end, after its last newline: no line is there
            start = text.rfind("\n", 0, where) + 1
            end = text.find("\n", where) + 1 or len(text)
            line = text[start:end]
            match = regex.search(line)
            if match is not None:
                yield first + newlines // 2, line, match
            at = end + 1
