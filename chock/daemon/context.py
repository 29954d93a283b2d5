"""What every connection thread of the daemon shares: the layout and the daemon's parts."""

from __future__ import annotations

import threading
import time

from chock.daemon.children import Children
from chock.daemon.status import Status
from chock.paths import Layout

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from chock.daemon.watch import Hub
    from chock.log.catalog import Catalog


class Daemon:
    """The layout, the status, the children; the catalog and the watches' hub are made at the first verb that
    asks for them, so the start a client waits on imports neither (docs/architecture.md#start-up)."""

    def __init__(self, layout: Layout, status: Status, children: Children) -> None:
        self.layout = layout
        self.status = status
        self.children = children
        self._catalog: Catalog | None = None
        self._hub: Hub | None = None
        # Open connections (a watch is one), and since when there have been none (for --idle-exit).
        self._lock = threading.Lock()
        self._steering: dict[str, threading.Lock] = {}
        self.active = 0
        self.watching = 0
        self.idle_since = time.monotonic()

    @property
    def catalog(self) -> Catalog:
        """Every session of the state dir, kept current by inotify (`Catalog(watched=True)`)."""
        if self._catalog is None:
            with self._lock:
                if self._catalog is None:
                    from chock.log.catalog import Catalog

                    self._catalog = Catalog(self.layout, watched=True)
        return self._catalog

    @property
    def hub(self) -> Hub:
        """The followers of watched sessions."""
        if self._hub is None:
            with self._lock:
                if self._hub is None:
                    from chock.daemon.watch import Hub

                    self._hub = Hub(self.layout)
        return self._hub

    def opened(self) -> None:
        with self._lock:
            self.active += 1

    def closed(self) -> None:
        with self._lock:
            self.active -= 1
            if self.active == 0:
                self.idle_since = time.monotonic()

    def steering(self, session_id: str) -> threading.Lock:
        """The lock that makes one session's `say`s take turns: two at an ended session must not both try to
        carry it on (the second would find it taken and be refused instead of queued)."""
        with self._lock:
            return self._steering.setdefault(session_id, threading.Lock())

    def watch_opened(self) -> None:
        with self._lock:
            self.watching += 1

    def watch_closed(self) -> None:
        with self._lock:
            self.watching -= 1

    def idle_for(self) -> float:
        """Seconds with no connection open (a watch is a connection); 0 while any is."""
        with self._lock:
            return 0.0 if self.active else time.monotonic() - self.idle_since
