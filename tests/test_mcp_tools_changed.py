"""A server's `notifications/tools/list_changed` in a real session (docs/mcp.md#in-a-session): the new list holds
from the next turn boundary on, so the model request in flight when the notification arrived keeps the old list,
the next one has the new list, and the log says `mcp.tools {server, names}`.

`chock run` is a real process against the loopback provider; the server is tests/fakes/mcp_server.py in its
sandbox (`grow {later}`: it adds a tool when the test touches `$HOME/grow` in its private HOME).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from tests.fakes.providers import FakeProvider
from tests.fakes.wait import wait_until
from tests.test_mcp_elicitation import fake_server
from tests.test_mcp_session import call, config, of, rules, server_processes, tool_names, tool_result


def test_a_changed_tool_list_reaches_the_model_from_the_next_turn_boundary_and_is_logged(home, project, tmp_path):
    requests = [0]

    def while_in_flight(body: dict[str, Any]) -> None:
        """The second model request: the server changes its tools while it is in flight."""
        requests[0] += 1
        if requests[0] == 2:
            (server_home,) = glob.glob(f"{home.env['CHOCK_DATA_DIR']}/mcp/*/fake")
            Path(server_home, "grow").touch()
            wait_until(lambda: Path(server_home, "grown").exists(), 30, "the server's list_changed")
        return None  # the queue's reply

    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.answer_with(while_in_flight)
        fake.script(tool_calls=[call("c1", "mcp__fake__grow", {"later": True})])
        fake.script(tool_calls=[call("c2", "mcp__fake__echo", {"text": "still the old list"})])
        fake.script(tool_calls=[call("c3", "mcp__fake__extra", {})])
        fake.script(text="Done.")
        config(home, fake, fake_server(tmp_path), rules(("allow", "mcp:fake/*")))
        result = home.chock("run", "grow your tools", cwd=project, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        bodies = fake.calls
    assert len(bodies) == 4, bodies
    assert tool_result(bodies[1]) == "will grow"
    assert "mcp__fake__extra" not in tool_names(bodies[0])
    assert "mcp__fake__extra" not in tool_names(bodies[1])  # in flight when the list changed
    served = [name for name in tool_names(bodies[2]) if name.startswith("mcp__")]
    assert "mcp__fake__extra" in served and served == sorted(served)  # the new list, still in a stable order
    assert tool_result(bodies[3]) == "extra ran"  # the model's call of the new tool reached the server
    events = home.events(home.only_session())
    (changed,) = of(events, "mcp.tools")
    assert changed["server"] == "fake" and changed["names"] == served
    # Logged at the boundary: after the second request's tool call, before the third request's.
    kinds = [event["type"] for event in events if event["type"] in ("tool.call", "mcp.tools")]
    assert kinds == ["tool.call", "tool.call", "mcp.tools", "tool.call"], kinds
    (extra,) = [event for event in of(events, "tool.call") if event["name"] == "mcp__fake__extra"]
    assert (extra["server"], extra["tool"]) == ("fake", "extra")
    assert server_processes(home) == []
