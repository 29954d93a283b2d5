"""Folding a log file into its row (`chock.log.row.RowState`): here, and for a cold look at many logs, in a
helper process as well.

A look at sessions nothing has folded yet (a daemon's first `list` with no row cache) folds every log whole:
about a tenth of a millisecond for a log of a hundred events, most of a second for a project of thousands. When
at least FAN_OUT of the logs a look is about to read have no row anywhere, it starts one helper (`python -P -m
chock.log.rowfold SESSIONS_DIR`, the ids on its standard input) and the two meet in the middle: the look folds
from the first log on, the helper from the last back, and the first log the look finds the helper has already
folded is where it stops folding and takes the helper's rows for that log and every one after it. The look never
waits on the helper: a helper that is slow to start, or never starts, leaves the look to fold each log itself,
as it does with no helper. Either way the helper is killed and reaped before the look returns.

The helper's rows are the row cache's lines (`chock.log.rowcache`) and are believed as the cache's are: whole for
the log the look finds (the same file, size and mtime), else as a prefix the look folds on from. A line that is
not one is a log the look folds itself.
"""

from __future__ import annotations

import fcntl
import os
import sys

from chock import module_argv
from chock.log.events import MAX_EVENT_BYTES
from chock.log.row import RowState
from chock.log.rowcache import Cached, parse_row, row_line
from chock.paths import is_session_id

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    import subprocess

# A log is read in pieces of this size: every complete event fits in one (events are at most 1 MiB).
CHUNK = 4 * MAX_EVENT_BYTES

# A look that would fold at least this many logs nothing holds a row of starts a helper: below it, the helper's
# start (an interpreter and this module's imports, some 40 ms) would cost more than half the folds save.
FAN_OUT = 500


def fold_log(fd: int, state: RowState, offset: int, size: int) -> int:
    """Fold the complete lines of `fd` from `offset` to `size` into `state`; the offset after the last one."""
    while offset < size:
        data = os.pread(fd, min(CHUNK, size - offset), offset)
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < CHUNK:
                break  # a torn tail, or a line still being written: read again once it is whole
            # A line longer than any event is not an event: step over it.
            found = _next_line(fd, offset + len(data), size)
            if found is None:
                break
            offset = found
            continue
        state.feed(data[:end])
        offset += end
    return offset


def _next_line(fd: int, offset: int, size: int) -> int | None:
    """The offset just after the next newline at or after `offset`, or None when there is none before `size`."""
    while offset < size:
        data = os.pread(fd, min(CHUNK, size - offset), offset)
        if not data:
            return None
        newline = data.find(b"\n")
        if newline >= 0:
            return offset + newline + 1
        offset += len(data)
    return None


class Helper:
    """A helper folding `ids` from the last back, as a look folds them from the first (see the module)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self._process = process
        self._out = process.stdout.fileno()
        self._held = b""  # the start of a line not yet whole
        self._lines: dict[str, bytes] = {}  # id -> its line, as the helper wrote it
        self.met = False  # the look reached a log the helper had folded: the rest are the helper's

    @classmethod
    def start(cls, sessions: str, ids: list[str]) -> Helper | None:
        """A helper for the logs `ids` of the sessions dir `sessions`, or None when it cannot be started."""
        import subprocess  # only a look at many logs starts one (docs/architecture.md#start-up)
        import tempfile

        try:
            with tempfile.TemporaryFile() as given:
                given.write("".join(f"{session_id}\n" for session_id in ids).encode())
                given.seek(0)
                process = subprocess.Popen(
                    [*module_argv(__name__), sessions], stdin=given, stdout=subprocess.PIPE, close_fds=True
                )
        except OSError:
            return None
        # Only a CPU nobody else wants: on a busy machine the helper must not slow the look it helps.
        os.setpriority(os.PRIO_PROCESS, process.pid, 19)
        assert process.stdout is not None
        fd = process.stdout.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        return cls(process)

    def take(self, session_id: str) -> Cached | None:
        """The helper's row of `session_id` once it has folded that log, else None (not yet, or it could not
        read it: the look folds it). Once the look meets the helper, every later log is the helper's."""
        line = self._lines.pop(session_id, None)
        if line is None and not self.met:
            self._read()
            line = self._lines.pop(session_id, None)
        if line is None:
            return None
        self.met = True
        return parse_row(line, session_id)  # None for `["<id>"]`, as for any line that is not a row

    def _read(self) -> None:
        """Take what the helper has written so far, without waiting."""
        while True:
            try:
                data = os.read(self._out, 1 << 20)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                return
            data = self._held + data
            end = data.rfind(b"\n") + 1
            self._held = data[end:]
            for line in data[:end].splitlines(keepends=True):
                session_id = line[2:24].decode("ascii", "replace") if line.startswith(b'["') else ""
                if is_session_id(session_id):
                    self._lines[session_id] = line

    def close(self) -> None:
        """Kill and reap the helper (it may be folding logs the look has folded already)."""
        self._process.kill()
        self._process.wait()
        assert self._process.stdout is not None
        self._process.stdout.close()

    def __enter__(self) -> Helper:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def fold_file(path: str, session_id: str, reals: dict[str, str]) -> Cached | None:
    """The row of the whole log of `session_id` at `path`, as the cache keeps one, or None when it cannot be
    opened; `reals` memoises project paths resolved."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        state = RowState()
        offset = fold_log(fd, state, 0, info.st_size)
    except OSError:  # not a file that reads (a directory in its place): the look meets it as it is
        return None
    finally:
        os.close(fd)
    state.id = state.id or session_id
    real = ""
    if state.project:
        real = reals.get(state.project) or reals.setdefault(state.project, os.path.realpath(state.project))
    return Cached((info.st_dev, info.st_ino), info.st_mtime_ns, offset, state, real)


def main() -> int:
    """The helper: fold the logs of the ids on standard input, the last first, one line each on standard output
    (the row's cache line, or `["<id>"]` for a log it could not open), until done or killed."""
    sessions = sys.argv[1]
    ids = [line for line in sys.stdin.buffer.read().decode("ascii", "replace").split("\n") if is_session_id(line)]
    reals: dict[str, str] = {}
    for session_id in reversed(ids):
        cached = fold_file(f"{sessions}/{session_id}/log.jsonl", session_id, reals)
        line = memoryview((None if cached is None else row_line(session_id, cached)) or f'["{session_id}"]\n'.encode())
        try:
            while line:
                line = line[os.write(1, line) :]
        except BrokenPipeError:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
