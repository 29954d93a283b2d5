"""The stdio pump: whole MCP messages over a started subprocess's stdin and stdout (one line each).

It starts nothing: it is given an `asyncio.subprocess.Process` (chock/mcp/supervisor.py spawns the server inside
its sandbox; `open_stdio` spawns a plain argv, for tests and tools). What the server writes to stderr is drained
as it comes, so a chatty server never blocks on a full pipe, and only its last `STDERR_TAIL` bytes are kept, for
the message that says why it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque

from chock.mcp.line_messages import LineMessages, frame
from chock.mcp.server_link import PumpClosed

STDERR_TAIL = 4096
READ_CHUNK = 64 * 1024
# How long a server has to exit once its stdin is closed, before it is killed.
CLOSE_SECONDS = 2.0


class StdioPump:
    """An `McpPump` (chock/mcp/server_link.py) over one process's stdin and stdout."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        if process.stdin is None or process.stdout is None or process.stderr is None:
            raise ValueError("a stdio MCP server needs its stdin, stdout and stderr piped")
        self.process = process
        self.protocol_version: str | None = None  # set by ServerLink; stdio sends no header
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._lines = LineMessages()
        self._ready: deque[bytes] = deque()
        self._tail = bytearray()
        self._stderr_task = asyncio.create_task(self._drain(process.stderr))

    async def _drain(self, stderr: asyncio.StreamReader) -> None:
        while chunk := await stderr.read(READ_CHUNK):
            self._tail += chunk
            del self._tail[:-STDERR_TAIL]

    async def send(self, message: bytes) -> None:
        if self._stdin.is_closing():
            raise PumpClosed(self._ended("its stdin is closed"))
        try:
            self._stdin.write(frame(message))
            await self._stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise PumpClosed(self._ended("it stopped reading its stdin")) from None

    async def receive(self) -> bytes:
        while not self._ready:
            chunk = await self._stdout.read(READ_CHUNK)
            if not chunk:
                cut = " in the middle of a message" if self._lines.unfinished() else ""
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):  # its exit status, when it is exiting, says more
                        await self.process.wait()
                raise PumpClosed(self._ended(f"it closed its stdout{cut}"))
            self._ready.extend(self._lines.feed(chunk))
        return self._ready.popleft()

    def _ended(self, what: str) -> str:
        code = self.process.returncode
        if code is None:
            return what
        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return f"{what} ({status})"

    def describe_failure(self) -> str:
        """The last of what the server wrote to stderr (raw: the caller escapes it), or ""."""
        text = self._tail.decode(errors="replace").strip()
        return f"its stderr ended with: {text}" if text else ""

    async def close(self) -> None:
        """Close its stdin, give it `CLOSE_SECONDS` to exit, then kill it (its process group, when it leads
        one); wait for it and for the rest of its stderr."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                await self.process.wait()
        except TimeoutError:
            _kill(self.process.pid)
            await self.process.wait()
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(CLOSE_SECONDS):
                await self._stderr_task
        self._stderr_task.cancel()


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def open_stdio(argv: list[str], env: dict[str, str]) -> StdioPump:
    """Start `argv` (no shell, no sandbox: for tests and tools) in a session of its own, its stdio piped, with
    exactly `env` for its environment (never the caller's whole), and return its pump."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    return StdioPump(process)
