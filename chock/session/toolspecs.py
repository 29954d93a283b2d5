"""What the model is told about each tool: names, descriptions and argument schemas."""

from __future__ import annotations

from typing import Any


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


_PATH = {"type": "string", "description": "a path relative to the workspace root"}

READ_FILE = _spec(
    "read_file",
    "Read a text file in the workspace.",
    {"path": _PATH, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
    ["path"],
)
LIST_FILES = _spec("list_files", "List the files under a directory of the workspace.", {"path": _PATH}, [])
SEARCH = _spec(
    "search",
    "Search the workspace's files for a regular expression; prints path:line:text.",
    {"pattern": {"type": "string"}, "path": _PATH},
    ["pattern"],
)
WRITE_FILE = _spec(
    "write_file",
    "Create or replace a file in the workspace.",
    {"path": _PATH, "content": {"type": "string"}},
    ["path", "content"],
)
EDIT_FILE = _spec(
    "edit_file",
    "Replace the text `old` with `new` in a workspace file (`old` must occur once, unless all is true).",
    {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}, "all": {"type": "boolean"}},
    ["path", "old", "new"],
)
SHELL = _spec(
    "shell",
    "Run a shell command in the sandboxed workspace (no network unless configured). With background: true "
    "it starts the command and returns at once; its exit code and output arrive later as a note.",
    {
        "command": {"type": "string"},
        "background": {"type": "boolean"},
        "timeout": {"type": "number", "description": "seconds (default 600)"},
    },
    ["command"],
)
SCRATCHPAD = _spec(
    "scratchpad",
    "Your notes for this session, kept across handovers: read them, replace them (write) or append to them.",
    {"action": {"type": "string", "enum": ["read", "write", "append"]}, "text": {"type": "string"}},
    ["action"],
)
SUBAGENT = _spec(
    "subagent",
    "Start a background sub-agent that researches a task with read-only tools (read_file, list_files, "
    "search) and returns a text result later, as a note.",
    {"task": {"type": "string"}},
    ["task"],
)

SESSION_TOOLS = [SHELL, READ_FILE, WRITE_FILE, EDIT_FILE, LIST_FILES, SEARCH, SCRATCHPAD, SUBAGENT]
SUBAGENT_TOOLS = [READ_FILE, LIST_FILES, SEARCH]

SYSTEM_PROMPT = """You are Chock, a coding agent working on a task in a git worktree of the person's project.
Use the tools to inspect and change files; paths are relative to the workspace root. Shell commands run
in a sandbox. When the task is done, answer with a short summary and no tool calls: your changes are then
committed to a branch for the person to review."""

SUBAGENT_PROMPT = """You are a research sub-agent of Chock. Answer the task using the read-only tools, then
reply with your findings as plain text and no tool calls."""


def summary(name: str, args: dict[str, Any]) -> str:
    """One line a person can judge a call by (used in approvals and the terminal view)."""
    if name == "shell":
        text = str(args.get("command", ""))
        return text + ("  (background)" if args.get("background") else "")
    if name == "subagent":
        return str(args.get("task", ""))
    if name == "scratchpad":
        return str(args.get("action", ""))
    if name == "search":
        return f"{args.get('pattern', '')} in {args.get('path') or '.'}"
    return str(args.get("path", ""))
