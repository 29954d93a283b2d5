"""The HTTP client, imported in a thread while a session's start waits on git and bubblewrap
(docs/architecture.md#start-up).

httpx, httpcore, h11 and anyio's asyncio backend are most of what a session imports before its first request,
and all of it is CPU spent in Python; the git and bwrap processes that make the session's worktree and check its
sandbox are time the main thread spends waiting, with the interpreter's lock let go. `begin` starts a thread that
imports the client then; `finish` waits for it before the provider is built, so that the main thread never
imports any of it on its own while the thread runs, and nothing but one short-lived thread ever exists before
the session's loop (which starts none: chock.session.start).

The rule that keeps two threads importing at once safe: the thread imports only the HTTP client's modules (and
chock.providers.lean_http, which imports nothing of Chock's), never one that imports Chock. Python's import locks
are per module, so the main thread importing a module the thread holds waits for it, and a deadlock would need a
module each imports from the other: there is none between Chock's modules and these. Whatever fails here (a
module this version of httpcore or anyio does not have) is left for the main thread's own import to report.
"""

from __future__ import annotations

import importlib
import sys
import threading

# In the order the first request needs them: httpx (lean, without its command-line tool), then what httpcore
# imports only when it opens its first connection. The private names are those of httpcore 0.16 (Debian 12)
# and 1.x, and anyio 3 and 4; a name a version does not have is skipped.
MODULES = (
    "chock.providers.lean_http",
    "httpcore",
    "httpcore.backends.asyncio",  # httpcore 0.16
    "httpcore._backends.anyio",  # httpcore 1.x
    "anyio",
    "anyio.lowlevel",
    "anyio._core._sockets",
    "anyio._core._tasks",
    "anyio._core._streams",
    "anyio.streams.tls",
    "anyio._backends._asyncio",
)

# While the thread imports, the main thread takes the interpreter's lock back within this many seconds of a git
# or bwrap process ending (Python's own interval, 5 ms, would cost each of a start's dozen waits up to that).
SWITCH_SECONDS = 0.0002

_thread: threading.Thread | None = None
_interval = 0.005  # the interval `finish` puts back


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the main thread's own import says what is wrong, where it matters
            continue


def begin() -> None:
    """Start importing the HTTP client in a thread, once per process."""
    global _thread, _interval
    if _thread is None:
        _thread = threading.Thread(target=_import_all, name="chock-warm-http", daemon=True)
        _interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_SECONDS)
        _thread.start()


def finish() -> None:
    """Wait until the thread `begin` started (if any) has imported what it could, and put the interpreter's
    switch interval back."""
    if _thread is not None:
        _thread.join()
        sys.setswitchinterval(_interval)
