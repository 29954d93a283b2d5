"""An exclusive flock taken within a bound: the kernel has no timed flock, so a holder is waited out by polling.

Every lock Chock waits for (a session's log, the login lock, a project's row cache) is taken here; a lock that
must not be waited for at all is the same call with `wait=0`.
"""

from __future__ import annotations

import errno
import fcntl
import time


def lock_within(fd: int, wait: float, poll: float) -> bool:
    """Take `fd`'s exclusive flock, trying again every `poll` seconds for at most `wait` seconds; False when
    another holder kept it that long. An error other than "another holds it" is raised as it came."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
