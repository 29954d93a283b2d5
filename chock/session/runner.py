"""The agent loop of one session, on one thread (SPEC §5).

Everything the session waits for — a model response chunk, a tool process, an approval, a background
command, a subagent — is awaited on one asyncio loop, and the session's sockets are served by that same
loop, so they answer while work goes on and the process never grows a second thread (the tool path forks).

Every fact goes to the log first: `emit` appends an event, folds it into the live state and renders it.
The conversation a model sees is therefore always the fold of the log, exactly what a later owner rebuilds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chock.errors import EXIT_COMPLETED, EXIT_FAILED, EXIT_HANDED_OVER, EXIT_INTERRUPTED, ChockError
from chock.log.events import TOOL_OUTPUT_LIMIT, Event, cut
from chock.log.fold import SessionState
from chock.log.writer import SessionLog
from chock.providers import Provider, Reply, TextDelta, ToolCall
from chock.session import files, toolspecs, workspace
from chock.session.files import ToolRefused
from chock.session.sandbox import Sandbox

# assistant.delta events are coalesced (SPEC §4): one event per this many seconds of streamed text.
DELTA_COALESCE_SECONDS = 0.1
SHELL_TIMEOUT_SECONDS = 600.0
# What of a command's output is kept in memory while it runs; the event keeps TOOL_OUTPUT_LIMIT of it.
OUTPUT_CAPTURE_LIMIT = 4 * TOOL_OUTPUT_LIMIT


class HandedOver(Exception):
    """The lock has changed hands; this process must exit 8 and touch nothing more."""


@dataclass
class Settings:
    session_id: str
    project: Path
    workspace: Path
    worktree: workspace.Worktree  # as recorded when it was made: finishing starts from this
    branch: str
    sandbox: Sandbox
    bwrap: str
    shell_policy: str  # ask | allow | deny
    interactive: bool  # a person at this terminal can answer approval prompts
    scratchpad: Path
    sockets: dict[str, Path]  # "approval" and "handover" (chock.paths.Layout.session_socket)
    subagent_spec: dict[str, Any]  # what a subagent child needs to reach the same instance
    subagent_blocks: list[list[dict[str, Any]]]  # replay entries per subagent (replay kind only)


class Session:
    def __init__(
        self,
        log: SessionLog,
        state: SessionState,
        provider: Provider,
        settings: Settings,
        render: Callable[[Event], None],
    ) -> None:
        self.log = log
        self.state = state
        self.provider = provider
        self.settings = settings
        self._render = render
        self._answers: dict[str, asyncio.Future[tuple[str, str]]] = {}
        self._work: dict[str, asyncio.Task[None]] = {}  # background commands and subagents by handle
        self._wake = asyncio.Event()  # background work ended, or a handover ask arrived
        self.handover: Any = None  # the open ask of handover.sock (chock.session.sockets.HandoverAsk)

    # The log ------------------------------------------------------------------------------------------

    def emit(self, type: str, **fields: Any) -> Event:
        event = self.log.append(type, **fields)
        self.state.apply(event)
        self._render(event)
        return event

    # Running ------------------------------------------------------------------------------------------

    async def run(self, *, call_model_first: bool) -> int:
        """Run turns until the task is done; log how it ended and return the exit code."""
        from chock.session import sockets

        servers = await sockets.serve(self)
        try:
            await self._turns(call_model_first)
            finished = workspace.finish(self.settings.worktree, _commit_message(self.state))
            self.emit("workspace.close", branch=self.settings.branch, commit=finished.commit, skipped=finished.skipped)
            self.emit("session.end", reason="completed", exit_code=EXIT_COMPLETED)
            return EXIT_COMPLETED
        except HandedOver:
            return EXIT_HANDED_OVER
        except asyncio.CancelledError:
            self._end_abnormally("interrupted", EXIT_INTERRUPTED, "interrupted")
            return EXIT_INTERRUPTED
        except ChockError as error:
            self._end_abnormally("error", error.exit_code or EXIT_FAILED, str(error))
            return error.exit_code or EXIT_FAILED
        finally:
            for task in self._work.values():
                task.cancel()
            await sockets.close(servers, ended=self.state.end_reason or "ended")
            self.log.release()

    def _end_abnormally(self, reason: str, code: int, error: str) -> None:
        for task in self._work.values():
            task.cancel()
        self.emit("session.end", reason=reason, exit_code=code, error=error)

    async def _turns(self, call_model_first: bool) -> None:
        call_model = call_model_first
        while True:
            await self.turn_boundary()
            if call_model:
                reply = await self._model_call()
                for call in reply.tool_calls:
                    await self._tool(call)
                self.emit("turn.end")
                if reply.tool_calls:
                    continue
            if not self._work:
                return
            # The model is done but background work is not: wait for it, then let the model read the notes.
            # Waiting here is a turn boundary too, so a handover ask is answered (`busy`) while it lasts.
            while self._work:
                self._wake.clear()
                await self.turn_boundary()
                if self._work:
                    await self._wake.wait()
            call_model = True

    async def turn_boundary(self) -> None:
        """Between turns: the only place a handover ask is answered (SPEC §5)."""
        if self.handover is not None:
            await self.handover.at_boundary(self)

    def outstanding(self) -> tuple[int, int]:
        return len(self.state.background), len(self.state.subagents)

    def wake(self) -> None:
        self._wake.set()

    def record_handover(self) -> None:
        """A confirmed handover: log the end and let go of the lock (the socket then sends `released`)."""
        self.emit("session.end", reason="handover", exit_code=EXIT_HANDED_OVER)
        self.log.release()

    def finish_handover(self) -> None:
        raise HandedOver

    # The model ----------------------------------------------------------------------------------------

    async def _model_call(self) -> Reply:
        pending: list[str] = []
        flushed = time.monotonic()
        reply: Reply | None = None
        async for item in self.provider.stream(self.state.conversation, self._tool_specs(), toolspecs.SYSTEM_PROMPT):
            if isinstance(item, TextDelta):
                pending.append(item.text)
                if time.monotonic() - flushed >= DELTA_COALESCE_SECONDS:
                    self.emit("assistant.delta", text="".join(pending))
                    pending.clear()
                    flushed = time.monotonic()
            else:
                reply = item
        if pending:
            self.emit("assistant.delta", text="".join(pending))
        if reply is None:
            raise ChockError("the provider's response ended without a reply")
        self.emit("assistant.message", text=reply.text, tool_calls=[call.as_dict() for call in reply.tool_calls])
        self.emit("usage", input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)
        return reply

    def _tool_specs(self) -> list[dict[str, Any]]:
        return toolspecs.SESSION_TOOLS

    # Tools --------------------------------------------------------------------------------------------

    async def _tool(self, call: ToolCall) -> None:
        self.emit("tool.call", call_id=call.call_id, name=call.name, args=call.args)
        try:
            output, is_error = await self._dispatch(call), False
        except ToolRefused as refusal:
            output, is_error = str(refusal), True
        except OSError as error:
            output, is_error = f"{call.name} failed: {error.strerror or error}", True
        except (ValueError, TypeError) as error:  # arguments of the wrong shape: the model's to fix, not a crash
            output, is_error = f"{call.name} could not use its arguments: {error}", True
        output, cut_fields = cut(output)
        self.emit(
            "tool.result",
            call_id=call.call_id,
            name=call.name,
            output=output,
            is_error=is_error,
            **cut_fields,
        )

    async def _dispatch(self, call: ToolCall) -> str:
        root = self.settings.workspace
        if call.name in files.READ_ONLY_TOOLS:
            return files.READ_ONLY_TOOLS[call.name](root, call.args)
        if call.name in files.WRITING_TOOLS:
            return files.WRITING_TOOLS[call.name](root, call.args)
        if call.name == "shell":
            return await self._shell(call)
        if call.name == "scratchpad":
            return self._scratchpad(call.args)
        if call.name == "subagent":
            return self._start_subagent(call.args)
        raise ToolRefused(f"there is no tool named {call.name!r}")

    async def _shell(self, call: ToolCall) -> str:
        command = call.args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolRefused("shell needs a `command`")
        await self._approve(call)
        if call.args.get("background"):
            handle = f"bg-{self.log.last_id + 1}"
            process = await self._spawn(command)
            self.emit("background.start", handle=handle, kind="shell", command=command)
            self._track(handle, self._finish_background(handle, command, process))
            return f"started background command {handle}; its exit code and output arrive as a note when it ends"
        timeout = float(call.args.get("timeout") or SHELL_TIMEOUT_SECONDS)
        process = await self._spawn(command)
        output, code = await _collect(process, timeout)
        if code is None:
            return f"{output}\n[killed after {timeout:g} s]"
        if code != 0:
            raise ToolRefused(f"{output}\n[exit code {code}]".lstrip("\n"))
        return output

    async def _spawn(self, command: str) -> asyncio.subprocess.Process:
        sandbox = self.settings.sandbox
        return await asyncio.create_subprocess_exec(
            *sandbox.argv(["/bin/sh", "-c", command], bwrap=self.settings.bwrap),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=sandbox.host_environment(),
            start_new_session=True,
        )

    async def _finish_background(self, handle: str, command: str, process: asyncio.subprocess.Process) -> None:
        output, code = await _collect(process, None)
        output, cut_fields = cut(output)
        self.emit(
            "background.end",
            handle=handle,
            kind="shell",
            command=command,
            exit_code=code,
            output=output,
            **cut_fields,
        )

    def _track(self, handle: str, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._work[handle] = task

        def done(_: asyncio.Task[None]) -> None:
            self._work.pop(handle, None)
            self._wake.set()

        task.add_done_callback(done)

    def _scratchpad(self, args: dict[str, Any]) -> str:
        path = self.settings.scratchpad
        action = args.get("action")
        if action == "read":
            return path.read_text(encoding="utf-8") if path.exists() else "(the scratchpad is empty)"
        text = args.get("text")
        if action not in ("write", "append") or not isinstance(text, str):
            raise ToolRefused("scratchpad takes action read, or write/append with a `text`")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(path, "a" if action == "append" else "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o600)
        return f"scratchpad {action} done ({path.stat().st_size} bytes)"

    def _start_subagent(self, args: dict[str, Any]) -> str:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolRefused("subagent needs a `task`")
        handle = f"sub-{self.log.last_id + 1}"
        ordinal = self.state.subagent_results + len(self.state.subagents)
        request = dict(self.settings.subagent_spec, task=task, workspace=str(self.settings.workspace))
        blocks = self.settings.subagent_blocks
        if request.get("kind") == "replay":
            request["entries"] = blocks[ordinal] if ordinal < len(blocks) else []
        self.emit("subagent.start", handle=handle, task=task)
        self._track(handle, self._run_subagent(handle, request))
        return f"started subagent {handle}; its result arrives as a note when it finishes"

    async def _run_subagent(self, handle: str, request: dict[str, Any]) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "chock.session.subagent",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate(json.dumps(request).encode())
        try:
            answer = json.loads(out)
            result = str(answer["result"])
            usage = (int(answer.get("input_tokens", 0)), int(answer.get("output_tokens", 0)))
        except (ValueError, KeyError, TypeError):
            last = err.decode(errors="replace").strip().splitlines()[-1:] or ["it printed nothing"]
            result, usage = f"the subagent failed: {last[0]}", (0, 0)
        self.emit("subagent.end", handle=handle, result=result)
        if any(usage):
            self.emit("usage", input_tokens=usage[0], output_tokens=usage[1])

    # Approvals ----------------------------------------------------------------------------------------

    async def _approve(self, call: ToolCall) -> None:
        policy = "allow" if self.state.approve_all else self.settings.shell_policy
        request_id = f"r{self.log.last_id + 1}"
        summary = toolspecs.summary(call.name, call.args)
        if policy in ("allow", "deny"):  # answered by config (or --yes): the log still says who decided
            self.emit(
                "approval.request",
                request_id=request_id,
                tool=call.name,
                summary=summary,
                call_id=call.call_id,
                by_config=True,
            )
            self.emit(
                "approval.answer", request_id=request_id, answer="yes" if policy == "allow" else "no", via="config"
            )
            if policy == "deny":
                raise ToolRefused('shell commands are denied by this person\'s config (.approvals.shell = "deny")')
            return
        future: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
        self._answers[request_id] = future
        self.emit("approval.request", request_id=request_id, tool=call.name, summary=summary, call_id=call.call_id)
        prompt = None
        if self.settings.interactive:
            prompt = asyncio.ensure_future(_terminal_answer(f"Allow {call.name}: {summary} ? [y/N] "))

            def answered_at_terminal(task: asyncio.Task[str | None]) -> None:
                if not task.cancelled() and task.result() is not None:
                    self.answer(request_id, task.result(), "terminal")

            prompt.add_done_callback(answered_at_terminal)
        try:
            answer, via = await future
        finally:
            self._answers.pop(request_id, None)
            if prompt is not None:
                prompt.cancel()
        self.emit("approval.answer", request_id=request_id, answer=answer, via=via)
        if answer != "yes":
            raise ToolRefused("the person declined this command")

    def pending(self) -> list[dict[str, Any]]:
        """Requests still waiting for an answer, for `pending` on approval.sock."""
        return [self.state.pending_approvals[rid] for rid in self._answers if rid in self.state.pending_approvals]

    def answer(self, request_id: str, answer: str, via: str) -> bool:
        """First answer wins; False when the id is not waiting (or already answered)."""
        future = self._answers.get(request_id)
        if future is None or future.done():
            return False
        future.set_result((answer, via))
        return True


async def _collect(process: asyncio.subprocess.Process, timeout: float | None) -> tuple[str, int | None]:
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
        raise
    text = kept.decode("utf-8", "replace")
    if total > len(kept):
        text += f"\n[output cut: {total} bytes in all]"
    return text, code


async def _terminal_answer(question: str) -> str | None:
    """Ask at the terminal without blocking the loop; 'yes', 'no', or None when stdin closed."""
    loop = asyncio.get_running_loop()
    sys.stderr.write(question)
    sys.stderr.flush()
    line: asyncio.Future[bytes] = loop.create_future()
    fd = sys.stdin.fileno()

    def readable() -> None:
        if not line.done():
            line.set_result(os.read(fd, 1024))

    loop.add_reader(fd, readable)
    try:
        data = await line
    finally:
        loop.remove_reader(fd)
    if not data:
        return None
    return "yes" if data.strip().lower() in (b"y", b"yes") else "no"


def _commit_message(state: SessionState) -> str:
    first = (state.message.strip().splitlines() or ["(no message)"])[0][:72]
    return f"chock: {first}\n\nSession {state.id}."
