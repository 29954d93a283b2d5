"""A daemon's address as a person writes it: `unix:/path`, `/path`, `host:port`, `[ipv6]:port` or
`ssh://[user@]host[:port][/path]` (chock/control/ssh.py), read by `parse_address` into an `Address`.

Which daemon a command acts through, and what a connection's name stands for, is chock/control/address.py's;
this module only reads what is written, so that config.zon's reader can check its `.connections` with it.
"""

from __future__ import annotations

import re

from chock.control.ssh import SCHEME, BadAddress, SshTarget, parse_ssh

# The name that stands for this machine's default daemon (the state directory's socket).
LOCAL = "local"
# A connection's name in config.zon: never an address (those hold `:` or `/`).
CONNECTION_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")

__all__ = ["BadAddress", "SshTarget"]


class Address:
    """A unix socket `path`, a TCP `host` and `port`, or a daemon reached over `ssh`."""

    __slots__ = ("host", "path", "port", "ssh")

    def __init__(
        self, path: str | None = None, host: str | None = None, port: int | None = None, ssh: SshTarget | None = None
    ) -> None:
        self.path = path
        self.host = host
        self.port = port
        self.ssh = ssh

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Address) and other._key() == self._key()

    def _key(self) -> tuple[object, ...]:
        return (self.path, self.host, self.port, self.ssh.key() if self.ssh else None)

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Address({str(self)!r})"

    def __str__(self) -> str:
        if self.ssh is not None:
            return str(self.ssh)
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in (self.host or "") else f"{self.host}:{self.port}"


_HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_V6_CHARACTERS = frozenset("0123456789abcdefABCDEF:.")


def _port(text: str) -> int | None:
    if 0 < len(text) <= 5 and text.isascii() and text.isdigit() and 0 < int(text) < 65536:
        return int(text)
    return None


def parse_address(text: str) -> Address:
    """`unix:/path`, `/abs/path`, `host:port`, `[ipv6]:port` or `ssh://…` as an Address; anything else is
    BadAddress."""
    if text.startswith(SCHEME):
        return Address(ssh=parse_ssh(text))
    if text.startswith(("unix:", "/")):
        path = text[len("unix:") :] if text.startswith("unix:") else text
        if path.startswith("/") and "\0" not in path:
            return Address(path=path)
        raise BadAddress(f"{text!r}: a unix socket address needs an absolute path, as in unix:/run/d.sock")
    if text.startswith("["):
        inside, bracket, port = text[1:].partition("]:")
        host, _, zone = inside.partition("%")
        if bracket and host and _V6_CHARACTERS.issuperset(host) and _HOST_CHARACTERS.issuperset(zone):
            number = _port(port)
            if number is not None:
                return Address(host=inside, port=number)
    else:
        head, colon, tail = text.rpartition(":")
        if colon and ":" in head:
            raise BadAddress(f"{text!r}: an IPv6 address goes in brackets, as in [::1]:7890")
        number = _port(tail) if colon else None
        if head and _HOST_CHARACTERS.issuperset(head) and number is not None:
            return Address(host=head, port=number)
    raise BadAddress(
        f"{text!r} is not a daemon address: write unix:/path/to/daemon.sock, /path/to/daemon.sock, "
        f"host:port, [ipv6]:port, ssh://[user@]host[:port][/path] or a connection's name from config.zon"
    )
