"""A project's sessions without reading other projects' logs: the state dir's sessions, indexed by project.

A session's project is named by the first line of its log (`session.start {project}`), compared by its
resolved real path. That line is read once per session; the mapping lives in the cache dir beside the
cached rows (`chock.log.rowcache`):

    listing.json          every project's key (the project's path, escaped) -> its session ids, and the ids
                          whose log has no complete first line yet (pending)
    projects/<key>.json   one project's session ids
    stamp.json            the sessions dir's mtime the files above reflect, the keys that have a file,
                          and the ids whose log has no complete first line yet

Listing one project reads `stamp.json` and that project's file, plus the first line of any session still
pending: its cost does not grow with other projects' sessions. Sessions come and go only as entries of the
sessions dir, which move its mtime, so a stamp whose mtime is the directory's is current — unless the
listing was made within RACY_NS of that mtime (a session made in the same clock tick, after the listing,
leaves the mtime where it was): then the next reader lists again — a reader holding its own listing in memory
(the daemon) compares the names with it, and writes nothing unless they differ or its listing is the first past
RACY_NS (which writes the stamp other readers then trust). Writers list and write under
`index.lock`, one at a time, and write what differs from `listing.json`, so a slower writer never puts
back an older listing; a reader that finds the lock taken lists for itself and writes nothing. A project
file the stamp names that is missing or unreadable makes the next reader list again and rewrite every file:
a damaged cache loses to the sessions dir.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

from chock.log.events import MAX_EVENT_BYTES, decode
from chock.log.rowcache import locked, read_json, write_json
from chock.paths import is_session_id, path_name

VERSION = 2

# A session a move brought here names its project (its adopt's, never the log's first line) in this file of its
# directory, one line.
MOVED_PROJECT = "project"

# A listing made this soon after the directory's last change may have missed a change in the same tick
# of the file system's clock (Linux stamps mtimes from a clock that moves every few milliseconds); a full
# second also covers file systems that keep whole seconds.
RACY_NS = 1_000_000_000


def key_of(project_real: str) -> str:
    """The index's name for a project ("" for a log that names none: it belongs to no project)."""
    return path_name(project_real) if project_real else ""


class ProjectIndex:
    """The session ids of each project of one state dir, kept current by the sessions dir's mtime."""

    def __init__(self, sessions_dir: str, cache_dir: str | None) -> None:
        self._sessions = sessions_dir
        self._dir = cache_dir  # where the index is kept between processes; None: in memory only
        self._lock = threading.Lock()
        self._mtime: int | None = None  # the sessions dir's mtime that the memory reflects
        self._trusted = False  # that mtime was not racy when it was listed
        self._keys: dict[str, str | None] | None = None  # every id -> key (None: pending), once listed here
        self._projects: dict[str, list[str]] = {}  # key -> ids, for the projects known so far
        self._filed: set[str] = set()  # the keys the stamp says have a file
        self._pending: list[str] = []  # ids whose log has no complete first line yet
        # The key of each project path a first line has named, so a listing resolves each path once. Kept
        # for the object's life: a daemon's index, or a single command's.
        self._resolved: dict[str, str] = {}

    def sessions_of(self, project_real: str) -> list[str]:
        """The ids of `project_real`'s sessions, oldest first (ids sort by their start time)."""
        key = key_of(project_real)
        with self._lock:
            if not self._update() or not key:
                return []
            return list(self._project(key))

    def current(self, key: str) -> list[str] | None:
        """The ids of the sessions of the project `key` (`key_of` its real path) when the memory already holds them
        as the sessions dir is now (a stat, no file read); None when `sessions_of` would list the directory or read
        a file first."""
        with self._lock:
            try:
                mtime = os.stat(self._sessions).st_mtime_ns
            except OSError:
                return None
            if mtime != self._mtime or not self._trusted or self._pending or not key:
                return None
            ids = self._projects.get(key)
            if ids is None and self._keys is not None:
                return []  # listed here, and no session of that project
            return None if ids is None else list(ids)

    def project_of(self, session_id: str) -> str | None:
        """The key of one session's project ("" for none; None while its log has no complete first line)."""
        with self._lock:
            known = self._keys.get(session_id) if self._keys is not None else None
        return known if known is not None else self._first_key(session_id)

    def every(self) -> dict[str, list[str]]:
        """Every session whose log has a first line, by its project's key ("" for a log that names none)."""
        with self._lock:
            if not self._update():
                return {}
            if self._keys is None:
                self._list()
            assert self._keys is not None
            return {**self._projects, "": sorted(i for i, key in self._keys.items() if key == "")}

    # Keeping the memory current ------------------------------------------------------------------------

    def _update(self) -> bool:
        """Bring the memory up to the sessions dir; False when there is no sessions dir."""
        try:
            mtime = os.stat(self._sessions).st_mtime_ns
        except FileNotFoundError:
            self._mtime, self._keys, self._projects, self._pending = None, {}, {}, []
            return False
        if self._mtime == mtime and not self._trusted and self._keys is not None:
            self._confirm(mtime)
        elif self._mtime != mtime or not self._trusted:
            stamp = self._read_stamp()
            if stamp is not None and stamp[0] == mtime and _trusted(stamp[0], stamp[1]):
                if self._mtime != mtime:
                    self._keys, self._projects = None, {}
                self._mtime, self._trusted, self._filed, self._pending = mtime, True, stamp[2], stamp[3]
            else:
                self._list()
        if self._pending and any(self._first_key(session_id) is not None for session_id in self._pending):
            self._list()
        return True

    def _list(self, *, rewrite: bool = False) -> None:
        """List the sessions dir, read the first line of each session not known yet, and write the index
        (every file of it with `rewrite`)."""
        with self._locked() as writable:
            mtime = os.stat(self._sessions).st_mtime_ns  # before the listing: a later change moves it on
            listed_at = time.time_ns()  # before it too: begun past RACY_NS, it misses nothing of that tick
            names = [name for name in os.listdir(self._sessions) if is_session_id(name)]
            filed = self._read_listing() if self._dir is not None else {}
            known = self._keys if self._keys is not None else filed
            keys = {}
            for session_id in sorted(names):
                key = known.get(session_id)
                keys[session_id] = key if key is not None else self._first_key(session_id)
            projects = _by_project(keys)
            pending = [session_id for session_id, key in keys.items() if key is None]
            if writable:
                before = {} if rewrite else _by_project(filed)
                for key in projects.keys() | before.keys():
                    if rewrite or projects.get(key) != before.get(key):
                        write_json(f"{self._dir}/projects/{key}.json", {"v": VERSION, "ids": projects.get(key, [])})
                if rewrite or keys != filed:
                    write_json(f"{self._dir}/listing.json", _listing(keys))
                write_json(
                    f"{self._dir}/stamp.json",
                    {"v": VERSION, "mtime": mtime, "at": listed_at, "filed": sorted(projects), "pending": pending},
                )
        self._mtime, self._trusted = mtime, _trusted(mtime, listed_at)
        self._keys, self._projects, self._filed, self._pending = keys, projects, set(projects), pending

    def _confirm(self, mtime: int) -> None:
        """The memory is this object's own listing of the directory at `mtime`, made too soon after it to be
        trusted: list the names again. The same names, while it is still too soon, are the same index, and
        nothing is written; other names, or the first listing past RACY_NS, are listed and written as ever
        (what differs, and the stamp, which other readers then trust too)."""
        assert self._keys is not None
        listed_at = time.time_ns()
        names = {name for name in os.listdir(self._sessions) if is_session_id(name)}
        if names != self._keys.keys() or _trusted(mtime, listed_at):
            self._list()

    def _first_key(self, session_id: str) -> str | None:
        """The key of the project the log's first line names — or, for a session a move brought here, the one
        its `project` file names (its adopt's: docs/remote.md#moving-a-session); None while that line is not
        complete."""
        directory = f"{self._sessions}/{session_id}"
        moved = _first_line(f"{directory}/{MOVED_PROJECT}")
        project = None if moved is None else os.fsdecode(moved.rstrip(b"\n"))
        line = _first_line(f"{directory}/log.jsonl")
        if line is None or not line.endswith(b"\n"):
            return None
        if project is None:
            event = decode(line) or {}
            project = str(event.get("project", "")) if event.get("type") == "session.start" else ""
        if not project:
            return ""
        key = self._resolved.get(project)
        if key is None:
            key = self._resolved[project] = key_of(os.path.realpath(project))
        return key

    # The files --------------------------------------------------------------------------------------------

    def _project(self, key: str) -> list[str]:
        ids = self._projects.get(key)
        if ids is None:
            ids = []
            if self._keys is None and key in self._filed:
                found = self._read_project(key)
                if found is None:  # the stamp names a file that is not there (whole): list and rewrite
                    self._list(rewrite=True)
                    return self._projects.get(key, [])
                ids = found
            self._projects[key] = ids
        return ids

    def _read_project(self, key: str) -> list[str] | None:
        value, _ = read_json(f"{self._dir}/projects/{key}.json")
        if type(value) is not dict or value.get("v") != VERSION or type(value.get("ids")) is not list:
            return None
        return sorted(_ids(value["ids"]))

    def _read_stamp(self) -> tuple[int, int, set[str], list[str]] | None:
        if self._dir is None:
            return None
        value, _ = read_json(f"{self._dir}/stamp.json")
        if type(value) is not dict or value.get("v") != VERSION:
            return None
        mtime, at, filed, pending = value.get("mtime"), value.get("at"), value.get("filed"), value.get("pending")
        if not (type(mtime) is int and type(at) is int and type(filed) is list and type(pending) is list):
            return None
        return mtime, at, {key for key in filed if type(key) is str}, list(_ids(pending))

    def _read_listing(self) -> dict[str, str | None]:
        value, _ = read_json(f"{self._dir}/listing.json")
        if type(value) is not dict or value.get("v") != VERSION:
            return {}
        projects, pending = value.get("projects"), value.get("pending")
        if type(projects) is not dict or type(pending) is not list:
            return {}
        keys: dict[str, str | None] = {}
        for key, ids in projects.items():
            if type(ids) is list:
                keys.update(dict.fromkeys(_ids(ids), key))
        keys.update(dict.fromkeys(_ids(pending)))
        return keys

    @contextlib.contextmanager
    def _locked(self) -> Iterator[bool]:
        """Hold `index.lock` while listing and writing; yields whether this listing may write the index. Never
        waits: while another process lists, this one lists for itself and leaves the files to that one."""
        if self._dir is None:
            yield False
            return
        with locked(f"{self._dir}/index.lock") as held:
            yield held


# A first line is read in a first piece that holds most (a session.start with its task), then in pieces of the
# second size: a read copies all it asks for, and the index reads one first line per session.
_FIRST_PIECE = 4 * 1024
_PIECE = 64 * 1024


def _first_line(path: str) -> bytes | None:
    """The file's first line with its newline (all of it when it has none yet), read to at most
    MAX_EVENT_BYTES + 1 bytes; None when there is no such file. Plain reads: the index reads one per session."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = b""
        while b"\n" not in data and len(data) <= MAX_EVENT_BYTES:
            piece = os.read(fd, min(_PIECE if data else _FIRST_PIECE, MAX_EVENT_BYTES + 1 - len(data)))
            if not piece:
                break
            data += piece
    except IsADirectoryError:
        return None
    finally:
        os.close(fd)
    end = data.find(b"\n") + 1
    return data[:end] if end else data


def _trusted(mtime: int, listed_at: int) -> bool:
    return listed_at - mtime > RACY_NS


def _ids(values: list[object]) -> Iterator[str]:
    return (i for i in values if type(i) is str and is_session_id(i))


def _listing(keys: dict[str, str | None]) -> dict[str, object]:
    """`listing.json`: the ids by project key ("" for no project), and the pending ids (one string per project,
    not per session: the file parses into little more than its ids)."""
    projects: dict[str, list[str]] = {}
    for session_id, key in sorted(keys.items()):
        if key is not None:
            projects.setdefault(key, []).append(session_id)
    return {"v": VERSION, "projects": projects, "pending": [i for i, key in sorted(keys.items()) if key is None]}


def _by_project(keys: dict[str, str | None]) -> dict[str, list[str]]:
    """Session ids by project key, sorted; sessions of no project, and pending ones, left out."""
    projects: dict[str, list[str]] = {}
    for session_id, key in sorted(keys.items()):
        if key:
            projects.setdefault(key, []).append(session_id)
    return projects
