"""Who is on the other end of a unix socket: the kernel's answer, or None when it will not say.

An absent answer is never a permissive one: a peer the kernel will not name is refused
(docs/protocol.md#who-may-connect).
"""

from __future__ import annotations

import os
import socket
import struct
import sys

# struct ucred { pid_t pid; uid_t uid; gid_t gid; } on Linux: uid_t and gid_t are unsigned (a uid may pass 2^31).
_UCRED = struct.Struct("iII")
# macOS: struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
_LOCAL_PEERCRED = 0x001
_SOL_LOCAL = 0
_XUCRED_HEAD = struct.Struct("2I")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process that connected `sock`, or None if the kernel cannot name it."""
    try:
        if sys.platform.startswith("linux"):
            data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            _pid, uid, _gid = _UCRED.unpack(data)
            return uid
        if sys.platform == "darwin":
            data = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, 76)
            _version, uid = _XUCRED_HEAD.unpack_from(data)
            return uid
    except (OSError, struct.error):
        return None
    return None


def is_own_user(sock: socket.socket) -> bool:
    return peer_uid(sock) == os.getuid()
