"""One way for a test to wait for something another process does: poll a predicate until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable
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
