"""HTTP for both wires: one instance's streamed calls over a pooled httpx client (`HTTPProvider`), and the
`GET /models` that login's credential check sends.

A `Wire` says what is the wire's own (its headers, its request body, its stream's reader); everything else of
a call happens here the same way for both, so a refused key or a cut stream reads the same whichever wire an
instance speaks. Everything before the answer's first byte is `HTTPProvider._post`: the one place a call is
refused (or could be tried again) before any text has been shown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from chock.providers import Reply, TextDelta
from chock.providers.failures import (
    incomplete_failure,
    not_a_model_list,
    not_an_event_stream,
    shown_address,
    status_failure,
    transport_failure,
    unusable_credential,
)
from chock.providers.wire import Wire

# Opening a connection is quick or it is not going to happen.
CONNECT_TIMEOUT = 10.0
# A model may think for minutes before its first token and pause between chunks; five minutes of silence
# means the call is lost.
READ_TIMEOUT = 300.0
STREAM_TIMEOUT = httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
# Login's check is one small GET: a person is waiting at the terminal for its answer.
CHECK_TIMEOUT = 15.0
# Below an instance's address, on both wires.
MODELS_PATH = "/models"


def header_safe(credential: str | None) -> bool:
    """A key travels in a header: printable ASCII with no space (RFC 9110 §5.5 field values are visible
    characters; httpx encodes them as ASCII). A line break left by a paste is the usual offender."""
    return credential is None or all("!" <= c <= "~" for c in credential)


class HTTPProvider:
    """One instance over one wire: `stream` yields TextDeltas as they arrive, then one Reply."""

    def __init__(
        self, wire: Wire, kind: str, address: str, model: str, credential: str | None, *, instance: str
    ) -> None:
        self.wire = wire
        self.kind = kind
        self.address = address.rstrip("/")
        self.model = model
        self.instance = instance
        self._credential = credential
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        credential = "set" if self._credential else "none"
        return (
            f"HTTPProvider(kind={self.kind!r}, instance={self.instance!r}, "
            f"address={shown_address(self.address)!r}, model={self.model!r}, credential={credential})"
        )

    async def stream(
        self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str
    ) -> AsyncIterator[TextDelta | Reply]:
        body = self.wire.request_body(self.model, conversation, tools, system)
        reader = self.wire.reader(self.address, self.instance)
        try:
            async with self._post(body) as response:
                async for line in response.aiter_lines():
                    text = reader.feed_line(line)
                    if text:
                        yield TextDelta(text)
                    if reader.done:
                        break
        except httpx.HTTPError as exc:
            raise transport_failure(
                exc,
                address=self.address,
                instance=self.instance,
                credential=self._credential,
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
            ) from exc
        if not reader.done:
            raise incomplete_failure(self.address, self.instance, f"no {self.wire.last_line}")
        yield reader.reply()

    @contextlib.asynccontextmanager
    async def _post(self, body: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """The streamed POST, open at a 2xx event stream; every refusal before the answer's first byte is
        raised here (httpx's own errors pass through to `stream`, which words them)."""
        if not header_safe(self._credential):
            raise unusable_credential(self.kind, self.address, self.instance)
        headers = {**self.wire.auth_headers(self._credential), "content-type": "application/json"}
        async with self._http().stream("POST", self.address + self.wire.path, json=body, headers=headers) as response:
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
            content_type = response.headers.get("content-type")
            if not (content_type or "").startswith("text/event-stream"):
                raise not_an_event_stream(content_type, self.address, self.instance)
            yield response

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


def list_models(wire: Wire, kind: str, address: str, credential: str, *, timeout: float = CHECK_TIMEOUT) -> None:
    """`GET <address>/models` with the wire's auth headers; returns when the provider accepts the key.

    Raises ProviderError naming the status and the provider's words on a non-2xx answer, or the address when
    nothing answers. Synchronous: login has no event loop to share.
    """
    if not header_safe(credential):
        raise unusable_credential(kind, address, None)
    try:
        with httpx.Client(timeout=timeout) as client:
            response = client.get(address.rstrip("/") + MODELS_PATH, headers=wire.auth_headers(credential))
    except httpx.HTTPError as exc:
        raise transport_failure(
            exc,
            address=address,
            instance=None,
            credential=credential,
            connect_timeout=timeout,
            read_timeout=timeout,
        ) from exc
    if not 200 <= response.status_code < 300:
        raise status_failure(
            response.status_code,
            response.content,
            kind=kind,
            address=address,
            credential=credential,
            retry_after=response.headers.get("retry-after"),
        )
    try:
        listing = response.json()
    except ValueError:
        listing = None
    if not isinstance(listing, dict):
        raise not_a_model_list(address)
