"""What both wires share: a streamed POST on one pooled httpx client, the server-sent-event lines it answers
with (and the tool arguments they carry in JSON pieces), and every failure in check.py's words.

A wire module keeps only what is its own, declared as a `Wire`: where it posts, its headers and request body
(the conversation's conversion), and the parser of its events. `EventStreamProvider` does the rest the same
way for both, so a cut stream or a refused key reads the same whichever wire an instance speaks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import httpx

from chock.providers import ProviderError, Reply, TextDelta
from chock.providers.check import (
    STREAM_TIMEOUT,
    header_safe,
    incomplete_failure,
    require_event_stream,
    status_failure,
    transport_failure,
    unusable_credential,
)


def sse_field(line: str) -> tuple[str, str]:
    """One server-sent-event line as (field, value): the field is what stands before the first colon (HTML
    §9.2.6); the value's surrounding white space is dropped, which JSON and `[DONE]` never miss."""
    field, _, value = line.partition(":")
    return field, value.strip()


def event_data(payload: str, stream: str, who: str) -> Any:
    """A `data:` line's JSON. Anything else came from something other than the API, so it says so."""
    try:
        return json.loads(payload)
    except ValueError:
        raise ProviderError(
            f"{who}: the response is not {stream} (it sent {payload[:80]!r}); check the address"
        ) from None


def tool_args(raw: str, name: str, who: str, *, limit: str | None) -> dict[str, Any]:
    """A tool call's arguments from the JSON its streamed pieces make. `limit` names the output limit the
    answer reached, if it did: a call cut there is broken JSON, and smaller steps are the remedy."""
    try:
        args = json.loads(raw)
    except ValueError:
        if limit:
            raise ProviderError(
                f"{who}: the answer reached {limit} in the middle of the tool call {name}; ask for smaller steps"
            ) from None
        raise ProviderError(f"{who}: the arguments of the tool call {name} are not JSON") from None
    if not isinstance(args, dict):
        raise ProviderError(f"{who}: the arguments of the tool call {name} are not a JSON object")
    return args


class LineReader(Protocol):
    """A wire's parser of its event stream, with no I/O: lines in, the text each adds out, then one Reply."""

    done: bool

    def feed_line(self, line: str) -> str | None: ...

    def reply(self) -> Reply: ...


@dataclass(frozen=True)
class Wire:
    """What sets one wire format apart; the rest of a streamed call is `EventStreamProvider`'s."""

    path: str  # where the POST goes, below the instance's address
    last_line: str  # what ends a complete stream, named when a stream is cut before it
    auth_headers: Callable[[str | None], dict[str, str]]
    request_body: Callable[[str, list[dict[str, Any]], list[dict[str, Any]], str], dict[str, Any]]
    reader: Callable[[str, str | None], LineReader]


class EventStreamProvider:
    """One instance over one wire: `stream` yields TextDeltas as they arrive, then one Reply."""

    wire: ClassVar[Wire]
    kind: str

    def __init__(self, address: str, model: str, credential: str | None, *, instance: str) -> None:
        self.address = address.rstrip("/")
        self.model = model
        self.instance = instance
        self._credential = credential
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def stream(
        self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str
    ) -> AsyncIterator[TextDelta | Reply]:
        if not header_safe(self._credential):
            raise unusable_credential(self.kind, self.address, self.instance)
        body = self.wire.request_body(self.model, conversation, tools, system)
        headers = {**self.wire.auth_headers(self._credential), "content-type": "application/json"}
        reader = self.wire.reader(self.address, self.instance)
        try:
            async with self._http().stream(
                "POST", self.address + self.wire.path, json=body, headers=headers
            ) as response:
                if not 200 <= response.status_code < 300:
                    raise status_failure(
                        response.status_code,
                        await response.aread(),
                        kind=self.kind,
                        address=self.address,
                        credential=self._credential,
                        instance=self.instance,
                        retry_after=response.headers.get("retry-after"),
                    )
                require_event_stream(response.headers.get("content-type"), self.address, self.instance)
                async for line in response.aiter_lines():
                    text = reader.feed_line(line)
                    if text:
                        yield TextDelta(text)
                    if reader.done:
                        break
        except httpx.HTTPError as exc:
            raise transport_failure(
                exc, address=self.address, instance=self.instance, credential=self._credential
            ) from exc
        if not reader.done:
            raise incomplete_failure(self.address, self.instance, f"no {self.wire.last_line}")
        yield reader.reply()

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()

    def _http(self) -> httpx.AsyncClient:
        # A client's connections belong to the event loop that opened them; a caller that runs each turn in
        # its own `asyncio.run` gets a fresh client rather than a pool bound to a closed loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(timeout=STREAM_TIMEOUT)
            self._loop = loop
        return self._client
