"""`chock run`'s hidden options for the steps of a move, each run by a child of a daemon
(docs/remote.md#moving-a-session):

    chock run --move-out ID --to HOST [--wait SECONDS] [--address=ADDR]
                                                           the source, step 1: one JSON line describing the parts
    chock run --move-in ID --project DIR --from HOST [--instance NAME] [--running]
                                                           the target, step 2: `{"adopted": <event id>}`, then
                                                           a running session carries on here
    chock run --moved ID --to HOST                         the source, step 3: `{"moved": <event id>}`
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from chock.commands.detach import DEFAULT_WAIT_SECONDS
from chock.errors import UsageError
from chock.paths import Layout

F = TypeVar("F", bound=Callable[..., Any])

STEPS = ("move_out", "move_in", "moved")
_NAMES = (*STEPS, "move_to", "move_from", "move_address", "move_running", "move_wait")


def move_options(function: F) -> F:
    """The options above, handed to the command as one `move` dict (click imported here: `fast` reads the source's
    steps without it)."""
    import click

    options = (
        click.option("--move-out", "move_out", metavar="ID", hidden=True, help="Step 1 of a move, on its source."),
        click.option("--move-in", "move_in", metavar="ID", hidden=True, help="Step 2 of a move, on its target."),
        click.option("--moved", "moved", metavar="ID", hidden=True, help="Step 3 of a move, on its source."),
        click.option("--to", "move_to", metavar="HOST", hidden=True, help="The host a session moves to."),
        click.option("--from", "move_from", metavar="HOST", hidden=True, help="The host a session moves from."),
        click.option("--address", "move_address", metavar="ADDR", hidden=True, help="Where the client reached --to."),
        click.option("--running", "move_running", is_flag=True, hidden=True, help="It was running: carry it on."),
        click.option(
            "--wait", "move_wait", type=float, default=DEFAULT_WAIT_SECONDS, hidden=True, help="Bounds each answer."
        ),
    )

    @functools.wraps(function)
    def gathered(*args: Any, **kwargs: Any) -> Any:
        kwargs["move"] = {name: kwargs.pop(name) for name in _NAMES}
        return function(*args, **kwargs)

    for option in reversed(options):
        gathered = option(gathered)
    return gathered  # type: ignore[return-value]


def step(move: dict[str, Any]) -> str | None:
    """Which step is asked for (None: no move), refusing two at once and a host option without its step."""
    asked = [name for name in STEPS if move[name] is not None]
    if len(asked) > 1:
        raise UsageError("give one of --move-out, --move-in and --moved")
    found = asked[0] if asked else None
    needs = {"move_out": "move_to", "moved": "move_to", "move_in": "move_from"}
    if found is not None and not move[needs[found]]:
        flag = "--" + needs[found].removeprefix("move_")
        raise UsageError(f"--{found.replace('_', '-')} needs {flag} HOST")
    return found


def fast(args: list[str]) -> int | None:
    """`chock run --move-out …` or `--moved …` read without click (chock/entry.py: a move waits on each of these
    children's start): the step's exit code, or None when `args` are not plainly these options (click reads
    them then, and explains)."""
    from chock.argv import Option, parse

    table = (
        Option("--move-out", "move_out", str, "ID", ""),
        Option("--moved", "moved", str, "ID", ""),
        Option("--to", "move_to", str, "HOST", ""),
        Option("--address", "move_address", str, "ADDR", ""),
        Option("--wait", "move_wait", float, "SECONDS", "", default=str(DEFAULT_WAIT_SECONDS)),
    )
    values = parse(args, table)
    if values is None:
        return None
    move: dict[str, Any] = {name: None for name in _NAMES} | {"move_running": False} | values
    move["move_wait"] = float(move["move_wait"])
    found = step(move)
    if found not in ("move_out", "moved"):
        return None
    return run_source_step(Layout.from_env(), move, found)


def run_source_step(layout: Layout, move: dict[str, Any], found: str) -> int:
    """Step 1 or 3: its one JSON line on stdout; a refusal is one line on stderr (chock.commands.cli)."""
    from chock.session import moving

    if found == "move_out":
        said = moving.move_out(
            layout, move["move_out"], move["move_to"], wait=move["move_wait"], say=_quiet,
            address=move["move_address"] or "",
        )  # fmt: skip
    else:
        said = {"moved": moving.moved(layout, move["moved"], move["move_to"])}
    os.write(1, (moving.json_line(said) + "\n").encode())
    return 0


def _quiet(text: str) -> None:
    """A step's progress is nobody's to read: its caller reads one line."""
