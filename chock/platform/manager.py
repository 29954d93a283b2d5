"""What the daemon and serve ask of the service manager they run under, in one place.

The platform modules do the work: `chock.platform.systemd` (LISTEN_FDS adoption, sd_notify, transient
scope units over D-Bus) and, on macOS, `chock.platform.launchd` (`launch_activate_socket`). This module
only chooses between them and stays quiet where neither applies: no socket activation means no sockets
handed over, no NOTIFY_SOCKET means no notifications, no user manager means children in their own process
group. Imports are lazy: a socket-activated start should pay only for what it uses.
"""

from __future__ import annotations

import sys
from types import ModuleType

SLICE = "app-chock.slice"


def _systemd() -> ModuleType | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        from chock.platform import systemd
    except ImportError:
        return None
    return systemd


def notify(*states: str) -> None:
    """sd_notify of `states` in one datagram ("READY=1", "STATUS=…"); nothing without NOTIFY_SOCKET."""
    systemd = _systemd()
    if systemd is not None:
        systemd.notify(*states)


def watchdog_interval() -> float | None:
    """Seconds within which the manager wants `WATCHDOG=1`, when it asked for it (WATCHDOG_USEC)."""
    systemd = _systemd()
    return None if systemd is None else systemd.watchdog_interval()


def under_user_manager() -> bool:
    systemd = _systemd()
    return systemd is not None and systemd.under_user_manager()


def scope_unit(session_id: str) -> str:
    return f"chock-session-{session_id}.scope"


def move_to_scope(pid: int, session_id: str) -> None:
    """Put a session child in its own transient scope, so the daemon's restart leaves it running.

    Raises ChockError when the manager refuses.
    """
    systemd = _systemd()
    if systemd is None:
        return
    systemd.move_to_scope(pid, scope_unit(session_id), description=f"chock session {session_id}", slice=SLICE)
