"""search: the lines of the workspace's files that match a regular expression, as path:line:text.

It streams through each file holding at most `LINE_LIMIT` bytes of a line, shows at most `HIT_LIMIT`
characters of a match, and stops at `SEARCH_LIMIT` matches, the event's bound, or the call's read bound.

A pattern can take a regular expression engine longer than any file is worth (`(a+)+$` on forty `a`s): so a
search runs on the session's loop only as long as a person would not notice, and past that from the start in a
forked child (chock.session.offload.quick_or_in_child) that the loop waits on, killed at `SEARCH_SECONDS` or by
the session's stop.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from io import BufferedReader
from pathlib import Path
from re import _parser  # type: ignore[attr-defined]  # the parse tree `_crosses_lines` reads
from typing import Any, ClassVar

from chock.errors import ChockError
from chock.log.events import TOOL_OUTPUT_LIMIT
from chock.session import offload
from chock.session.tools import confined
from chock.session.tools.tool import PATH_ARG, Files, Tool, ToolRefused

SEARCH_LIMIT = 500  # matching lines
LINE_LIMIT = 1024 * 1024  # bytes of one line searched: a minified bundle's single line is searched in its first MiB
HIT_LIMIT = 400  # characters of a matching line shown, around the match: enough to judge it by
NOTE_ROOM = 1024  # bytes of the event's bound left for the notes at the end
NAMED = 3  # binary files named in the note; the rest are counted
# Seconds one call may search: reading through `confined.SCAN_LIMIT` with a plain pattern takes a few.
SEARCH_SECONDS = 60
PATTERN_SHOWN = 120  # characters of a pattern quoted back in an error


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
            async with asyncio.timeout(SEARCH_SECONDS):
                refused, output = await offload.quick_or_in_child(
                    search, context.workspace, pattern, args.get("path") or "."
                )
        except TimeoutError:
            raise ToolRefused(
                f"search stopped after {SEARCH_SECONDS} s: the pattern is too slow on these files; simplify it "
                "(nested repeats such as (a+)+ backtrack without end), or narrow the path"
            ) from None
        except ChockError as error:  # the child died (killed from outside, out of memory): "search failed in its…"
            raise ToolRefused(str(error)) from None
        if refused:
            raise ToolRefused(output)
        return output


def search(workspace: Path, pattern: str, where: str) -> tuple[bool, str]:
    """The search: (False, its output), or (True, why it was refused)."""
    try:
        return False, _search(workspace, pattern, where)
    except ToolRefused as refusal:
        return True, str(refusal)
    except OSError as error:
        return True, f"search failed: {error.strerror or error}"


def _compiled(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """`pattern` compiled, or the model's error saying why it cannot be."""
    why = ""
    try:
        return re.compile(pattern, flags)
    except re.error as error:
        why = f"it is not a valid regular expression: {error}"
    except OverflowError as error:  # a{4294967296}
        why = str(error)
    except RecursionError:  # thousands of nested groups
        why = "it nests groups too deeply"
    except MemoryError:
        why = "it is too big"
    shown = pattern if len(pattern) <= PATTERN_SHOWN else pattern[:PATTERN_SHOWN] + "…"
    raise ToolRefused(f"the pattern {shown!r} cannot be compiled: {why}")


def _search(workspace: Path, pattern: str, where: str) -> str:
    regex = _compiled(pattern)
    scanner = _scanner(pattern)
    crosses = _crosses_lines(pattern)
    root = confined.inside(workspace, where)
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
                elif crosses:
                    found = _each_line(scan, handle, regex, scanner)
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
    if walk is not None:
        notes.extend(walk.notes("narrow the path"))
    return "\n".join((hits or ["(no matches)"]) + notes)


# What a pattern can match only at a line's start or end (`\A`, `\Z`) or by looking back (`(?<`), or with its
# multi-line flag turned off (`(?-m`), is searched line by line: elsewhere searching a whole run of lines finds
# what searching each line would. A pattern that can match a newline (`\s`, `[^"]`, `(?s).`) is searched in runs
# too, but each line within its own bounds (`_each_line`): one search of it over the whole run could go on, from
# each place it tries, through every line after, which makes the run's search quadratic in its length
# (`x[^z]*z` over a file of `x` lines).
_LINE_ONLY = ("\\A", "\\Z", "(?<", "(?-")


def _scanner(pattern: str) -> re.Pattern[str] | None:
    """The pattern compiled to search many lines at once (`^` and `$` at each line), or None when only a search
    of each line alone finds what it means."""
    if any(sign in pattern for sign in _LINE_ONLY):
        return None
    return _compiled(pattern, re.MULTILINE)


_NEWLINE = ord("\n")
_LEAVES = {_parser.AT, _parser.GROUPREF, _parser.FAILURE, _parser.SUCCESS}  # match no character of their own


def _crosses_lines(pattern: str) -> bool:
    """Whether some part of `pattern` can match a newline (in doubt, it can)."""
    try:
        parsed = _parser.parse(pattern)
        todo = [(list(parsed), bool(parsed.state.flags & re.DOTALL))]
    except (re.error, RecursionError, OverflowError):
        return True
    while todo:
        items, dotall = todo.pop()
        for op, value in items:
            if op in _LEAVES:
                continue
            if op == _parser.LITERAL:
                if value == _NEWLINE:
                    return True
            elif op == _parser.NOT_LITERAL:
                if value != _NEWLINE:
                    return True
            elif op == _parser.ANY:
                if dotall:
                    return True
            elif op == _parser.IN:
                if _set_holds_newline(value):
                    return True
            elif op == _parser.SUBPATTERN:  # (group, flags added, flags taken away, items)
                todo.append((list(value[3]), (dotall or bool(value[1] & re.DOTALL)) and not value[2] & re.DOTALL))
            elif op == _parser.BRANCH:
                todo.extend((list(branch), dotall) for branch in value[1])
            elif op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT):
                todo.append((list(value[2]), dotall))
            elif op == _parser.ATOMIC_GROUP:
                todo.append((list(value), dotall))
            elif op in (_parser.ASSERT, _parser.ASSERT_NOT):
                todo.append((list(value[1]), dotall))
            elif op == _parser.GROUPREF_EXISTS:
                todo.extend((list(branch), dotall) for branch in value[1:] if branch is not None)
            else:
                return True
    return False


def _set_holds_newline(items: list[tuple[Any, Any]]) -> bool:
    """Whether the character set `[...]` parsed as `items` holds a newline."""
    negated = bool(items) and items[0][0] == _parser.NEGATE
    held = False
    for op, value in items[negated:]:
        if op == _parser.LITERAL:
            held = value == _NEWLINE
        elif op == _parser.RANGE:
            held = value[0] <= _NEWLINE <= value[1]
        elif op == _parser.CATEGORY:  # \s and line breaks hold it, \d and \w do not; NOT_ turns each round
            name = str(value)
            held = ("SPACE" in name or "LINEBREAK" in name) != ("NOT" in name)
        else:
            return True
        if held:
            break
    return held != negated


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
    for first, text in _runs(scan, handle):
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


def _runs(scan: confined.Scan, handle: BufferedReader) -> Iterator[tuple[int, str]]:
    """Each run of whole lines of the file (`Scan.runs`) as text with `\n` line ends, after its first line's
    number; the lines cut at `LINE_LIMIT` are counted in `scan.long_lines`."""
    scan.long_lines = 0
    for first, run, cut in scan.runs(handle, LINE_LIMIT):
        scan.long_lines += cut
        yield first, _as_text(run)  # held by no name here: the caller's copy of it is the only one


def _as_text(run: bytes) -> str:
    text = run.decode("utf-8", "replace")
    return text.replace("\r\n", "\n") if "\r" in text else text


def _each_line(scan: confined.Scan, handle: BufferedReader, regex: re.Pattern[str], scanner: re.Pattern[str]) -> Found:
    """What `_line_by_line` finds, reading runs of lines and searching each line of a run within its own bounds
    (`pos` and `endpos`), so that no search goes past the line's newline. Within those bounds the scanner sees a
    line as the pattern sees it alone (a bound is a line's start or end to `^`, `$` and `\\b`), and more: `^` and
    `$` at a newline; so a line where it matches is searched alone with the pattern."""
    for first, text in _runs(scan, handle):
        search, find, start, number = scanner.search, text.find, 0, first
        while start < len(text):
            end = find("\n", start) + 1 or len(text)
            if search(text, start, end) is not None:
                line = text[start:end]
                match = regex.search(line)
                if match is not None:
                    yield number, line, match
            start, number = end, number + 1
