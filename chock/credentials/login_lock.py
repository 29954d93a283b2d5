"""The login lock: `<data>/login.lock`, the kernel's flock, held over the credential and the index together.

A second login that starts while the first is writing waits for it; the wait is bounded, and the lock is the
kernel's, so a login that is killed releases it at once and there is nothing to clean up by hand
(docs/credentials.md#the-login-lock).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from chock.credentials.refusals import LoginBusy
from chock.paths import FILE_MODE, Layout, ensure_dir
from chock.platform.flock import lock_within

# Thousands of times what a store write takes.
LOCK_WAIT_SECONDS = 5.0
# Often enough that a released lock is taken about at once, rarely enough to cost nothing.
LOCK_POLL_SECONDS = 0.05

# It stores nothing, and names neither the credential nor the instance: the message is read off a terminal other
# people may see.
BUSY_MESSAGE = "another chock login is running. Nothing was stored: wait for it to finish, then run this login again."


@contextlib.contextmanager
def login_lock(layout: Layout, *, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Hold the login lock for the body; after `wait` seconds of another holder, raise LoginBusy."""
    ensure_dir(layout.data)
    # O_CLOEXEC, and subprocess closes other descriptors too: a keystore child never holds the lock.
    fd = os.open(layout.login_lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        if not lock_within(fd, wait, LOCK_POLL_SECONDS):
            raise LoginBusy(BUSY_MESSAGE)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock
