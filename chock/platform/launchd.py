"""launchd socket activation on macOS: the sockets a LaunchAgent's `Sockets` entry opened for us.

launchd hands sockets over only on request, by the key they have in the plist's `Sockets` dictionary
(`control` for the daemon, `http` for serve), through launch_activate_socket(3) in libSystem:

    int launch_activate_socket(const char *name, int **fds, size_t *cnt);

It returns 0 or an errno: ENOENT (no socket by that name in the plist), ESRCH (this process was not started
by launchd), EALREADY (already handed over once). `*fds` is malloc'd; the caller frees it.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import sys
from typing import Any

from chock.errors import ChockError
from chock.platform.systemd import adopt_listener

LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
# Both are taken as "started by hand" (the caller binds its own socket): ESRCH is a process launchd does not
# manage; ENOENT one it counts as part of a job without this socket, which a shell inside an app launchd started
# may be (not verified on a Mac). Our own plists always name the socket (tests check); were one wrong, the
# daemon's own bind would meet launchd's listener on the path and say so.
NOT_ACTIVATED = (errno.ESRCH, errno.ENOENT)


def activate_socket(name: str) -> list[socket.socket]:
    """The listening sockets launchd opened under `name`; [] when this process was not started for them.

    Each is checked to be a listening stream socket and gets FD_CLOEXEC, as under systemd.
    """
    if sys.platform != "darwin":
        raise ChockError(f"launchd socket activation is macOS only; this is {sys.platform}")
    fds = _activate(ctypes.CDLL(LIBSYSTEM, use_errno=True), name)
    return [adopt_listener(fd, name) for fd in fds]


def bind(lib: Any) -> tuple[Any, Any]:
    """launch_activate_socket and free from `lib` with their C signatures, so ctypes passes the right widths."""
    activate = lib.launch_activate_socket
    activate.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t)]
    activate.restype = ctypes.c_int
    free = lib.free
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    return activate, free


def _activate(lib: Any, name: str) -> list[int]:
    activate, free = bind(lib)
    fds = ctypes.POINTER(ctypes.c_int)()
    count = ctypes.c_size_t(0)
    error = activate(name.encode(), ctypes.byref(fds), ctypes.byref(count))
    if error in NOT_ACTIVATED:
        return []
    if error:
        raise ChockError(_explain(error, name))
    try:
        return [fds[index] for index in range(count.value)]
    finally:
        if fds:
            free(fds)


def _explain(error: int, name: str) -> str:
    if error == errno.EALREADY:
        return f"launchd already handed over the {name!r} sockets to this process"
    return f"launch_activate_socket({name!r}) failed: {errno.errorcode.get(error, error)}"
