"""What a change to a file looks like to a person: a unified diff, as `git diff` shows it, and bounded.

`write_file` and `edit_file` return one beside their output (`tool.Result`); the session logs it as the
`tool.result` event's `diff` field (docs/log.md), the page shows it, and the model is never sent it (the
output already says what the tool did). It is for a glance: past `DIFF_LIMIT` bytes it is cut at a line with
a note, and the whole change is in the workspace, and on the session's branch once it completes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Bytes of diff an event carries: a screenful or two of changes, far below the 64 KiB a tool's output may take.
DIFF_LIMIT = 8 * 1024
CONTEXT = 3  # unchanged lines around each change, as git shows them
# Lines difflib compares at most, once the unchanged head and tail are left out (its matching is quadratic at
# worst): a rewrite bigger than that is summed up in one line instead.
COMPARE_LINES = 20_000
# What write_file reads of the file it replaces, to show what it replaced.
READ_LIMIT = 1024 * 1024

_NO_NEWLINE = "\\ No newline at end of file\n"
_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified(name: str, before: str | None, after: str) -> str:
    """The diff from `before` (None: the file is new) to `after`, cut to DIFF_LIMIT bytes; "" when equal."""
    old = (before or "").splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    head = _common(old, new)
    tail = _common(old[head:][::-1], new[head:][::-1])
    start = max(0, head - CONTEXT)
    old_middle = old[start : len(old) - max(0, tail - CONTEXT)]
    new_middle = new[start : len(new) - max(0, tail - CONTEXT)]
    if old_middle == new_middle:
        return ""
    header = [f"--- {'/dev/null' if before is None else 'a/' + name}\n", f"+++ b/{name}\n"]
    if len(old_middle) + len(new_middle) > COMPARE_LINES:
        said = f"({len(old_middle)} lines from line {start + 1} on became {len(new_middle)}: too many to compare)\n"
        return "".join([*header, said])
    import difflib  # at the first diff: a session's start imports only what its first request uses

    body = difflib.unified_diff(old_middle, new_middle, n=CONTEXT, lineterm="\n")
    return _bounded(header, (_shifted(line, start) for line in list(body)[2:]))


def _common(a: list[str], b: list[str]) -> int:
    """How many lines `a` and `b` share from their start."""
    count = 0
    for x, y in zip(a, b, strict=False):  # the shorter one ends the count
        if x != y:
            break
        count += 1
    return count


def _shifted(line: str, start: int) -> str:
    """A hunk header's line numbers counted from the file's first line, not the compared middle's."""
    if not start or not line.startswith("@@"):
        return line
    return _HUNK.sub(lambda m: f"@@ -{int(m[1]) + start}{m[2] or ''} +{int(m[3]) + start}{m[4] or ''} @@", line, 1)


def _bounded(header: list[str], lines: Iterable[str]) -> str:
    """The header and lines, each ending in a newline (a last line without one says so, as git does), stopped
    before DIFF_LIMIT bytes with a note saying how much was left out."""
    out = list(header)
    size = sum(len(line.encode()) for line in out)
    left = 0
    for line in lines:
        if not line.endswith("\n"):
            line += "\n" + _NO_NEWLINE
        length = len(line.encode())
        if left or size + length > DIFF_LIMIT:
            left += 1
            continue
        out.append(line)
        size += length
    if left:
        out.append(f"… {left} more lines of diff not shown (the diff is cut at {DIFF_LIMIT // 1024} KiB)\n")
    return "".join(out)
