"""Rows that survive a restart: the row fold of each session kept in the cache dir, with what of its log it
covers.

`$XDG_CACHE_HOME/chock/rows/<state dir>/cached/<project>.json` holds, for each session of one project, its
`RowState`, the identity of the log it was folded from (device, inode), the log's mtime then, and the
offset of the end of the last line it covers. The owner of a session writes its row as it lets go of the
log (at its end, or a handover: it has folded every line it wrote, so this costs no reading), and any reader
may write one (the daemon, `chock sessions`): a restarted daemon and every new `chock sessions` start warm
and fold only the bytes the cache does not cover. One file per project, not per session: listing a project
reads one file. The cache is only ever a shortcut: an entry whose identity is not the log's, whose offset
is past the log's end or not just after a newline, or that does not parse as this version's, is ignored and
the log is folded from its start.

Every write is a merge made under the project's kernel lock (`<project>.lock`): the file is read again if
another process wrote it since, so an owner recording its end and a daemon recording a listing never undo
each other. Files are written whole (a temporary file renamed over the old one) and are 0600 in 0700
directories; nothing here ever fails a command: a cache that cannot be read, locked or written is a cache
that is not there.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from chock.log.row import RowState
from chock.paths import FILE_MODE, SESSION_ID_RE, ensure_dir
from chock.platform.flock import lock_within

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

# Moves whenever the row fold gives another row for the same lines, so no older fold's row is believed.
VERSION = 4

# An owner recording its end waits this long for another's merge (a tenth of a second for a project of
# thousands of sessions) before it leaves the cache behind; a reader never waits (its next listing records
# what this one could not).
OWNER_WAIT = 2.0
LOCK_POLL_SECONDS = 0.005

# Past this a file in the cache dir is not one this module wrote (a project's rows take about 700 bytes a
# session: this is room for tens of thousands).
MAX_CACHE_FILE = 64 * 1024 * 1024


class Cached:
    """What the cache says of one session: where its row fold stopped, and the row fold there."""

    __slots__ = ("identity", "mtime", "offset", "project_real", "state")

    def __init__(self, identity: tuple[int, int], mtime: int, offset: int, state: RowState, project_real: str) -> None:
        self.identity = identity  # (device, inode) of the log
        self.mtime = mtime  # the log's mtime when it was folded: unchanged with its size, unchanged bytes
        self.offset = offset  # the end of the last complete line folded
        self.state = state
        self.project_real = project_real


def read_json(path: str) -> tuple[Any, float]:
    """The JSON value in `path` and when the file was written; None when it is missing, unreadable, too large
    or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None, 0.0
    try:
        info = os.fstat(fd)
        if info.st_size > MAX_CACHE_FILE:
            return None, 0.0
        data = os.read(fd, info.st_size + 1)
    except OSError:
        return None, 0.0
    finally:
        os.close(fd)
    try:
        return json.loads(data), info.st_mtime
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None, 0.0


def write_json(path: str, value: Any) -> bool:
    """Replace `path` with `value` as JSON, whole or not at all; its directories are made 0700 when missing.
    False when it could not be written (a read-only or full disk: the cache just stays behind)."""
    data = json.dumps(value, separators=(",", ":")).encode()
    directory, name = os.path.split(path)
    temporary = f"{directory}/.{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    for attempt in range(2):
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
        except FileNotFoundError:
            if attempt:
                return False
            with contextlib.suppress(OSError):
                ensure_dir(Path(directory))
            continue
        except OSError:
            return False
        try:
            if os.write(fd, data) != len(data):
                raise OSError("short write")
            os.close(fd)
            os.replace(temporary, path)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            return False
    return False


def project_path(directory: str, key: str) -> str:
    return f"{directory}/cached/{key}.json"


class Snapshot:
    """What the cache file of one project held when it was read (or written) here: its rows by session id,
    since when it has held them as far as this process knows (its mtime when read; the time of the last merge
    made here), and its generation, a random name each write gives the file, which says whether anyone has
    written it since."""

    __slots__ = ("generation", "rows", "since")

    def __init__(self, rows: dict[str, Cached], since: float, generation: str | None) -> None:
        self.rows = rows
        self.since = since
        self.generation = generation


def read(directory: str, key: str) -> Snapshot:
    """The cached rows of one project's sessions (not yet checked against their logs); none when there are
    none."""
    value, written = read_json(project_path(directory, key))
    if type(value) is not dict or value.get("v") != VERSION or type(value.get("rows")) is not dict:
        return Snapshot({}, 0.0, None)
    found = {}
    for session_id, item in value["rows"].items():
        if type(item) is not list or len(item) != 6 or not SESSION_ID_RE.fullmatch(session_id):
            continue
        dev, ino, mtime, offset, project_real, state = item
        if _whole(dev) and _whole(ino) and _whole(mtime) and _whole(offset) and type(project_real) is str:
            row = RowState.from_json(state)
            if row is not None:
                found[session_id] = Cached((dev, ino), mtime, offset, row, project_real)
    generation = value.get("g")
    return Snapshot(found, written, generation if _generation(generation) else None)


def changed(directory: str, key: str, known: Snapshot) -> bool:
    """Whether the project's cache file is no longer what `known` was read from (a few bytes are read)."""
    return generation(project_path(directory, key)) != known.generation


# The start of every file `merge` writes, up to its generation (json.dumps keeps this order).
_HEAD = b'{"v":%d,"g":"' % VERSION
_GENERATION_BYTES = 8


def generation(path: str) -> str | None:
    """The generation named at the start of a cache file, or None."""
    size = len(_HEAD) + 2 * _GENERATION_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        head = os.pread(fd, size, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = head[len(_HEAD) :].decode("ascii", "replace")
    return found if head.startswith(_HEAD) and _generation(found) else None


def _generation(value: object) -> bool:
    """Whether `value` is a generation as `merge` names one."""
    return type(value) is str and len(value) == 2 * _GENERATION_BYTES and value.isalnum()


def merge(
    directory: str,
    key: str,
    rows: Mapping[str, Cached],
    *,
    known: Snapshot | None = None,
    gone: Callable[[str], bool] = lambda session_id: False,
    force: dict[str, tuple[tuple[int, int], int] | None] | None = None,
    wait: float = 0.0,
) -> Snapshot | None:
    """Put `rows` into the cached rows of one project, under its lock, and return what the file holds then
    (None when it could not be written). A row replaces its session's cached row unless that one covers more
    of the same log, or is the same; a session in `force` is replaced whatever its cached row covers — an
    owner's (None: its row is its log's truth), or one whose cached (identity, offset) the log refused, while
    the cached row is still that one. A cached row `rows` has no word on stays unless `gone(session_id)`.
    `known` is what the caller last read or wrote, used as it is when nobody has written the file since.
    Nothing is written when nothing changes. Waits at most `wait` seconds for the lock."""
    force = force or {}
    with locked(f"{directory}/cached/{key}.lock", wait=wait) as held:
        if not held:
            return None
        current = known if known is not None and not changed(directory, key, known) else read(directory, key)
        merged = dict(current.rows)
        dropped = [session_id for session_id in merged if session_id not in rows and gone(session_id)]
        for session_id in dropped:
            del merged[session_id]
        replaced = False
        for session_id, new in rows.items():
            old = merged.get(session_id)
            if old is not None and (old.identity, old.offset, old.mtime) == (new.identity, new.offset, new.mtime):
                continue  # the same lines folded: the same row
            covers_less = old is None or old.identity != new.identity or old.offset <= new.offset
            if covers_less or (old is not None and _gives_way(old, force, session_id)):
                merged[session_id] = new
                replaced = True
        if not (dropped or replaced) and current.generation is not None:
            return Snapshot(current.rows, time.time(), current.generation)
        name = os.urandom(_GENERATION_BYTES).hex()
        if not _write(project_path(directory, key), merged, name):
            return None
        return Snapshot(merged, time.time(), name)


def _gives_way(old: Cached, force: dict[str, tuple[tuple[int, int], int] | None], session_id: str) -> bool:
    """Whether `force` says the cached row `old` is replaced whatever it covers."""
    if session_id not in force:
        return False
    refused = force[session_id]
    return refused is None or refused == (old.identity, old.offset)


def _write(path: str, rows: dict[str, Cached], name: str) -> bool:
    return write_json(
        path,
        {
            "v": VERSION,
            "g": name,
            "rows": {
                session_id: [*c.identity, c.mtime, c.offset, c.project_real, c.state.to_json()]
                for session_id, c in rows.items()
            },
        },
    )


@contextlib.contextmanager
def locked(path: str, *, wait: float = 0.0) -> Iterator[bool]:
    """Hold the kernel lock on `path` (made 0600, its directories 0700, when missing), waiting at most `wait`
    seconds for it; yields whether it is held. A holder that dies lets go at once."""
    fd = _lock(path, wait)
    try:
        yield fd >= 0
    finally:
        if fd >= 0:
            os.close(fd)


def _lock(path: str, wait: float) -> int:
    """A descriptor of `path` holding its lock, or -1."""
    try:
        ensure_dir(Path(os.path.dirname(path)))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    except OSError:
        return -1
    with contextlib.suppress(OSError):
        if lock_within(fd, wait, LOCK_POLL_SECONDS):
            return fd
    os.close(fd)
    return -1


def _whole(value: object) -> bool:
    return type(value) is int and value >= 0
