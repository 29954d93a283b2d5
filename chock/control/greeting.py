"""Every connection opens with a number (docs/protocol.md#the-greeting).

The client greets with the protocol number it was built against (`hello chock-control 1`), the server answers
with its own (`ok chock-control 1`), and both compare the numbers — never the shape of the reply. Nothing else is
read or written until they are equal, so a server a client cannot speak to is never asked to do anything. A
refusal names both numbers and which end to update. A first line that is a verb instead of a greeting is told
that its client predates the greeting.

The number moves when a client built against the old number would misread the new one, and at no other time:
a field added to a session row, a new verb or a new reply to a new verb is not such a change.
"""

from __future__ import annotations

from chock.control.framing import ErrorCode, ProtocolError, decode_error, show
from chock.control.message import LineProtocol


class Greeted:
    """The greeting was accepted: on the server, the client's; on the client, the server's answer."""

    __slots__ = ("name", "number")

    def __init__(self, name: str, number: int) -> None:
        self.name = name
        self.number = number

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Greeted) and (other.name, other.number) == (self.name, self.number)

    def __repr__(self) -> str:
        return f"Greeted({self.name!r}, {self.number})"


def encode_greeting(protocol: LineProtocol, number: int | None = None) -> bytes:
    """The client's first line: `hello chock-control 1`."""
    return f"hello {protocol.name} {protocol.number if number is None else number}\n".encode()


def encode_greeting_reply(protocol: LineProtocol, number: int | None = None) -> bytes:
    """The server's answer to a greeting it accepted: `ok chock-control 1`."""
    return f"ok {protocol.name} {protocol.number if number is None else number}\n".encode()


def _number(text: str) -> int | None:
    return int(text) if 0 < len(text) <= 9 and text.isascii() and text.isdigit() else None


def _mismatch(name: str, this: str, ours: int, other: str, theirs: int) -> str:
    older = this if ours < theirs else other
    return f"this {this} speaks {name} {ours}, the {other} {name} {theirs}: update the {older}"


def parse_greeting(line: str, protocol: LineProtocol, *, number: int | None = None) -> Greeted:
    """The server's check of a client's first line.

    - `hello <name> <ours>` is accepted.
    - `hello <name> <other number>` is `protocol`, naming both numbers and the older end.
    - `hello <another protocol's name> <n>` is `protocol` too: the client reached the wrong kind of socket.
    - A verb of this protocol first is `greeting`: the client predates the greeting, and the text names this
      end's number.
    - Anything else (a malformed `hello`, an empty line, noise) is `greeting` as well, saying what the greeting
      looks like.
    """
    ours = protocol.number if number is None else number
    name, server = protocol.name, protocol.server
    greeting = f"hello {name} {ours}"
    word, _, rest = line.partition(" ")
    if word != "hello":
        if word in protocol.requests:
            raise ProtocolError(
                ErrorCode.GREETING,
                f"{word} came before the greeting, so the client predates the greeting: update the client "
                f"(this {server} speaks {name} {ours}; a client opens with `{greeting}`)",
            )
        raise ProtocolError(
            ErrorCode.GREETING, f"the first line must be the greeting `{greeting}` (this {server} speaks {name} {ours})"
        )
    parts = rest.split(" ")
    theirs = _number(parts[1]) if len(parts) == 2 else None
    if theirs is None:
        raise ProtocolError(
            ErrorCode.GREETING,
            f"{show(line)} is not a greeting; this {server} speaks {name} {ours}: greet with `{greeting}`",
        )
    if parts[0] != name:
        raise ProtocolError(
            ErrorCode.PROTOCOL,
            f"this {server} speaks {name} {ours}, the client {parts[0]} {theirs}: the client reached the wrong socket",
        )
    if theirs != ours:
        raise ProtocolError(ErrorCode.PROTOCOL, _mismatch(name, server, ours, "client", theirs))
    return Greeted(name, theirs)


def check_greeting_reply(
    line: str, protocol: LineProtocol, *, number: int | None = None, peer: str | None = None
) -> Greeted:
    """The client's check of the server's answer to its greeting.

    Numbers are compared, never shapes beyond `ok <name> <n>`. A different number is `protocol`, naming both and
    the older end. An `error …` reply keeps the server's code and text (its refusal already names both numbers),
    except that `unknown-verb` or `bad-request` in answer to `hello` means the server predates the greeting,
    which is `protocol` with our number named. A reply with no number at all is `protocol` too.
    """
    ours = protocol.number if number is None else number
    name = protocol.name
    peer = peer or protocol.server
    refused = decode_error(line)
    if refused is not None:
        if refused.code in (ErrorCode.UNKNOWN_VERB, ErrorCode.BAD_REQUEST):
            raise ProtocolError(
                ErrorCode.PROTOCOL,
                f"the {peer} does not know the greeting, so it predates {name} {ours} (this client speaks "
                f"{name} {ours}): update the {peer} ({refused.text})",
            )
        raise refused
    parts = line.split(" ")
    theirs = _number(parts[2]) if len(parts) == 3 and parts[0] == "ok" else None
    if theirs is None:
        raise ProtocolError(
            ErrorCode.PROTOCOL,
            f"the {peer} answered the greeting with {show(line)}, which names no protocol number: it is not a "
            f"chock {peer}, or it predates {name} {ours} (this client's number); update the {peer}",
        )
    if parts[1] != name:
        raise ProtocolError(
            ErrorCode.PROTOCOL,
            f"this client speaks {name} {ours}, the {peer} {parts[1]} {theirs}: this address is not a chock "
            f"{peer}'s socket",
        )
    if theirs != ours:
        raise ProtocolError(ErrorCode.PROTOCOL, _mismatch(name, "client", ours, peer, theirs))
    return Greeted(name, theirs)
