"""`ServerLink` over the stdio pump with real server processes: tests/fakes/mcp_server.py (whose switches make it
hostile) and the reference server `@modelcontextprotocol/server-everything`, installed on the host."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from chock.mcp.server_link import MAX_LISTED_TOOLS, McpError, McpRefused, ServerLink
from chock.mcp.stdio_pump import STDERR_TAIL, StdioPump, open_stdio

FAKE = Path(__file__).parent / "fakes" / "mcp_server.py"
# The reference server, pinned in scripts/npm-packages.txt, which scripts/system-packages installs.
EVERYTHING = "mcp-server-everything"
NPM_PACKAGES = Path(__file__).parent.parent / "scripts" / "npm-packages.txt"
FAKE_TOOLS = 13
# What a server is given of the environment here: nothing of the person's (the sandbox gives no more).
ENV = {"PATH": os.environ["PATH"]}


def linked(*switches: str, **callbacks: Any) -> Callable[[Callable[[ServerLink], Awaitable[None]]], None]:
    """Run `body` with a started link to the fake server given `switches`, closing it after."""

    def run(body: Callable[[ServerLink], Awaitable[None]]) -> None:
        async def main() -> None:
            link = ServerLink("fake", await open_stdio([sys.executable, str(FAKE), *switches], ENV), **callbacks)
            try:
                await link.start(20)
                await body(link)
            finally:
                await link.close()

        asyncio.run(main())

    return run


async def start_failure(*switches: str, deadline: float = 20) -> str:
    pump = await open_stdio([sys.executable, str(FAKE), *switches], ENV)
    link = ServerLink("fake", pump)
    try:
        with pytest.raises(McpError) as failure:
            await link.start(deadline)
    finally:
        await link.close()
    assert pump.process.returncode is not None  # closed: nothing left running
    return str(failure.value)


def text(result: Any) -> str:
    return "".join(block.get("text", "") for block in result.content)


def test_ten_thousand_tools_are_all_read() -> None:
    async def main() -> None:
        link = ServerLink(
            "fake", await open_stdio([sys.executable, str(FAKE), "--tools", "10000", "--page-size", "999"], ENV)
        )
        assert len(await link.start(20)) == FAKE_TOOLS + 10_000  # which to keep is the supervisor's choice
        await link.close()

    asyncio.run(main())


def test_start_reads_every_page_of_tools(tmp_path: Path) -> None:
    async def body(link: ServerLink) -> None:
        assert link.client.negotiated_version == "2025-11-25"
        assert len(await link.list_tools(20)) == FAKE_TOOLS + 10

    async def main() -> None:
        link = ServerLink(
            "fake", await open_stdio([sys.executable, str(FAKE), "--tools", "10", "--page-size", "3"], ENV)
        )
        tools = await link.start(20)
        assert [tool["name"] for tool in tools][:3] == ["echo", "add", "fail"] and len(tools) == FAKE_TOOLS + 10
        await body(link)
        await link.close()

    asyncio.run(main())


def test_a_server_that_writes_a_banner_to_stdout_still_starts() -> None:
    @linked("--banner", "docs-mcp 1.0 listening on stdio")
    async def _(link: ServerLink) -> None:
        assert text(await link.call_tool("echo", {"text": "ok"}, timeout=10)) == "ok"


def test_calls_return_structured_unstructured_and_error_results() -> None:
    @linked()
    async def _(link: ServerLink) -> None:
        added = await link.call_tool("add", {"a": 2, "b": 3}, timeout=10)
        assert added.structured == {"sum": 5} and text(added) == "5" and not added.is_error
        failed = await link.call_tool("fail", {}, timeout=10)
        assert failed.is_error and text(failed) == "this tool always fails"
        with pytest.raises(McpRefused, match="fake failed tools/call: Unknown tool: nope"):
            await link.call_tool("nope", {}, timeout=10)


def test_progress_reaches_the_calls_callback() -> None:
    seen: list[tuple[float, float | None, str]] = []

    @linked()
    async def _(link: ServerLink) -> None:
        result = await link.call_tool(
            "slow", {"seconds": 0.4}, timeout=10, on_progress=lambda p, t, m: seen.append((p, t, m))
        )
        assert text(result) == "slept 0.4 s"

    assert seen == [(1.0, 4.0, "step 1"), (2.0, 4.0, "step 2"), (3.0, 4.0, "step 3"), (4.0, 4.0, "step 4")]


def test_a_cancelled_call_says_notifications_cancelled_and_the_link_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "received"

    @linked("--log", str(log))
    async def _(link: ServerLink) -> None:
        call = asyncio.ensure_future(link.call_tool("slow", {"seconds": 30}, timeout=60))
        await asyncio.sleep(0.3)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert text(await link.call_tool("echo", {"text": "still here"}, timeout=10)) == "still here"

    received = [json.loads(line) for line in log.read_text().splitlines()]
    [slow] = [m for m in received if m.get("params", {}).get("name") == "slow"]
    [cancelled] = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert cancelled["params"]["requestId"] == slow["id"]


def test_a_server_that_never_answers_is_a_bounded_error_and_the_link_goes_on() -> None:
    @linked()
    async def _(link: ServerLink) -> None:
        with pytest.raises(McpError, match=r"fake did not answer tools/call within 0\.5 s"):
            await link.call_tool("hang", {}, timeout=0.5)
        assert text(await link.call_tool("echo", {"text": "next"}, timeout=10)) == "next"


def test_a_server_that_stops_reading_cannot_hold_a_call_past_its_timeout() -> None:
    @linked("--deaf")
    async def _(link: ServerLink) -> None:
        for _ in range(2):  # a megabyte fills the pipe: the write itself waits, within the call's time
            with pytest.raises(McpError, match=r"did not answer tools/call within 0\.5 s"):
                await asyncio.wait_for(link.call_tool("echo", {"text": "z" * 1_000_000}, timeout=0.5), 60)


class GatedPump(StdioPump):
    """The stdio pump, whose send of a message holding one of `gates`' markers waits for that gate once written:
    a pipe's slow drain, where a cancellation finds it."""

    def __init__(self, pump: StdioPump, gates: dict[bytes, asyncio.Event]) -> None:
        self.__dict__.update(pump.__dict__)
        self.gates = gates
        self.waiting: asyncio.Queue[bytes] = asyncio.Queue()

    async def send(self, message: bytes) -> None:
        await super().send(message)
        for marker, gate in self.gates.items():
            if marker in message:
                self.waiting.put_nowait(marker)
                await gate.wait()


def test_a_call_cancelled_while_it_writes_loses_no_other_message() -> None:
    async def main() -> None:
        gates = {b'"text":"p"': asyncio.Event(), b'"text":"a"': asyncio.Event()}
        pump = GatedPump(await open_stdio([sys.executable, str(FAKE)], ENV), gates)
        link = ServerLink("fake", pump)
        await link.start(20)
        first = asyncio.ensure_future(link.call_tool("echo", {"text": "p"}, timeout=20))
        assert await pump.waiting.get() == b'"text":"p"'  # holds the write while a and b queue behind it
        second = asyncio.ensure_future(link.call_tool("echo", {"text": "a"}, timeout=20))
        other = asyncio.ensure_future(link.call_tool("echo", {"text": "b"}, timeout=5))
        await asyncio.sleep(0.1)
        gates[b'"text":"p"'].set()
        # p's flush goes on to send what queued behind it: a's write waits, b's is next
        assert await pump.waiting.get() == b'"text":"a"'
        first.cancel()  # the call whose task is writing gives up, mid-send of another's message
        await asyncio.sleep(0.1)
        gates[b'"text":"a"'].set()
        assert text(await other) == "b" and text(await second) == "a"
        await link.close()

    asyncio.run(main())


def test_garbage_is_named_when_the_call_it_broke_times_out() -> None:
    @linked()
    async def _(link: ServerLink) -> None:
        with pytest.raises(McpError) as failure:
            await link.call_tool("garbage", {}, timeout=0.5)
        assert "did not answer" in str(failure.value) and "could not read, the last not JSON" in str(failure.value)


def test_a_ten_megabyte_result_fails_the_call_and_the_link_goes_on() -> None:
    @linked()
    async def _(link: ServerLink) -> None:
        with pytest.raises(McpError, match="fake failed: it sent a message of more than 4 MiB"):
            await link.call_tool("big", {"megabytes": 10}, timeout=30)  # failed as it came, not timed out
        assert text(await link.call_tool("echo", {"text": "after"}, timeout=10)) == "after"


def test_a_server_that_dies_mid_call_says_how_with_its_stderr() -> None:
    @linked()
    async def _(link: ServerLink) -> None:
        with pytest.raises(McpError) as failure:
            await link.call_tool("die", {}, timeout=10)
        message = str(failure.value)
        assert "exit status 3" in message and "fake server: dying mid-call" in message
        with pytest.raises(McpError, match="ended"):
            await link.call_tool("echo", {"text": "x"}, timeout=10)


def test_a_server_that_fails_to_start_is_shown_escaped() -> None:
    message = asyncio.run(start_failure("--die-initialize"))
    assert "exit status 4" in message and "fake server: refusing to start" in message
    assert "\x1b" not in message and "\\x1b[31m" in message


@pytest.mark.parametrize(
    ("switches", "words"),
    [
        (("--hang-initialize",), "did not answer initialize within 1 s"),
        (("--garbage-initialize",), "could not read"),
        (("--version", "2024-11-05"), "speaks MCP revision '2024-11-05'"),
        (("--tools", "20000", "--page-size", "2000"), f"lists more than {MAX_LISTED_TOOLS:,} tools"),
        (("--tools", "100", "--page-size", "1", "--tool-bytes", "400000"), "tools/list runs past 16 MiB"),
        (("--tools", "300", "--page-size", "1"), "tools/list runs past 256 pages"),
        (("--schema-bytes", str(5 * 1024 * 1024)), "a message of more than 4 MiB"),
    ],
)
def test_a_hostile_server_fails_start_in_bounds(switches: tuple[str, ...], words: str) -> None:
    assert words in asyncio.run(start_failure(*switches, deadline=1 if "initialize" in switches[0] else 20))


def test_floods_of_notifications_and_requests_do_not_stall_a_call(tmp_path: Path) -> None:
    log = tmp_path / "received"
    progress: list[float] = []

    @linked("--log", str(log))
    async def _(link: ServerLink) -> None:
        assert text(await link.call_tool("requests", {"count": 10_000}, timeout=60)) == "requested"
        flooded = await link.call_tool(
            "flood", {"count": 10_000}, timeout=60, on_progress=lambda p, t, m: progress.append(p)
        )
        assert text(flooded) == "flooded"
        assert link.client.dropped > 10_000

    assert len(progress) < 10_000  # most were dropped, with the requests past the budget (link.client.dropped)
    replies = [json.loads(line) for line in log.read_text().splitlines()]
    refused = [m for m in replies if str(m.get("id", "")).startswith("m")]
    assert refused and {m["error"]["code"] for m in refused} == {-32601}


def test_elicitation_never_blocks_a_call_and_is_declined_with_nobody_to_ask() -> None:
    asked = asyncio.Event()
    answer_now = asyncio.Event()

    async def elicit(message: str, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        assert message == "Which colour?" and "colour" in schema["properties"]
        asked.set()
        await answer_now.wait()
        return "accept", {"colour": "red"}

    @linked(on_elicit=elicit)
    async def _(link: ServerLink) -> None:
        call = asyncio.ensure_future(link.call_tool("ask", {}, timeout=30))
        await asyncio.wait_for(asked.wait(), 10)
        assert text(await link.call_tool("echo", {"text": "meanwhile"}, timeout=10)) == "meanwhile"
        answer_now.set()
        assert json.loads(text(await call)) == {"action": "accept", "content": {"colour": "red"}}

    @linked()
    async def _(link: ServerLink) -> None:
        assert json.loads(text(await link.call_tool("ask", {}, timeout=30))) == {"action": "decline"}


def test_list_changed_calls_back_and_the_new_list_has_the_tool() -> None:
    changes: list[None] = []

    @linked(on_tools_changed=lambda: changes.append(None))
    async def _(link: ServerLink) -> None:
        await link.call_tool("grow", {}, timeout=10)
        assert changes == [None]
        assert "extra" in [tool["name"] for tool in await link.list_tools(10)]


def test_no_variable_is_passed_but_those_given() -> None:
    async def main() -> None:
        env = {"PATH": os.environ["PATH"], "ONLY": "this"}
        link = ServerLink("fake", await open_stdio([sys.executable, str(FAKE)], env))
        await link.start(20)
        seen = json.loads(text(await link.call_tool("env", {}, timeout=10)))
        await link.close()
        assert {key for key in seen if not key.startswith("LC_")} == {"PATH", "ONLY"}

    asyncio.run(main())


def test_close_kills_a_server_that_ignores_its_stdin_and_keeps_only_a_stderr_tail() -> None:
    async def main() -> StdioPump:
        script = "import sys, time; sys.stderr.write('e' * 100_000 + 'the end'); sys.stderr.flush(); time.sleep(600)"
        pump = await open_stdio([sys.executable, "-c", script], ENV)
        link = ServerLink("sleepy", pump)
        with pytest.raises(McpError, match="did not answer initialize"):
            await link.start(0.5)
        await link.close()
        return pump

    pump = asyncio.run(main())
    assert pump.process.returncode == -9
    tail = pump.describe_failure()
    assert tail.endswith("the end") and len(tail) <= STDERR_TAIL + len("its stderr ended with: ")


def test_the_reference_server_everything_over_stdio() -> None:
    """The pinned `@modelcontextprotocol/server-everything` (scripts/npm-packages.txt), as the host has it."""
    [pin] = [line for line in NPM_PACKAGES.read_text().splitlines() if "server-everything" in line]
    assert shutil.which(EVERYTHING), (
        f"{EVERYTHING} is not on PATH: install the pinned reference server, `npm install -g {pin}` "
        "(scripts/system-packages does, from scripts/npm-packages.txt)"
    )
    progress: list[tuple[float, float | None, str]] = []

    async def main() -> None:
        pump = await open_stdio([EVERYTHING, "stdio"], ENV)
        link = ServerLink("everything", pump)
        tools = {tool["name"]: tool for tool in await link.start(20)}
        assert link.client.negotiated_version == "2025-11-25"
        assert {"echo", "get-sum", "trigger-long-running-operation"} <= set(tools)
        assert text(await link.call_tool("echo", {"message": "hello"}, timeout=20)) == "Echo: hello"
        structured = await link.call_tool("get-structured-content", {"location": "Chicago"}, timeout=20)
        assert structured.structured is not None and "temperature" in structured.structured
        await link.call_tool(
            "trigger-long-running-operation",
            {"duration": 0.3, "steps": 3},
            timeout=20,
            on_progress=lambda p, t, m: progress.append((p, t, m)),
        )
        await link.close()
        assert pump.process.returncode is not None

    asyncio.run(main())
    assert [(p, t) for p, t, _ in progress] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
