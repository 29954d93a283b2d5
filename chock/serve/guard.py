"""Who may use serve, decided per request before any route runs (docs/architecture.md#who-may-use-serve).

Three checks, each where the transport makes it meaningful:

- A unix socket: the peer's uid, from the kernel, must be ours, and anybody else is refused with 403
  Forbidden; a peer the kernel will not name is refused too, because an absent answer is never a permissive
  one. Any Host is accepted there, since a proxy in front of the socket sets its own.
- A TCP listener: no identity (TCP carries none; authentication is a proxy's job), but the `Host` header
  must name this listener — its address, a localhost form, or a name given with `--allow-host` — so a page
  on another site cannot reach a `--host 127.0.0.1` serve through DNS rebinding (its requests carry the
  attacker's name in Host). RFC 7540 §9.1.2's 421 Misdirected Request says "not this server's name".
- Every transport: an unsafe method needs `Content-Type: application/json` (which a cross-site form or a
  "simple" fetch cannot send without a CORS preflight that serve never grants) and an `Origin` that is
  this same site, or none (curl and other non-browser clients send none).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from chock.platform import journal
from chock.platform.peer import is_own_user, peer_uid

TYPE_CHECKING = False  # annotations only: aiohttp.typedefs differs between the aiohttp versions Chock runs on
if TYPE_CHECKING:
    from aiohttp.typedefs import Handler, Middleware

# RFC 9110 §9.2.1: GET, HEAD, OPTIONS and TRACE are safe; everything else changes something.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

# The names a browser on this machine uses for a loopback listener: a TCP listener accepts them in Host.
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def split_host(value: str) -> tuple[str, int | None] | None:
    """`name`, `name:port`, `[v6]` or `[v6]:port` as (lower-case name, port); None when it is none of them."""
    value = value.strip()
    if not value or any(c in value for c in "/@?# \t"):
        return None
    try:
        parts = urlsplit("//" + value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host.rstrip(".").lower(), port


def _name(host: str) -> str:
    """A host as Host writes it: an IPv6 literal in brackets."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class HostRule:
    """The names a TCP listener answers to; `allowed` entries with a port must match it exactly."""

    bound: frozenset[str]  # the address the listener was bound to (as given to --host, and as bound)
    allowed: frozenset[tuple[str, int | None]]  # --allow-host names, with their port when they gave one

    @classmethod
    def of(cls, bound: Iterable[str], allow_hosts: Iterable[str]) -> HostRule:
        allowed = set()
        for name in allow_hosts:
            parsed = split_host(name)
            if parsed is None:
                raise ValueError(f"--allow-host {name!r} is not a host name (write a name, or name:port)")
            allowed.add(parsed)
        return cls(frozenset(h.lower().strip("[]") for h in bound if h), frozenset(allowed))

    def accepts(self, header: str | None, local: tuple[str, int] | None) -> bool:
        """Whether a request whose Host is `header`, arriving at local address `local`, is for us."""
        if header is None or local is None:
            return False
        parsed = split_host(header)
        if parsed is None:
            return False
        host, port = parsed
        local_host, local_port = local[0].lower(), local[1]
        if (host, port) in self.allowed or (host, None) in self.allowed:
            return True
        if port != local_port and not (port is None and local_port == 80):
            return False
        if host in LOCAL_NAMES or host in self.bound:
            return True
        # The IP literal the browser connected to is no rebinding (that needs a name the attacker owns);
        # it covers --host 0.0.0.0 reached at one of the machine's addresses.
        try:
            return ipaddress.ip_address(host) == ipaddress.ip_address(local_host.split("%")[0])
        except ValueError:
            return False


def _origin_matches(origin: str, host: str | None) -> bool:
    """Same site: the Origin's host and port are the Host header's (the scheme may differ behind TLS)."""
    if host is None or origin == "null":
        return False
    try:
        parts = urlsplit(origin)
        origin_host, origin_port = parts.hostname, parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not origin_host:
        return False
    if origin_port is None:
        origin_port = 443 if parts.scheme == "https" else 80
    parsed = split_host(host)
    if parsed is None:
        return False
    host_name, host_port = parsed
    if host_port is None:
        host_port = origin_port if origin_port in (80, 443) else None
    return (origin_host.rstrip(".").lower(), origin_port) == (host_name, host_port)


def make_guard(rule: HostRule) -> Middleware:
    """The middleware that runs the three checks before any route."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if transport is None or sock is None:
            return _text(403, "403 Forbidden: the connection is gone")
        if sock.family == socket.AF_UNIX:
            if not is_own_user(sock):
                journal.record("request.forbidden", peer_uid=peer_uid(sock))
                return _text(403, "403 Forbidden: this chock serve answers only the user that started it")
        else:
            host = request.headers.get("Host")
            sockname = transport.get_extra_info("sockname")
            local = (str(sockname[0]), int(sockname[1])) if sockname else None
            if not rule.accepts(host, local):
                journal.record("request.refused", status=421, reason="its Host is not this listener's name")
                shown = "no Host header" if host is None else f"Host {host!r}"
                return _text(
                    421,
                    f"421 Misdirected Request: {shown} is not this server's address or a localhost name "
                    f"(a page on another site reaching this port through DNS rebinding looks like this); "
                    f"start chock serve with --allow-host NAME to accept a name a proxy sends",
                )
        if request.method not in SAFE_METHODS:
            if request.content_type != "application/json":
                journal.record("request.refused", status=415, reason="a change not sent as JSON")
                return _text(415, "415 Unsupported Media Type: send the request body as application/json")
            origin = request.headers.get("Origin")
            if origin is not None and not _origin_matches(origin, request.headers.get("Host")):
                journal.record("request.refused", status=403, reason="a change from another site")
                return _text(
                    403,
                    f"403 Forbidden: a request from {origin} is cross-origin; serve takes changes only "
                    f"from its own page",
                )
        return await handler(request)

    return guard
