"""The agent loop in-process (docs/architecture.md#chock-run): its behaviours with every port real but the sandbox.

Each test builds a session as `chock run` begins one (tests/fakes/loop.py): a real log, a real git worktree
finished by the real host git, the real socket server on unix sockets, the replay provider (or the HTTP provider
against a loopback server), and `/bin/sh` where bwrap would run a command. Time is a clock the test moves.
The real sandbox and a real `chock run` process stay in tests/test_run.py, test_steer.py and test_sandbox.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from chock.errors import EXIT_COMPLETED, EXIT_HANDED_OVER, EXIT_INTERRUPTED
from chock.log.writer import LogWriteFailed, SessionLog
from chock.providers.registry import make_provider
from chock.providers.retry import MAX_WAIT
from chock.session import workspace
from chock.session.handover import CONFIRM_SECONDS
from tests.fakes.loop import Loop, build
from tests.fakes.projects import git_value
from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import processes_with

# Only a broken loop takes this long: the alarm turns a hang (a loop that never awaits) into a failure.
HANG_SECONDS = 60


@pytest.fixture(autouse=True)
def hang_guard() -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise AssertionError(f"the loop did not end within {HANG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def play(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def shell(call_id: str, command: str, **args: Any) -> dict[str, Any]:
    return {"call_id": call_id, "name": "shell", "args": {"command": command, **args}}


def gated(gate: Path, marker: str) -> str:
    """A command that runs until the test creates `gate`; `marker` finds its process."""
    return f"while [ ! -e {gate} ]; do sleep 0.01; done; echo {marker}"


async def until(holds: Callable[[], object]) -> None:
    async with asyncio.timeout(30):
        while not holds():
            await asyncio.sleep(0.01)


async def until_running(marker: str) -> None:
    await until(lambda: processes_with(marker))


def end_of(loop: Loop) -> dict[str, Any]:
    (end,) = loop.of("session.end")
    return end


def ordered(loop: Loop, *wanted: tuple[str, str]) -> list[int]:
    """Where each (type, text) first shows in the log."""
    return [
        next(i for i, e in enumerate(loop.events) if e["type"] == kind and e.get("text") == text)
        for kind, text in wanted
    ]


# Completed -------------------------------------------------------------------------------------------------


def test_a_completed_session_commits_its_work_to_its_branch_and_removes_the_worktree(tmp_path):
    write = {"call_id": "c1", "name": "write_file", "args": {"path": "notes.txt", "content": "hi\n"}}

    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "writing", "tool_calls": [write]}, {"text": "done"}])
        assert await loop.start() == EXIT_COMPLETED
        assert end_of(loop)["reason"] == "completed"
        assert loop.types()[-2:] == ["workspace.close", "session.end"]
        assert git_value(loop.project, "show", "chock/loop-test:notes.txt") == "hi"
        assert not loop.worktree.directory.exists()
        SessionLog.take(loop.log_path).release()  # the lock was let go

    play(scenario)


def test_a_file_the_agent_rewrote_to_its_size_and_old_mtime_is_still_committed(tmp_path):
    """Finishing reads only what changed (docs/architecture.md#finishing-by-what-changed); ctime says this did."""
    rewrite = (
        'python3 -c \'import os; s = os.stat("README.md"); open("README.md", "r+b").write(b"X"); '
        'os.utime("README.md", ns=(s.st_atime_ns, s.st_mtime_ns))\''
    )
    entries = [{"text": "", "tool_calls": [shell("c1", rewrite)]}, {"text": "done"}]

    async def scenario() -> None:
        loop = build(tmp_path, entries, shell="allow")
        # As a session continued after an earlier finish: its stamps are past their racy window, so no file is
        # read again unless its identity changed.
        await asyncio.sleep(0.1)  # longer than a tick of any kernel's coarse clock
        workspace.advance(loop.worktree, workspace.commit(loop.worktree, "an earlier finish"))
        before = os.stat(loop.worktree.directory / "README.md")
        assert await loop.start() == EXIT_COMPLETED
        (result,) = loop.of("tool.result")
        assert not result["is_error"], result
        assert git_value(loop.project, "show", "chock/loop-test:README.md") == "X demo"
        assert before.st_size == len("X demo\n")

    play(scenario)


# The turn boundary -------------------------------------------------------------------------------------------


def test_messages_said_during_a_model_call_are_taken_at_the_next_boundary_once_and_in_order(tmp_path):
    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "first", "delay": 5}, {"text": "second"}])
        task = loop.start()
        await loop.clock.sleeping()  # the first model call is under way
        client = await loop.client()
        assert await client.ask("say one") == "ok queued"
        assert await client.ask("say two") == "ok queued"
        assert not [e for e in loop.of("user.message") if e.get("via") == "socket"]  # not before the boundary
        loop.clock.advance(5)
        assert await task == EXIT_COMPLETED
        said = [e["text"] for e in loop.of("user.message") if e.get("via") == "socket"]
        assert said == ["one", "two"]
        first, one, two, second = ordered(
            loop, ("assistant.message", "first"), ("user.message", "one"), ("user.message", "two"),
            ("assistant.message", "second"),
        )  # fmt: skip
        assert first < one < two < second
        assert await client.line() == "ended completed"

    play(scenario)


def test_a_message_said_during_an_approval_and_a_tool_is_taken_after_the_tool_and_the_answer_is_logged_first(
    tmp_path,
):
    gate, marker = tmp_path / "gate", "tool-marker-1"

    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "", "tool_calls": [shell("c1", gated(gate, marker))]}, {"text": "done"}])
        task = loop.start()
        request = await loop.wait_for("approval.request")
        steer = await loop.client()
        assert await steer.ask("say while asked") == "ok queued"
        approve = await loop.client("approval")
        assert await approve.ask(f"answer {request['request_id']}\tyes") == "ok answered"
        assert loop.of("approval.answer")[0]["via"] == "socket"  # logged before `ok answered`
        await until_running(marker)
        assert await steer.ask("say while running") == "ok queued"
        gate.touch()
        assert await task == EXIT_COMPLETED
        result, asked, running = ordered(
            loop, ("tool.result", None), ("user.message", "while asked"), ("user.message", "while running")
        )
        assert result < asked < running
        assert marker in loop.of("tool.result")[0]["output"]

    play(scenario)


# Stop in every state --------------------------------------------------------------------------------------


def test_stop_during_a_model_call_ends_the_session_interrupted_and_every_client_hears_it(tmp_path):
    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "never", "delay": 5}])
        task = loop.start()
        await loop.clock.sleeping()
        client = await loop.client()
        client.send("stop")
        assert await client.line() == "ended interrupted"
        assert await task == EXIT_INTERRUPTED
        end = end_of(loop)
        assert (end["reason"], end["via"]) == ("interrupted", "socket")
        assert not loop.of("assistant.message")
        assert loop.worktree.directory.is_dir()  # kept: nothing committed it

    play(scenario)


def test_a_signal_during_a_tool_kills_the_tool_whole_and_ends_the_session_interrupted(tmp_path):
    marker = "tool-marker-2"

    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "", "tool_calls": [shell("c1", f"sleep 300; : {marker}")]}], shell="allow")
        task = loop.start()
        await until_running(marker)
        loop.session.steering.stop("signal")  # what `chock run`'s SIGINT and SIGTERM handlers call
        assert await task == EXIT_INTERRUPTED
        assert end_of(loop)["via"] == "signal"
        assert not processes_with(marker)
        assert not loop.of("tool.result")  # the call stays open: the next owner closes it

    play(scenario)


def test_stop_during_an_approval_withdraws_the_request(tmp_path):
    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "", "tool_calls": [shell("c1", "echo never")]}])
        task = loop.start()
        request_id = (await loop.wait_for("approval.request"))["request_id"]
        approve = await loop.client("approval")
        assert (await approve.ask("pending")).startswith(f"request {request_id}\tshell\techo never")
        assert await approve.line() == "end"
        steer = await loop.client()
        steer.send("stop")
        assert await task == EXIT_INTERRUPTED
        assert await approve.line() == "ended interrupted"
        assert loop.session.approvals.pending() == []  # the registry no longer lists it
        assert not loop.session.approvals.answer(request_id, "yes", "socket")  # and takes no answer
        assert not loop.of("approval.answer") and not loop.of("tool.result")

    play(scenario)


def test_say_then_stop_during_background_work_takes_the_message_and_kills_the_work(tmp_path):
    gate, marker = tmp_path / "gate", "bg-marker-1"
    entries = [
        {"text": "", "tool_calls": [shell("c1", gated(gate, marker), background=True)]},
        {"text": "waiting"},
        {"text": "heard you"},
    ]

    async def scenario() -> None:
        loop = build(tmp_path, entries, shell="allow")
        task = loop.start()
        await loop.wait_for("assistant.message", lambda e: e["text"] == "waiting")
        await until_running(marker)
        client = await loop.client()
        assert await client.ask("say hurry") == "ok queued"
        await loop.wait_for("assistant.message", lambda e: e["text"] == "heard you")  # a turn while it runs
        client.send("stop")
        assert await task == EXIT_INTERRUPTED
        (ended,) = loop.of("background.end")
        assert ended["exit_code"] is None and ended["output"].startswith("killed:")
        assert not processes_with(marker)
        assert [e["text"] for e in loop.of("user.message")][-1] == "hurry"

    play(scenario)


@pytest.mark.parametrize("when", ["turn.end", "workspace.close"])
def test_stop_during_the_finish_stops_the_commit_but_never_the_end_after_it(tmp_path, when):
    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "done", "delay": 1}])
        task = loop.start()
        await loop.clock.sleeping()
        client = await loop.client()
        loop.hooks[when] = lambda event: client.send("stop")  # read by the session while host git runs
        loop.clock.advance(1)
        code = await task
        if when == "turn.end":  # before the log says where the work went: the commit is stopped
            assert await client.line() == "ended interrupted"
            assert code == EXIT_INTERRUPTED and end_of(loop)["reason"] == "interrupted"
            assert not loop.of("workspace.close") and loop.worktree.directory.is_dir()
        else:  # after it: the worktree goes and the session completes, whatever is asked
            assert await client.line() == "ended completed"
            assert code == EXIT_COMPLETED and end_of(loop)["reason"] == "completed"
            assert not loop.worktree.directory.exists()
        assert git_value(loop.project, "branch", "--list", "chock/loop-test") == ""  # nothing changed: no branch

    play(scenario)


def test_a_say_once_the_end_has_begun_is_refused_never_acknowledged_and_lost(tmp_path):
    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "done", "delay": 1}])
        task = loop.start()
        await loop.clock.sleeping()
        client = await loop.client()
        loop.hooks["workspace.close"] = lambda event: client.send("say too late")
        loop.clock.advance(1)
        refusal = await client.line()
        assert refusal.startswith("error unreachable ") and "ending" in refusal
        assert await client.line() == "ended completed"
        assert await task == EXIT_COMPLETED
        assert [e["text"] for e in loop.of("user.message")] == ["do the task"]

    play(scenario)


# Retries and compaction ---------------------------------------------------------------------------------------


def test_a_provider_error_then_success_logs_the_retry_while_it_waits(tmp_path):
    async def scenario() -> None:
        with FakeProvider(kind="anthropic", key=None) as fake:
            fake.fail(status=529, message="overloaded")
            fake.script(text="done")

            def provider(clock: Any) -> Any:
                return make_provider("anthropic", fake.address, "m", None, instance="demo", sleep=clock.sleep)

            loop = build(tmp_path, [], provider=provider)
            task = loop.start()
            await loop.clock.sleeping()  # the backoff, on the session's clock
            (retry,) = loop.of("provider.retry")
            assert (retry["attempt"], retry["status"]) == (1, 529) and "overloaded" in retry["error"]
            assert not loop.of("assistant.message")
            loop.clock.advance(MAX_WAIT)  # past the wait (the log rounds it to the millisecond)
            assert await task == EXIT_COMPLETED
        assert [e["text"] for e in loop.of("assistant.message")] == ["done"]

    play(scenario)


def test_a_conversation_past_the_window_is_compacted_with_the_replays_summary(tmp_path):
    read = {"name": "read_file", "args": {"path": "big.txt"}}
    entries = [
        {"text": "one", "tool_calls": [{"call_id": "c1", **read}]},
        {"for": "compaction", "text": "Read big.txt once."},
        {"text": "done"},
    ]

    async def scenario() -> None:
        loop = build(tmp_path, entries, files={"big.txt": "x" * 8000}, context_window=3000)
        assert await loop.start() == EXIT_COMPLETED
        (compaction,) = loop.of("compaction")
        assert compaction["summary"] == "Read big.txt once." and compaction["window"] == 3000
        assert [e["text"] for e in loop.of("assistant.message")] == ["one", "done"]
        sent = json.dumps(loop.session.state.conversation)  # what the last call was sent
        assert "Read big.txt once." in sent and "x" * 8000 not in sent

    play(scenario)


# Handover ----------------------------------------------------------------------------------------------------


def test_a_handover_is_busy_while_background_work_runs_then_ready_then_released_on_confirm(tmp_path):
    gate, marker = tmp_path / "gate", "bg-marker-2"
    entries = [{"text": "", "tool_calls": [shell("c1", gated(gate, marker), background=True)]}, {"text": "waiting"}]

    async def scenario() -> None:
        loop = build(tmp_path, entries, shell="allow")
        task = loop.start()
        await loop.wait_for("assistant.message", lambda e: e["text"] == "waiting")
        client = await loop.client()
        assert await client.ask("handover") == "busy 1 0"
        gate.touch()
        assert await client.line() == "ready"
        assert loop.of("background.end")[0]["exit_code"] == 0
        assert await client.ask("confirm") == "released"
        assert await task == EXIT_HANDED_OVER
        end = end_of(loop)
        assert (end["reason"], end["exit_code"]) == ("handover", EXIT_HANDED_OVER)
        SessionLog.take(loop.log_path).release()  # released: the next owner takes it
        assert loop.worktree.directory.is_dir()  # the workspace moves with the session

    play(scenario)


@pytest.mark.parametrize("how", ["asker goes away", "confirm never comes"])
def test_a_dropped_handover_changes_nothing(tmp_path, how):
    read = {"call_id": "c1", "name": "read_file", "args": {"path": "app.py"}}

    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "one", "delay": 5, "tool_calls": [read]}, {"text": "done"}])
        task = loop.start()
        await loop.clock.sleeping()
        client = await loop.client()
        client.send("handover")  # answered at the next boundary, after this call and its tool
        await until(lambda: loop.session.handover.open)
        loop.clock.advance(5)
        assert await client.line() == "ready"
        if how == "asker goes away":
            client.close()
        else:
            await loop.clock.sleeping()
            loop.clock.advance(CONFIRM_SECONDS)
            assert await client.line() == ""  # closed: nothing was handed over
        assert await task == EXIT_COMPLETED
        assert [e["text"] for e in loop.of("assistant.message")] == ["one", "done"]

    play(scenario)


# Ending under every other cause ----------------------------------------------------------------------------


def test_a_provider_that_fails_ends_the_session_with_its_error(tmp_path):
    async def scenario() -> None:
        loop = build(tmp_path, [])
        assert await loop.start() == 1
        end = end_of(loop)
        assert end["reason"] == "error" and "has no entry 1" in end["error"]
        assert loop.worktree.directory.is_dir()

    play(scenario)


def test_an_answer_that_turns_out_not_to_be_the_apis_ends_the_session_keeping_its_text(tmp_path):
    async def scenario() -> None:
        with FakeProvider(kind="anthropic", key=None) as fake:
            odd = {"type": "content_block_delta", "index": 0, "delta": "x"}
            fake.script(text="half of the answer", extra_events=[odd])

            def provider(clock: Any) -> Any:
                return make_provider("anthropic", fake.address, "m", None, instance="demo", sleep=clock.sleep)

            loop = build(tmp_path, [], provider=provider)
            assert await loop.start() == 1
        end = end_of(loop)
        assert end["reason"] == "error"
        assert end["error"].startswith(
            f"instance 'demo' at {fake.address}: the response is not a Messages event stream"
        )
        assert "".join(e["text"] for e in loop.of("assistant.delta")) == "half of the answer"
        assert loop.of("usage")  # what the call had cost so far is counted

    play(scenario)


def test_a_failed_log_write_ends_the_session_in_the_reserve_and_says_so_once(tmp_path):
    read = {"call_id": "c1", "name": "read_file", "args": {"path": "big.txt"}}
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)

    async def scenario() -> None:
        loop = build(tmp_path, [{"text": "", "tool_calls": [read]}], files={"big.txt": "y" * 20000})

        def no_more_room(event: Any) -> None:  # the tool's 20 KB result will not fit; a session.end does
            resource.setrlimit(resource.RLIMIT_FSIZE, (loop.log_path.stat().st_size + 2000, limit[1]))

        loop.hooks["tool.call"] = no_more_room
        try:
            with pytest.raises(LogWriteFailed, match=r"could not write to the session log .*; the session stopped"):
                await loop.start()
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        lines = [json.loads(line) for line in loop.log_path.read_text().splitlines()]
        assert [e["type"] for e in lines][-2:] == ["tool.call", "session.end"]
        assert lines[-1]["reason"] == "error" and "could not write to the session log" in lines[-1]["error"]
        SessionLog.take(loop.log_path).release()

    play(scenario)
