"""HTTP for both wires: one instance's streamed calls over a pooled httpx client (`HTTPProvider`), and the
`GET /models` that login's credential check sends.

A `Wire` says what is the wire's own (its headers, its request body, its stream's reader); everything else of
a call happens here the same way for both, so a refused key or a cut stream reads the same whichever wire an
instance speaks. Everything before the answer's first byte is `HTTPProvider._send`: the one place a call is
refused, or found worth sending again (`retry`), before any text has been shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from chock.providers import ProviderError, Reply, Retrying, TextDelta, retry
from chock.providers.failures import (
    incomplete_failure,
    not_a_model_list,
    not_an_event_stream,
    overdue_answer,
    overdue_check,
    oversized_answer,
    oversized_model_list,
    shown_address,
    status_failure,
    transport_failure,
    unreadable_answer,
    unusable_credential,
)
from chock.providers.lean_http import httpx
from chock.providers.sse_lines import PastLimit, SSELines
from chock.providers.wire import StreamReader, Wire

# Opening a connection is quick or it is not going to happen.
CONNECT_TIMEOUT = 10.0
# A model may think for minutes before its first token and pause between chunks; five minutes of silence
# means the call is lost.
READ_TIMEOUT = 300.0
STREAM_TIMEOUT = httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
# The most one attempt may take as a whole, from its request to its answer's last byte, however often something
# arrives: a server that sends pings or comments, or trickles its headers, never finishing, is given up. A slow
# local model may take tens of minutes over one long answer.
CALL_SECONDS = 3600.0
# Login's check is one small GET: a person is waiting at the terminal for its answer. Each read waits this long,
# and its body is read within CHECK_SECONDS of the request.
CHECK_TIMEOUT = 15.0
CHECK_SECONDS = 30.0
# Below an instance's address, on both wires.
MODELS_PATH = "/models"
# An error answer is a JSON object of a few hundred bytes; a proxy's error page may be anything, and only its
# start is ever quoted (failures.QUOTE_LIMIT).
ERROR_BODY_LIMIT = 64 * 1024
# An error answer's body is read for this long at most: what came by then is quoted, the status said either way.
ERROR_BODY_SECONDS = 60.0
# The API's list of models is a few KiB; thousands of models with their descriptions still fit.
LISTING_LIMIT = 4 * 1024 * 1024
# The most one answer's stream may bring, every byte of its body counted from the first (events, pings, blank
# lines, a line not yet ended): everything in it is the model's, and it is all kept in memory, then cut to fit
# the log on the session's only loop (chock/log/shrink.py, linear in its size). Far past any real answer.
ANSWER_LIMIT = 16 * 1024 * 1024


# What a wire's reader raises on an event whose fields are not of the types it reads: the answer is not the
# API's, said as a ProviderError rather than a traceback.
READER_FAULTS = (TypeError, AttributeError, KeyError, ValueError, RecursionError)


def header_safe(credential: str | None) -> bool:
    """A key travels in a header: printable ASCII with no space (RFC 9110 §5.5 field values are visible
    characters; httpx encodes them as ASCII). A line break left by a paste is the usual offender."""
    return credential is None or all("!" <= c <= "~" for c in credential)


def verifies(address: str) -> bool:
    """Whether a client for `address` loads the certificate store (35–40 ms at every start): an https address
    does; a plain-http one never speaks TLS (redirects are not followed), unless a proxy named in the
    environment might carry it, and then the store is loaded as for https."""
    plain = address.lower().startswith("http://")
    return not plain or any(name.lower().endswith("_proxy") for name in os.environ)


# How a wait is waited: asyncio.sleep, or the session's clock (chock.session.ports.Clock.sleep).
Sleep = Callable[[float], Awaitable[None]]


class _Retryable(Exception):
    """An attempt that failed before its answer's first byte: `error` is what a person is told if it is not
    sent again; `status` and `headers` decide whether it is, and when."""

    def __init__(self, error: ProviderError, status: int | None, headers: Mapping[str, str] | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.status = status
        self.headers = headers


class HTTPProvider:
    """One instance over one wire: `stream` yields TextDeltas as they arrive, then one Reply; before them, a
    Retrying for each attempt that failed before its answer began and is sent again (`retries` times at most)."""

    def __init__(
        self,
        wire: Wire,
        kind: str,
        address: str,
        model: str,
        credential: str | None,
        *,
        instance: str,
        retries: int = retry.DEFAULT_RETRIES,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.wire = wire
        self.kind = kind
        self.address = address.rstrip("/")
        self.model = model
        self.instance = instance
        self.retries = retries
        self._sleep = sleep
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
    ) -> AsyncGenerator[TextDelta | Retrying | Reply, None]:
        body = self.wire.request_body(self.model, conversation, tools, system)
        attempt = 1
        while True:
            deadline = asyncio.get_running_loop().time() + CALL_SECONDS
            try:
                response = await self._send(body, deadline)
                reader = self.wire.reader(self.address, self.instance, self._credential)
                lines = self._lines(response, deadline)
                first = await self._opening(response, lines, reader)
                break
            except _Retryable as failed:
                wait = retry.wait_seconds(attempt, failed.headers)
                worth = retry.retryable(failed.status, failed.headers, failed.error)
                if attempt > self.retries or wait is None or not worth:
                    raise _given_up(failed.error, attempt) from None
                # The wait is an await on the session's loop: its sockets keep answering meanwhile.
                yield Retrying(attempt, failed.status, wait, str(failed.error), usage=failed.error.usage)
                await self._sleep(wait)
                attempt += 1
        try:
            # Closed explicitly, whatever ends the loop: an async generator left to the garbage collector is
            # finished by a task the loop may never run ("Task was destroyed but it is pending!").
            async with contextlib.aclosing(lines):
                if first:
                    yield TextDelta(first)
                if not reader.done:
                    async for line in lines:
                        text = self._feed(reader, line)
                        if text:
                            yield TextDelta(text)
                        if reader.done:
                            break
            if not reader.done:
                raise incomplete_failure(self.address, self.instance, f"no {self.wire.last_line}")
            reply = self._reply(reader)
        except httpx.HTTPError as exc:
            error = self._transport_failure(exc)
            error.usage = reader.usage()
            raise error from exc
        except ProviderError as error:
            error.usage = reader.usage()
            raise
        finally:
            await response.aclose()
        yield reply

    async def _opening(
        self, response: httpx.Response, lines: AsyncGenerator[str, None], reader: StreamReader
    ) -> str | None:
        """Read the stream until its answer begins (or ends), returning the text that began it. Nothing has
        been shown before then, so a stream cut there is raised as `_Retryable`, as is an error event, with the
        status it stands for (Anthropic's `overloaded_error` as 529), so it is sent again as that status would
        be; usage reported so far goes with it."""
        try:
            try:
                async for line in lines:
                    text = self._feed(reader, line)
                    if text or reader.began or reader.done:
                        return text
            except httpx.HTTPError as exc:
                raise _Retryable(self._transport_failure(exc), None, None) from exc
            reason = f"no {self.wire.last_line}"
            raise _Retryable(incomplete_failure(self.address, self.instance, reason), None, None)
        except _Retryable as failed:
            failed.error.usage = reader.usage()
            await _close(response, lines)
            raise
        except ProviderError as error:
            error.usage = reader.usage()
            await _close(response, lines)
            if error.status is None:
                raise
            raise _Retryable(error, error.status, None) from None

    def _feed(self, reader: StreamReader, line: str) -> str | None:
        """`reader.feed_line`; a reader that fails on an event it cannot read (a field of the wrong type) says
        the answer is not the API's, as a ProviderError."""
        try:
            return reader.feed_line(line)
        except ProviderError:
            raise
        except READER_FAULTS as exc:
            raise unreadable_answer(reader.who, line, self._credential) from exc

    def _reply(self, reader: StreamReader) -> Reply:
        """`reader.reply`, failing as `_feed` does."""
        try:
            return reader.reply()
        except ProviderError:
            raise
        except READER_FAULTS as exc:
            raise unreadable_answer(reader.who, None, self._credential) from exc

    async def _lines(self, response: httpx.Response, deadline: float) -> AsyncGenerator[str, None]:
        """The stream's lines as its bytes come (`sse_lines`), each read within the attempt's `deadline`, every
        byte from the body's first counted against `ANSWER_LIMIT`."""
        lines = SSELines(ANSWER_LIMIT)
        async with contextlib.aclosing(_generator(response.aiter_bytes())) as chunks:
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise overdue_answer(self.address, self.instance, CALL_SECONDS) from None
                try:
                    ended = lines.feed(chunk)
                except PastLimit:
                    raise oversized_answer(self.address, self.instance, ANSWER_LIMIT) from None
                for line in ended:
                    yield line
        for line in lines.close():
            yield line

    async def _send(self, body: dict[str, Any], deadline: float) -> httpx.Response:
        """The streamed POST, open at a 2xx event stream by `deadline`; every failure before the answer's first
        byte is raised here, as `_Retryable` when it may be worth sending again."""
        if not header_safe(self._credential):
            raise unusable_credential(self.kind, self.address, self.instance)
        headers = {**self.wire.auth_headers(self._credential), "content-type": "application/json"}
        client = self._http()
        request = client.build_request("POST", self.address + self.wire.path, json=body, headers=headers)
        try:
            async with asyncio.timeout_at(deadline):
                response = await client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise _Retryable(self._transport_failure(exc), None, None) from exc
        except TimeoutError:
            raise overdue_answer(self.address, self.instance, CALL_SECONDS) from None
        try:
            if not 200 <= response.status_code < 300:
                error = _refusal(
                    response.status_code,
                    await _error_body(response, deadline),
                    kind=self.kind,
                    address=self.address,
                    credential=self._credential,
                    instance=self.instance,
                    wait=retry.retry_after(response.headers),
                )
                raise _Retryable(error, response.status_code, response.headers)
            content_type = response.headers.get("content-type")
            if not (content_type or "").startswith("text/event-stream"):
                raise not_an_event_stream(content_type, self.address, self.instance)
        except BaseException:
            await response.aclose()
            raise
        return response

    def _transport_failure(self, exc: httpx.HTTPError) -> ProviderError:
        return transport_failure(
            exc,
            address=self.address,
            instance=self.instance,
            credential=self._credential,
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()

    def _http(self) -> httpx.AsyncClient:
        # A client's connections belong to the event loop that opened them; a caller that runs each turn in
        # its own `asyncio.run` gets a fresh client rather than a pool bound to a closed loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(timeout=STREAM_TIMEOUT, verify=verifies(self.address))
            self._loop = loop
        return self._client


async def _error_body(response: httpx.Response, deadline: float) -> bytes:
    """At most `ERROR_BODY_LIMIT` bytes of an error answer, read for `ERROR_BODY_SECONDS` at most: its words are
    quoted, the rest never read. A body cut or slow is quoted as far as it came: the status says enough."""
    kept = bytearray()
    deadline = min(deadline, asyncio.get_running_loop().time() + ERROR_BODY_SECONDS)
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout_at(deadline), contextlib.aclosing(_generator(response.aiter_bytes())) as chunks:
            async for chunk in chunks:
                kept += chunk
                if len(kept) >= ERROR_BODY_LIMIT:
                    break
    return bytes(kept[:ERROR_BODY_LIMIT])


def _refusal(status: int, body: bytes, **context: Any) -> ProviderError:
    """`status_failure`, or the same without the body's words when the body cannot be read at all (JSON nested
    past the parser's depth)."""
    try:
        return status_failure(status, body, **context)
    except RecursionError:
        return status_failure(status, b"", **context)


async def _close(response: httpx.Response, lines: AsyncGenerator[str, None]) -> None:
    with contextlib.suppress(httpx.HTTPError):
        await lines.aclose()
    await response.aclose()


def _given_up(error: ProviderError, attempts: int) -> ProviderError:
    """The last attempt's error, saying how many were made when there was more than one; what it says of the
    refusal (a prompt too long, the window stated) and of the usage goes with it."""
    if attempts == 1:
        return error
    given_up = ProviderError(f"{error} (gave up after {attempts} attempts)")
    given_up.__dict__.update(error.__dict__)
    return given_up


def list_models(wire: Wire, kind: str, address: str, credential: str, *, timeout: float = CHECK_TIMEOUT) -> None:
    """`GET <address>/models` with the wire's auth headers; returns when the provider accepts the key.

    Raises ProviderError naming the status and the provider's words on a non-2xx answer, or the address when
    nothing answers, or the answer is not a listing (past `LISTING_LIMIT`, or not read within `CHECK_SECONDS`).
    Synchronous: login has no event loop to share.
    """
    if not header_safe(credential):
        raise unusable_credential(kind, address, None)
    deadline = time.monotonic() + CHECK_SECONDS
    try:
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream("GET", address.rstrip("/") + MODELS_PATH, headers=wire.auth_headers(credential)) as response,
        ):
            listed = 200 <= response.status_code < 300
            body, whole = _read_within(response, LISTING_LIMIT if listed else ERROR_BODY_LIMIT, deadline)
    except httpx.HTTPError as exc:
        raise transport_failure(
            exc,
            address=address,
            instance=None,
            credential=credential,
            connect_timeout=timeout,
            read_timeout=timeout,
        ) from exc
    if not listed:
        raise _refusal(
            response.status_code,
            body,
            kind=kind,
            address=address,
            credential=credential,
            wait=retry.retry_after(response.headers),
        )
    if whole is None:
        raise overdue_check(address, CHECK_SECONDS)
    if not whole:
        raise oversized_model_list(address, LISTING_LIMIT)
    try:
        listing = json.loads(body)
    except (ValueError, RecursionError):
        listing = None
    if not isinstance(listing, dict):
        raise not_a_model_list(address)


def _read_within(response: httpx.Response, limit: int, deadline: float) -> tuple[bytes, bool | None]:
    """At most `limit` bytes of a body, read until `deadline` (time.monotonic) at most, and whether that was
    all of it: False when it went past `limit`, None when it was still coming at `deadline`."""
    kept = bytearray()
    for chunk in response.iter_bytes():
        kept += chunk
        if len(kept) > limit:
            return bytes(kept[:limit]), False
        if time.monotonic() > deadline:
            return bytes(kept), None
    return bytes(kept), True


T = TypeVar("T")


def _generator(items: AsyncIterator[T]) -> AsyncGenerator[T, None]:
    """httpx's `aiter_bytes`, typed as an iterator, is an async generator: it can be closed."""
    assert isinstance(items, AsyncGenerator)
    return items
