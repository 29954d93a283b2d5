"""shell: a command run by /bin/sh in the session's sandbox, waited for or in the background.

Each call asks for approval. A command waited for is killed (its whole process group) at its timeout, and a
killed command is the tool's error, never its success; a background one reports its end as a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
from typing import Any, ClassVar

from chock.log.events import TOOL_OUTPUT_LIMIT, cut
from chock.session.tools.tool import Context, Tool, ToolRefused

SHELL_TIMEOUT_SECONDS = 600.0
# Longer than any build or test run a person waits on in one call; a longer command runs in the background.
SHELL_TIMEOUT_LIMIT = 3600.0
# What of a command's output is kept in memory while it runs; the event keeps TOOL_OUTPUT_LIMIT of it.
OUTPUT_CAPTURE_LIMIT = 4 * TOOL_OUTPUT_LIMIT
# A killed command is waited for this long at most (its pipes close when its sandbox is gone).
REAP_SECONDS = 5.0


def command_of(args: dict[str, Any]) -> str:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolRefused("shell needs a `command`")
    return command


def timeout_of(args: dict[str, Any]) -> float:
    """Seconds to wait for the command: the default when none is given, else a finite number in (0, limit]."""
    value = args.get("timeout")
    if value is None or value == "":
        return SHELL_TIMEOUT_SECONDS
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        seconds = float(value)
    except (ValueError, OverflowError):
        raise ToolRefused(f"shell's `timeout` must be a number of seconds, not {value!r}") from None
    if not (math.isfinite(seconds) and 0 < seconds <= SHELL_TIMEOUT_LIMIT):
        raise ToolRefused(
            f"shell's `timeout` must be more than 0 and at most {SHELL_TIMEOUT_LIMIT:g} seconds, not {value!r}; "
            "run a longer command with background: true"
        )
    return seconds


class Shell(Tool):
    name = "shell"
    description = (
        "Run a shell command in the sandboxed workspace (no network unless configured). With background: true "
        "it starts the command and returns at once; its exit code and output arrive later as a note."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "command": {"type": "string"},
        "background": {"type": "boolean"},
        "timeout": {"type": "number", "description": "seconds (default 600)"},
    }
    required = ("command",)
    asks_approval = True

    def summary(self, args: dict[str, Any]) -> str:
        return str(args.get("command", "")) + ("  (background)" if args.get("background") else "")

    def check(self, args: dict[str, Any]) -> None:
        command_of(args)
        timeout_of(args)

    async def run(self, context: Context, args: dict[str, Any]) -> str:
        command, timeout = command_of(args), timeout_of(args)
        if args.get("background"):
            handle = context.handle("bg")
            process = await spawn(context, command)
            context.emit("background.start", handle=handle, kind="shell", command=command)
            context.track(handle, finish_background(context, handle, command, process))
            return f"started background command {handle}; its exit code and output arrive as a note when it ends"
        output, code = await collect(await spawn(context, command), timeout)
        if code is None:
            raise ToolRefused(f"{output}\n[killed after {timeout:g} s]".lstrip("\n"))
        if code != 0:
            raise ToolRefused(f"{output}\n[exit code {code}]".lstrip("\n"))
        return output


async def spawn(context: Context, command: str) -> asyncio.subprocess.Process:
    """`command` under the session's sandbox, in a process group of its own (killed whole at a timeout)."""
    return await asyncio.create_subprocess_exec(
        *context.sandbox.argv(["/bin/sh", "-c", command], bwrap=context.bwrap),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=context.sandbox.host_environment(),
        start_new_session=True,
    )


async def finish_background(context: Context, handle: str, command: str, process: asyncio.subprocess.Process) -> None:
    output, code = await collect(process, None)
    output, cut_fields = cut(output)
    context.emit(
        "background.end",
        handle=handle,
        kind="shell",
        command=command,
        exit_code=code,
        output=output,
        **cut_fields,
    )


async def collect(process: asyncio.subprocess.Process, timeout: float | None) -> tuple[str, int | None]:
    """Read a process's output (bounded in memory) until it exits; None as the code when it was killed."""
    assert process.stdout is not None
    kept = bytearray()
    total = 0

    async def read() -> None:
        nonlocal total
        while chunk := await process.stdout.read(65536):
            total += len(chunk)
            if len(kept) < OUTPUT_CAPTURE_LIMIT:
                kept.extend(chunk[: OUTPUT_CAPTURE_LIMIT - len(kept)])
        await process.wait()

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    code: int | None = None
    try:
        await asyncio.wait_for(read(), timeout)
        code = process.returncode
    except TimeoutError:
        kill()
        await process.wait()
    except asyncio.CancelledError:
        kill()
        # Reap it before the cancel goes on, so nothing of it outlives the loop; bounded, as a process that
        # escaped the kill could hold its pipe open for ever.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), REAP_SECONDS)
        raise
    text = kept.decode("utf-8", "replace")
    if total > len(kept):
        text += f"\n[output cut: {total} bytes in all]"
    return text, code
