"""An export as it streams: the log read through the daemon in pages, each event written as it is read.

Each `read` asks for the events after the last one written and is left after PAGE of them, so no reply is
longer than a page and a client never holds more than the event it writes: memory does not grow with the log
(bench/export.py). An export ends at the last event the daemon listed when it began (`find`), so a running
session's export ends too; a log shorter than that (removed meanwhile) ends it where it ends. Each wait is the
client's own bound (chock/control/client.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from itertools import islice
from typing import BinaryIO

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, expect
from chock.errors import ChockError
from chock.terminal import safe, safe_json
from chock.transcript.entries import entry
from chock.transcript.html import Html
from chock.transcript.markdown import Markdown

FORMATS = ("markdown", "html", "jsonl")

# Events per `read`: a page of them is read, then the reply is left and the next page asked for.
PAGE = 4096


class ExportFailed(ChockError):
    pass


def events(client: ControlClient, session_id: str) -> Iterator[dp.EventLine]:
    """The session's events in order, read through the daemon a page at a time, up to the last one it listed."""
    row = expect(client.call(dp.FindRequest(session_id)), dp.ListRow).row
    last = row.get("last_event_id")
    bound = last if type(last) is int else None
    after = 0
    while bound is None or after < bound:
        stream = client.stream(dp.ReadRequest(session_id, after))
        read = 0
        try:
            for line in islice(stream, PAGE):
                event = expect(line, dp.EventLine)
                if event.id != after + 1:
                    raise ExportFailed(
                        f"the daemon at {client.address} sent event {event.id} of session {session_id} after event "
                        f"{after}; the log's ids run 1, 2, 3, … — nothing more was exported"
                    )
                if bound is not None and event.id > bound:
                    return
                after, read = event.id, read + 1
                yield event
        finally:
            stream.close()
        if read < PAGE:
            return


class Destination:
    """Where an export is written: bytes to `out`, each text first through the safe printer when `out` is a
    terminal (`styled`: in reverse video). A character UTF-8 cannot encode (a lone surrogate) is written as its
    escape."""

    def __init__(self, out: BinaryIO, *, terminal: bool, styled: bool) -> None:
        self.out = out
        self.terminal = terminal
        self.styled = styled

    def text(self, chunk: str) -> None:
        if self.terminal:
            chunk = safe(chunk, styled=self.styled)
        self.out.write(chunk.encode("utf-8", "backslashreplace"))

    def line(self, line: str) -> None:
        """A log line, as the log has it (made safe at a terminal: the same JSON value, escaped)."""
        self.out.write(((safe_json(line) if self.terminal else line) + "\n").encode("utf-8", "backslashreplace"))


def export(client: ControlClient, session_id: str, form: str, sink: Destination) -> int:
    """Write the session's transcript in `form` (one of FORMATS) to `sink`; return how many events it read."""
    count = 0
    if form == "jsonl":
        for event in events(client, session_id):
            sink.line(event.line)
            count += 1
        return count
    writer = Html() if form == "html" else Markdown()
    sink.text(writer.head(session_id))
    for event in events(client, session_id):
        shown = entry(event.event)
        if shown is not None:
            sink.text(writer.entry(shown))
        count += 1
    sink.text(writer.tail())
    return count


def _destination(path: str) -> tuple[str, bool]:
    """The file an export to `path` writes, and whether it is written straight into rather than replaced.

    A symbolic link is followed to the file it names (a dangling one: the file it would name), so the link stays
    and its target becomes the transcript. A link into /proc (`/dev/stdout`, `/dev/fd/N`) names a file a process
    holds open: that open file is written straight into, as a shell's redirection would. So is anything that is
    not a regular file (a FIFO, a terminal, a device): renaming over it would put a regular file in its place.
    """
    here = os.path.abspath(path)
    for _ in range(40):  # the kernel's own bound on links followed (MAXSYMLINKS)
        parent = os.path.realpath(os.path.dirname(here))
        here = os.path.join(parent, os.path.basename(here))
        if parent == "/proc" or parent.startswith("/proc/"):
            return here, True
        try:
            link = os.readlink(here)
        except OSError:  # not a link, or nothing there: the file itself
            break
        here = os.path.join(parent, link)
    else:
        raise ExportFailed(f"cannot write {path}: too many symbolic links; name the file itself")
    try:
        mode = os.stat(here).st_mode
    except FileNotFoundError:
        return here, False
    except OSError as error:
        raise ExportFailed(f"cannot write {path}: {error.strerror or error}; name a file you can write") from None
    if stat.S_ISDIR(mode):
        raise ExportFailed(f"cannot write {path}: it is a directory; name a file in it", exit_code=2)
    return here, not stat.S_ISREG(mode)


@contextlib.contextmanager
def written_to(path: str) -> Iterator[BinaryIO]:
    """Where an export to `path` goes. A regular file (or none yet) becomes the transcript only when the block
    ends well (a failed export leaves no half transcript there): it is written beside it, mode 0600 (a transcript
    holds what the session saw), and renamed over it at the end. A FIFO, a device or a process's open file
    (`/dev/stdout`) is written straight into, and left what it was (see `_destination`)."""
    target, straight = _destination(path)
    if straight:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as error:
            raise ExportFailed(f"cannot write {path}: {error.strerror or error}; name a file you can write") from None
        with os.fdopen(fd, "wb") as out:
            yield out
        return
    directory, name = os.path.split(target)
    try:
        handle = tempfile.NamedTemporaryFile(dir=directory, prefix=f".{name}.", suffix=".part", delete=False)  # noqa: SIM115
    except OSError as error:
        raise ExportFailed(
            f"cannot write {path}: {error.strerror or error} in {directory}; name a file in a directory you can write"
        ) from None
    try:
        with handle:
            yield handle  # type: ignore[misc]  # a NamedTemporaryFile is a binary file
        os.replace(handle.name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise
