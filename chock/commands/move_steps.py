"""`chock run`'s hidden options for the steps of a move, each run by a child of a daemon
(docs/remote.md#moving-a-session):

    chock run --move-out ID --to HOST [--wait SECONDS] [--address=ADDR] [--have=COMMIT] [--kept=LENGTH:SHA256]
                                                           the source, step 1: `{"staged": {…}}` as the log and
                                                           each piece of the bundle are staged, then one JSON
                                                           line describing the parts
    chock run --move-in ID --project DIR --from HOST [--instance NAME] [--running]
                                                           the target, step 2: `{"adopted": <event id>}`, then
                                                           a running session carries on here
    chock run --moved ID --to HOST                         the source, step 3: `{"moved": <event id>}`
"""

from __future__ import annotations

import os
from typing import Any

from chock.argv import Option
from chock.commands.shared_options import DEFAULT_WAIT_SECONDS
from chock.errors import UsageError
from chock.paths import Layout

STEPS = ("move_out", "move_in", "moved")
OPTIONS = (
    Option("--move-out", "move_out", str, "ID", "Step 1 of a move, on its source.", hidden=True),
    Option("--move-in", "move_in", str, "ID", "Step 2 of a move, on its target.", hidden=True),
    Option("--moved", "moved", str, "ID", "Step 3 of a move, on its source.", hidden=True),
    Option("--to", "move_to", str, "HOST", "The host a session moves to.", hidden=True),
    Option("--from", "move_from", str, "HOST", "The host a session moves from.", hidden=True),
    Option("--address", "move_address", str, "ADDR", "Where the client reached --to.", hidden=True),
    Option("--have", "move_have", str, "COMMIT", "What --to holds: the bundle leaves it out.", hidden=True),
    Option("--kept", "move_kept", str, "LENGTH:SHA256", "What --to keeps of the log: not sent.", hidden=True),
    Option("--running", "move_running", bool, "", "It was running: carry it on.", hidden=True),
    Option("--wait", "move_wait", float, "", "Bounds each answer.", default=DEFAULT_WAIT_SECONDS, hidden=True),
)


def step(move: dict[str, Any]) -> str | None:
    """Which step the values of `chock run`'s options (`OPTIONS` among them) ask for (None: no move), refusing
    two at once and a host option without its step."""
    asked = [name for name in STEPS if move[name] is not None]
    if len(asked) > 1:
        raise UsageError("give one of --move-out, --move-in and --moved")
    found = asked[0] if asked else None
    needs = {"move_out": "move_to", "moved": "move_to", "move_in": "move_from"}
    if found is not None and not move[needs[found]]:
        flag = "--" + needs[found].removeprefix("move_")
        raise UsageError(f"--{found.replace('_', '-')} needs {flag} HOST")
    return found


def run_source_step(layout: Layout, move: dict[str, Any], found: str) -> int:
    """Step 1 or 3: its JSON lines on stdout (the last says what the step did); a refusal is one line on stderr
    (chock.commands.cli)."""
    import threading

    from chock.session import moving

    saying = threading.Lock()  # the log's part is said from a thread of its own

    def said(value: dict[str, Any]) -> None:
        with saying:
            os.write(1, (moving.json_line(value) + "\n").encode())

    if found == "move_out":
        said(
            moving.move_out(
                layout, move["move_out"], move["move_to"], wait=move["move_wait"], say=_quiet,
                address=move["move_address"] or "", have=move["move_have"] or "", kept=move["move_kept"] or "",
                staged=lambda part: said({"staged": part}),
            )
        )  # fmt: skip
    else:
        said({"moved": moving.moved(layout, move["moved"], move["move_to"])})
    return 0


def _quiet(text: str) -> None:
    """A step's progress is nobody's to read: its caller reads one line."""
