"""What a tool is, and what it may ask of the session that runs it.

A tool is one object: the name and schema the model is told, whether a person approves each call, the
one line a person judges a call by, and its code. The code reaches the session only through `Context`,
which the session implements, so no tool imports the agent loop.
"""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from chock.errors import ChockError
from chock.value import Value

if TYPE_CHECKING:
    from chock.log.events import Event
    from chock.session.ports import ToolRunner


# The most of a call's summary a person is asked to approve: shown whole, one line per line, so what is approved is
# exactly what runs. A call past it (a 2 MB shell command) is the tool's error before anyone is asked.
SUMMARY_LIMIT = 64 * 1024


class ToolRefused(ChockError):
    """A tool call the session will not carry out; the model sees the message as the tool's error."""


class Files(Protocol):
    """What the file tools need: the workspace they are confined to (all a subagent's process has)."""

    @property
    def workspace(self) -> Path: ...


class Context(Files, Protocol):
    """What the session gives its tools (chock.session.runner.Session implements it)."""

    @property
    def runner(self) -> ToolRunner:
        """Where a shell command's process is started: the sandbox boundary."""
        ...

    @property
    def scratchpad(self) -> Path: ...

    def emit(self, type: str, **fields: Any) -> Event:
        """Append an event to the session's log (and fold and show it)."""
        ...

    def handle(self, prefix: str) -> str:
        """A new handle for background work, unique in this session's log (`bg-12`, `sub-30`)."""
        ...

    def track(self, handle: str, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` on the session's loop; the session waits for it before it ends, and cancels it then."""
        ...

    def subagent_spec(self) -> dict[str, Any]:
        """What the next subagent's process needs to reach the session's instance (a replay: its entries)."""
        ...

    def record_usage(self, usage: dict[str, int], purpose: str) -> None:
        """Log the usage of calls made for the session elsewhere, priced as its own (its budget counts them)."""
        ...

    async def relay(self, name: str, args: dict[str, Any]) -> Result:
        """Carry out a subagent's call of the MCP tool `name` if the rules in force (or --yes) allow it: a
        subagent asks nobody."""
        ...


class Result(Value):
    """What one call gave: the output the model reads, whether it is the tool's error, and for a change to a
    file its unified diff (chock.session.tools.diff), which is logged for a person to see and never sent to
    the model. A tool's `run` returns the output alone when it has nothing more to say."""

    __slots__ = ("diff", "is_error", "output")

    def __init__(self, output: str, is_error: bool = False, diff: str = "") -> None:
        self.output = output
        self.is_error = is_error
        self.diff = diff


def path_summary(args: dict[str, Any]) -> str:
    return str(args.get("path", ""))


class Tool:
    """One tool; a subclass sets the class attributes and writes `run` (and `check` when it asks approval)."""

    name: str
    description: str
    parameters: ClassVar[dict[str, Any]]  # JSON schema of each argument, by name
    required: tuple[str, ...] = ()
    asks_approval = False  # each call waits for a person's (or the config's) yes

    def schema(self) -> dict[str, Any]:
        """What the model is told about this tool."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {"type": "object", "properties": self.parameters, "required": list(self.required)},
        }

    def summary(self, args: dict[str, Any]) -> str:
        """One line a person can judge a call by (approvals and the terminal view)."""
        return path_summary(args)

    def check(self, args: dict[str, Any]) -> None:
        """Refuse arguments the tool cannot use before anyone is asked to approve the call."""

    async def run(self, context: Context, args: dict[str, Any]) -> str | Result:
        """Carry the call out and return its output (or a `Result` with a diff); raise `ToolRefused` for the
        tool's own errors."""
        raise NotImplementedError


PATH_ARG = {"type": "string", "description": "a path relative to the workspace root"}
