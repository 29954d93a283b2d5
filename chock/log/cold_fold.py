"""A cold listing's second hand: when a listing must fold many logs that no row covers (its own or the cache's), a
child process folds them from the far end of the list while the listing folds from the near end, and the two meet
in the middle. With two CPUs a first listing of thousands of sessions takes little more than half as long
(docs/log.md#rows-and-the-catalog).

The child, `python -m chock.log.cold_fold SESSIONS_DIR` with the ids on its standard input (one a line, in the
order to fold them), writes each row as soon as it is folded, and nothing else: a 4-byte length, then a pickle of
plain values (the id, what says which log the row covers, `RowState.values()`). The pipe is the child's alone, and
what reads it refuses a pickle that names any class, so nothing a log holds can make it build anything else; a
row handed over so costs a few microseconds, a tenth of a row cache line's parse.

A row the child gives is taken as a cached row is: the listing stats the log as it always does, takes the row when
it covers the log as the log is then, and folds on from it when the log has grown. A child that is slow, fails to
start or dies leaves the listing to fold what it has not given; the listing kills it once every log is looked at.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import tempfile

from chock import module_argv
from chock.log import rowcache
from chock.log.folding import fold_log
from chock.log.row import FIELDS, RowState
from chock.log.rowcache import Cached
from chock.paths import is_session_id

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from typing import Any

# The child's first frame: the row fold it folds by (its version, as the cache names it, and the row's fields in the
# order it sends them). A child of another Chock (an upgrade under a running daemon) is not believed.
FORM = (rowcache.VERSION, tuple(FIELDS))

# What of the listing's environment the child gets: what Python needs to find and run Chock, no more.
_KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")


class Helper:
    """The child folding `ids` (in that order) of the sessions dir `sessions`, and the rows it has given."""

    def __init__(self, sessions: str, ids: list[str]) -> None:
        self.rows: dict[str, Cached] = {}
        self._pending = b""
        with tempfile.TemporaryFile() as listed:
            listed.write("".join(f"{session_id}\n" for session_id in ids).encode())
            listed.seek(0)
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                [*module_argv(__name__), sessions],
                stdin=listed,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={name: os.environ[name] for name in _KEPT if name in os.environ},
            )
        self._form: object = None  # the child's first frame, once read
        assert self._process.stdout is not None
        self._fd = self._process.stdout.fileno()
        os.set_blocking(self._fd, False)

    def take(self, session_id: str) -> Cached | None:
        """The row the child gave of `session_id`, reading what it wrote since the last look (never waiting)."""
        found = self.rows.pop(session_id, None)
        if found is None and self._collect():
            found = self.rows.pop(session_id, None)
        return found

    def _collect(self) -> bool:
        """Take every whole row the child has written so far; whether there was any."""
        if self._process is None:
            return False
        chunks = [self._pending]
        try:
            while data := os.read(self._fd, 1 << 20):
                chunks.append(data)
        except BlockingIOError:
            pass
        else:  # the child is done: it has given all it will
            self.close()
        data = b"".join(chunks)
        at = 0
        while len(data) - at >= _LENGTH.size:
            end = at + _LENGTH.size + _LENGTH.unpack_from(data, at)[0]
            if end > len(data):
                break
            frame = data[at + _LENGTH.size : end]
            at = end
            if self._form is None:
                self._form = _plain(frame)
                if self._form != FORM:  # another Chock's child: nothing of it is believed
                    self.close()
                    break
                continue
            given = _row_of(frame)
            if given is None:  # not the child's writing: nothing more of it is believed
                self.close()
                break
            self.rows[given[0]] = given[1]
        self._pending = data[at:]
        return at > 0

    def close(self) -> None:
        """End the child (it writes nothing but its output, so it can be killed at any point)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def start(sessions: str, ids: list[str]) -> Helper | None:
    """A helper folding `ids` in that order, or None when no child could be started."""
    try:
        return Helper(sessions, ids)
    except OSError:
        return None


def main(argv: list[str]) -> int:
    """The child: fold each log named on standard input and write its row."""
    sessions = argv[0]
    reals: dict[str, str] = {}

    def resolve(project: str) -> str:
        real = reals.get(project)
        if real is None:
            real = reals[project] = os.path.realpath(project)
        return real

    out = sys.stdout.buffer

    def write(value: object) -> None:
        frame = pickle.dumps(value)
        out.write(_LENGTH.pack(len(frame)) + frame)
        out.flush()

    try:
        write(FORM)
    except BrokenPipeError:
        return 0
    for raw in sys.stdin.buffer:
        session_id = raw.rstrip(b"\n").decode("ascii", "replace")
        if not is_session_id(session_id):
            continue
        try:
            fd = os.open(f"{sessions}/{session_id}/log.jsonl", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            row, _ = fold_log(session_id, fd, None, resolve)
        except OSError:
            continue
        finally:
            os.close(fd)
        try:
            write((session_id, *row.identity, row.mtime, row.offset, row.project_real, row.state.values()))
        except BrokenPipeError:  # the listing has all it needs
            return 0
    return 0


_LENGTH = struct.Struct(">I")


class _PlainValues(pickle.Unpickler):
    """An unpickler of plain values (str, int, float, bool, None, tuples, lists and dicts of them) and nothing
    else: one that names a class is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a cold fold's row names {module}.{name}: only plain values are taken")


def _plain(frame: bytes) -> object:
    """The plain values one frame of the child holds; None when it holds anything else."""
    try:
        return _PlainValues(io.BytesIO(frame)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError):
        return None


def _row_of(frame: bytes) -> tuple[str, Cached] | None:
    """The session id and row one frame of the child holds; None when it holds no such thing."""
    found: Any = _plain(frame)
    try:
        session_id, dev, ino, mtime, offset, project_real, values = found
        return session_id, Cached((dev, ino), mtime, offset, RowState.of_values(values), project_real)
    except (ValueError, TypeError):
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
