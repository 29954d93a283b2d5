"""subagent: a background research task, run by a child process with the read-only tools.

The child (chock.session.subagent_process) reads one JSON request line on its stdin and writes one JSON answer
line on its stdout; before it, each MCP call it makes is one line relayed to the session (which decides it by the
rules and answers one line back). The instance's credential travels only over that pipe, never argv or the
environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, ClassVar

from chock import module_argv
from chock.session import reaper
from chock.session.tools.tool import Context, Result, Tool, ToolRefused

# The longest line a subagent's process may write (its answer, or a relayed call), and how many MCP calls it may
# relay: a child that breaks either ends as a failed subagent, never a stalled session.
LINE_LIMIT = 4 * 1024 * 1024
MAX_RELAYED = 64


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
    """Run the child to its end and log its result (and what it cost), carrying out the MCP calls it relays."""
    process = await asyncio.create_subprocess_exec(
        *module_argv("chock.session.subagent_process"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(_tail(process.stderr))
    try:
        process.stdin.write(json.dumps(request).encode() + b"\n")
        answer = await _converse(context, process.stdin, process.stdout)
        process.stdin.close()  # a child still waiting for a line ends
        if answer is None:  # it broke the protocol (an over-long or garbled line): it is not waited for
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()
        said = await errors
    except asyncio.CancelledError:  # the session is stopping: the child goes with it (a relayed call is cancelled)
        errors.cancel()
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await reaper.wait_killed(process)
        raise
    try:
        result = str(answer["result"])
        usage = (int(answer.get("input_tokens", 0)), int(answer.get("output_tokens", 0)))
    except (KeyError, TypeError, ValueError):
        last = said.decode(errors="replace").strip().splitlines()[-1:] or ["it printed nothing"]
        result, usage = f"the subagent failed: {last[0]}", (0, 0)
    context.emit("subagent.end", handle=handle, result=result)
    if any(usage):
        context.record_usage({"input_tokens": usage[0], "output_tokens": usage[1]}, "subagent")


async def _converse(context: Context, to_child: asyncio.StreamWriter, from_child: asyncio.StreamReader) -> Any:
    """The child's lines until its answer: each `{"call": {name, args}}` is a relayed MCP call, answered on its
    stdin by one line `{output, is_error}`; anything else is the answer (None when it ended without one)."""
    relayed = 0
    while True:
        try:
            line = await from_child.readline()
            said = json.loads(line) if line else None
        except (ValueError, asyncio.LimitOverrunError):
            return None
        call = said.get("call") if isinstance(said, dict) else None
        if not isinstance(call, dict):
            return said
        relayed += 1
        name, args = call.get("name"), call.get("args")
        if relayed > MAX_RELAYED:
            result = Result(f"a subagent relays at most {MAX_RELAYED} MCP calls; answer with what you found", True)
        elif not isinstance(name, str) or not isinstance(args, dict):
            result = Result("a relayed call needs a `name` and an object of `args`", is_error=True)
        else:
            result = await context.relay(name, args)
        to_child.write(json.dumps({"output": result.output, "is_error": result.is_error}).encode() + b"\n")
        with contextlib.suppress(ConnectionError):
            await to_child.drain()


async def _tail(stream: asyncio.StreamReader) -> bytes:
    """What the child says on stderr, drained as it comes; its last 4 KiB kept."""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-4096:]
    return kept
