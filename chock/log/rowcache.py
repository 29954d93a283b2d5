"""Rows that survive a restart: the row fold of each session kept in the cache dir, with what of its log it
covers.

`$XDG_CACHE_HOME/chock/rows/<state dir>/cached/<project>.json` holds, for each session of one project, its
`RowState`, the identity of the log it was folded from (device, inode), the log's mtime then, and the
offset of the end of the last line it covers. It is JSON lines: a head `{"v":…,"g":…}`, then one line per
session, `["<id>",dev,ino,mtime,offset,"<project>",{row}]`, sorted by id, none longer than MAX_LINE. A reader
keeps the file as its bytes, finds a session's line by bisection and parses only that line, when that
session is looked at: a cache file of N bytes costs at most about 4·N bytes of memory, whatever it holds
(a row whose parse would keep more than 3 bytes for each of its line's is not believed).

The owner of a session writes its row as it lets go of the log (at its end, or a handover: it has folded every
line it wrote, so this costs no reading), and any reader may write one (the daemon, `chock sessions`): a
restarted daemon and every new `chock sessions` start warm and fold only the bytes the cache does not cover. One
file per project, not per session: listing a project reads one file. The cache is only ever a shortcut: an entry
whose identity is not the log's, whose offset is past the log's end or not just after a newline, or that does
not parse as this version's, is ignored and the log is folded from its start.

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
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from chock.log.row import RowState
from chock.paths import FILE_MODE, ensure_dir, is_session_id
from chock.platform.flock import lock_within

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

# Moves whenever the row fold gives another row for the same lines, or the file's form changes, so no older
# file is believed.
VERSION = 11

# A row's line is at most this long (a real row takes about 700 bytes): one that would be longer is not cached.
MAX_LINE = 256 * 1024

# A parsed row may keep at most this many bytes of memory for each byte of its line (a real row keeps about 2).
MAX_ROW_WEIGHT = 3

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


def open_regular(path: str) -> tuple[int, os.stat_result] | None:
    """A descriptor of `path` and its fstat, when it is a regular file; None for anything else. Opened
    O_NONBLOCK|O_NOFOLLOW, so a FIFO, a device or a symlink put in its place is never waited on or followed:
    it is a file that is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info


def read_bytes(path: str) -> tuple[bytes | None, float]:
    """The bytes of `path` and when it was written; None when it is missing, not a regular file, unreadable or
    too large."""
    opened = open_regular(path)
    if opened is None:
        return None, 0.0
    fd, info = opened
    try:
        if info.st_size > MAX_CACHE_FILE:
            return None, 0.0
        return os.read(fd, info.st_size + 1), info.st_mtime
    except OSError:
        return None, 0.0
    finally:
        os.close(fd)


def read_json(path: str) -> tuple[Any, float]:
    """The JSON value in `path` and when the file was written; None when it is missing, not a regular file,
    unreadable, too large, not JSON, or would cost more to parse than `cheap` allows."""
    data, written = read_bytes(path)
    if data is None or not cheap(data):
        return None, 0.0
    text = data.decode("ascii")
    del data  # the text alone is held while it is parsed
    try:
        return json.loads(text), written
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None, 0.0


# What parsing JSON may cost at most, in bytes of memory, per byte that can start a value or name a key: a
# list or dict opened (`[`, `{`), a value after a comma, a key's entry in its dict (`:`), an escape (`\`).
_VALUE_COST = 64
_KEY_COST = 160


def cheap(data: bytes) -> bool:
    """Whether `data` (JSON this module wrote: ASCII) parses into at most 3 bytes of memory per byte of it, plus
    a little, by an estimate made with a few counts (an upper bound on what the parser makes of it)."""
    if not data.isascii():
        return False
    values = data.count(b",") + data.count(b"[") + data.count(b"{") + data.count(b"\\")
    estimate = len(data) + _VALUE_COST * values + _KEY_COST * data.count(b":")
    return estimate <= 3 * len(data) + 1024 * 1024


def write_json(path: str, value: Any) -> bool:
    """Replace `path` with `value` as JSON, whole or not at all; its directories are made 0700 when missing.
    False when it could not be written (a read-only or full disk: the cache just stays behind)."""
    return write_bytes(path, json.dumps(value, separators=(",", ":")).encode())


def write_bytes(path: str, data: bytes | bytearray) -> bool:
    """Replace `path` with `data`, as `write_json` does."""
    directory, name = os.path.split(path)
    temporary = f"{directory}/.{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    for attempt in range(2):
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
        except FileNotFoundError:
            if attempt:
                return False
            with contextlib.suppress(OSError):
                ensure_dir(directory)
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


# What deciding whether to write a row needs of the cached one: (identity, mtime, offset).
Head = tuple[tuple[int, int], int, int]


class Rows(Mapping[str, Cached]):
    """The rows of one project's cache file, as the file's bytes: a session's line is found by bisection (the
    lines are sorted by id) and parsed when that session is first asked for; its (identity, mtime, offset)
    are kept, its row is not (the catalog keeps the rows it uses)."""

    __slots__ = ("_count", "_data", "_heads", "_start")

    def __init__(
        self, data: bytes | bytearray = b"", start: int = 0, heads: dict[str, Head | None] | None = None
    ) -> None:
        self._data = data
        self._start = start
        self._heads: dict[str, Head | None] = heads or {}
        self._count: int | None = None

    def __getitem__(self, session_id: str) -> Cached:
        cached = self.get(session_id)
        if cached is None:
            raise KeyError(session_id)
        return cached

    def get(self, session_id: str, default: Cached | None = None) -> Cached | None:  # type: ignore[override]
        """The session's row, or `default`: with no exception for a session the file does not hold (a cold listing
        asks for every session, and the file holds none of them)."""
        found = self._find(session_id) if self._start < len(self._data) else None
        cached = None if found is None else _parse(self._data[found[0] : found[1]], session_id)
        self._heads[session_id] = None if cached is None else (cached.identity, cached.mtime, cached.offset)
        return default if cached is None else cached

    def head(self, session_id: str) -> Head | None:
        """The (identity, mtime, offset) of a session's cached row, or None: what deciding a write needs."""
        if session_id not in self._heads:
            self.get(session_id)
        return self._heads[session_id]

    def __iter__(self) -> Iterator[str]:
        return (session_id for session_id, _, _ in self.lines())

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self.lines())
        return self._count

    def lines(self) -> Iterator[tuple[str, int, int]]:
        """Each row's (session id, start, end) in the file, in order; a line out of order, too long or with no
        id is passed over."""
        data, at, last = self._data, self._start, ""
        while at < len(data):
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end + 1
            session_id = _line_id(data, at, end)
            if session_id is not None and session_id > last:
                yield session_id, at, end
                last = session_id
            at = end

    def ids(self) -> set[str]:
        """The ids the file has a line for, found by one scan of the lines' starts: no row is parsed."""
        import re  # re caches the compiled pattern

        starts = re.findall(rb'^\["([^"\n]{%d})",' % _ID_LENGTH, self._data[self._start :], re.MULTILINE)
        return {found for found in (start.decode("ascii", "replace") for start in starts) if is_session_id(found)}

    @property
    def known(self) -> dict[str, Head | None]:
        """The heads parsed so far, by session id."""
        return self._heads

    def line(self, start: int, end: int) -> bytes | bytearray:
        return self._data[start:end]

    def _find(self, session_id: str) -> tuple[int, int] | None:
        """Where the session's line is, by bisection of the lines after the head."""
        if not is_session_id(session_id):
            return None
        data, low, high = self._data, self._start, len(self._data)
        while low < high:  # low and high are at the start of a line (or the end)
            middle = (low + high) // 2
            start = data.rfind(b"\n", low, middle) + 1 or low
            end = data.find(b"\n", start, high)
            end = high if end < 0 else end + 1
            found = _line_id(data, start, end)
            if found == session_id:
                return start, end
            if found is not None and found < session_id:
                low = end
            else:
                high = start
        return None


_ID_LENGTH = len("20260101-000000-000000")


def _line_id(data: bytes | bytearray, start: int, end: int) -> str | None:
    """The session id a row's line starts with (`["<id>",`), when the line is short enough to believe."""
    if (
        end - start > MAX_LINE
        or data[start : start + 2] != b'["'
        or data[start + 2 + _ID_LENGTH : start + 4 + _ID_LENGTH] != b'",'
    ):
        return None
    found = data[start + 2 : start + 2 + _ID_LENGTH].decode("ascii", "replace")
    return found if is_session_id(found) else None


def _parse(line: bytes | bytearray, session_id: str) -> Cached | None:
    """The row a line holds, when it is one (and keeps at most MAX_ROW_WEIGHT bytes per byte of the line)."""
    try:
        item = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if type(item) is not list or len(item) != 7 or item[0] != session_id:
        return None
    _, dev, ino, mtime, offset, project_real, state = item
    if not (_whole(dev) and _whole(ino) and _whole(mtime) and _whole(offset) and type(project_real) is str):
        return None
    row = RowState.from_json(state)
    if row is None or sum(map(_weight, state.values())) > MAX_ROW_WEIGHT * len(line):
        return None
    return Cached((dev, ino), mtime, offset, row, project_real)


def _weight(value: object) -> int:
    """The bytes of memory `value` (parsed JSON) takes."""
    size = sys.getsizeof(value)
    if type(value) is dict:
        return size + sum(_weight(key) + _weight(item) for key, item in value.items())
    if type(value) is list:
        return size + sum(_weight(item) for item in value)
    return size


def _line(session_id: str, cached: Cached) -> bytes | None:
    """A row's line in the file, or None when it would be longer than MAX_LINE (the row is then not cached)."""
    value = [session_id, *cached.identity, cached.mtime, cached.offset, cached.project_real, cached.state.to_json()]
    line = json.dumps(value, separators=(",", ":")).encode() + b"\n"
    return line if len(line) <= MAX_LINE else None


class Snapshot:
    """What the cache file of one project held when it was read (or written) here: its rows by session id,
    since when it has held them as far as this process knows (its mtime when read; the time of the last merge
    made here), and its generation, a random name each write gives the file, which says whether anyone has
    written it since."""

    __slots__ = ("generation", "rows", "since")

    def __init__(self, rows: Rows, since: float, generation: str | None) -> None:
        self.rows = rows
        self.since = since
        self.generation = generation


def read(directory: str, key: str) -> Snapshot:
    """The cached rows of one project's sessions (not yet checked against their logs); none when there are
    none."""
    data, written = read_bytes(project_path(directory, key))
    end = -1 if data is None else data.find(b"\n", 0, 256)
    if data is None or end < 0:
        return Snapshot(Rows(), 0.0, None)
    try:
        head = json.loads(data[:end])
    except ValueError:
        head = None
    if type(head) is not dict or head.get("v") != VERSION or not _generation(head.get("g")):
        return Snapshot(Rows(), 0.0, None)
    return Snapshot(Rows(data, end + 1), written, head["g"])


def changed(directory: str, key: str, known: Snapshot) -> bool:
    """Whether the project's cache file is no longer what `known` was read from (a few bytes are read)."""
    return generation(project_path(directory, key)) != known.generation


# The start of every file `merge` writes, up to its generation (json.dumps keeps this order).
_HEAD = b'{"v":%d,"g":"' % VERSION
_GENERATION_BYTES = 8


def generation(path: str) -> str | None:
    """The generation named at the start of a cache file, or None."""
    size = len(_HEAD) + 2 * _GENERATION_BYTES
    opened = open_regular(path)
    if opened is None:
        return None
    fd = opened[0]
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
        data, heads, replaced = _merged(current.rows, rows, gone, force)
        if not replaced and current.generation is not None:
            return Snapshot(current.rows, time.time(), current.generation)
        name = os.urandom(_GENERATION_BYTES).hex()
        head = _HEAD + name.encode() + b'"}\n'
        if not write_bytes(project_path(directory, key), head + data):
            return None
        return Snapshot(Rows(data, 0, heads), time.time(), name)


def _merged(
    current: Rows,
    rows: Mapping[str, Cached],
    gone: Callable[[str], bool],
    force: dict[str, tuple[tuple[int, int], int] | None],
) -> tuple[bytearray, dict[str, Head | None], bool]:
    """The lines of `current` with `rows` merged in (as `merge` says), in order; the heads of those known here
    (so the next look at them parses nothing); and whether they differ from `current`'s."""
    out = bytearray()
    heads: dict[str, Head | None] = {}
    new = sorted(rows)
    n = 0
    differ = False
    for session_id, start, end in current.lines():
        while n < len(new) and new[n] < session_id:
            line = _line(new[n], rows[new[n]])
            if line is not None:
                out += line
                heads[new[n]] = _head(rows[new[n]])
                differ = True
            n += 1
        if n < len(new) and new[n] == session_id:
            n += 1
            line = _replacing(current, session_id, rows[session_id], force)
            if line is not None:
                out += line
                heads[session_id] = _head(rows[session_id])
                differ = True
                continue
        elif gone(session_id):
            differ = True
            continue
        out += current.line(start, end)
        if session_id in current.known:
            heads[session_id] = current.known[session_id]
    for session_id in new[n:]:
        line = _line(session_id, rows[session_id])
        if line is not None:
            out += line
            heads[session_id] = _head(rows[session_id])
            differ = True
    return out, heads, differ


def _head(cached: Cached) -> Head:
    return cached.identity, cached.mtime, cached.offset


def _replacing(
    current: Rows, session_id: str, new: Cached, force: dict[str, tuple[tuple[int, int], int] | None]
) -> bytes | None:
    """The line of `new` when it replaces the session's cached row; None when the cached one stays."""
    old = current.get(session_id)
    if old is not None and (old.identity, old.offset, old.mtime) == (new.identity, new.offset, new.mtime):
        return None  # the same lines folded: the same row
    if old is None or old.identity != new.identity or old.offset <= new.offset or _gives_way(old, force, session_id):
        return _line(session_id, new)
    return None


def _gives_way(old: Cached, force: dict[str, tuple[tuple[int, int], int] | None], session_id: str) -> bool:
    """Whether `force` says the cached row `old` is replaced whatever it covers."""
    if session_id not in force:
        return False
    refused = force[session_id]
    return refused is None or refused == (old.identity, old.offset)


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
        ensure_dir(os.path.dirname(path))
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
