"""What `chock run` asks of a session's start (chock/session/start.py): a task, a `--continue`, an adoption, or a
move's arrival, with the options that say how."""

from __future__ import annotations

from chock.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


class RunRequest(Value):
    __slots__ = (
        "adopt_id", "after_reboot", "allow_dirty", "continue_id", "for_daemon", "force", "instance", "interactive",
        "message", "model", "move_in", "project", "session_id", "yes"
    )  # fmt: skip

    def __init__(
        self, message: str | None = None, project: Path | None = None, instance: str | None = None,
        model: str | None = None, allow_dirty: bool = False, yes: bool = False, continue_id: str | None = None,
        adopt_id: str | None = None, session_id: str | None = None, interactive: bool = False,
        for_daemon: bool = False, after_reboot: bool = False, force: bool = False, move_in: MoveIn | None = None
    ) -> None:  # fmt: skip
        self.message = message
        self.project = project
        self.instance = instance
        self.model = model
        self.allow_dirty = allow_dirty
        self.yes = yes
        self.continue_id = continue_id  # "" means: the newest session of this project
        self.adopt_id = adopt_id
        self.session_id = session_id
        self.interactive = interactive
        self.for_daemon = for_daemon  # a child of the daemon carrying an ended session on for a `say`
        self.after_reboot = after_reboot  # a child of the daemon carrying on a session a reboot interrupted
        self.force = force  # take back a session moved out to a host that cannot say it does not hold it
        self.move_in = move_in  # a moved session this host receives (docs/remote.md#moving-a-session)


class MoveIn(Value):
    """`chock run --move-in ID --project DIR --from HOST [--running]`: what the daemon's child is given."""

    __slots__ = ("running", "session_id", "source")

    def __init__(self, session_id: str, source: str, running: bool) -> None:
        self.session_id = session_id
        self.source = source  # the host it comes from
        self.running = running  # it was running there: it carries on here
