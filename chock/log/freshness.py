"""Which of the daemon's catalog entries still say what their logs hold, learnt from inotify rather than from a
stat of every log at every `list` (docs/log.md#rows-and-the-catalog).

Each log the catalog holds an entry for has a watch, and so has the sessions dir. A watch is added before the
stat that makes the entry, so a change after that stat is an event; an entry is fresh from when it is made
until an event for its session arrives, and a fresh entry is returned with no system call. What a look
could find different, and the event that says so:

    lines appended, or the log cut                    IN_MODIFY on the log
    the log unlinked, or another file renamed over it IN_ATTRIB on the log (its link count)
    the log renamed away (another may follow it)      IN_MOVE_SELF on the log
    a session's directory moved away (removal's first step, or by hand)
                                                      IN_MOVED_FROM on the sessions dir, named
    the sessions dir itself moved                     IN_MOVE_SELF on it: every entry is stale
    a log deleted, or a watch dropped                 IN_IGNORED (always sent): its entries go

Nothing else needs one: a directory is removed or a file moved into a name only after what was there went,
and a writer's close changes no byte. A new session is found by the index (`chock.log.index`), and a row's
status by the lock probe on every look. Everything inotify cannot tell is looked at with a stat, as without
it: a lost queue (IN_Q_OVERFLOW) makes every entry stale, and a session whose watch the kernel refuses (the
per-user watch limit), or past MAX_WATCHES, is never fresh.

Not thread-safe: the catalog calls it under its own lock.
"""

from __future__ import annotations

from chock.platform import inotify

# The events that say a log may not hold what its entry says (see above).
LOG_EVENTS = inotify.IN_MODIFY | inotify.IN_ATTRIB | inotify.IN_MOVE_SELF
DIR_EVENTS = inotify.IN_MOVED_FROM | inotify.IN_MOVE_SELF | inotify.IN_ONLYDIR

# The logs watched at most; the sessions past it are looked at with a stat. Watches are counted per user and
# shared with every program the user runs (editors, file managers); the kernel allows at least 8,192, so
# the daemon takes at most half of the smallest allowance.
MAX_WATCHES = 4096


class Freshness:
    """The inotify watches of one catalog, and which of its entries no event has touched since they were made."""

    def __init__(self, sessions_dir: str) -> None:
        self._sessions = sessions_dir
        self._inotify: inotify.Inotify | None = None
        self._tried = False  # whether an instance was asked for (once: without one, every entry is stale)
        self._dir = -1  # the sessions dir's watch
        self._wd: dict[str, int] = {}  # session id -> its log's watch
        self._ids: dict[int, set[str]] = {}  # watch -> the sessions whose log it is (hard links make several)
        # The looks under way, each since its watch was added: an event for the session cancels its look's
        # claim to freshness (a second look of the same session cancels the first's).
        self._looking: dict[str, object] = {}
        self.fresh: set[str] = set()
        # How many times a session has left `fresh` (or may have): ids all fresh at one count still are at the
        # same count, so a reader that checked them then need not check them again.
        self.losses = 0

    def drain(self) -> list[str]:
        """Take every queued event (without blocking); the sessions whose watch went with its log (deleted):
        the catalog lets go of their entries."""
        if self._inotify is None:
            return []
        gone: list[str] = []
        for wd, mask, name in self._inotify.read():
            if mask & inotify.IN_Q_OVERFLOW:
                self._lost()
            elif wd == self._dir:
                if name:
                    if name in self._wd:
                        self._touched(name)
                    continue
                # The sessions dir itself was removed or moved: no event about its entries reaches us now.
                if not mask & inotify.IN_IGNORED:
                    self._inotify.remove(wd)
                self._dir = -1
                self._lost()
            elif mask & inotify.IN_IGNORED:
                for session_id in self._ids.pop(wd, ()):
                    if self._wd.get(session_id) == wd:
                        del self._wd[session_id]
                        self._touched(session_id)
                        gone.append(session_id)
            else:
                for session_id in self._ids.get(wd, ()):
                    self._touched(session_id)
        return gone

    def watch(self, session_id: str, path: str) -> object | None:
        """Watch the log at `path` before it is looked at; what `made` compares with, or None when it cannot be
        watched (its entry stays stale: looked at with a stat every time)."""
        self._unfresh(session_id)
        if not self._tried:
            self._tried = True
            self._inotify = inotify.open_inotify()
        if self._inotify is None:
            return None
        if self._dir < 0:
            self._dir = self._inotify.add(self._sessions, DIR_EVENTS)
            if self._dir < 0:
                return None
        old = self._wd.get(session_id)
        wd = self._inotify.add(path, LOG_EVENTS) if old is not None or len(self._wd) < MAX_WATCHES else -1
        if old is not None and old != wd:
            self._unwatch(session_id, old)
        if wd < 0:
            self._looking.pop(session_id, None)
            return None
        self._wd[session_id] = wd
        self._ids.setdefault(wd, set()).add(session_id)
        token = self._looking[session_id] = object()
        return token

    def made(self, session_id: str, token: object | None) -> None:
        """The entry of `session_id` was made from a look after `watch` gave `token`: fresh, unless an event
        for it (or a loss of everything, or another look of it) has been taken since."""
        if token is not None and self._looking.get(session_id) is token:
            del self._looking[session_id]
            self.fresh.add(session_id)
        else:
            self._unfresh(session_id)

    def forget(self, session_id: str) -> None:
        """The session has no log any more: its watch goes with its entry."""
        self._unfresh(session_id)
        self._looking.pop(session_id, None)
        wd = self._wd.get(session_id)
        if wd is not None:
            self._unwatch(session_id, wd)

    def _unwatch(self, session_id: str, wd: int) -> None:
        if self._wd.get(session_id) == wd:
            del self._wd[session_id]
        ids = self._ids.get(wd)
        if ids is not None:
            ids.discard(session_id)
            if not ids:
                del self._ids[wd]
                assert self._inotify is not None
                self._inotify.remove(wd)

    def _touched(self, session_id: str) -> None:
        self._looking.pop(session_id, None)
        self._unfresh(session_id)

    def _unfresh(self, session_id: str) -> None:
        self.fresh.discard(session_id)
        self.losses += 1

    def _lost(self) -> None:
        self._looking.clear()
        self.fresh.clear()
        self.losses += 1
