"""subagent: a background research task, run by a child process with the read-only tools.

The child (chock.session.subagent_process) reads one JSON request on its stdin and writes one JSON answer
on its stdout; the instance's credential travels only over that pipe, never argv or the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, ClassVar

from chock import module_argv
from chock.session import reaper
from chock.session.tools.tool import Context, Tool, ToolRefused


class Subagent(Tool):
    name = "subagent"
    description = (
        "Start a background sub-agent that researches a task with read-only tools (read_file, list_files, "
        "search) and returns a text result later, as a note."
    )
    parameters: ClassVar[dict[str, Any]] = {"task": {"type": "string"}}
    required = ("task",)

    def summary(self, args: dict[str, Any]) -> str:
        return str(args.get("task", ""))

    async def run(self, context: Context, args: dict[str, Any]) -> str:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolRefused("subagent needs a `task`")
        handle = context.handle("sub")
        request = dict(context.subagent_spec(), task=task, workspace=str(context.workspace))
        context.emit("subagent.start", handle=handle, task=task)
        context.track(handle, research(context, handle, request))
        return f"started subagent {handle}; its result arrives as a note when it finishes"


async def research(context: Context, handle: str, request: dict[str, Any]) -> None:
    """Run the child to its end and log its result (and what it cost)."""
    process = await asyncio.create_subprocess_exec(
        *module_argv("chock.session.subagent_process"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await process.communicate(json.dumps(request).encode())
    except asyncio.CancelledError:  # the session is stopping: the child goes with it
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await reaper.wait_killed(process)
        raise
    try:
        answer = json.loads(out)
        result = str(answer["result"])
        usage = (int(answer.get("input_tokens", 0)), int(answer.get("output_tokens", 0)))
    except (ValueError, KeyError, TypeError):
        last = err.decode(errors="replace").strip().splitlines()[-1:] or ["it printed nothing"]
        result, usage = f"the subagent failed: {last[0]}", (0, 0)
    context.emit("subagent.end", handle=handle, result=result)
    if any(usage):
        context.record_usage({"input_tokens": usage[0], "output_tokens": usage[1]}, "subagent")
