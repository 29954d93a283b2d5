"""The parts of a session that travel when it moves between hosts, as the wire carries them (docs/protocol.md#moving-
a-session): the log, its end, the branch's bundle and the scratchpad. Sans-I/O: bytes in, bytes out, no socket and
no file.

A part travels as exactly `<length>` bytes after the line that announces it (`send`'s reply, `receive`'s request):

- `log` and `log-end` as they are: the log's own lines, each at most the event limit, the last ending in `\\n` — the
  log as the source took it, sent while the other parts are made, and the span the source then ended it with (its
  `session.adopt` and its `session.end {reason: handover}`), which the target joins onto it;
- `bundle` and `scratchpad` base64-encoded (RFC 4648, with padding) in lines of at most 64 KiB and a `\\n` each:
  every line but the last holds exactly `RAW_PER_LINE` bytes of the part, so one part has one encoding.

`<length>` counts the bytes on the wire (for the bundle and the scratchpad, the encoded bytes and their newlines);
`<sha256>` is the digest of the part itself (the file's bytes, decoded). A part is bounded by what it is:
`PART_BOUNDS` says how much of each a host takes, and a length past its part's wire bound is refused before any
byte of the part is read.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Iterator

from chock.control import framing as f
from chock.log.events import MAX_EVENT_BYTES

# The parts, in the order a target checks them; the bundle last, since it is the largest and the slowest to check.
PARTS = ("log", "log-end", "scratchpad", "bundle")
# How they travel: each lane on connections of its own, the lanes at once (the log beside the bundle, so a move
# takes about as long as the larger of the two, not their sum), the parts of a lane one after the other. The log
# goes ahead: it is sent while the source still makes the bundle (`move-out`'s first line), the rest once the
# source has staged them all.
LANES = (("log", "log-end"), ("scratchpad", "bundle"))
AHEAD = "log"

# How much of each part a host takes, decoded: a log of 256 MiB is more than a year of a busy session's events
# (its outputs are cut at their own bounds); its end is the two events of a move-out's span; a bundle of 1 GiB holds
# any branch a session makes (its worktree is bounded far below that); the scratchpad is one note file, bounded
# where the session writes it.
PART_BOUNDS = {
    "log": 256 * 1024 * 1024,
    "log-end": 2 * MAX_EVENT_BYTES,
    "bundle": 1024 * 1024 * 1024,
    "scratchpad": 16 * 1024 * 1024,
}

# A base64 line: 64 KiB of text, holding 48 KiB of the part, and its `\n`.
ENCODED_LINE = 64 * 1024
RAW_PER_LINE = ENCODED_LINE // 4 * 3


def encoded(part: str) -> bool:
    """Whether `part` travels base64-encoded (the bundle and the scratchpad) rather than as it is (the log, and its
    end)."""
    return part not in ("log", "log-end")


def line_bound(part: str) -> int:
    """The longest line of `part` on the wire, without its `\\n`."""
    return ENCODED_LINE if encoded(part) else MAX_EVENT_BYTES


def wire_length(part: str, size: int) -> int:
    """How many bytes a part of `size` bytes takes on the wire."""
    if not encoded(part) or size == 0:
        return size
    lines = -(-size // RAW_PER_LINE)
    return 4 * -(-size // 3) + lines


def wire_bound(part: str) -> int:
    """The longest `<length>` a host takes for `part`: its bound, as it travels."""
    return wire_length(part, PART_BOUNDS[part])


def part_name(value: str) -> str:
    if value not in PARTS:
        raise f.bad_request(f"{f.show(str(value))} is not a part of a session (the parts are {', '.join(PARTS)})")
    return value


def digest(value: str) -> str:
    """A sha256 as 64 lower-case hex digits."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value
    raise f.bad_request(f"{f.show(str(value))} is not a sha256 (64 lower-case hex digits)")


def check_length(part: str, length: int) -> int:
    """`length` (bytes on the wire) for `part`, or `too-large` naming the part's bound."""
    bound = wire_bound(part)
    if length > bound:
        raise f.ProtocolError(
            f.ErrorCode.TOO_LARGE,
            f"a {part} may be at most {f.size(PART_BOUNDS[part])} ({bound:,} bytes on the wire); this one is "
            f"{length:,} bytes: nothing of it was read",
        )
    return length


def encode_chunks(part: str, read: Callable[[int], bytes], size: int) -> Iterator[bytes]:
    """The wire bytes of a part read by `read(n)` (a file's `read`), `size` bytes in all, in chunks of about 1 MiB;
    a part that ends early raises OSError (the file changed under the reader)."""
    left = size
    step = RAW_PER_LINE * 16 if encoded(part) else 1024 * 1024
    while left:
        data = read(min(step, left))
        if not data:
            raise OSError(f"the {part} ended {left:,} bytes early")
        left -= len(data)
        if not encoded(part):
            yield data
            continue
        yield b"".join(
            binascii.b2a_base64(data[at : at + RAW_PER_LINE], newline=True) for at in range(0, len(data), RAW_PER_LINE)
        )


class PartDecoder:
    """A part's wire bytes in (as they come, `feed`), the part's own bytes out; `finish` checks what came against
    the announced sha256. Every check is here: a base64 line that is not exactly `ENCODED_LINE` long (but the
    last), or that does not decode strictly, is `bad-request`; a digest that differs is `bad-request` naming both."""

    def __init__(self, part: str, sha256: str) -> None:
        self.part = part
        self.sha256 = sha256
        import hashlib  # only when a part is received (docs/architecture.md#start-up)

        self.size = 0
        self._hash = hashlib.sha256()
        self._held = bytearray()  # an unfinished base64 line
        self._last = False  # a base64 line shorter than the rest came: it must be the last

    def feed(self, data: bytes | bytearray) -> bytes | bytearray:
        """The part's bytes that `data` (the next bytes of the wire) carries."""
        if not encoded(self.part):
            self._take(data)
            return data
        buffer = self._held + data if self._held else data
        view = memoryview(buffer)
        out = []
        at = 0
        while (end := buffer.find(b"\n", at, at + ENCODED_LINE + 1)) >= 0:
            out.append(self._line(view[at:end]))
            at = end + 1
        if len(buffer) - at > ENCODED_LINE:
            self._refuse()
        self._held = bytearray(view[at:])
        view.release()
        decoded = b"".join(out)
        self._take(decoded)
        return decoded

    def _line(self, line: memoryview) -> bytes:
        """One base64 line's bytes: every line but the last is exactly ENCODED_LINE long, and decodes strictly."""
        if self._last or len(line) % 4:
            self._refuse()
        self._last = len(line) < ENCODED_LINE
        try:
            return binascii.a2b_base64(line, strict_mode=True)
        except binascii.Error as error:
            raise f.bad_request(f"the {self.part} is not base64 ({error}); nothing of it was kept") from None

    def _refuse(self) -> None:
        raise f.bad_request(
            f"the {self.part} is not base64 in lines of {ENCODED_LINE:,} characters (the last may be shorter); "
            "nothing of it was kept"
        )

    def _take(self, data: bytes | bytearray) -> None:
        self.size += len(data)
        if self.size > PART_BOUNDS[self.part]:
            raise f.ProtocolError(
                f.ErrorCode.TOO_LARGE, f"a {self.part} may be at most {f.size(PART_BOUNDS[self.part])}"
            )
        self._hash.update(data)

    def finish(self) -> None:
        """The part came whole: its digest must be the one announced."""
        if self._held:
            raise f.bad_request(f"the {self.part} does not end with a whole line; nothing of it was kept")
        found = self._hash.hexdigest()
        if found != self.sha256:
            raise f.bad_request(
                f"the {self.part}'s bytes have sha256 {found}, not the {self.sha256} announced: it was damaged on "
                "the way; nothing of it was kept (move it again)"
            )
