"""The session loop's structured concurrency, built once: trio's cancel scope with its shield, and its nursery.

    async with work:                 # a Nursery: leaving it cancels what still runs and waits until it is gone
        async with stop_scope:       # a StopScope: `stop()` cancels the task only in here; it leaves as CancelledByStop
            ...                      # the turns, the commit of the work
        ...                          # the rest of the ending: shielded, a stop no longer cancels it

A stop comes from outside the loop's task (a socket's handler, a signal handler), so it is a cancel of that task.
Only the scope's own cancel is taken back at its edge (`Task.uncancel`); in Python 3.11 `uncancel` does not clear
a cancel not yet delivered, so a stop that lands as the body finishes is delivered at one checkpoint there and
taken back there and changes nothing: the body had finished. Anything else that cancels the task is not the
scope's to take.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any


class CancelledByStop(Exception):
    """The body of a StopScope was cancelled by a stop."""


class StopScope:
    """Where a stop cancels the session's task. A stop asked before the scope is entered cancels it as it is
    entered; one asked after it is left does nothing (the ending it would interrupt is logged whole)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self.requested = False

    def stop(self) -> None:
        self.requested = True
        if self._task is not None and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    async def __aenter__(self) -> StopScope:
        self._task = asyncio.current_task()
        if self.requested:
            self.requested = False
            self.stop()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        task, self._task = self._task, None  # shielded from here on
        if not self._cancelled or task is None:
            return False
        if kind is not asyncio.CancelledError:  # the cancel was not delivered: 3.11 keeps it pending until here
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
        task.uncancel()
        if kind is asyncio.CancelledError:
            raise CancelledByStop from None
        return False  # the body had finished (or failed on its own) before the stop reached it


class Nursery:
    """Background tasks by name. Leaving `async with` cancels every one still running and waits until each has
    gone (each kills its own process); `on_done` is called as each one ends."""

    def __init__(self, on_done: Callable[[], None]) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._on_done = on_done

    def start(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[name] = task

        def done(_: asyncio.Task[None]) -> None:
            self._tasks.pop(name, None)
            self._on_done()

        task.add_done_callback(done)

    def __len__(self) -> int:
        return len(self._tasks)

    async def __aenter__(self) -> Nursery:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return False
