"""The tools the model can call, one module each, gathered in the tables that the session loop
(`SESSION_TOOLS`) and a subagent's process (`SUBAGENT_TOOLS`) dispatch through, with their system prompts.

    tool.py        what a tool is (`Tool`), its errors (`ToolRefused`), what it may ask of the session (`Context`),
                   what a call gives (`Result`)
    confined.py    file access confined to the workspace and bounded, for the file tools
    diff.py        the bounded unified diff write_file and edit_file give beside their output
    shell.py, read_file.py, write_file.py, edit_file.py, list_files.py, search.py, scratchpad.py, plan.py,
    subagent.py

Adding a tool: its module, and one entry in `SESSION_TOOLS` (and `SUBAGENT_TOOLS` when it only reads).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from chock.errors import ChockError
from chock.session.tools.edit_file import EditFile
from chock.session.tools.list_files import ListFiles
from chock.session.tools.plan import Plan
from chock.session.tools.read_file import ReadFile
from chock.session.tools.scratchpad import Scratchpad
from chock.session.tools.search import Search
from chock.session.tools.shell import Shell
from chock.session.tools.subagent import Subagent
from chock.session.tools.tool import SUMMARY_LIMIT, Files, Result, Tool, ToolRefused, path_summary
from chock.session.tools.write_file import WriteFile

SESSION_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (Shell(), ReadFile(), WriteFile(), EditFile(), ListFiles(), Search(), Scratchpad(), Plan(), Subagent())
}
SUBAGENT_TOOLS: dict[str, Tool] = {name: SESSION_TOOLS[name] for name in ("read_file", "list_files", "search")}

SYSTEM_PROMPT = """You are Chock, a coding agent working on a task in a git worktree of the person's project.
Use the tools to inspect and change files; paths are relative to the workspace root. Shell commands run
in a sandbox. When the task is done, answer with a short summary and no tool calls: your changes are then
committed to a branch for the person to review."""

SUBAGENT_PROMPT = """You are a research sub-agent of Chock. Answer the task using the read-only tools, then
reply with your findings as plain text and no tool calls."""


def specs(table: dict[str, Tool]) -> list[dict[str, Any]]:
    """What the model is told about the tools of `table`."""
    return [tool.schema() for tool in table.values()]


def summary(name: str, args: dict[str, Any]) -> str:
    """One line a person can judge a call by, for any tool name a log may hold."""
    tool = SESSION_TOOLS.get(name)
    return tool.summary(args) if tool is not None else path_summary(args)


async def dispatch(
    table: dict[str, Tool],
    context: Files,
    name: str,
    args: dict[str, Any],
    approve: Callable[[bool], Awaitable[None]] | None = None,
    ready: Callable[[], None] = lambda: None,
) -> Result:
    """Run one call through `table`: its output, whether it is the tool's error, and any diff.

    The tool's own refusals, OS errors and arguments of the wrong shape are the model's to read and fix,
    never a crash of the session; so is any other exception a tool's code raises (a RuntimeError, a
    RecursionError), named by its type. A ChockError other than a refusal ends the session as it means to (the
    sandbox cannot be built), and a cancel or an interrupt is never caught. Any call runs only after
    `approve(asks)` returns (the rules decide it; `asks`: the tool asks a person when no rule does), and only
    after `ready` (the session syncs its log there: docs/log.md#durability). With no `approve`, a tool that
    asks is refused.
    """
    try:
        tool = table.get(name)
        if tool is None:
            raise ToolRefused(f"there is no tool named {name!r}; the tools here are {', '.join(table)}")
        tool.check(args)
        if tool.asks_approval:
            shown = len(tool.summary(args).encode("utf-8", "replace"))
            if shown > SUMMARY_LIMIT:  # nothing is ever approved from a summary cut short
                raise ToolRefused(
                    f"this {name} call is {shown:,} bytes, and a person approves at most {SUMMARY_LIMIT // 1024} KiB "
                    "shown whole; write a long script to a file with write_file, then run that file"
                )
            if approve is None:
                raise ToolRefused(f"{name} needs a person's approval, and nobody here can give it")
        if approve is not None:  # every call is decided by the rules in force; `asks` gives the default
            await approve(tool.asks_approval)
        ready()
        try:
            done = await tool.run(context, args)  # type: ignore[arg-type]  # SUBAGENT_TOOLS need only Files
        except (ChockError, OSError, ValueError, TypeError):
            raise
        except Exception as error:  # a fault of the tool's own on what it was given: the session goes on
            return Result(f"{name} failed: {type(error).__name__}: {error}", is_error=True)
        return done if isinstance(done, Result) else Result(done)
    except ToolRefused as refusal:
        return Result(str(refusal), is_error=True)
    except OSError as error:
        return Result(f"{name} failed: {error.strerror or error}", is_error=True)
    except (ValueError, TypeError) as error:
        return Result(f"{name} could not use its arguments: {error}", is_error=True)
