"""The file tools: read, write, edit, list and search inside the workspace, and nowhere else.

They run in the session process, outside the sandbox, so every path is resolved and refused unless it
lies inside the workspace, and then opened one component at a time with O_NOFOLLOW: a shell command in
the sandbox can write the workspace, and a symlink it swaps in after the check must not lead outside.
A subagent uses the read-only ones from its own process.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
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
    if "\0" in relative:
        raise ToolRefused("a path cannot hold a NUL character")
    root = workspace.resolve()
    candidate = (root / relative).resolve()
    if candidate != root and root not in candidate.parents:
        raise ToolRefused(f"{relative} is outside the workspace; tools work only on files inside it")
    return candidate


def _display(workspace: Path, path: Path) -> str:
    return os.path.relpath(path, workspace.resolve())


def _open(workspace: Path, path: Path, flags: int, *, make_parents: bool = False) -> int:
    """Open `path` (resolved inside the workspace) from the workspace root down, following no symlink."""
    parts = path.relative_to(workspace.resolve()).parts
    if not parts:
        raise ToolRefused("the workspace itself is not a file")
    directory = os.open(workspace.resolve(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if make_parents:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=directory)
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            os.close(directory)
            directory = below
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=directory)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ToolRefused(f"{_display(workspace, path)} changed to a symlink while it was opened") from None
        raise
    finally:
        os.close(directory)


def _open_file(workspace: Path, path: Path, shown: str) -> int:
    """A regular file opened for reading; O_NONBLOCK so a FIFO swapped in can never hang the session."""
    fd = _open(workspace, path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolRefused(f"{shown} is not a file")
    return fd


def _read(workspace: Path, path: Path, shown: str) -> str:
    with open(_open_file(workspace, path, shown), encoding="utf-8", errors="replace", closefd=True) as handle:
        return handle.read()


def _write(workspace: Path, path: Path, text: str) -> None:
    fd = _open(workspace, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, make_parents=True)
    with open(fd, "w", encoding="utf-8", closefd=True) as handle:
        handle.write(text)


def _number(args: dict[str, Any], name: str) -> int | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str) or not str(value).isdigit():
        raise ToolRefused(f"`{name}` must be a whole number, not {value!r}")
    return int(value)


def read_file(workspace: Path, args: dict[str, Any]) -> str:
    path = inside(workspace, args.get("path", ""))
    if not path.is_file():
        raise ToolRefused(f"{args.get('path')} is not a file")
    text = _read(workspace, path, str(args.get("path")))
    offset, limit = _number(args, "offset") or 0, _number(args, "limit")
    if offset or limit:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[offset : offset + limit if limit else None])
    kept, cut_fields = cut(text)
    return kept + (f"\n[cut: the file has {cut_fields['bytes']} bytes]" if cut_fields else "")


def write_file(workspace: Path, args: dict[str, Any]) -> str:
    path = inside(workspace, args.get("path", ""))
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolRefused("write_file needs the file's content as a string")
    _write(workspace, path, content)
    return f"wrote {len(content.encode())} bytes to {_display(workspace, path)}"


def edit_file(workspace: Path, args: dict[str, Any]) -> str:
    path = inside(workspace, args.get("path", ""))
    old, new = args.get("old"), args.get("new")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        raise ToolRefused("edit_file needs `old` (text that is in the file) and `new` (its replacement)")
    if not path.is_file():
        raise ToolRefused(f"{args.get('path')} is not a file")
    text = _read(workspace, path, str(args.get("path")))
    count = text.count(old)
    if count == 0:
        raise ToolRefused(f"the text to replace was not found in {args.get('path')}")
    if count > 1 and not args.get("all"):
        raise ToolRefused(
            f"the text to replace occurs {count} times in {args.get('path')}; give more context or all: true"
        )
    _write(workspace, path, text.replace(old, new))
    return f"replaced {count if args.get('all') else 1} occurrence(s) in {_display(workspace, path)}"


def _walk(root: Path):
    """Every file below `root`, symlinks left out (a symlink may point anywhere on the host)."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(directory) / name
            if name not in SKIPPED_DIRS and not path.is_symlink():  # a linked worktree's .git is a file
                yield path


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
            with open(_open_file(workspace, path, str(path)), encoding="utf-8", closefd=True) as handle:
                for number, line in enumerate(handle, 1):
                    if regex.search(line):
                        hit = f"{_display(workspace, path)}:{number}:{line.rstrip()}"
                        hits.append(hit)
                        size += len(hit)
                        if len(hits) >= SEARCH_LIMIT or size >= TOOL_OUTPUT_LIMIT:
                            hits.append("[stopped: too many matches; narrow the pattern or the path]")
                            return "\n".join(hits)
        except (UnicodeDecodeError, OSError, ToolRefused):
            continue  # binary, unreadable or swapped files are not searched
    return "\n".join(hits) or "(no matches)"


READ_ONLY_TOOLS = {"read_file": read_file, "list_files": list_files, "search": search}
WRITING_TOOLS = {"write_file": write_file, "edit_file": edit_file}
