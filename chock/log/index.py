"""A project's sessions without reading other projects' logs: the state dir's sessions, indexed by project.

A session's project is named by the first line of its log (`session.start {project}`), compared by its
resolved real path. That line is read once per session; the mapping lives in the cache dir beside the
cached rows (`chock.log.rowcache`):

    listing.json          every session id -> its project's key (null: no complete first line yet)
    projects/<key>.json   one project's session ids (the key: the project's path, escaped)
    stamp.json            the sessions dir's mtime the files above reflect, and the ids still pending

Listing one project reads `stamp.json` and that project's file, plus the first line of any pending
session: its cost does not grow with other projects' sessions. Sessions come and go only by entries of
the sessions dir, which move its mtime, so a stamp whose mtime is the directory's is current — unless the
listing was made within RACY_NS of that mtime (a session made in the same clock tick, after the listing,
leaves the mtime where it was), in which case the next reader lists again. Writers list and write under
`index.lock`, one at a time, so a slower writer never puts back an older listing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from pathlib import Path

from chock.log.events import MAX_EVENT_BYTES, decode
from chock.log.rowcache import read_json, write_json
from chock.paths import FILE_MODE, SESSION_ID_RE, ensure_dir, path_name

VERSION = 1

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
        self._keys: dict[str, str | None] | None = None  # every id -> key, once this process has listed
        self._projects: dict[str, list[str]] = {}  # key -> ids, for the projects read so far
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
            return sorted(self._project(key))

    def project_of(self, session_id: str) -> str | None:
        """The key of one session's project ("" for none; None while its log has no complete first line)."""
        with self._lock:
            known = self._keys.get(session_id) if self._keys is not None else None
        return known if known is not None else self._first_key(session_id)

    def every(self) -> dict[str, list[str]]:
        """Every session with a log, by the key of its project ("" for a log that names none)."""
        with self._lock:
            if not self._update():
                return {}
            if self._keys is None:
                self._list()
            assert self._keys is not None
            return {**_by_project(self._keys), "": sorted(i for i, key in self._keys.items() if key == "")}

    # Keeping the memory current ------------------------------------------------------------------------

    def _update(self) -> bool:
        """Bring the memory up to the sessions dir; False when there is no sessions dir."""
        try:
            mtime = os.stat(self._sessions).st_mtime_ns
        except FileNotFoundError:
            self._mtime, self._keys, self._projects, self._pending = None, {}, {}, []
            return False
        if self._mtime != mtime or not self._trusted:
            stamp = self._read_stamp()
            if stamp is not None and stamp[0] == mtime and _trusted(*stamp[:2]):
                if self._mtime != mtime:
                    self._keys, self._projects = None, {}
                self._mtime, self._trusted, self._pending = mtime, True, stamp[2]
            else:
                self._list()
        if self._pending and any(self._first_key(session_id) is not None for session_id in self._pending):
            self._list()
        return True

    def _list(self) -> None:
        """List the sessions dir, read the first line of each session not known yet, and write the index."""
        with self._locked() as writable:
            mtime = os.stat(self._sessions).st_mtime_ns  # before the listing: a later change moves it on
            names = [name for name in os.listdir(self._sessions) if SESSION_ID_RE.fullmatch(name)]
            listed_at = time.time_ns()
            old = self._keys if self._keys is not None else self._read_listing()
            keys = {}
            for session_id in names:
                known = old.get(session_id)
                keys[session_id] = known if known is not None else self._first_key(session_id)
            projects = _by_project(keys)
            if writable:
                before = _by_project(old)
                for key in projects.keys() | before.keys():
                    if key and projects.get(key, []) != before.get(key, []):
                        write_json(f"{self._dir}/projects/{key}.json", {"v": VERSION, "ids": projects.get(key, [])})
                pending = sorted(session_id for session_id, key in keys.items() if key is None)
                write_json(f"{self._dir}/listing.json", {"v": VERSION, "keys": keys})
                write_json(
                    f"{self._dir}/stamp.json", {"v": VERSION, "mtime": mtime, "at": listed_at, "pending": pending}
                )
        self._mtime, self._trusted = mtime, _trusted(mtime, listed_at)
        self._keys, self._projects = keys, projects
        self._pending = sorted(session_id for session_id, key in keys.items() if key is None)

    def _first_key(self, session_id: str) -> str | None:
        """The key of the project the log's first line names; None while that line is not complete."""
        try:
            with open(f"{self._sessions}/{session_id}/log.jsonl", "rb") as handle:
                line = handle.readline(MAX_EVENT_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not line.endswith(b"\n"):
            return None
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
            if self._keys is None and self._dir is not None:
                value, _ = read_json(f"{self._dir}/projects/{key}.json")
                if isinstance(value, dict) and value.get("v") == VERSION and isinstance(value.get("ids"), list):
                    ids = [i for i in value["ids"] if isinstance(i, str) and SESSION_ID_RE.fullmatch(i)]
            self._projects[key] = ids
        return ids

    def _read_stamp(self) -> tuple[int, int, list[str]] | None:
        if self._dir is None:
            return None
        value, _ = read_json(f"{self._dir}/stamp.json")
        if not isinstance(value, dict) or value.get("v") != VERSION:
            return None
        mtime, at, pending = value.get("mtime"), value.get("at"), value.get("pending")
        if not (isinstance(mtime, int) and isinstance(at, int) and isinstance(pending, list)):
            return None
        return mtime, at, [i for i in pending if isinstance(i, str) and SESSION_ID_RE.fullmatch(i)]

    def _read_listing(self) -> dict[str, str | None]:
        value, _ = read_json(f"{self._dir}/listing.json") if self._dir is not None else (None, 0.0)
        if not isinstance(value, dict) or value.get("v") != VERSION or not isinstance(value.get("keys"), dict):
            return {}
        return {i: k for i, k in value["keys"].items() if isinstance(k, str) and SESSION_ID_RE.fullmatch(i)}

    @contextlib.contextmanager
    def _locked(self):
        """Hold `index.lock` while listing and writing; yields whether the index can be written at all."""
        fd = -1
        if self._dir is not None:
            try:
                ensure_dir(Path(self._dir))
                fd = os.open(
                    f"{self._dir}/index.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                if fd >= 0:
                    os.close(fd)
                fd = -1
        try:
            yield fd >= 0
        finally:
            if fd >= 0:
                os.close(fd)


def _trusted(mtime: int, listed_at: int) -> bool:
    return listed_at - mtime > RACY_NS


def _by_project(keys: dict[str, str | None]) -> dict[str, list[str]]:
    projects: dict[str, list[str]] = {}
    for session_id, key in sorted(keys.items()):
        if key:
            projects.setdefault(key, []).append(session_id)
    return projects
