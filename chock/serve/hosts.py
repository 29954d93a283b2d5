"""The daemons one serve is a client of, by name (docs/remote.md#one-page-over-several-daemons): which ones
(`serve_hosts`, from `--daemon`, `$CHOCK_DAEMON` or config.zon's `.serve.daemons`), and whether each answers
(`Probes`, behind `GET /api/hosts`).

A page polls `GET /api/hosts`; each host is greeted at most once per PROBE_TTL however many pages ask, each
greeting bounded by PROBE_SECONDS, and concurrent asks of a host share one greeting. What a host's state says is
its name and either its protocol number or the reason it does not answer, in one line as the client's error
says it: never its address (a unix one is a path).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chock.control.address import CONNECTION_NAME, ENVIRONMENT, LOCAL, Address, BadAddress, host_address
from chock.control.async_client import AsyncControlClient
from chock.control.framing import ProtocolError

# A host's state is this fresh at most: a page polling every few seconds opens no connection per request.
PROBE_TTL = 5.0
# A greeting that takes longer than this says the host does not answer (above ssh's ConnectTimeout of 10 s, so
# ssh's own reason is the one given when it has one).
PROBE_SECONDS = 12.0
# A reason is one line of at most this many characters.
REASON_CHARS = 300


def serve_hosts(
    daemon: Sequence[str],
    *,
    configured: Sequence[str] = (),
    connections: Mapping[str, Address] | None = None,
    environ: Mapping[str, str] | None = None,
    local: Address | None = None,
) -> list[tuple[str, Address]]:
    """The hosts serve is a client of, each `(name, address)`, the first the one `/api/…` stands for: `--daemon`
    given (repeatable), else `$CHOCK_DAEMON`, else `.serve.daemons`, else `local`.

    Several are each `local` or a connection's name, once each. One word alone keeps its meaning of before:
    an address typed directly (or `$CHOCK_DAEMON`'s) is served as `local`, a connection's name under its name.
    """
    words = list(daemon)
    if not words:
        env = os.environ if environ is None else environ
        words = [env[ENVIRONMENT]] if env.get(ENVIRONMENT) else list(configured) or [LOCAL]
    if len(words) == 1:
        name, address = host_address(words[0], connections, local=local)
        return [(name if name == LOCAL or CONNECTION_NAME.fullmatch(name) else LOCAL, address)]
    found: list[tuple[str, Address]] = []
    for word in words:
        if word != LOCAL and not CONNECTION_NAME.fullmatch(word):
            raise BadAddress(
                f"--daemon {word!r}: serve over several daemons names each one `local` or a connection's name, so "
                f'the page can name its host; add it to config.zon as .connections = .{{ .NAME = "{word}" }}'
            )
        if any(name == word for name, _ in found):
            raise BadAddress(f"--daemon {word!r} is given twice; name each host once")
        found.append(host_address(word, connections, local=local))
    return found


@dataclass(frozen=True)
class HostState:
    """A host's answer to a greeting: its protocol number, or why it did not answer."""

    name: str
    protocol: int | None = None
    reason: str = ""

    def json(self) -> dict[str, Any]:
        if self.protocol is not None:
            return {"name": self.name, "state": "reachable", "protocol": self.protocol}
        return {"name": self.name, "state": "unreachable", "reason": self.reason}


def one_line(text: str) -> str:
    """The first line of `text`, cut at REASON_CHARS."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


class Probes:
    """Each host's state, greeted at most once per PROBE_TTL; asks while a greeting is under way share it."""

    def __init__(self, ttl: float = PROBE_TTL, bound: float = PROBE_SECONDS) -> None:
        self.ttl = ttl
        self.bound = bound
        self._known: dict[str, tuple[float, HostState]] = {}
        self._asking: dict[str, asyncio.Task[HostState]] = {}

    async def state(self, name: str, daemon: AsyncControlClient) -> HostState:
        known = self._known.get(name)
        if known is not None and time.monotonic() - known[0] < self.ttl:
            return known[1]
        task = self._asking.get(name)
        if task is None:
            task = self._asking[name] = asyncio.get_running_loop().create_task(self._greet(name, daemon))
            task.add_done_callback(lambda _: self._asking.pop(name, None))
        return await asyncio.shield(task)

    async def _greet(self, name: str, daemon: AsyncControlClient) -> HostState:
        try:
            async with asyncio.timeout(self.bound):
                state = HostState(name, protocol=await daemon.ping())
        except TimeoutError:
            state = HostState(name, reason=f"no answer within {self.bound:g} s")
        except ProtocolError as error:
            state = HostState(name, reason=one_line(error.text))
        self._known[name] = (time.monotonic(), state)
        return state

    def close(self) -> None:
        for task in self._asking.values():
            task.cancel()
