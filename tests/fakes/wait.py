"""One way for a test to wait for something another process does: poll a predicate until it holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# Short enough that a test waits little past the moment, long enough that polling costs nothing.
INTERVAL = 0.05


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, what: str = "the condition") -> T:
    """The predicate's first truthy value, polled every INTERVAL; an AssertionError naming `what` when
    `timeout` seconds pass first. An exception the predicate raises ends the wait at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(INTERVAL)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_until_async(
    predicate: Callable[[], Awaitable[T]], timeout: float = 30.0, what: str = "the condition"
) -> T:
    """`wait_until` for a test on an event loop: the predicate is awaited, and the wait sleeps on the loop."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(INTERVAL)
    raise AssertionError(f"timed out waiting for {what}")
