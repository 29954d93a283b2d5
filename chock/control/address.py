"""Where a daemon listens, as a person writes it: `unix:/path`, `/path`, `host:port` or `[ipv6]:port`.

Which daemon a command acts through is decided once, here (docs/architecture.md#steering): `--daemon ADDR`, else
`--port N` (meaning 127.0.0.1:N; both together are refused), else `$CHOCK_DAEMON` — `named_address`, which every
command that can act through a daemon calls with its `chock.commands.shared_options.DAEMON_OPTIONS` — and when
none is given, the state directory's own daemon (`resolve_address`) or the state directory itself, as the command says.
`--daemon` is repeatable in that table; a command acts through one daemon today, so a second is refused here.
A command that cannot act through a daemon takes neither option and ignores `$CHOCK_DAEMON`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from chock.errors import UsageError

ENVIRONMENT = "CHOCK_DAEMON"


class BadAddress(UsageError):
    pass


class Address:
    """A unix socket `path`, or a TCP `host` and `port`."""

    __slots__ = ("host", "path", "port")

    def __init__(self, path: str | None = None, host: str | None = None, port: int | None = None) -> None:
        self.path = path
        self.host = host
        self.port = port

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    @property
    def target(self) -> str | tuple[str, int]:
        """What a connect takes: the unix socket's path, or (host, port)."""
        return self.path if self.path is not None else (self.host or "", self.port or 0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Address) and (other.path, other.host, other.port) == (self.path, self.host, self.port)

    def __hash__(self) -> int:
        return hash((self.path, self.host, self.port))

    def __repr__(self) -> str:
        return f"Address({str(self)!r})"

    def __str__(self) -> str:
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
    """`unix:/path`, `/abs/path`, `host:port` or `[ipv6]:port` as an Address; anything else is BadAddress."""
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
        f"host:port or [ipv6]:port"
    )


def named_address(
    daemon: str | Sequence[str] | None = None, *, port: int | None = None, environ: Mapping[str, str] | None = None
) -> Address | None:
    """The daemon a person named: `--daemon ADDR` (given once: the commands act through one daemon), or
    `--port N` meaning 127.0.0.1:N (both together are refused), else `$CHOCK_DAEMON`; None when none is named."""
    if daemon is not None and not isinstance(daemon, str):
        if len(daemon) > 1:
            raise BadAddress(
                f"--daemon was given {len(daemon)} times ({', '.join(daemon)}); this command acts through one "
                f"daemon: give --daemon once"
            )
        daemon = daemon[0] if daemon else None
    if daemon is not None and port is not None:
        raise BadAddress("--daemon and --port both name the daemon; give one of them")
    if daemon is not None:
        return parse_address(daemon)
    if port is not None:
        return parse_address(f"127.0.0.1:{port}")
    environ = os.environ if environ is None else environ
    if environ.get(ENVIRONMENT):
        return parse_address(environ[ENVIRONMENT])
    return None


def resolve_address(
    daemon: str | Sequence[str] | None = None,
    *,
    port: int | None = None,
    environ: Mapping[str, str] | None = None,
    state_socket: Path | None = None,
) -> Address:
    """The daemon a command talks to: the one named (`named_address`), else the state directory's `daemon.sock`."""
    named = named_address(daemon, port=port, environ=environ)
    if named is not None:
        return named
    if state_socket is None:
        from chock.paths import Layout

        state_socket = Layout.from_env().daemon_socket
    return Address(path=str(state_socket))
