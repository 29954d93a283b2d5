"""Where a daemon listens, as a person writes it: `unix:/path`, `/path`, `host:port`, `[ipv6]:port`,
`ssh://[user@]host[:port][/path]` (chock/control/ssh.py), or the name of a connection in config.zon.

Which daemon a command acts through is decided once, here (docs/architecture.md#steering): `--daemon ADDR`, else
`--port N` (meaning 127.0.0.1:N; both together are refused), else `$CHOCK_DAEMON` — `named_address`, which every
command that can act through a daemon calls with its `chock.commands.shared_options.DAEMON_OPTIONS` — and when
none is given, the state directory's own daemon (`resolve_address`) or the state directory itself, as the command says.
`--daemon` is repeatable in that table: a command that asks several daemons (`chock sessions --all`, a bare session
id looked for on each) takes them with `named_hosts`; one that acts through one takes `named_address`, which
refuses a second by the command's name.
A command that cannot act through a daemon takes neither option and ignores `$CHOCK_DAEMON`.

A word that is a connection's name (`^[a-z][a-z0-9_-]{0,31}$`, never an address: those hold `:` or `/`) is
looked up in config.zon's `.connections` by `host_address`, the one place names are resolved; `local` is this
machine's own daemon and is never a connection's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from chock.control.endpoint import CONNECTION_NAME, LOCAL, Address, BadAddress, parse_address

ENVIRONMENT = "CHOCK_DAEMON"

# What is written is read by chock/control/endpoint.py; every command imports it from here.
__all__ = ["CONNECTION_NAME", "LOCAL", "Address", "BadAddress", "parse_address"]


def host_address(
    word: str, connections: Mapping[str, Address] | None = None, *, local: Address | None = None
) -> tuple[str, Address]:
    """The host a person named and its address: `local` is this machine's default daemon (`local`, else the
    state directory's socket), a connection's name is its address from config.zon (`connections`, else read
    from the config file), and an address typed directly is itself, its own text its host name."""
    if word == LOCAL:
        if local is None:
            from chock.paths import Layout

            local = Address(path=str(Layout.from_env().daemon_socket))
        return LOCAL, local
    if CONNECTION_NAME.fullmatch(word):
        if connections is None:
            connections = configured_connections()
        if word in connections:
            return word, connections[word]
        known = ", ".join(sorted(connections)) or "none yet"
        raise BadAddress(
            f"{word!r} is not a connection in config.zon (connections: {known}; `local` is this machine's "
            f'daemon): add it as .connections = .{{ .{word} = "ssh://user@host" }}, or give an address'
        )
    address = parse_address(word)
    return str(address), address


def configured_connections() -> Mapping[str, Address]:
    """The connections config.zon names (its `.connections`), read and checked as every config read is."""
    from chock.config import load_config
    from chock.paths import Layout

    return load_config(Layout.from_env().config).connections


def named_hosts(
    daemon: str | Sequence[str] | None = None,
    *,
    port: int | None = None,
    environ: Mapping[str, str] | None = None,
    connections: Mapping[str, Address] | None = None,
) -> list[tuple[str, Address]] | None:
    """The hosts a person named, each once, in the order given, with their addresses (`host_address`): every
    `--daemon`, or `--port N` meaning 127.0.0.1:N (both together are refused), else `$CHOCK_DAEMON`; None when
    none is named."""
    words = [daemon] if isinstance(daemon, str) else list(daemon or ())
    if words and port is not None:
        raise BadAddress("--daemon and --port both name the daemon; give one of them")
    if port is not None:
        address = parse_address(f"127.0.0.1:{port}")
        return [(str(address), address)]
    if not words:
        environ = os.environ if environ is None else environ
        words = [environ[ENVIRONMENT]] if environ.get(ENVIRONMENT) else []
    if not words:
        return None
    found: dict[str, Address] = {}
    for word in words:
        name, address = host_address(word, connections)
        found.setdefault(name, address)
    return list(found.items())


def named_address(
    daemon: str | Sequence[str] | None = None,
    *,
    port: int | None = None,
    environ: Mapping[str, str] | None = None,
    connections: Mapping[str, Address] | None = None,
    acting: str = "this command",
) -> Address | None:
    """The one daemon a person named (`named_hosts`; a second `--daemon` is refused naming `acting`, the
    command, which acts through one); None when none is named."""
    if daemon is not None and not isinstance(daemon, str) and len(daemon) > 1:
        raise BadAddress(
            f"--daemon was given {len(daemon)} times ({', '.join(daemon)}); {acting} acts through one daemon: "
            "give --daemon once"
        )
    hosts = named_hosts(daemon, port=port, environ=environ, connections=connections)
    return hosts[0][1] if hosts else None


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
