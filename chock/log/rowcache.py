"""Rows that survive a restart: the row fold of each session kept in the cache dir, with what of its log it
covers.

`$XDG_CACHE_HOME/chock/rows/<state dir>/cached/<project>.json` holds, for each session of one project, its
`RowState`, the identity of the log it was folded from (device, inode), the log's mtime then, and the
offset of the end of the last line it covers. Any reader may write one (the daemon, `chock sessions`), so a
restarted daemon and every new `chock sessions` start warm and fold only the bytes the cache does not
cover. One file per project, not per session: listing a project reads one file, and the first listing of
thousands of sessions writes one. The cache is only ever a shortcut: an entry whose identity is not the
log's, whose offset is past the log's end or not just after a newline, or that does not parse as this
version's, is ignored and the log is folded from its start.

Files are written whole (a temporary file renamed over the old one) and are 0600 in 0700 directories;
nothing here ever fails a command: a cache that cannot be read or written is a cache that is not there.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

from chock.log.row import RowState
from chock.paths import FILE_MODE, ensure_dir

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

# Moves whenever the row fold gives another row for the same lines, so no older fold's row is believed.
VERSION = 2

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
    except ValueError:
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


def read(directory: str, key: str) -> tuple[dict[str, Cached], float]:
    """The cached rows of one project's sessions, by id (not yet checked against their logs), and when they
    were written (0 when there are none)."""
    value, written = read_json(project_path(directory, key))
    if type(value) is not dict or value.get("v") != VERSION or type(value.get("rows")) is not dict:
        return {}, 0.0
    found = {}
    for session_id, item in value["rows"].items():
        if type(item) is not list or len(item) != 6:
            continue
        dev, ino, mtime, offset, project_real, state = item
        if _whole(dev) and _whole(ino) and _whole(mtime) and _whole(offset) and type(project_real) is str:
            row = RowState.from_json(state)
            if row is not None:
                found[session_id] = Cached((dev, ino), mtime, offset, row, project_real)
    return found, written


def write(directory: str, key: str, rows: dict[str, Cached]) -> bool:
    """Replace the cached rows of one project's sessions."""
    return write_json(
        project_path(directory, key),
        {
            "v": VERSION,
            "rows": {
                session_id: [*c.identity, c.mtime, c.offset, c.project_real, c.state.to_json()]
                for session_id, c in rows.items()
            },
        },
    )


def _whole(value: object) -> bool:
    return type(value) is int and value >= 0
