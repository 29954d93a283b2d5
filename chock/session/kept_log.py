"""The log a host keeps of a session that moved away from it, and a session coming back
(docs/remote.md#moving-a-session): only what the log gained elsewhere travels.

The target keeps all of its log but its move-out span (`session.adopt {via: move}`, `session.end {reason: moved}`)
— or all of it, when it ends with a handover (a move cut before its adopt) — and an incoming log must begin with
exactly those bytes. `move-check` names them as `<length>:<sha256>` (`Kept`); the source digests as many bytes of
its own log, and when they are the same it sends only what follows them: a log part whose first line has an id
past 1. The target joins that part onto the bytes it keeps, and checks the whole as any log sent: a part that does
not continue them is refused for its first line that does not, and a source whose log differs within them sends
it whole, which is refused as a log that diverged.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
from pathlib import Path
from typing import BinaryIO, NamedTuple

from chock.errors import Refused
from chock.log.events import decode
from chock.log.reader import lines_backwards
from chock.paths import private_file

CHUNK = 1024 * 1024


class Kept(NamedTuple):
    """The first `length` bytes of a host's log of the session, and their sha256."""

    length: int
    sha256: str

    def text(self) -> str:
        """As `move-check` and `move-out` carry it: `<length>:<sha256>`."""
        return f"{self.length}:{self.sha256}"

    @classmethod
    def parse(cls, text: str) -> Kept | None:
        """The `<length>:<sha256>` `text` says, as the wire takes one (chock.control.move_protocol), or None."""
        from chock.control.framing import ProtocolError
        from chock.control.move_protocol import kept_prefix

        try:
            length, _, sha = kept_prefix(text).partition(":")
        except ProtocolError:
            return None
        return cls(int(length), sha)


def kept_length(here: BinaryIO, handed: bool) -> tuple[int | None, bool]:
    """How much of the log here an incoming one must begin with, read from its tail: all of it when it ends with a
    handover — a move-in to here cut before its adopt (the source's handover, as the incoming one ends: `handed`),
    or a move away from here whose target's answer was lost (a handover to another host: the log sent, beginning
    with all of it, is that host's copy coming back) —, else all before its last `session.adopt` when it ends with
    `end {reason: moved}`; None for any other log. And whether it ended with a handover (its worktree is a
    leftover)."""
    lines = lines_backwards(here)
    last = next(lines, None)
    end = (decode(last[1]) or {}) if last is not None else {}
    if end.get("type") == "session.adopt" and end.get("via") == "move" and not end.get("from"):
        # A step of a move away from here killed after its adopt: all before that span, a handover, is kept.
        assert last is not None
        before = next(lines, None)
        prior = (decode(before[1]) or {}) if before is not None else {}
        was_handed = prior.get("type") == "session.end" and prior.get("reason") == "handover" and prior.get("to")
        return (last[0], True) if was_handed and handed else (None, False)
    if end.get("type") != "session.end":
        return None, False
    if end.get("reason") == "handover" and handed and end.get("to"):
        return os.fstat(here.fileno()).st_size, True
    if end.get("reason") != "moved":
        return None, False
    assert last is not None
    for offset, line in itertools.chain([last], lines):
        # Only a line naming the type (or escaping a character, as JSON may) can be an adopt: the rest are skipped.
        if (b"session.adopt" in line or b"\\u" in line) and (decode(line) or {}).get("type") == "session.adopt":
            return offset, False
    return None, False


def kept_of(path: Path) -> Kept | None:
    """What the log at `path` keeps for a session coming back (a log sent ends with a handover), digested; None
    when there is no such log, or it keeps nothing."""
    try:
        here = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    with here:
        length, _ = kept_length(here, True)
        if not length:
            return None
        here.seek(0)
        digest = _digest(here, length)
    return None if digest is None else Kept(length, digest)


def begins_with(log: BinaryIO, kept: Kept) -> bool:
    """Whether `log` (read from its start) begins with exactly the bytes `kept` names, whole lines."""
    log.seek(kept.length - 1)
    if log.read(1) != b"\n":
        return False
    log.seek(0)
    return _digest(log, kept.length) == kept.sha256


def _digest(found: BinaryIO, length: int) -> str | None:
    """The sha256 of the next `length` bytes of `found`; None when it holds fewer."""
    digest = hashlib.sha256()
    while length:
        chunk = found.read(min(CHUNK, length))
        if not chunk:
            return None
        digest.update(chunk)
        length -= len(chunk)
    return digest.hexdigest()


def first_id(path: Path) -> int | None:
    """The id of the first line of the log part at `path`, when that line is an event with an int id."""
    with open(path, "rb") as found:
        event = decode(found.readline(CHUNK)) or {}
    found_id = event.get("id")
    return found_id if type(found_id) is int else None


def join(here: Path, sent: Path, bound: int) -> None:
    """The part `sent`, a log's lines past those the log `here` keeps, made the whole log sent: the kept bytes, then
    the part's (the file replaced; nothing of `here` changes). Refused when `here` keeps nothing, or the two would be
    longer than `bound`; the check of the whole refuses a part that does not continue what is kept."""
    try:
        kept_from = open(here, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise Refused(
            "the log sent begins past its first line, continuing a log this host keeps of the session, and it keeps "
            "none: move the session again. Nothing was written"
        ) from None
    with kept_from:
        length, _ = kept_length(kept_from, True)
        if not length:
            raise Refused(
                "the log sent begins past its first line, continuing a log this host keeps of the session, and the "
                "one here is none a log sent may continue (it is running here, or it did not move away from here). "
                "Nothing was written"
            )
        if length + os.stat(sent).st_size > bound:
            raise Refused(
                f"the log sent, joined onto the one here, is longer than {bound} bytes, the most a move carries"
            )
        whole = sent.with_name(f"{sent.name}.whole")
        with open(whole, "wb", opener=private_file) as out, open(sent, "rb") as tail:
            _append(kept_from, out, length)
            _append(tail, out, os.fstat(tail.fileno()).st_size)
        os.replace(whole, sent)


def _append(source: BinaryIO, target: BinaryIO, length: int) -> None:
    """The first `length` bytes of `source` appended to `target`: copied by the kernel where it can."""
    target.flush()  # what an earlier append left in its buffer goes first
    offset = 0
    with contextlib.suppress(OSError):  # another file system, or a kernel without it: read and written below
        while offset < length:
            copied = os.copy_file_range(source.fileno(), target.fileno(), min(length - offset, 1 << 30), offset)
            if not copied:
                break
            offset += copied
    source.seek(offset)
    target.seek(0, os.SEEK_END)
    while offset < length:
        chunk = source.read(min(CHUNK, length - offset))
        if not chunk:
            raise Refused("the log here was cut short while it was copied; move the session again")
        target.write(chunk)
        offset += len(chunk)
