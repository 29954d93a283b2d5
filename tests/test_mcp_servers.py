"""MCP servers for real: each in its bubblewrap sandbox, started, bounded, restarted and stopped by the supervisor.

The servers are tests/fakes/mcp_hostile_server.py run by the system's /usr/bin/python3. The script is copied
into a directory of the test's own, outside the workspace, and named by its absolute path in the server's argv:
that is what makes the sandbox bind it (read-only, and nothing around it), as it would a server a person
installed in /opt.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chock.errors import Refused
from chock.mcp import confinement
from chock.mcp.declarations import ServerSpec
from chock.mcp.supervisor import McpServers, McpTool
from chock.paths import Layout
from chock.session import workspace
from chock.session.sandbox import find_bwrap, for_workspace, host_environment
from chock.session.tools import dispatch
from chock.session.tools.mcp_tool import ServerTool
from tests.fakes.projects import make_project
from tests.fakes.sessions import no_process_left, processes_with

HOSTILE = Path(__file__).parent / "fakes" / "mcp_hostile_server.py"
PYTHON = "/usr/bin/python3"
SESSION = "20261206-114500-a1b2c3"


@pytest.fixture
def person_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home" / "ada"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-test")
    return home


@pytest.fixture
def layout(person_home: Path) -> Layout:
    layout = Layout(
        config=person_home / ".config" / "chock" / "config.zon",
        state=person_home / ".local" / "state" / "chock",
        data=person_home / ".local" / "share" / "chock",
    )
    layout.data.mkdir(parents=True)
    layout.tokens_path.write_text('.{ .work = "sk-secret-test" }\n')
    return layout


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """The workspace, the project, and the directory the test's server script is installed in."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("hello\n")
    servers = tmp_path / "servers"
    servers.mkdir()
    shutil.copy(HOSTILE, servers / "hostile.py")
    return {"workspace": workspace, "project": tmp_path / "project", "script": servers / "hostile.py"}


@pytest.fixture
def marker() -> Iterator[str]:
    with no_process_left() as marked:
        yield marked


def spec(places: dict[str, Path], marker: str, mode: str = "well", name: str = "probe", **fields: Any) -> ServerSpec:
    return ServerSpec(name=name, origin="config", command=(PYTHON, str(places["script"]), mode, marker), **fields)


class Run:
    """A supervisor over the test's servers, and the events it logged."""

    def __init__(self, layout: Layout, places: dict[str, Path], specs: list[ServerSpec], **options: Any) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.servers = McpServers(
            specs,
            layout=layout,
            workspace=places["workspace"],
            project=places["project"],
            emit=self.emit,
            credentials=lambda spec: None,
            **options,
        )

    def emit(self, type: str, **fields: Any) -> None:
        self.events.append((type, fields))

    def states(self, server: str) -> list[str]:
        return [fields["state"] for type, fields in self.events if type == "mcp.server" and fields["server"] == server]

    def tool(self, model_name: str) -> McpTool:
        found = [tool for tool in self.servers.tools() if tool.model_name == model_name]
        assert found, f"no tool {model_name}; the servers said: {self.events}"
        return found[0]

    async def call(self, model_name: str, args: dict[str, Any]) -> Any:
        return await self.servers.call(self.tool(model_name), args)


def probed(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.output
    return json.loads(result.output)


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP listener that greets whoever connects."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"hello from the host")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def secrets_of(person_home: Path, layout: Layout) -> list[str]:
    return [str(person_home / ".ssh" / "id_ed25519"), str(layout.tokens_path)]


def peak_reset() -> int:
    """Reset this process's peak resident size (Linux: clear_refs 5); its resident size now, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def peak() -> int:
    return _status("VmHWM")


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/self/status")


# The sandbox ----------------------------------------------------------------------------------------------


def test_a_server_reads_the_workspace_and_nothing_of_the_person(layout, places, person_home, marker, listener):
    async def scenario() -> dict[str, Any]:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        try:
            workspace = places["workspace"]
            return probed(
                await run.call(
                    "mcp__probe__probe",
                    {
                        "read": [str(workspace / "README.md"), *secrets_of(person_home, layout)],
                        "write": str(workspace / "written.txt"),
                        "connect": listener,
                    },
                )
            )
        finally:
            await run.servers.stop()

    said = asyncio.run(scenario())
    assert said[f"read {places['workspace'] / 'README.md'}"] == "read 6 bytes"
    for secret in secrets_of(person_home, layout):
        assert said[f"read {secret}"] == "failed: No such file or directory", said
    assert said["write"] == "failed: Read-only file system"
    assert not (places["workspace"] / "written.txt").exists()
    assert said["connect"].startswith("failed"), said
    assert set(said["environ"]) <= {"HOME", "LANG", "PATH", "PWD", "CHOCK_WORKSPACE"}  # bwrap's --chdir sets PWD
    assert said["home"] == str(layout.mcp_home(places["project"], "probe").resolve())
    assert said["workspace"] == str(places["workspace"].resolve())  # where the files it serves are
    assert said["cwd"] == said["home"]  # never the workspace: a relative path names nothing the agent wrote


def test_with_the_network_a_server_connects_and_still_reads_no_secret(layout, places, person_home, marker, listener):
    async def scenario() -> dict[str, Any]:
        run = Run(layout, places, [spec(places, marker, network=True)])
        await run.servers.start()
        try:
            args = {"read": secrets_of(person_home, layout), "connect": listener}
            return probed(await run.call("mcp__probe__probe", args))
        finally:
            await run.servers.stop()

    said = asyncio.run(scenario())
    assert said["connect"] == "connected: hello from the host"
    for secret in secrets_of(person_home, layout):
        assert said[f"read {secret}"].startswith("failed"), said


def test_a_server_that_says_so_writes_the_workspace(layout, places, marker):
    async def scenario() -> dict[str, Any]:
        run = Run(layout, places, [spec(places, marker, workspace="write")])
        await run.servers.start()
        try:
            return probed(await run.call("mcp__probe__probe", {"write": str(places["workspace"] / "written.txt")}))
        finally:
            await run.servers.stop()

    assert asyncio.run(scenario())["write"] == "written"
    assert (places["workspace"] / "written.txt").read_text() == "written by a server\n"


def test_code_the_agent_can_rewrite_is_never_a_server(layout, places, marker):
    toolchains = layout.toolchains_dir(places["project"])
    toolchains.mkdir(parents=True)
    for directory in (places["workspace"], toolchains):
        program = directory / "server"
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
        link = places["script"].parent / f"link-to-{directory.name}"
        link.symlink_to(program)
        for argv0 in (str(program), str(link)):
            refused = ServerSpec(name="evil", origin="project", command=(argv0, marker))
            with pytest.raises(Refused, match=r"inside .* which the agent can rewrite"):
                confinement.server_argv(
                    refused, layout=layout, workspace=places["workspace"], project=places["project"]
                )

            async def scenario(refused: ServerSpec = refused) -> list[str]:
                run = Run(layout, places, [refused])
                await run.servers.start()
                await run.servers.stop()
                assert run.servers.tools() == []
                return [fields["reason"] for _, fields in run.events]

            (reason,) = asyncio.run(scenario())
            assert "the agent can rewrite" in reason
            assert not processes_with(marker)


def test_an_argument_naming_what_the_agent_can_rewrite_is_refused_before_it_starts(layout, places, marker):
    """`python3 tools/srv.py` runs the agent's code as surely as an argv[0] in the workspace would: every argument
    naming an existing path in the workspace or the toolchains HOME is refused, whichever way it names it."""
    tools = places["workspace"] / "tools"
    tools.mkdir()
    shutil.copy(places["script"], tools / "srv.py")
    toolchains = layout.toolchains_dir(places["project"])
    toolchains.mkdir(parents=True)
    shutil.copy(places["script"], toolchains / "srv.py")
    home = layout.mcp_home(places["project"], "evil")
    home.mkdir(parents=True)
    (home / "tools").symlink_to(tools)  # left by an earlier run of the server, which may write its HOME
    (places["workspace"] / "mcp.json").write_text("{}\n")
    named = [
        ("tools/srv.py", tools / "srv.py"),  # relative to the working directory, the HOME: via its symlink
        (str(tools / "srv.py"), tools / "srv.py"),
        (str(toolchains / "srv.py"), toolchains / "srv.py"),
        (f"--config={places['workspace'] / 'mcp.json'}", places["workspace"] / "mcp.json"),
        (str(places["script"].parent / "link"), tools),
    ]
    (places["script"].parent / "link").symlink_to(tools)
    for argument, real in named:
        refused = ServerSpec(name="evil", origin="project", command=(PYTHON, argument, "well", marker))
        with pytest.raises(Refused) as error:
            confinement.server_argv(refused, layout=layout, workspace=places["workspace"], project=places["project"])
        assert f"its argument {argument!r} names {real.resolve()}" in str(error.value)
        assert "which the agent can rewrite" in str(error.value)

    async def scenario() -> list[str]:
        run = Run(layout, places, [ServerSpec(name="evil", origin="project", command=(PYTHON, "tools/srv.py"))])
        await run.servers.start()
        await run.servers.stop()
        assert run.servers.tools() == []
        return [fields["state"] for _, fields in run.events]

    assert asyncio.run(scenario()) == ["failed"]
    assert not processes_with(marker)


def test_a_servers_home_is_never_in_an_agents_sandbox(layout, places, tmp_path):
    home = layout.mcp_home(places["project"], "probe")
    home.mkdir(parents=True)
    (home / "state").write_text("the server's own\n")
    project = make_project(places["project"], {"README.md": "hello\n"}, message="first")
    worktree, _ = workspace.create(project, layout.workspace_dir(SESSION), f"chock/{SESSION}")
    box = for_workspace(layout, worktree)
    done = subprocess.run(
        box.argv(["/bin/sh", "-c", f"cat {home / 'state'}; ls {layout.data}"], bwrap=find_bwrap()),
        env=host_environment(),
        capture_output=True,
        text=True,
    )
    assert "No such file" in done.stderr and "the server's own" not in done.stdout
    assert "mcp" not in done.stdout.split()


def test_what_a_server_may_not_ask_for_is_refused_before_it_starts(layout, places):
    def argv(**fields: Any) -> list[str]:
        server = ServerSpec(**{"name": "x", "origin": "config", "command": (PYTHON,), **fields})
        return confinement.server_argv(server, layout=layout, workspace=places["workspace"], project=places["project"])

    with pytest.raises(Refused, match="never both"):
        argv(network=True, workspace="write")
    with pytest.raises(Refused, match="relative path"):
        argv(command=("bin/server",))
    with pytest.raises(Refused, match="not on the sandbox's PATH"):
        argv(command=("no-such-server-anywhere",))
    with pytest.raises(Refused, match="Chock's own files"):
        argv(command=(PYTHON, str(layout.tokens_path)))
    with pytest.raises(Refused, match="Chock's own files"):
        argv(command=(PYTHON, str(layout.data.parent)))
    with pytest.raises(Refused, match="not a file or directory a server may be given"):
        argv(command=(PYTHON, "/proc/self/environ"))  # the session's own environment
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(places["script"].parent / "daemon.sock"))
    with pytest.raises(Refused, match="no socket or device"):
        argv(command=(PYTHON, str(places["script"].parent / "daemon.sock")))
    listening.close()
    assert argv(command=("python3",))[-1] == "python3"  # a bare name, found on the sandbox's PATH


def test_a_masked_etc_file_gone_before_bwrap_starts_costs_one_more_start(layout, places, marker, monkeypatch):
    """bwrap cannot bind over a mask that vanished (`useradd` removing its lock file between the command line and
    bwrap's start): the server's sandbox is built again, once, and the server starts."""
    if os.geteuid() != 0:
        pytest.fail("this test writes a file in /etc: run it as root (CI does)")
    lock = Path("/etc") / f"chock-test-lock-{os.getpid()}"
    built = confinement.server_argv

    def vanishing(*args: Any, **kwargs: Any) -> list[str]:
        argv = built(*args, **kwargs)
        lock.unlink(missing_ok=True)
        return argv

    async def scenario() -> Any:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        try:
            return run, await run.call("mcp__probe__echo", {"text": "started"})
        finally:
            await run.servers.stop()

    monkeypatch.setattr(confinement, "server_argv", vanishing)
    try:
        os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        run, echoed = asyncio.run(scenario())
    finally:
        lock.unlink(missing_ok=True)
    assert run.states("probe") == ["started", "stopped"], run.events
    assert (echoed.output, echoed.is_error) == ("started", False)


# Bounds and failures -----------------------------------------------------------------------------------


def test_servers_start_at_once(layout, places, marker):
    """Each server answers initialize only once the other is up: started one after the other, the first would
    wait for the second until its start deadline."""

    async def scenario() -> Run:
        specs = [
            spec(places, marker, f"meet:a:b:{places['workspace']}", name="a", workspace="write"),
            spec(places, marker, f"meet:b:a:{places['workspace']}", name="b", workspace="write"),
        ]
        run = Run(layout, places, specs, start_seconds=30)
        await run.servers.start()
        await run.servers.stop()
        return run

    run = asyncio.run(scenario())
    assert (run.states("a"), run.states("b")) == (["started", "stopped"], ["started", "stopped"])


def test_a_server_that_never_answers_initialize_is_left_out(layout, places, marker):
    async def scenario() -> Run:
        run = Run(
            layout, places, [spec(places, marker, "silent", name="silent"), spec(places, marker)], start_seconds=1
        )
        await run.servers.start()
        await run.servers.stop()
        return run

    run = asyncio.run(scenario())
    assert run.states("silent") == ["failed"]
    (reason,) = [fields["reason"] for type, fields in run.events if fields.get("state") == "failed"]
    assert "did not answer initialize and tools/list within 1 s" in reason
    assert run.states("probe") == ["started", "stopped"]


def test_a_server_that_exits_at_start_is_left_out_with_what_it_said(layout, places, marker):
    async def scenario() -> Run:
        gone = ServerSpec(name="gone", origin="config", command=(PYTHON, "-c", "import sys; sys.exit('no config')"))
        run = Run(layout, places, [gone, spec(places, marker)])
        await run.servers.start()
        await run.servers.stop()
        return run

    run = asyncio.run(scenario())
    (reason,) = [fields["reason"] for type, fields in run.events if fields["server"] == "gone"]
    assert "no config" in reason
    assert {tool.server for tool in run.servers.tools()} == {"probe"}


def test_ten_thousand_tools_are_cut_to_128_and_a_huge_schema_is_dropped(layout, places, marker):
    async def scenario() -> Run:
        specs = [
            spec(places, marker, "tools10000", name="many"),
            spec(places, marker, "schema1mb", name="wide"),
            spec(places, marker, "schema5mb", name="huge"),
        ]
        run = Run(layout, places, specs)
        await run.servers.start()
        await run.servers.stop()
        return run

    run = asyncio.run(scenario())
    names = [tool.model_name for tool in run.servers.tools()]
    assert len([name for name in names if name.startswith("mcp__many__")]) == 128
    assert [name for name in names if name.startswith("mcp__wide__")] == ["mcp__wide__echo"]
    started = {fields["server"]: fields for type, fields in run.events if fields["state"] == "started"}
    assert started["many"]["tools"] == 128 and "9,872 tools dropped past the 128" in started["many"]["reason"]
    assert "input schema past 64 KiB (huge)" in started["wide"]["reason"]
    assert run.states("huge") == ["failed"]  # its tools/list is past the 4 MiB a message may have


def test_a_session_keeps_256_tools_of_all_its_servers(layout, places, marker):
    async def scenario() -> Run:
        run = Run(layout, places, [spec(places, marker, "tools1000", name=name) for name in ("a", "b", "c")])
        await run.servers.start()
        await run.servers.stop()
        return run

    run = asyncio.run(scenario())
    servers = [tool.server for tool in run.servers.tools()]
    assert (servers.count("a"), servers.count("b"), servers.count("c")) == (128, 128, 0)
    started = {fields["server"]: fields for type, fields in run.events if fields["state"] == "started"}
    assert started["c"]["tools"] == 0 and "128 tools dropped past the 256 a session may have" in started["c"]["reason"]


def test_progress_reaches_the_caller(layout, places, marker):
    async def scenario() -> tuple[Any, list[tuple[float, float | None, str]]]:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        said: list[tuple[float, float | None, str]] = []
        try:
            tool = run.tool("mcp__probe__steps")
            result = await run.servers.call(tool, {}, on_progress=lambda *step: said.append(step))
            return result, said
        finally:
            await run.servers.stop()

    result, said = asyncio.run(scenario())
    assert result.output == "done"
    assert said == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def test_hostile_results_are_bounded_errors_and_a_server_is_restarted_once(layout, places, marker):
    async def scenario() -> tuple[Run, dict[str, Any]]:
        run = Run(layout, places, [spec(places, marker, timeout=2)])  # a garbled call fails at its timeout
        await run.servers.start()
        results = {}
        try:
            for name in ("big", "garbage", "hang", "echo"):
                results[name] = await run.call(f"mcp__probe__{name}", {"text": "still here"})
        finally:
            await run.servers.stop()
        return run, results

    before = peak_reset()
    run, results = asyncio.run(scenario())
    grown = peak() - before
    assert grown < 16 * 2**20, f"the session's peak memory grew {grown:,} bytes reading a 10 MB result"
    for name in ("big", "garbage"):
        assert results[name].is_error
        assert len(results[name].output.encode()) < 64 * 1024
    assert "restarted" in results["big"].output
    assert "failed twice" in results["garbage"].output
    assert "failed earlier in this session" in results["hang"].output
    assert results["echo"].is_error
    assert run.states("probe") == ["started", "restarted", "failed"]


def test_a_call_past_its_timeout_is_the_tools_error(layout, places, marker):
    async def scenario() -> list[Any]:
        run = Run(layout, places, [spec(places, marker, timeout=2)])  # the echo after it must answer within it
        await run.servers.start()
        try:
            return [await run.call("mcp__probe__hang", {}), await run.call("mcp__probe__echo", {"text": "back"})]
        finally:
            await run.servers.stop()

    hung, echoed = asyncio.run(scenario())
    assert hung.is_error and "restarted" in hung.output
    assert echoed.output == "back" and not echoed.is_error


def test_a_refusal_is_the_tools_error_and_a_server_that_dies_is_started_again(layout, places, marker):
    async def scenario() -> tuple[Run, list[Any]]:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        try:
            calls = [("refuse", {}), ("echo", {"text": "one"}), ("die", {}), ("echo", {"text": "two"})]
            return run, [await run.call(f"mcp__probe__{name}", args) for name, args in calls]
        finally:
            await run.servers.stop()

    run, (refused, one, died, two) = asyncio.run(scenario())
    assert refused.is_error and "failed tools/call: refuse takes no arguments" in refused.output
    assert (one.output, two.output) == ("one", "two")
    assert died.is_error and "was restarted" in died.output
    assert run.states("probe") == ["started", "restarted", "stopped"]


def test_a_notification_flood_does_not_stall_a_call(layout, places, marker):
    async def scenario() -> Any:
        run = Run(layout, places, [spec(places, marker, "flood")])
        await run.servers.start()
        try:
            return await run.call("mcp__probe__echo", {"text": "through"})
        finally:
            await run.servers.stop()
            (stopped,) = [fields for _, fields in run.events if fields["state"] == "stopped"]
            dropped = int(stopped["reason"].split()[0].replace(",", ""))  # the log says how many were dropped
            assert dropped >= 100_000 and "past the 100 a second it may send" in stopped["reason"], stopped

    result = asyncio.run(scenario())
    assert (result.output, result.is_error) == ("through", False)


def test_a_storm_of_list_changed_lists_the_tools_again_once_at_a_time(layout, places, marker):
    """50 `list_changed` at once are one re-listing in flight and one more after it, never 50 lists held at once
    (each may be 16 MiB)."""
    listed = layout.mcp_home(places["project"], "probe") / "listed"

    async def scenario() -> list[str]:
        run = Run(layout, places, [spec(places, marker, "relist-storm")])
        await run.servers.start()
        try:
            await run.call("mcp__probe__echo", {"text": "storm"})
            # A round trip after the storm: every tools/list Chock sent before this call has reached the server.
            return [(await run.call("mcp__probe__echo", {"text": "after"})).output]
        finally:
            await run.servers.stop()

    assert asyncio.run(scenario()) == ["after"]
    # The start's listing, then for each of the two calls' storms one in flight and at most one after it.
    assert 2 <= len(listed.read_text().splitlines()) <= 5


def test_a_changed_tool_list_is_applied_at_the_turn_boundary(layout, places, marker):
    async def scenario() -> tuple[list[str], list[tuple[str, list[str]]], list[str]]:
        run = Run(layout, places, [spec(places, marker, "list-changed")])
        await run.servers.start()
        try:
            await run.call("mcp__probe__echo", {"text": "x"})
            before = [tool.model_name for tool in run.servers.tools()]
            for _ in range(100):  # the server was re-listed in the background
                await asyncio.sleep(0.05)
                changes = run.servers.take_changes()
                if changes:
                    break
            return before, changes, [tool.model_name for tool in run.servers.tools()]
        finally:
            await run.servers.stop()

    before, changes, after = asyncio.run(scenario())
    assert "mcp__probe__extra0" not in before
    assert changes == [("probe", after)] and "mcp__probe__extra0" in after


def test_stop_cancels_a_call_and_leaves_no_process(layout, places, marker):
    async def scenario() -> Any:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        assert processes_with(marker)
        calling = asyncio.ensure_future(run.call("mcp__probe__hang", {}))
        await asyncio.sleep(0.2)
        await run.servers.stop()
        assert not processes_with(marker)
        return await calling

    result = asyncio.run(scenario())
    assert result.is_error and "stopped with the session" in result.output
    told = (layout.mcp_home(places["project"], "probe") / "cancelled").read_text().splitlines()
    (cancelled,) = [json.loads(line) for line in told]  # the hung call's, and nothing else
    assert isinstance(cancelled["requestId"], int) and cancelled["reason"]


def test_a_cancelled_call_tells_the_server_and_is_cancelled(layout, places, marker):
    told = layout.mcp_home(places["project"], "probe") / "cancelled"

    async def scenario() -> None:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        try:
            calling = asyncio.ensure_future(run.call("mcp__probe__hang", {}))
            await asyncio.sleep(0.2)
            calling.cancel()
            with pytest.raises(asyncio.CancelledError):
                await calling
            for _ in range(1000):  # the server is told in a task of its own
                if told.exists():
                    break
                await asyncio.sleep(0.01)
            assert told.exists(), "the server was not told the call was cancelled"
            assert (await run.call("mcp__probe__echo", {"text": "after"})).output == "after"
        finally:
            await run.servers.stop()

    asyncio.run(scenario())
    assert len(told.read_text().splitlines()) == 1


def test_stop_during_a_restart_leaves_no_process(layout, places, marker):
    started = layout.mcp_home(places["project"], "probe") / "started"

    async def scenario() -> Any:
        run = Run(layout, places, [spec(places, marker, "once")], start_seconds=60)
        await run.servers.start()
        calling = asyncio.ensure_future(run.call("mcp__probe__die", {}))
        while len(started.read_text().splitlines()) < 2:  # the restarted server is up, and will never answer
            await asyncio.sleep(0.01)
        await run.servers.stop()
        result = await calling
        assert not processes_with(marker)
        return result

    result = asyncio.run(scenario())
    assert result.is_error and "the session stopped while MCP server probe was being started again" in result.output


def test_the_tool_adapter_asks_and_shows_server_tool_and_arguments(layout, places, marker):
    async def scenario() -> tuple[ServerTool, Any, list[bool]]:
        run = Run(layout, places, [spec(places, marker)])
        await run.servers.start()
        asked: list[bool] = []

        async def approve(asks: bool) -> None:
            asked.append(asks)

        try:
            adapter = ServerTool(run.servers, run.tool("mcp__probe__echo"))
            table = {adapter.name: adapter}
            files = SimpleNamespace(workspace=places["workspace"])
            result = await dispatch(table, files, adapter.name, {"text": "ok"}, approve=approve)
            return adapter, result, asked
        finally:
            await run.servers.stop()

    adapter, result, asked = asyncio.run(scenario())
    assert (result.output, asked) == ("ok", [True])
    assert adapter.summary({"text": "ok"}) == 'probe/echo {"text":"ok"}'
    assert adapter.schema() == {
        "name": "mcp__probe__echo",
        "description": "the echo tool",
        "parameters": {"type": "object"},
    }
