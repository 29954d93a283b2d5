"""shell: a command run by /bin/sh in the session's sandbox, waited for or in the background.

Each call asks for approval. A command waited for is killed (its whole sandbox) at its timeout, and a killed
command is the tool's error, never its success; a background one reports its end as a note. A cancel (the
session stopping) kills the command's sandbox too, at any moment of it (chock.session.reaper).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from typing import Any, ClassVar

from chock.log.events import TOOL_OUTPUT_LIMIT, cut
from chock.session import reaper, sandbox
from chock.session.tools.tool import Context, Tool, ToolRefused
from chock.value import Value

SHELL_TIMEOUT_SECONDS = 600.0
# Longer than any build or test run a person waits on in one call; a longer command runs in the background.
SHELL_TIMEOUT_LIMIT = 3600.0
# What of a command's output is kept in memory while it runs; the event keeps TOOL_OUTPUT_LIMIT of it.
OUTPUT_CAPTURE_LIMIT = 4 * TOOL_OUTPUT_LIMIT


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
            started = await spawn(context, command)
            context.emit("background.start", handle=handle, kind="shell", command=command)
            context.track(handle, finish_background(context, handle, command, started))
            return f"started background command {handle}; its exit code and output arrive as a note when it ends"
        output, code = await run_to_end(context, command, timeout, await spawn(context, command))
        if code is None:
            raise ToolRefused(f"{output}\n[killed after {timeout:g} s]".lstrip("\n"))
        if code != 0:
            raise ToolRefused(f"{output}\n[exit code {code}]".lstrip("\n"))
        return output


class Spawned(Value):
    """A command's process, and the read end of bwrap's status pipe when the runner gave it one."""

    __slots__ = ("process", "status")

    def __init__(self, process: asyncio.subprocess.Process, status: int | None = None) -> None:
        self.process = process
        self.status = status

    def setup_failed(self, code: int | None) -> bool:
        """Whether bwrap could not build the sandbox, so the command never ran (`sandbox.setup_failed`); the
        status pipe is read without waiting (something of the sandbox may hold its write end) and closed."""
        if self.status is None:
            return False
        status, self.status = self.status, None
        try:
            os.set_blocking(status, False)
            with contextlib.suppress(BlockingIOError):
                said = os.read(status, 65536)
                return sandbox.setup_failed(said, code)
            return sandbox.setup_failed(b"", code)
        finally:
            os.close(status)

    def close(self) -> None:
        if self.status is not None:
            os.close(self.status)
            self.status = None


async def run_to_end(context: Context, command: str, timeout: float | None, started: Spawned) -> tuple[str, int | None]:
    """The output and exit code of a started command; when bwrap could not build its sandbox (a masked `/etc`
    file vanished since the command line was built), `/etc` is walked again and the command started once more:
    it had not run."""
    try:
        output, code = await collect(started.process, timeout)
        failed = started.setup_failed(code)
    finally:
        started.close()
    if failed:
        sandbox.forget_masks()
        again = await spawn(context, command)
        try:
            output, code = await collect(again.process, timeout)
        finally:
            again.close()
    return output, code


async def spawn(context: Context, command: str) -> Spawned:
    """`command` as the session's tool runner starts it (under its sandbox), in a process group of its own.

    A cancel never interrupts the creation half-way: asyncio's own clean-up would kill the outer bwrap alone,
    then wait for pipes the sandbox still holds. The creation finishes, what it made is killed, and then the
    cancel goes on.
    """
    launch = context.runner.shell(command)  # bwrap's command line in `chock run` (chock.session.ports)
    read, write = launch.status if launch.status is not None else (None, None)
    creating = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=launch.env,
            cwd=launch.cwd,
            start_new_session=True,
            pass_fds=() if write is None else (write,),
        )
    )
    cancelled: asyncio.CancelledError | None = None
    try:
        while not creating.done():
            try:
                await asyncio.wait([creating])
            except asyncio.CancelledError as error:
                cancelled = error
    finally:
        if write is not None:
            os.close(write)  # the process holds its own copy
    if cancelled is None:
        try:
            return Spawned(creating.result(), read)
        except BaseException:
            if read is not None:
                os.close(read)
            raise
    if read is not None:
        os.close(read)
    if not creating.cancelled() and creating.exception() is None:
        await kill(creating.result())
    raise cancelled


async def kill(process: asyncio.subprocess.Process) -> None:
    """Kill the command's whole sandbox, and wait (boundedly) until it is gone."""
    if process.returncode is None:
        reaper.kill_sandbox(process.pid)
    await reaper.wait_killed(process)


async def finish_background(context: Context, handle: str, command: str, started: Spawned) -> None:
    output, code = await run_to_end(context, command, None, started)
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
    stdout = process.stdout
    assert stdout is not None
    kept = bytearray()
    total = 0

    async def read() -> None:
        nonlocal total
        while chunk := await stdout.read(65536):
            total += len(chunk)
            if len(kept) < OUTPUT_CAPTURE_LIMIT:
                kept.extend(chunk[: OUTPUT_CAPTURE_LIMIT - len(kept)])
        await process.wait()

    code: int | None = None
    try:
        await asyncio.wait_for(read(), timeout)
        code = process.returncode
    except TimeoutError:
        await kill(process)
    except asyncio.CancelledError:
        await kill(process)
        raise
    text = kept.decode("utf-8", "replace")
    if total > len(kept):
        text += f"\n[output cut: {total} bytes in all]"
    return text, code
