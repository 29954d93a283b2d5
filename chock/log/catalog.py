"""Every session in the state dir as a row: what `chock sessions`, `chock usage`, `chock workspace`,
`chock detach`, `chock run --continue` (to find the newest session) and the daemon's `list` read.

One catalog serves them all. Per session it keeps the log's identity (device, inode), the offset of the end
of the last complete line it has folded, and the row fold up to there (`chock.log.row.RowState`); a later
look folds only the bytes appended since. A torn tail is never folded (it is read again once it is whole);
a log that shrank or was replaced is folded again from its start. Rows are written to the cache dir
(`chock.log.rowcache`) by a session's owner as it lets go of the log (`remember`), and by a reader when a
session has ended and at most every CACHE_EVERY seconds while it runs, so a new process starts where the
last one left off; a project's sessions are found through the index by project (`chock.log.index`), so
listing one project never reads another's logs.

The daemon's catalog (`watched=True`) learns which logs changed from inotify (`chock.log.freshness`): an entry
no event has touched since it was made is returned with no system call, and only the others are looked at
with a stat. A one-shot reader looks at each log once anyway, and stats it.

A row's status needs the log's lock as well as the fold (a session with no end after its latest start or
adopt is running while its owner holds the lock, abandoned once nobody does): that probe is made on
every look, and not at all for a session whose log says how it ended (docs/log.md#rows-and-the-catalog).
"""

from __future__ import annotations

import operator
import os
import stat
import threading
import time
from collections.abc import Callable

from chock.log import rowcache
from chock.log.folding import covers, fold_log, folded
from chock.log.index import ProjectIndex, key_of
from chock.log.reader import owner_alive
from chock.log.row import RowState
from chock.log.rowcache import OWNER_WAIT, Cached, Snapshot
from chock.paths import Layout, check_session_id

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from chock.log import cold_fold
    from chock.log.freshness import Freshness

# A listing that must fold at least this many logs from their start (no row of them here or in the cache) folds them
# with a second hand, a child process (chock.log.cold_fold), when it may keep a second CPU busy: the child's start
# (about 50 ms) costs what folding a few hundred logs does.
COLD_FOLD_AT = 256

# A project's cached rows are rewritten for a running session at most this often (at once for a session
# that has ended or is new to the cache): a restarted reader then folds at most this many seconds of a
# running log, and a busy session costs one small file write per interval.
CACHE_EVERY = 5.0


class Entry(Cached):
    """One session as the catalog last saw it. Never changed once made (a later look makes a new one), so
    a thread reading it needs no lock; `lines` memoises what a reader derives from the row."""

    __slots__ = ("lines", "session_id")

    def __init__(
        self,
        session_id: str,
        identity: tuple[int, int],
        mtime: int,
        offset: int,
        state: RowState,
        project_real: str,
    ) -> None:
        super().__init__(identity, mtime, offset, state, project_real)
        self.session_id = session_id
        self.lines: dict[tuple[bool, str], bytes] = {}

    def row(self, alive: bool) -> dict[str, Any]:
        return self.state.row(alive)

    def line(self, alive: bool, encode: Callable[[str, dict[str, Any]], bytes]) -> bytes:
        """`encode(started_at, row)` for this entry, made once per status (the daemon's `list` line). Whether
        an abandoned session is free is asked on every look: it changes with the process table, not the log."""
        state = self.state
        interrupted = "" if alive or state.ended else state.interrupted()
        line = self.lines.get((alive, interrupted))
        if line is None:
            line = self.lines[(alive, interrupted)] = encode(state.started_at, state.row(alive, interrupted))
        return line


class Catalog:
    """The sessions of one state dir. Safe to share between threads."""

    def __init__(self, layout: Layout, *, cache: bool = True, watched: bool = False) -> None:
        # Paths as strings: a listing builds one per session, and pathlib would be its largest cost.
        self._sessions = layout.sessions_text
        self._cache = layout.rows_text if cache else None
        self._entries: dict[str, Entry] = {}
        self._changes = 0  # how many times `_entries` has been changed (watched: see `_fresh`)
        # With `watched` (the daemon's: it lists again and again), which entries no event has touched, made at
        # the first look; the lock keeps its bookkeeping and `_entries` in step.
        self._watched = watched
        self._freshness: Freshness | None = None
        self._lock = threading.Lock()
        self.index = ProjectIndex(self._sessions, self._cache)
        # What the cache dir holds of each project (as read, or as last written here).
        self._disk: dict[str, Snapshot] = {}
        self._refused: dict[str, tuple[tuple[int, int], int]] = {}  # id -> the cached row the log refused
        self._saving = threading.Lock()
        # Each project path a log names, resolved: made again for every listing (a symlink may be moved between
        # two), once per path within one (its logs all name the same path).
        self._reals: dict[str, str] = {}
        # The project keys whose cache file this listing has asked `rowcache.changed` about: once per listing
        # (a file an owner writes during it serves the next one; until then its sessions' logs are folded).
        self._checked: set[str] = set()
        # Per project key, its last listing: what the look found, whether the cache check then left nothing
        # for time to change, the entries as listed, and (once made, when every session has ended) the reply.
        self._listed: dict[str, LastListing] = {}

    def _log(self, session_id: str) -> str:
        """The log's path, for an id already checked (the index's, an entry's)."""
        return f"{self._sessions}/{session_id}/log.jsonl"

    def alive(self, entry: Entry) -> bool:
        """The lock probe, skipped when the log already says how the session ended."""
        return False if entry.state.ended else owner_alive(self._log(entry.session_id))

    def entry(self, session_id: str) -> Entry | None:
        """The session as its log says now, or None when it has no log (yet, or any more)."""
        check_session_id(session_id)
        return self._looks([session_id], None)[0]

    def of_project(self, project: str | os.PathLike[str]) -> list[Entry]:
        """The sessions of `project` (compared by resolved real path), oldest first."""
        return list(self._listing(project)[0].entries)

    def reply(self, project: str | os.PathLike[str], encode: Callable[[str, dict[str, Any]], bytes]) -> bytes:
        """The daemon's `list` of `project`: `Entry.line` of each session, oldest first. Made once for a listing
        that finds every entry as the last one did and every session ended (no line of it can change then)."""
        return self.reply_then_save(project, encode, defer=False)[0]

    def warm_reply(
        self, project: str | os.PathLike[str], encode: Callable[[str, dict[str, Any]], bytes]
    ) -> bytes | None:
        """`reply`, when it is answered from memory (`warm`); else None, and nothing was read. The last listing's
        own reply when this look finds the very entries it found (`_listing`'s rule), which is checked once and
        then again only once an entry has changed or left `fresh`, or the project's ids are not the ones checked."""
        real = _resolved(os.fspath(project))
        key = key_of(real)
        last = self._listed.get(key)
        if last is not None and (last.reply is None or not last.settled or last.real != real):
            last = None  # no reply of its own to answer with
        found = self._fresh(key, last)
        if found is None:
            return None
        if last is not None and found is last.found:
            return last.reply
        return self.reply_then_save(project, encode, defer=False, real=real)[0]

    def reply_then_save(
        self,
        project: str | os.PathLike[str],
        encode: Callable[[str, dict[str, Any]], bytes],
        *,
        defer: bool = True,
        real: str | None = None,
    ) -> tuple[bytes, Callable[[], object]]:
        """`reply`, and what writes the cache of what it found (nothing, when nothing is due): the daemon's cold
        `list` calls it once its reply is sent, so a client never waits on the cache. `real` is `project`
        resolved, when the caller has just resolved it."""
        listed, save = self._listing(project, defer=defer, real=real)
        if listed.reply is None:
            entries = listed.entries
            data = b"".join([entry.line(self.alive(entry), encode) for entry in entries])
            if all(entry.state.ended for entry in entries):
                listed.reply = data
        return listed.reply if listed.reply is not None else data, save

    def _listing(
        self, project: str | os.PathLike[str], *, defer: bool = False, real: str | None = None
    ) -> tuple[LastListing, Callable[[], object]]:
        """The listing of `project`: the last one when the look found the same entries and its cache check
        left nothing for time to change (then neither the check nor the sort would give anything else). With
        `defer`, the cache is written by the function returned with it, else before this returns."""
        if real is None:
            real = os.path.realpath(project)
        key = key_of(real)
        found = [entry for entry in self._looks(self.index.sessions_of(real), key) if entry is not None]
        last = self._listed.get(key)
        if last is not None and last.settled and last.real == real and _same(last.found, found):
            return last, _nothing
        entries = [entry for entry in found if entry.project_real == real]
        foreign = frozenset(entry.session_id for entry in found if entry.project_real != real)
        if defer:
            # Not settled yet: the next listing checks the cache again (and finds it written, or writes it).
            listed = self._listed[key] = LastListing(real, found, False, sorted(entries, key=started))
            return listed, lambda: self._save(key, entries, foreign)
        settled = self._save(key, entries, foreign)
        listed = self._listed[key] = LastListing(real, found, settled, sorted(entries, key=started))
        return listed, _nothing

    def warm(self, project: str | os.PathLike[str]) -> bool:
        """Whether `of_project(project)` answers from memory now: the index holds the project's ids as the
        sessions dir is, and no event has touched any of its entries (watched). A listing that is not warm
        reads files: the daemon makes it in a thread, never in its selector loop."""
        return self._fresh(key_of(os.path.realpath(project))) is not None

    def _fresh(self, key: str, last: LastListing | None = None) -> list[Entry] | None:
        """The entries of the sessions of the project `key` (foreign ones among them, as `_looks` finds them) when
        they answer from memory: the index holds its ids as the sessions dir is, and each is held and fresh; else
        None. `last.found` itself when they are its entries, checked as they are now, or no entry has changed nor
        left `fresh` since the same ids were checked so."""
        if self._freshness is None or self._saving.locked():  # a cache being written: the loop would wait for it
            return None
        ids = self.index.current(key)
        if ids is None:
            return None
        with self._lock:
            freshness = self._freshness
            for session_id in freshness.drain():
                self._entries.pop(session_id, None)
            checked = (freshness.losses, self._changes, ids)
            if last is not None and last.checked == checked:
                return last.found
            if not freshness.fresh.issuperset(ids):
                return None
            got = list(map(self._entries.get, ids))
            if not all(got):
                return None
            found: list[Entry] = got  # type: ignore[assignment]  # all(got): an entry is true, None is not
            if last is not None and _same(last.found, found):
                last.checked = checked
                return last.found
        return found

    def every(self) -> list[Entry]:
        """Every session of the state dir, oldest first."""
        entries = []
        for key, ids in self.index.every().items():
            group = [entry for entry in self._looks(ids, key) if entry is not None]
            self._save(key, group)
            entries += group
        return sorted(entries, key=started)

    def newest(self, project: str | os.PathLike[str], *, running: bool = False) -> str | None:
        """The newest session of `project` (only a running or waiting one, with running=True)."""
        for entry in reversed(self.of_project(project)):
            if not running or self.alive(entry):
                return entry.session_id
        return None

    # Looking, and folding -------------------------------------------------------------------------------

    def _looks(self, ids: list[str], key: str | None) -> list[Entry | None]:
        """The sessions `ids` (checked ids, of project `key` when known) now: the fresh entries as they are
        (watched), a look at each of the others."""
        self._reals, self._checked = {}, set()
        if not self._watched:
            return self._look_each(ids, key, [None] * len(ids))
        with self._lock:
            freshness = self._freshness
            if freshness is None:
                # Lazily: neither a one-shot reader nor the daemon's start-up pays for what it has no use for yet.
                from chock.log.freshness import Freshness

                freshness = self._freshness = Freshness(self._sessions)
            for session_id in freshness.drain():
                self._entries.pop(session_id, None)
            fresh, entries = freshness.fresh, self._entries
            if fresh.issuperset(ids):  # the warm listing's case: every one held, fresh
                found = list(map(entries.get, ids))
                if None not in found:
                    return found  # None is not in it
            else:
                found = [entries.get(session_id) if session_id in fresh else None for session_id in ids]
        return self._look_each(ids, key, found)

    def _look_each(self, ids: list[str], key: str | None, found: list[Entry | None]) -> list[Entry | None]:
        """Each of `found`, and a look at each session it has no entry for; when many of those have no row
        anywhere, with a helper folding them from the far end (chock.log.cold_fold)."""
        helper = self._helper(ids, key, found)
        take = helper.take if helper is not None else _nothing_given
        try:
            return [
                entry if entry is not None else self._look(session_id, key, take(session_id))
                for session_id, entry in zip(ids, found, strict=True)
            ]
        finally:
            if helper is not None:
                helper.close()

    def _helper(self, ids: list[str], key: str | None, found: list[Entry | None]) -> cold_fold.Helper | None:
        """A helper folding, last first, the sessions of `ids` no row covers (neither this catalog's nor the cache's),
        when there are enough of them to be worth it."""
        if len(ids) < COLD_FOLD_AT:
            return None
        from chock.platform.host import cpus

        entries = self._entries
        cold = [i for i, entry in zip(ids, found, strict=True) if entry is None and i not in entries]
        if len(cold) < COLD_FOLD_AT or cpus() < 2:
            return None
        if key and self._cache is not None:
            held = self._project_cache(key).rows.ids()
            cold = [session_id for session_id in cold if session_id not in held]
            if len(cold) < COLD_FOLD_AT:
                return None
        from chock.log import cold_fold  # pickle and subprocess, for a listing this big only

        return cold_fold.start(self._sessions, cold[::-1])

    def _look(self, session_id: str, key: str | None, helped: Cached | None = None) -> Entry | None:
        """The session now: what this catalog holds when the log has not grown, else the fold of what the
        log holds past what it (or the row a helper gave, or the cache) covers."""
        path = self._log(session_id)
        token = None
        if self._freshness is not None:
            with self._lock:  # watched before the stat: a change after it is an event
                token = self._freshness.watch(session_id, path)
        old = self._entries.get(session_id)
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._forget(session_id)
            return None
        identity = (info.st_dev, info.st_ino)
        if old is not None and old.identity == identity and old.offset == info.st_size:
            return self._keep(old, token)
        base: Cached | None = (
            old if old is not None and old.identity == identity and old.offset <= info.st_size else None
        )
        cached = None
        if base is None:
            if helped is not None:
                base = helped
            elif self._cache is not None:
                if key is None:
                    key = self.index.project_of(session_id)
                base = cached = self._cached(key, session_id, info) if key else None
            if base is not None and covers(base, info):  # the log is as it was when that row was made: nothing to read
                return self._keep(_entry(session_id, base), token)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._forget(session_id)
            return None
        try:
            row, based = fold_log(session_id, fd, base, self._real)
        finally:
            os.close(fd)
        entry = _entry(session_id, row)
        if cached is not None and not based:
            # The cache disagrees with the log: the next save rewrites that row (while it is still this one).
            self._refused[session_id] = (cached.identity, cached.offset)
        return self._keep(entry, token)

    def _real(self, project: str) -> str:
        """`project` resolved, once per listing."""
        real = self._reals.get(project)
        if real is None:
            real = self._reals[project] = os.path.realpath(project)
        return real

    def _keep(self, entry: Entry, token: object | None) -> Entry:
        """Hold `entry` as the session's, fresh when no event came since the watch that gave `token`."""
        if self._freshness is None:
            self._entries[entry.session_id] = entry
            return entry
        with self._lock:
            self._entries[entry.session_id] = entry
            self._changes += 1
            self._freshness.made(entry.session_id, token)
        return entry

    def _forget(self, session_id: str) -> None:
        """The session has no log (any more): its entry goes, and its watch with it."""
        if self._freshness is None:
            self._entries.pop(session_id, None)
            return
        with self._lock:
            self._entries.pop(session_id, None)
            self._changes += 1
            self._freshness.forget(session_id)

    # The cache ------------------------------------------------------------------------------------------

    def _project_cache(self, key: str) -> Snapshot:
        found = self._disk.get(key)
        if found is None:
            assert self._cache is not None
            found = self._disk[key] = rowcache.read(self._cache, key)
        return found

    def _cached(self, key: str, session_id: str, info: os.stat_result) -> Cached | None:
        """The cached row of a session this catalog holds none of; the file is read again when it does not
        cover the log and someone wrote the file since it was read here (an owner that let go of its log), which
        is asked once per listing."""
        assert self._cache is not None
        snapshot = self._project_cache(key)
        cached = snapshot.rows.get(session_id)
        if (cached is None or not covers(cached, info)) and key not in self._checked:
            self._checked.add(key)
            if rowcache.changed(self._cache, key, snapshot):
                snapshot = self._disk[key] = rowcache.read(self._cache, key)
                cached = snapshot.rows.get(session_id)
        return cached

    def _save(self, key: str, entries: list[Entry], foreign: frozenset[str] = frozenset()) -> bool:
        """Write the project's cached rows when they cover less than `entries` (what a look found of it): at
        once for a session that ended or is new to the cache, at most every CACHE_EVERY seconds for one that
        grew while it runs. A cached row goes when its log is gone or, `foreign`, names another project. Whether
        the cache was found to hold what `entries` say already (the same check later, with nothing else changed,
        would find it so again)."""
        if self._cache is None or not key:
            return True
        with self._saving:
            disk = self._project_cache(key)
            due = time.time() - disk.since >= CACHE_EVERY
            urgent = stale = False
            for entry in entries:
                cached = disk.rows.head(entry.session_id)
                if cached is None or entry.session_id in self._refused:
                    urgent = urgent or entry.offset > 0
                elif cached[2] != entry.offset:
                    urgent = urgent or entry.state.ended
                    stale = True
            if not (urgent or (stale and due) or (due and len(disk.rows) > len(entries))):
                return not (urgent or stale or len(disk.rows) > len(entries))
            rows = {entry.session_id: entry for entry in entries if entry.offset > 0}
            written = rowcache.merge(
                self._cache,
                key,
                rows,
                known=disk,
                gone=lambda session_id: session_id in foreign or not os.path.exists(self._log(session_id)),
                force={session_id: self._refused[session_id] for session_id in rows if session_id in self._refused},
            )
            self._listed.pop(key, None)  # what the cache holds may have changed: the next listing checks again
            if written is not None:
                self._disk[key] = written
                for session_id in rows:
                    self._refused.pop(session_id, None)
            return False  # written (or not, when another process held the lock): checked again next time

    def record(self, session_id: str, fd: int, row: RowState | None, end: int) -> None:
        """Write one session's row to the cache, as its owner lets go of the log (`fd`, still locked): `row`
        is the row fold of every line of the log up to `end`, where the lines the owner wrote end, when it wrote
        them all (nothing is read then); what the log holds past `end` (a line another writer added before the
        owner let go), or without `row` past what the cache covers, is folded now. The file's size is never
        taken for `end`: a row that claimed a line it never folded would hide it from every reader."""
        if self._cache is None:
            return
        if row is not None:
            with self._lock:
                self._entries[session_id] = _entry(session_id, folded(session_id, os.fstat(fd), end, row.copy()))
                self._changes += 1
        entry = self.entry(session_id)
        if entry is None or not entry.project_real or not entry.offset:
            return
        key = key_of(entry.project_real)
        with self._saving:
            known = self._disk.get(key)
            written = rowcache.merge(
                self._cache, key, {session_id: entry}, known=known, force={session_id: None}, wait=OWNER_WAIT
            )
            self._listed.pop(key, None)
            if written is not None:
                self._disk[key] = written


class LastListing:
    """One listing of a project (`Catalog._listing`)."""

    __slots__ = ("checked", "entries", "found", "real", "reply", "settled")

    def __init__(self, real: str, found: list[Entry], settled: bool, entries: list[Entry]) -> None:
        self.real = real
        self.found = found
        self.settled = settled
        self.entries = entries
        self.reply: bytes | None = None
        # When a warm look last found `found` as they are (`Catalog._fresh`): the freshness losses and changes of
        # entries then, and the ids it looked for.
        self.checked: tuple[int, int, list[str]] | None = None


def _nothing() -> None:
    """Nothing left to save."""


def _resolved(path: str) -> str:
    """`os.path.realpath(path)`, in one lstat a component for the usual project path: absolute, normal, and no
    symlink on the way (then it is its own real path); any other is left to realpath."""
    if path.startswith("/") and not path.startswith("//") and path == os.path.normpath(path):
        at = 0
        try:
            while at >= 0:
                at = path.find("/", at + 1)
                if stat.S_ISLNK(os.lstat(path if at < 0 else path[:at]).st_mode):
                    break
            else:
                return path
        except OSError:
            pass
    return os.path.realpath(path)


def _same(old: list[Entry], new: list[Entry]) -> bool:
    """Whether a look found the very entries it found before (an entry is never changed: a new look makes a new
    one)."""
    return len(old) == len(new) and all(map(operator.is_, old, new))


def _nothing_given(session_id: str) -> None:
    """No helper's row of the session: a listing folding alone."""


def _entry(session_id: str, row: Cached) -> Entry:
    return Entry(session_id, row.identity, row.mtime, row.offset, row.state, row.project_real)


# For the commands: one look at the state dir each -------------------------------------------------------


def started(entry: Entry) -> tuple[str, str]:
    """The order of sessions, oldest first: when each started (to the millisecond), then its id, so two started in
    one second keep their order (an id holds only the second)."""
    return entry.state.started_at, entry.session_id


def rows(layout: Layout, project: Path | str) -> list[dict[str, Any]]:
    """The rows of `project`'s sessions, oldest first."""
    catalog = Catalog(layout)
    return [entry.row(catalog.alive(entry)) for entry in catalog.of_project(project)]


def states(layout: Layout, project: Path | str | None = None) -> list[tuple[RowState, bool]]:
    """The row fold of each session of `project` (every session's, with None) and whether its owner is alive,
    oldest first."""
    catalog = Catalog(layout)
    entries = catalog.every() if project is None else catalog.of_project(project)
    return [(entry.state, catalog.alive(entry)) for entry in entries]


def load(layout: Layout, session_id: str) -> tuple[RowState, bool] | None:
    """One session's row fold and whether its owner is alive; None when it has no log."""
    catalog = Catalog(layout)
    entry = catalog.entry(session_id)
    return None if entry is None else (entry.state, catalog.alive(entry))


def remember(layout: Layout, session_id: str, fd: int, row: RowState | None, end: int) -> None:
    """What the owner of a session's log does as it lets go of it: write the session's row to the cache, so
    no reader folds this log again (`Catalog.record`)."""
    Catalog(layout).record(session_id, fd, row, end)


def newest(layout: Layout, project: Path | str, *, running: bool = False) -> str | None:
    """The newest session of `project` (only a running or waiting one, with running=True)."""
    return Catalog(layout).newest(project, running=running)
