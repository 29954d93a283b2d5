"""A subagent's process: its own conversation with the session's instance, and the read-only tools.

The parent writes one JSON request line on our stdin (task, workspace, the instance's kind/address/model and
retries, its credential if any, the tool rules in force, the session's MCP tools, and for a replay its block of
entries) and reads one JSON answer line from our stdout. A call of an MCP tool is relayed: one line
`{"call": {name, args}}` on stdout, answered by one line `{output, is_error}` on stdin — the session decides it by
its rules and its servers carry it out (this process starts no server). The credential travels only over that
pipe: never argv, never the environment.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from pathlib import Path
from typing import Any

from chock.errors import ChockError
from chock.providers import Provider, Reply
from chock.rules.rule import Rule, RuleSet
from chock.session import reaper, stops, tools
from chock.session.tools.tool import Result, Tool, ToolRefused

MAX_TURNS = 30  # a research task that needs more model calls than this has lost its way


class Relayed(Tool):
    """An MCP tool of the session, as this process sees it: its spec, and each call relayed to the session (which
    decides it by its rules: this process asks nothing)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.name = str(spec.get("name", ""))

    def schema(self) -> dict[str, Any]:
        return self.spec

    async def run(self, context: Any, args: dict[str, Any]) -> Result:
        sys.stdout.write(json.dumps({"call": {"name": self.name, "args": args}}) + "\n")
        sys.stdout.flush()
        line = sys.stdin.readline()  # nothing else runs in this process meanwhile
        if not line:
            raise ChockError("the session ended while a relayed MCP call was in flight")
        answer = json.loads(line)
        return Result(str(answer.get("output", "")), bool(answer.get("is_error")))


class ReadOnlyContext:
    """What the read-only tools need of a subagent's process (chock.session.tools.tool.Files)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace


async def research(request: dict[str, Any]) -> dict[str, Any]:
    context = ReadOnlyContext(Path(request["workspace"]))
    provider: Provider
    if request.get("kind") == "replay":
        from chock.providers.replay import ReplayProvider

        provider = ReplayProvider(list(request.get("entries") or []), source="the replay file's subagent entries")
    else:
        from chock.providers.registry import make_provider

        provider = make_provider(
            request["kind"],
            request.get("address"),
            request.get("model"),
            request.get("credential"),
            instance=request.get("instance", ""),
            retries=request.get("retries"),
        )
    conversation: list[dict[str, Any]] = [{"role": "user", "text": str(request["task"])}]
    table: dict[str, Tool] = dict(tools.SUBAGENT_TOOLS)
    table.update((tool.name, tool) for tool in map(Relayed, request.get("mcp_tools") or []))
    rules = RuleSet(Rule(*entry) for entry in request.get("rules") or [])
    usage = [0, 0]
    try:
        for _ in range(MAX_TURNS):
            reply = None
            async for item in provider.stream(conversation, tools.specs(table), tools.SUBAGENT_PROMPT):
                if isinstance(item, Reply):
                    reply = item
            if reply is None:
                raise ChockError("the provider's response ended without a reply")
            usage[0] += reply.input_tokens
            usage[1] += reply.output_tokens
            conversation.append(
                {
                    "role": "assistant",
                    "text": reply.text,
                    "tool_calls": [c.as_dict() for c in reply.tool_calls],
                }
            )
            if stops.stopped_short(reply):
                return {"result": stops.subagent_result(reply), "input_tokens": usage[0], "output_tokens": usage[1]}
            if stops.is_paused(reply):
                continue  # the paused answer is in the conversation: sent again, it goes on (within MAX_TURNS)
            if not reply.tool_calls:
                return {"result": reply.text, "input_tokens": usage[0], "output_tokens": usage[1]}
            for call in reply.tool_calls:
                approve = functools.partial(_decide, rules, call.name)
                result = await tools.dispatch(table, context, call.name, call.args, approve=approve)
                conversation.append(
                    {
                        "role": "tool",
                        "call_id": call.call_id,
                        "name": call.name,
                        "output": result.output,
                        "is_error": result.is_error,
                    }
                )
        return {
            "result": f"[the subagent stopped after {MAX_TURNS} model calls without an answer]",
            "input_tokens": usage[0],
            "output_tokens": usage[1],
        }
    finally:
        await provider.aclose()


async def _decide(rules: RuleSet, name: str, asks: bool) -> None:
    """A subagent's call, decided by the session's tool rules: a deny is the tool's error naming the rule, and so
    is an ask, since a subagent has nobody to ask (docs/approvals.md)."""
    decision = rules.decide(name, None, "ask" if asks else "allow")
    if decision.verdict == "deny":
        raise ToolRefused(f"this call did not run: {decision.reason}")
    if decision.verdict == "ask":
        raise ToolRefused(f"this call needs a person's approval ({decision.reason}), and a subagent cannot ask one")


def main() -> None:
    reaper.die_with_parent()  # a subagent lives only as long as the session that started it
    try:
        answer = asyncio.run(research(json.loads(sys.stdin.readline())))
    except ChockError as error:
        print(f"chock subagent: {error}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
