"""The parts of a session that travel when it moves between hosts, as the wire carries them (docs/protocol.md#moving-
a-session): the log, its end, the branch's bundle in pieces and the scratchpad. Sans-I/O: bytes in, bytes out, no
socket and no file.

A part travels as exactly `<length>` bytes after the line that announces it (`send`'s reply, `receive`'s request):

- `log` and `log-end` as they are: the log's own lines, each at most the event limit, the last ending in `\\n` — the
  log as the source took it, sent while the other parts are made, and the span the source then ended it with (its
  `session.adopt` and its `session.end {reason: handover}`), which the target joins onto it;
- `bundle.<n>` and `scratchpad` base64-encoded (RFC 4648, with padding) in lines of at most 64 KiB and a `\\n` each:
  every line but the last holds exactly `RAW_PER_LINE` bytes of the part, so one part has one encoding. The bundle
  travels as pieces `bundle.0`, `bundle.1`, … of `PIECE` bytes each but the last (which holds fewer, maybe none),
  each sent as soon as git has written it, so the bundle crosses while it is made; the target joins them in order.

`<length>` counts the bytes on the wire (for the bundle's pieces and the scratchpad, the encoded bytes and their
newlines); `<sha256>` is the digest of the part itself (the file's bytes, decoded). A part is bounded by what it is:
`bound` says how much of each a host takes, and a length past its part's wire bound is refused before any byte of
the part is read.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Iterator

from chock.control import framing as f
from chock.log.events import MAX_EVENT_BYTES

# What a session's move carries, in the order a target checks it; the bundle last, since it is the largest and the
# slowest to check. Each part but the bundle travels whole; the bundle, in pieces.
BUNDLE = "bundle"
WHOLE = ("log", "log-end", "scratchpad")
PARTS = (*WHOLE, BUNDLE)
# How they travel: each lane on connections of its own, the lanes at once (the log beside the bundle, so a move
# takes about as long as the larger of the two, not their sum), the parts of a lane one after the other, each as
# soon as the source says it is staged (`move-out`'s reply): the log and the bundle's pieces while the source still
# makes the bundle, the log's end and the scratchpad once it has made everything.
LANES = (("log", "log-end"), ("bundle", "scratchpad"))

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

# A piece of the bundle: small enough that the last one, sent once git is done, is quick to send, large enough that
# a piece's two verbs cost little beside its bytes. Every piece but the last holds exactly `PIECE` bytes; the last
# holds fewer (none, when the bundle is a whole number of pieces), so a target knows the bundle whole when it comes.
PIECE = 16 * 1024 * 1024
MOST_PIECES = PART_BOUNDS[BUNDLE] // PIECE + 1


def piece(index: int) -> str:
    """The name of the bundle's piece `index` (from 0)."""
    return f"{BUNDLE}.{index}"


def piece_index(part: str) -> int | None:
    """Which piece of the bundle `part` names (`bundle.<n>`, `n` in ASCII digits, no leading zero, below
    MOST_PIECES), or None when it names no piece."""
    prefix, _, index = part.partition(".")
    if prefix != BUNDLE or not 0 < len(index) <= len(str(MOST_PIECES)) or not index.isascii() or not index.isdigit():
        return None
    return int(index) if index == str(int(index)) and int(index) < MOST_PIECES else None


def kind(part: str) -> str:
    """What `part` is of the session: one of PARTS (a piece of the bundle is the bundle)."""
    return BUNDLE if piece_index(part) is not None else part


def lane(part: str) -> int:
    """The lane `part` travels in."""
    return next(index for index, kinds in enumerate(LANES) if kind(part) in kinds)


def bound(part: str) -> int:
    """The most a host takes of `part` (a name `part_name` took), its own bytes."""
    return PIECE if kind(part) == BUNDLE else PART_BOUNDS[part]


def check_pieces(sizes: list[int]) -> None:
    """The sizes of a bundle's pieces, in order: 1 to MOST_PIECES of them, each but the last exactly PIECE bytes, the
    last fewer, all of them within the bundle's bound; `bad-request` saying which rule fails."""
    if not 0 < len(sizes) <= MOST_PIECES:
        raise f.bad_request(f"a bundle travels in 1 to {MOST_PIECES} pieces (this one in {len(sizes)})")
    if any(size != PIECE for size in sizes[:-1]) or not 0 <= sizes[-1] < PIECE:
        raise f.bad_request(f"every piece of a bundle but the last holds exactly {PIECE:,} bytes, the last fewer")
    if sum(sizes) > PART_BOUNDS[BUNDLE]:
        raise f.bad_request(f"a bundle may be at most {f.size(PART_BOUNDS[BUNDLE])}")


def encoded(part: str) -> bool:
    """Whether `part` travels base64-encoded (the bundle's pieces and the scratchpad) rather than as it is (the log,
    and its end)."""
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
    return wire_length(part, bound(part))


def part_name(value: str) -> str:
    """A part as the wire names one: `log`, `log-end`, `scratchpad` or a piece of the bundle, `bundle.<n>`."""
    if value not in WHOLE and not (isinstance(value, str) and piece_index(value) is not None):
        raise f.bad_request(
            f"{f.show(str(value))} is not a part of a session (the parts are log, log-end, scratchpad and bundle.0 "
            f"to bundle.{MOST_PIECES - 1})"
        )
    return value


def digest(value: str) -> str:
    """A sha256 as 64 lower-case hex digits."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value
    raise f.bad_request(f"{f.show(str(value))} is not a sha256 (64 lower-case hex digits)")


def check_length(part: str, length: int) -> int:
    """`length` (bytes on the wire) for `part`, or `too-large` naming the part's bound."""
    most, wire = bound(part), wire_bound(part)
    if length > wire:
        raise f.ProtocolError(
            f.ErrorCode.TOO_LARGE,
            f"a {part} may be at most {f.size(most)} ({wire:,} bytes on the wire); this one is "
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
        if self.size > bound(self.part):
            raise f.ProtocolError(f.ErrorCode.TOO_LARGE, f"a {self.part} may be at most {f.size(bound(self.part))}")
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
