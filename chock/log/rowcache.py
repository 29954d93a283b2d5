"""Rows that survive a restart: each session's row fold kept in the cache dir, with what of the log it covers.

`$XDG_CACHE_HOME/chock/rows/<digest of the state dir>/sessions/<id>.json` holds one session's `RowState`,
the identity of the log it was folded from (device, inode) and the offset of the end of the last line it
covers. Any reader may write one (the daemon, `chock sessions`), so a restarted daemon and every new
`chock sessions` start warm and fold only the bytes the cache does not cover. The cache is only ever a
shortcut: an entry whose identity is not the log's, whose offset is past the log's end or not just after a
newline, or that does not parse as this version's, is ignored and the log is folded from its start.

Files are written whole (a temporary file renamed over the old one) and are 0600 in 0700 directories;
nothing here ever fails a command: a cache that cannot be read or written is a cache that is not there.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from chock.log.row import RowState
from chock.paths import FILE_MODE, ensure_dir

VERSION = 1

# A cache file is a few hundred bytes; one far larger is not ours.
MAX_CACHE_FILE = 1024 * 1024


class Cached:
    """What the cache says of one session."""

    __slots__ = ("identity", "offset", "project_real", "state", "written")

    def __init__(
        self, identity: tuple[int, int], offset: int, state: RowState, project_real: str, written: float
    ) -> None:
        self.identity = identity
        self.offset = offset
        self.state = state
        self.project_real = project_real
        self.written = written  # when it was written (its file's mtime), for "at most every N seconds"


def read_json(path: str) -> Any:
    """The JSON value in `path`, or None when it is missing, unreadable, too large or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_CACHE_FILE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_CACHE_FILE:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


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


def entry_path(directory: str, session_id: str) -> str:
    return f"{directory}/sessions/{session_id}.json"


def read(directory: str, session_id: str) -> Cached | None:
    """The cached row of `session_id` (not yet checked against the log), or None."""
    path = entry_path(directory, session_id)
    value = read_json(path)
    if not isinstance(value, dict) or value.get("v") != VERSION:
        return None
    dev, ino, offset, project_real = value.get("dev"), value.get("ino"), value.get("offset"), value.get("real")
    if not (_whole(dev) and _whole(ino) and _whole(offset) and isinstance(project_real, str)):
        return None
    state = RowState.from_json(value.get("state"))
    if state is None:
        return None
    try:
        written = os.stat(path).st_mtime
    except OSError:
        return None
    return Cached((dev, ino), offset, state, project_real, written)


def write(
    directory: str, session_id: str, identity: tuple[int, int], offset: int, state: RowState, project_real: str
) -> bool:
    return write_json(
        entry_path(directory, session_id),
        {
            "v": VERSION,
            "dev": identity[0],
            "ino": identity[1],
            "offset": offset,
            "real": project_real,
            "state": state.to_json(),
        },
    )


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
