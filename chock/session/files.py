"""The file tools: read, write, edit, list and search inside the workspace, and nowhere else.

They run in the session process (no sandbox needed: every path is resolved and refused unless it lies
inside the workspace). A subagent uses the read-only ones from its own process.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from chock.errors import ChockError
from chock.log.events import TOOL_OUTPUT_LIMIT, cut

LIST_LIMIT = 2000  # entries; enough for a real source tree's overview, bounded for a node_modules
SEARCH_LIMIT = 500  # matching lines
SKIPPED_DIRS = {".git"}  # the repository itself, never the work


class ToolRefused(ChockError):
    """A tool call the session will not carry out; the model sees the message as the tool's error."""


def inside(workspace: Path, relative: str) -> Path:
    """Resolve `relative` against the workspace, refusing anything that leaves it (.., symlinks, absolute)."""
    if not isinstance(relative, str) or not relative:
        raise ToolRefused("a path is required")
    root = workspace.resolve()
    candidate = (root / relative).resolve()
    if candidate != root and root not in candidate.parents:
        raise ToolRefused(f"{relative} is outside the workspace; tools work only on files inside it")
    return candidate


def _display(workspace: Path, path: Path) -> str:
    return os.path.relpath(path, workspace.resolve())


def read_file(workspace: Path, args: dict[str, Any]) -> str:
    path = inside(workspace, args.get("path", ""))
    if not path.is_file():
        raise ToolRefused(f"{args.get('path')} is not a file")
    text = path.read_text(encoding="utf-8", errors="replace")
    offset, limit = int(args.get("offset", 0) or 0), args.get("limit")
    if offset or limit:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[offset : offset + int(limit) if limit else None])
    kept, cut_fields = cut(text)
    return kept + (f"\n[cut: the file has {cut_fields['bytes']} bytes]" if cut_fields else "")


def write_file(workspace: Path, args: dict[str, Any]) -> str:
    path = inside(workspace, args.get("path", ""))
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolRefused("write_file needs the file's content as a string")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return f"wrote {len(content.encode())} bytes to {_display(workspace, path)}"


def edit_file(workspace: Path, args: dict[str, Any]) -> str:
    path = inside(workspace, args.get("path", ""))
    old, new = args.get("old"), args.get("new")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        raise ToolRefused("edit_file needs `old` (text that is in the file) and `new` (its replacement)")
    if not path.is_file():
        raise ToolRefused(f"{args.get('path')} is not a file")
    text = path.read_text(encoding="utf-8")
    count = text.count(old)
    if count == 0:
        raise ToolRefused(f"the text to replace was not found in {args.get('path')}")
    if count > 1 and not args.get("all"):
        raise ToolRefused(
            f"the text to replace occurs {count} times in {args.get('path')}; give more context or all: true"
        )
    path.write_text(text.replace(old, new), encoding="utf-8")
    return f"replaced {count if args.get('all') else 1} occurrence(s) in {_display(workspace, path)}"


def _walk(root: Path):
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            if name not in SKIPPED_DIRS:  # a linked worktree's .git is a file
                yield Path(directory) / name


def list_files(workspace: Path, args: dict[str, Any]) -> str:
    root = inside(workspace, args.get("path") or ".")
    if not root.is_dir():
        raise ToolRefused(f"{args.get('path')} is not a directory")
    entries = []
    for path in _walk(root):
        entries.append(_display(workspace, path))
        if len(entries) >= LIST_LIMIT:
            entries.append(f"[stopped at {LIST_LIMIT} entries]")
            break
    return "\n".join(entries) or "(no files)"


def search(workspace: Path, args: dict[str, Any]) -> str:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolRefused("search needs a `pattern` (a regular expression)")
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ToolRefused(f"the pattern {pattern!r} is not a valid regular expression: {error}") from None
    root = inside(workspace, args.get("path") or ".")
    hits: list[str] = []
    size = 0
    for path in _walk(root) if root.is_dir() else [root]:
        try:
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if regex.search(line):
                        hit = f"{_display(workspace, path)}:{number}:{line.rstrip()}"
                        hits.append(hit)
                        size += len(hit)
                        if len(hits) >= SEARCH_LIMIT or size >= TOOL_OUTPUT_LIMIT:
                            hits.append("[stopped: too many matches; narrow the pattern or the path]")
                            return "\n".join(hits)
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable files are not searched
    return "\n".join(hits) or "(no matches)"


READ_ONLY_TOOLS = {"read_file": read_file, "list_files": list_files, "search": search}
WRITING_TOOLS = {"write_file": write_file, "edit_file": edit_file}
