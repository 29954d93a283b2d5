"""The service manager's end of NOTIFY_SOCKET (sd_notify(3)), for a test that starts chock as systemd would.

notifications = NotifySocket(short_dir())
process = subprocess.Popen([...], env={**home.env, **notifications.env()})
assert notifications.next()[0] == "READY=1"
"""

from __future__ import annotations

import socket
from pathlib import Path

# WATCHDOG_USEC as a test sets it: a ping every 0.2 s, so one arrives within any wait a test makes.
WATCHDOG_USEC = 400_000


class NotifySocket:
    """A datagram socket at `<directory>/notify`; each datagram is one sd_notify call, read as its lines."""

    def __init__(self, directory: Path, timeout: float = 10.0) -> None:
        self.path = directory / "notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(timeout)

    def env(self) -> dict[str, str]:
        """What the manager sets for a notify service that asked for a watchdog."""
        return {"NOTIFY_SOCKET": str(self.path), "WATCHDOG_USEC": str(WATCHDOG_USEC)}

    def next(self) -> list[str]:
        return self.sock.recv(4096).decode().split("\n")

    def until_stopping(self) -> None:
        """Read up to `STOPPING=1`; only watchdog pings may come before it."""
        while (states := self.next()) != ["STOPPING=1"]:
            assert states == ["WATCHDOG=1"], states

    def close(self) -> None:
        self.sock.close()
