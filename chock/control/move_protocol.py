"""The control protocol's verbs that move a session between hosts (docs/protocol.md#moving-a-session): each a request
and its reply, part of chock.control.daemon_protocol's `VERBS` (declared here so that table stays one screenful of
verbs a session's life uses; nothing else declares a verb).

    move-check <id>\\t<base commit>\\t<instance>\\t<project>   -> ok <host name>[\\t<tip>[\\t<kept>]]  (on the target)
    move-out <id>\\t<to host>\\t<wait seconds>\\t<address>\\t<have>\\t<kept>
                 -> ok <part>\\t<length>\\t<sha256> per part staged, then ok <manifest JSON>  (on the source)
    send <id>\\t<part>                                         -> ok <length>\\t<sha256>, then <length> bytes
    receive <id>\\t<part>\\t<length>\\t<sha256>, then <length> bytes -> ok received          (on the target)
    move-in <id>\\t<project>\\t<from host>\\t<0|1>\\t<instance>     -> ok <adopt event id>     (on the target)
    moved <id>\\t<to host>                                     -> ok moved                 (on the source)
    move-drop <id>                                            -> ok dropped               (on the target)
"""

from __future__ import annotations

import json

from chock.control import framing as f
from chock.control import parts
from chock.control.message import Bare, ReplyLine, Request

# A move's children do work a session's start does not: the source's waits for a running session's turn boundary
# (`--wait` twice, as `chock detach` does) and bundles its branch; the target's checks every line of the log and
# fetches a bundle of up to 1 GiB with every object checked. A client waits this long for either, beyond `--wait`.
MOVE_SECONDS = 600.0

_HEX = frozenset("0123456789abcdef")
_DIGITS = frozenset("0123456789")
_HOST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def commit(value: str) -> str:
    """A commit as git names it in full: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits."""
    if isinstance(value, str) and len(value) in (40, 64) and _HEX.issuperset(value):
        return value
    raise f.bad_request(f"{f.show(str(value))} is not a commit (40 or 64 lower-case hex digits)")


def host_name(value: str) -> str:
    """A host as a log names it (`session.end {to}`, `session.adopt {from}`): a host name, or a connection's name
    — 1 to 253 letters, digits, `.`, `-` or `_`, not starting with `-` (it becomes a child's argument)."""
    if isinstance(value, str) and 0 < len(value) <= 253 and _HOST.issuperset(value) and value[0] != "-":
        return value
    raise f.bad_request(f"{f.show(str(value))} is not a host name (letters, digits, . - and _)")


def target_address(value: str) -> str:
    """A move's target as the client reached it, as `--daemon` takes an address (never a connection's name: the
    source's config.zon may name other connections), in its own spelling: at most 1024 characters."""
    from chock.control.endpoint import BadAddress, parse_address

    try:
        if not isinstance(value, str) or len(value) > 1024:
            raise BadAddress("longer than 1024 characters")
        return str(parse_address(value))
    except BadAddress as error:
        raise f.bad_request(f"{f.show(str(value)[:80])} is not a daemon's address ({error})") from None


def kept_prefix(value: str) -> str:
    """What a target keeps of a session's log, as `<length>:<sha256>` (chock.session.kept_log.Kept): a length from 1
    to 12 ASCII digits with no leading zero, and 64 lower-case hex digits."""
    length, colon, sha = value.partition(":") if isinstance(value, str) else ("", "", "")
    counted = 0 < len(length) <= 12 and length[0] != "0" and _DIGITS.issuperset(length)
    if colon and counted and len(sha) == 64 and _HEX.issuperset(sha):
        return value
    raise f.bad_request(f"{f.show(str(value)[:80])} is not what a host keeps of a log (<length>:<sha256>)")


def seconds(name: str, field: str) -> int:
    value = f.number(name, field)
    if not 0 < value <= 24 * 3600:
        raise f.bad_request(f"{name} must be from 1 to 86400 seconds (got {value})")
    return value


# --------------------------------------------------------------------------------------------------------
# Replies


class HostNamed(ReplyLine):
    """`ok <host name>[\\t<tip>[\\t<kept>]]`: `move-check`'s answer, the target's own host name (what the source's log
    says it went to); when the project there has a branch `chock/<id>`, the commit it names (empty: none): every
    object it reaches is there already, so the bundle leaves them out (`move-out`'s `<have>`); and when the target
    keeps a log of the session (a session coming back), `<length>:<sha256>` of what the log sent must begin with
    (chock.session.kept_log): a log that does is sent without it (`move-out`'s `<kept>`)."""

    __slots__ = ("host", "kept", "tip")
    WHAT = "ok <host name>[\\t<tip>[\\t<kept>]]"

    def __init__(self, host: str, tip: str = "", kept: str = "") -> None:
        self.host = host
        self.tip = commit(tip) if tip else ""
        self.kept = kept_prefix(kept) if kept else ""

    def encode(self) -> bytes:
        fields = [self.host, self.tip, self.kept] if self.kept else [self.host, self.tip] if self.tip else [self.host]
        return f"ok {chr(9).join(fields)}\n".encode()

    @classmethod
    def decode(cls, line: str) -> HostNamed | None:
        if not line.startswith("ok "):
            return None
        fields = line[3:].split("\t")
        if len(fields) > 3 or (len(fields) == 2 and not fields[1]) or (len(fields) == 3 and not fields[2]):
            return None
        fields += [""] * (3 - len(fields))
        try:
            return cls(host_name(fields[0]), commit(fields[1]) if fields[1] else "", fields[2])
        except f.ProtocolError:
            return None


class Staging(ReplyLine):
    """A line of `move-out`'s reply: a part staged (`StagedPart`), or every part staged (`Manifest`, the last)."""

    __slots__ = ()
    WHAT = "ok <part>\\t<length>\\t<sha256> or ok <manifest JSON>"

    @classmethod
    def decode(cls, line: str) -> Staging | None:
        return StagedPart.decode(line) or Manifest.decode(line)


class StagedPart(Staging):
    """`ok <part>\\t<length>\\t<sha256>`: a part `move-out`'s child staged (its own bytes), which the client may send
    at once: the log as the child took it, then each piece of the bundle as git writes it, while the rest is made."""

    __slots__ = ("length", "part", "sha256")
    WHAT = "ok <part>\\t<length>\\t<sha256>"

    def __init__(self, part: str, length: int, sha256: str) -> None:
        self.part = parts.part_name(part)
        if type(length) is not int or not 0 <= length <= parts.bound(part):
            raise f.bad_request(f"a {part} staged has no length within its bound")
        self.length = length
        self.sha256 = parts.digest(sha256)

    def encode(self) -> bytes:
        return f"ok {self.part}\t{self.length}\t{self.sha256}\n".encode()

    @classmethod
    def decode(cls, line: str) -> StagedPart | None:
        fields = line[3:].split("\t")
        if not line.startswith("ok ") or len(fields) != 3:
            return None
        try:
            return cls(fields[0], f.number("the length", fields[1]), fields[2])
        except f.ProtocolError:
            return None


class Manifest(Staging):
    """`ok <manifest JSON>`: what `move-out`'s child staged — each part's name, length (the part's own bytes) and
    sha256, the session's base commit and instance, whether it was running — and the source's own host name."""

    __slots__ = ("base", "host", "instance", "parts", "session_id", "was_running")
    WHAT = 'ok {"parts": […], "base": …, "instance": …, "session": …, "was_running": …, "host": …}'

    def __init__(
        self,
        parts_: list[tuple[str, int, str]],
        base: str,
        instance: str,
        session_id: str,
        was_running: bool,
        host: str,
    ) -> None:
        self.parts = parts_
        self.base = base
        self.instance = instance
        self.session_id = session_id
        self.was_running = was_running
        self.host = host

    def value(self) -> dict[str, object]:
        return {
            "parts": [{"part": part, "length": length, "sha256": sha} for part, length, sha in self.parts],
            "base": self.base,
            "instance": self.instance,
            "session": self.session_id,
            "was_running": self.was_running,
            "host": self.host,
        }

    def encode(self) -> bytes:
        return f.reply_line("ok " + json.dumps(self.value(), separators=(", ", ": ")))

    @classmethod
    def from_value(cls, value: object) -> Manifest:
        """The manifest a JSON value says, every field checked; `bad-request` naming the first that is wrong."""
        if not isinstance(value, dict):
            raise f.bad_request("a move's manifest is a JSON object")
        listed = value.get("parts")
        named = [each.get("part") for each in listed if isinstance(each, dict)] if isinstance(listed, list) else []
        whole = list(parts.WHOLE)
        pieces = [parts.piece(index) for index in range(min(parts.MOST_PIECES, max(0, len(named) - len(whole))))]
        if not isinstance(listed, list) or len(named) != len(listed) or named != [*whole, *pieces]:
            raise f.bad_request(
                "a move's manifest names each part once, in this order: log, log-end, scratchpad, then the bundle's "
                f"pieces from bundle.0 (at most {parts.MOST_PIECES})"
            )
        found = []
        for each in listed:
            length = each.get("length")
            if type(length) is not int or not 0 <= length <= parts.bound(each["part"]):
                raise f.bad_request(f"the manifest's {each['part']} has no length within its bound")
            found.append((each["part"], length, parts.digest(each.get("sha256"))))
        parts.check_pieces([length for _, length, _ in found[len(whole) :]])
        if not isinstance(value.get("was_running"), bool):
            raise f.bad_request("the manifest does not say whether the session was running")
        return cls(
            found,
            commit(value.get("base")),  # type: ignore[arg-type]
            f.instance_name(value.get("instance")),  # type: ignore[arg-type]
            f.session_id(value.get("session")),  # type: ignore[arg-type]
            value["was_running"],
            host_name(value.get("host")),  # type: ignore[arg-type]
        )

    @classmethod
    def decode(cls, line: str) -> Manifest | None:
        if not line.startswith("ok {"):
            return None
        try:
            return cls.from_value(json.loads(line[3:]))
        except (ValueError, RecursionError, f.ProtocolError):
            return None


class PartHeader(ReplyLine):
    """`ok <length>\\t<sha256>`: `send`'s first line, which exactly `<length>` bytes of the part follow."""

    __slots__ = ("body_length", "sha256")
    WHAT = "ok <length>\\t<sha256>"

    def __init__(self, body_length: int, sha256: str) -> None:
        self.body_length = body_length
        self.sha256 = sha256

    def encode(self) -> bytes:
        return f"ok {self.body_length}\t{self.sha256}\n".encode()

    @classmethod
    def decode(cls, line: str) -> PartHeader | None:
        length, tab, sha = line[3:].partition("\t")
        if not line.startswith("ok ") or not tab:
            return None
        try:
            return cls(f.number("the length", length), parts.digest(sha))
        except f.ProtocolError:
            return None


class MovedIn(ReplyLine):
    """`ok <adopt event id>`: the target's child logged its `session.adopt {via: move}` (the commit point)."""

    __slots__ = ("adopted",)
    WHAT = "ok <adopt event id>"

    def __init__(self, adopted: int) -> None:
        self.adopted = adopted

    def encode(self) -> bytes:
        return f"ok {self.adopted}\n".encode()

    @classmethod
    def decode(cls, line: str) -> MovedIn | None:
        if not line.startswith("ok "):
            return None
        try:
            return cls(f.number("the adopt event id", line[3:]))
        except f.ProtocolError:
            return None


class Received(Bare):
    """`ok received`: the part came whole, matched its sha256, and is kept for `move-in`."""

    __slots__ = ()
    LINE = "ok received"
    WHAT = "`ok received`"


class MovedOut(Bare):
    """`ok moved`: the source's log says the session moved; its worktree is gone."""

    __slots__ = ()
    LINE = "ok moved"
    WHAT = "`ok moved`"


class Dropped(Bare):
    """`ok dropped`: nothing received for the session's move is kept any more."""

    __slots__ = ()
    LINE = "ok dropped"
    WHAT = "`ok dropped`"


# --------------------------------------------------------------------------------------------------------
# Requests


class MoveCheckRequest(Request):
    """`move-check <id>\\t<base commit>\\t<instance>\\t<project>` -> `ok <host name>`: whether the target takes the
    session, asked before either side changes — its project a git repository holding the base commit, the instance
    one it has, and the id one it does not hold (or one that moved away from it: a session coming back)."""

    __slots__ = ("base", "instance", "project", "session_id")
    ATTRS = ("session_id", "base", "instance", "project")
    verb = "move-check"
    FIELDS = ("session id", "base commit", "instance", "project")
    REPLY = HostNamed
    WAIT = 60.0

    def __init__(self, session_id: str, base: str, instance: str, project: str) -> None:
        self.session_id = f.session_id(session_id)
        self.base = commit(base)
        self.instance = f.instance_name(instance)
        self.project = f.absolute_project(project)


class MoveOutRequest(Request):
    """`move-out <id>\\t<to host>\\t<wait seconds>\\t<address>\\t<have>\\t<kept>` -> `ok <part>\\t<length>\\t<sha256>`
    for each part as it is staged, then `ok <manifest JSON>`: the source's child takes the session (a running one at
    its next turn boundary, `--wait` bounding each round trip) and stages its log as it took it and its bundle piece
    by piece — each said at once, so the client sends it while the rest is made —, then its other parts, and ends its
    span handed over to the target (the log's end).
    `<address>` is where the client reached the target (an address as `--daemon` takes one; empty: none the source
    could use), which `chock run --continue` asks there. `<have>` is the commit the target's `chock/<id>` names
    (`move-check`'s `<tip>`; empty: none): the bundle leaves out every object it reaches, when it is an ancestor of
    the branch here. `<kept>` is what the target keeps of the log (`move-check`'s `<kept>`; empty: nothing): when the
    log here begins with exactly it, only the rest is sent."""

    __slots__ = ("address", "have", "kept", "session_id", "to", "wait")
    ATTRS = ("session_id", "to", "wait", "address", "have", "kept")
    verb = "move-out"
    FIELDS = ("session id", "to host", "wait seconds", "address", "have", "kept")
    REPLY = StagedPart  # the first part staged
    ITEM = Staging  # each further part staged, then the manifest

    def __init__(self, session_id: str, to: str, wait: int, address: str = "", have: str = "", kept: str = "") -> None:
        self.session_id = f.session_id(session_id)
        self.to = host_name(to)
        if type(wait) is not int or not 0 < wait <= 24 * 3600:
            raise f.bad_request(f"the wait must be from 1 to 86400 seconds (got {f.show(str(wait))})")
        self.wait = wait
        self.address = target_address(address) if address else ""
        self.have = commit(have) if have else ""
        self.kept = kept_prefix(kept) if kept else ""

    @classmethod
    def from_fields(cls, fields: list[str]) -> MoveOutRequest:
        return cls(fields[0], fields[1], seconds("the wait", fields[2]), fields[3], fields[4], fields[5])

    @property
    def WAIT(self) -> float:  # type: ignore[override]  # the client's bound, as every request names it
        return 2 * self.wait + MOVE_SECONDS


class SendRequest(Request):
    """`send <id>\\t<part>` -> `ok <length>\\t<sha256>`, then exactly `<length>` bytes: a part `move-out` staged."""

    __slots__ = ("part", "session_id")
    ATTRS = ("session_id", "part")
    verb = "send"
    FIELDS = ("session id", "part")
    REPLY = PartHeader
    REPLY_BODY = True
    WAIT = MOVE_SECONDS  # the daemon reads the part through once for its digest before it says the first line

    def __init__(self, session_id: str, part: str) -> None:
        self.session_id = f.session_id(session_id)
        self.part = parts.part_name(part)


class ReceiveRequest(Request):
    """`receive <id>\\t<part>\\t<length>\\t<sha256>`, then exactly `<length>` bytes -> `ok received`: the one verb
    that reads past its request. A length past the part's bound is refused before any byte of it is read."""

    __slots__ = ("length", "part", "session_id", "sha256")
    ATTRS = ("session_id", "part", "length", "sha256")
    verb = "receive"
    FIELDS = ("session id", "part", "length", "sha256")
    REPLY = Received
    BODY = True

    def __init__(self, session_id: str, part: str, length: int, sha256: str) -> None:
        self.session_id = f.session_id(session_id)
        self.part = parts.part_name(part)
        self.length = parts.check_length(self.part, f.event_id("the length", length))
        self.sha256 = parts.digest(sha256)

    @classmethod
    def from_fields(cls, fields: list[str]) -> ReceiveRequest:
        return cls(fields[0], fields[1], f.number("the length", fields[2]), fields[3])

    def body_length(self) -> int:
        return self.length

    def body_line_limit(self) -> int:
        return parts.line_bound(self.part)


class MoveInRequest(Request):
    """`move-in <id>\\t<project>\\t<from host>\\t<running 0|1>\\t<instance>` -> `ok <adopt event id>`: the target's
    child takes the parts received, and answers once its `session.adopt` is logged; `<instance>` empty keeps the
    session's own."""

    __slots__ = ("instance", "project", "running", "session_id", "source")
    ATTRS = ("session_id", "project", "source", "running", "instance")
    verb = "move-in"
    FIELDS = ("session id", "project", "from host", "running 0|1", "instance")
    REPLY = MovedIn
    WAIT = MOVE_SECONDS

    def __init__(self, session_id: str, project: str, source: str, running: bool, instance: str = "") -> None:
        self.session_id = f.session_id(session_id)
        self.project = f.absolute_project(project)
        self.source = host_name(source)
        if not isinstance(running, bool):
            raise f.bad_request("running is 0 or 1")
        self.running = running
        self.instance = f.instance_name(instance) if instance else ""

    @classmethod
    def from_fields(cls, fields: list[str]) -> MoveInRequest:
        if fields[3] not in ("0", "1"):
            raise f.bad_request(f"running is 0 or 1 (got {f.show(fields[3])})")
        return cls(fields[0], fields[1], fields[2], fields[3] == "1", fields[4])

    def fields(self) -> tuple[str, ...]:
        return (self.session_id, self.project, self.source, "1" if self.running else "0", self.instance)


class MovedRequest(Request):
    """`moved <id>\\t<to host>` -> `ok moved`: once the target adopted the session, the source's child logs that it
    moved there and removes its worktree."""

    __slots__ = ("session_id", "to")
    ATTRS = ("session_id", "to")
    verb = "moved"
    FIELDS = ("session id", "to host")
    REPLY = MovedOut
    WAIT = MOVE_SECONDS

    def __init__(self, session_id: str, to: str) -> None:
        self.session_id = f.session_id(session_id)
        self.to = host_name(to)


class MoveDropRequest(Request):
    """`move-drop <id>` -> `ok dropped`: the parts received for a move that will not happen are removed."""

    __slots__ = ("session_id",)
    ATTRS = ("session_id",)
    verb = "move-drop"
    FIELDS = ("session id",)
    REPLY = Dropped

    def __init__(self, session_id: str) -> None:
        self.session_id = f.session_id(session_id)


MOVE_VERBS = (
    MoveCheckRequest, MoveOutRequest, SendRequest, ReceiveRequest, MoveInRequest, MovedRequest, MoveDropRequest,
)  # fmt: skip
