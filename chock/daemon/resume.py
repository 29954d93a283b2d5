"""After a reboot: the sessions the daemon owned that a reboot interrupted are carried on as its children
(docs/architecture.md#after-a-reboot), when config.zon says `.after_reboot = "resume"`.

At its start the daemon looks once, in a thread of its own (a client waiting on the start never waits on
this), for every session whose latest span the daemon owned, has no end, has its lock free, and was
provably interrupted by a reboot (`RowState.interrupted`), and carries each on with `chock run --continue ID
--after-reboot`: the child logs `session.adopt {via: daemon, after: reboot}` and follows the daemon's own
`.approvals`, never the `--yes` the session was started with. A session is tried at most once per interrupted
span: the span's owner (boot, pid, start time) is written to `sessions/<id>/after-reboot` before its child is
spawned, so a child that fails is not spawned again at the next start; a person takes that one with
`chock run --continue`.
"""

from __future__ import annotations

import os
import threading

from chock.daemon.children import Refusal
from chock.daemon.context import Daemon

# What names the setting in config.zon: a file that does not mention it lists (the default), and the
# daemon's start then reads neither the config nor a log (docs/architecture.md#start-up).
SETTING = b"after_reboot"


def after_start(daemon: Daemon) -> threading.Thread | None:
    """Carry on, in a thread, what a reboot interrupted, when config.zon asks for it."""
    try:
        with open(daemon.layout.config_file, "rb") as handle:
            mentioned = SETTING in handle.read()
    except OSError:
        return None
    if not mentioned:
        return None
    thread = threading.Thread(target=_resume_all, args=(daemon,), name="after-reboot", daemon=True)
    thread.start()
    return thread


def _resume_all(daemon: Daemon) -> None:
    try:
        from chock.config import load_config

        if load_config(daemon.layout.config).after_reboot != "resume":
            return
        catalog = daemon.catalog
        interrupted = [
            entry
            for entry in catalog.every()
            if entry.state.owner == "daemon" and not catalog.alive(entry) and entry.state.interrupted() == "reboot"
        ]
    except Exception as error:  # a config refused, a state dir unreadable: recorded, and the daemon serves on
        daemon.status.error("after-reboot", error)
        return
    for entry in interrupted:
        state = entry.state
        marker = daemon.layout.session_dir(entry.session_id) / "after-reboot"
        span = f"{state.owner_boot} {state.owner_pid} {state.owner_pid_start}\n"
        try:
            with open(marker, encoding="utf-8") as handle:
                if handle.read() == span:
                    continue  # tried once already for this span
        except OSError:
            pass
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, span.encode())
            finally:
                os.close(fd)
            daemon.children.resume(entry.session_id, state.project, state.last_event_id)
        except (Refusal, OSError) as error:
            daemon.status.error("after-reboot", error)
