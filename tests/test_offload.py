"""Long work off the session's loop: a forked child's result, its refusal, and a cancel that kills it whenever it
comes (chock/session/offload.py)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from chock.errors import ChockError, Refused
from chock.session import offload


def _mark_later(directory: str, name: str) -> str:
    time.sleep(0.3)
    Path(directory, name).touch()
    return name


def _refuse() -> None:
    raise Refused("no, and here is why")


def test_the_childs_result_and_its_refusal_come_back():
    assert asyncio.run(offload.in_child(_mark_later, "/tmp", f"chock-offload-{os.getpid()}")).startswith("chock-")
    os.unlink(f"/tmp/chock-offload-{os.getpid()}")
    with pytest.raises(ChockError, match="no, and here is why") as refused:
        asyncio.run(offload.in_child(_refuse))
    assert refused.value.exit_code == Refused.exit_code


def test_a_cancel_kills_the_child_even_before_it_has_run(tmp_path):
    async def cancelled(name: str, checkpoints: int) -> None:
        task = asyncio.ensure_future(offload.in_child(_mark_later, str(tmp_path), name))
        for _ in range(checkpoints):  # 0: right after the fork, before the child may have run at all
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def all_of_them() -> None:
        for number in range(30):
            await cancelled(f"m{number}", number % 3)

    asyncio.run(all_of_them())
    time.sleep(0.6)  # longer than the work: a child that lived on would have left its mark by now
    assert list(tmp_path.iterdir()) == []


def _backtrack(letters: int) -> tuple[int, bool]:
    """Which process ran it, and whether `(a+)+$` matched: 2**letters steps of backtracking."""
    import re

    return os.getpid(), re.search(r"(a+)+$", "a" * letters + "!") is not None


def test_quick_work_stays_on_the_loop_and_slow_work_starts_over_in_a_child():
    import signal

    signal.setitimer(signal.ITIMER_REAL, 30)  # an alarm set before (a test's own guard): it is kept
    try:
        assert asyncio.run(offload.quick_or_in_child(_backtrack, 5)) == (os.getpid(), False)  # no fork paid
        pid, matched = asyncio.run(offload.quick_or_in_child(_backtrack, 24))  # seconds of backtracking
        assert pid != os.getpid() and matched is False  # cut on the loop, done again in a child
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30  # set again for what is left of it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
