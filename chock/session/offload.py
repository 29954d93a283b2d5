"""Long work off the session's loop: a function run in a forked child, awaited on the loop, killed on a cancel.

A session is one thread on one loop (docs/architecture.md#chock-run), and what it must answer at once — a stop,
SIGTERM, a question on its sockets — is answered only while that loop runs. Work whose length the agent
decides (finishing a workspace of 60,000 directories) therefore runs in a child the loop waits on; never in a
thread, because the tool path forks and a fork of a threaded process is unsafe. The child is a fork of the
session: no interpreter to start and nothing to import. It leads a process group of its own, so a cancel kills
it with whatever it started (git), and it dies with the session however the session dies.

The child hands back what the function returned, or the message and exit code of the ChockError it raised, by
pickle over a pipe; that pipe is the child's only descriptor from the session (its log, its sockets and the
loop's own are closed in the child).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

from chock.errors import ChockError
from chock.session import reaper

T = TypeVar("T")

# A killed child is gone within milliseconds; this bounds the wait for one the kernel cannot finish.
REAP_SECONDS = reaper.KILLED_SECONDS
# What `quick_or_in_child` may hold the loop for before it starts over in a child: below what a person notices,
# above what most such work takes (a search through a 10 MB file takes tens of milliseconds).
QUICK_SECONDS = 0.25


class _Unfinished(BaseException):
    """Raised by the alarm into work that ran past its time on the loop: a BaseException, so that no `except
    Exception` of the work's own can take it for a fault of its input and carry on, on the loop, unbounded."""


async def quick_or_in_child(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)`, on the loop when it is done within `QUICK_SECONDS`, else from the start in a child, as
    `in_child`: for work with no effect but its result, whose length the agent decides. A fork costs more than
    most such work, and work cut short on the loop is cut by SIGALRM, whose handler Python runs even inside a
    regular expression's backtracking (re checks for signals as it goes) and inside a read."""
    done = _on_the_loop(function, args)
    if done is not _UNFINISHED:
        return done
    return await in_child(function, *args)


_UNFINISHED = object()


def _on_the_loop(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """`function(*args)`, or `_UNFINISHED` when it ran past `QUICK_SECONDS` (or cannot be timed: signal handlers
    are the main thread's). An alarm set before is set again for what is left of it."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _UNFINISHED

    def interrupt(_signum: int, _frame: object) -> None:
        raise _Unfinished

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, interrupt)
    earlier, _ = signal.setitimer(signal.ITIMER_REAL, QUICK_SECONDS)
    try:
        try:
            return function(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Unfinished:  # also when the alarm came just after the work: it is done again, in the child
        return _UNFINISHED
    finally:
        signal.signal(signal.SIGALRM, previous)
        if earlier:
            signal.setitimer(signal.ITIMER_REAL, max(earlier - (time.monotonic() - started), 0.001))


async def in_child(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` run in a forked child; its result, or its ChockError raised here. A cancel kills the
    child and its process group at once."""
    import ctypes  # noqa: F401  # for reaper.die_with_parent in the child: imported there it takes 20 ms each
    import pickle  # here, not at a session's start; before the fork, so no child imports it again

    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; it never returns
        _child(write_end, parent, function, args)
    # The child leads its group from here on whichever of the two gets there first, so a cancel that comes
    # before the child has run still finds the group to kill.
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    os.close(write_end)
    try:
        data = await _read_to_end(read_end)
    except BaseException:
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
        raise
    finally:
        os.close(read_end)
        _reap(pid)
    try:
        outcome = pickle.loads(data)
    except Exception:
        outcome = ("died", "it ended before it answered")
    if outcome[0] == "ok":
        return outcome[1]
    if outcome[0] == "error":
        raise ChockError(outcome[1], exit_code=outcome[2])
    raise ChockError(f"{getattr(function, '__name__', 'the work')} failed in its process: {outcome[1]}")


def _child(write_end: int, parent: int, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run `function` and write its outcome; whatever happens, exit without running the session's cleanup."""
    try:
        with contextlib.suppress(OSError):  # the parent may have made it so already
            os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)  # the parent's loop must not hear this process's signals
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        reaper.die_with_parent(parent)
        os.closerange(3, write_end)  # the log, its lock, the sockets, the loop's own descriptors
        os.closerange(write_end + 1, os.sysconf("SC_OPEN_MAX"))
        try:
            outcome: tuple[Any, ...] = ("ok", function(*args))
        except ChockError as error:
            outcome = ("error", str(error), error.exit_code)
        except BaseException as error:
            outcome = ("crash", f"{type(error).__name__}: {error}")
        import pickle  # in_child imported it before it forked: this only looks it up

        data = pickle.dumps(outcome)
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view) :]
    finally:
        os._exit(0)


async def _read_to_end(fd: int) -> bytes:
    """Everything written to the pipe `fd` until its writer closes it, read as the loop finds it readable."""
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            if not done.done():
                done.set_result(None)  # end of file: the child has closed it (it exited)
        except BlockingIOError:
            return
        except OSError as error:
            if not done.done():
                done.set_exception(error)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


def _reap(pid: int) -> None:
    """Collect the child, so it is no zombie: it has exited or been killed, so this takes moments."""
    deadline = time.monotonic() + REAP_SECONDS
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] != 0:
                return
        except ChildProcessError:
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.001)
