"""One model call as the log records it, whatever it is for (a turn, a compaction's summary).

Text is logged as it arrives (`assistant.delta`, coalesced), each wait before an attempt is sent again as
`provider.retry` (after a `usage` event for what the failed attempt reported, if it reported any), and nothing
received is lost when the call fails: the text not yet logged is logged, and a `usage` event records what the
provider had reported, before the error goes on to end the session. The provider's stream is closed explicitly
however the call ends, so no generator is left for the garbage collector to finish on a loop that may be gone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from chock.config import Price
from chock.errors import ChockError
from chock.log.events import Event
from chock.providers import Provider, ProviderError, Reply, Retrying, TextDelta

# assistant.delta events are coalesced (docs/log.md): one event per this many seconds of streamed text.
DELTA_COALESCE_SECONDS = 0.1

Emit = Callable[..., Event]


async def call(
    provider: Provider,
    conversation: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    system: str,
    emit: Emit,
    *,
    price: Price | None,
    purpose: str | None = None,
) -> Reply:
    """Send one call and return its reply. A turn's text is logged as it streams; a call with a `purpose`
    (`compaction`) logs none, and its events say what they were for."""
    marked = {"for": purpose} if purpose else {}
    pending: list[str] = []
    flushed = time.monotonic()

    def flush() -> None:
        nonlocal flushed
        if pending:
            emit("assistant.delta", text="".join(pending))
            pending.clear()
        flushed = time.monotonic()

    reply: Reply | None = None
    try:
        async with contextlib.aclosing(provider.stream(conversation, tools, system)) as items:
            async for item in items:
                if isinstance(item, TextDelta):
                    if purpose is None:
                        pending.append(item.text)
                        if time.monotonic() - flushed >= DELTA_COALESCE_SECONDS:
                            flush()
                elif isinstance(item, Retrying):
                    if item.usage and any(item.usage.values()):
                        record_usage(emit, item.usage, price, purpose)  # the failed attempt's tokens count too
                    emit(
                        "provider.retry",
                        attempt=item.attempt,
                        status=item.status,
                        wait_seconds=round(item.wait_seconds, 3),
                        error=item.error,
                        **marked,
                    )
                else:
                    reply = item
    except ProviderError as error:
        flush()
        if error.usage is not None:
            record_usage(emit, error.usage, price, purpose)
        raise
    finally:
        flush()
    if reply is None:
        raise ChockError("the provider's response ended without a reply")
    return reply


def record_usage(emit: Emit, usage: dict[str, int], price: Price | None, purpose: str | None = None) -> Event:
    """Log one call's `usage`, with its cost when the instance has a price."""
    fields: dict[str, Any] = dict(usage)
    if price is not None:
        fields["cost"] = round(price.cost(usage), 6)
    if purpose:
        fields["for"] = purpose
    return emit("usage", **fields)
