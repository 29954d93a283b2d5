"""chock.platform.launchd and packaging/launchd, as far as Linux can check them.

launch_activate_socket exists only in macOS's libSystem, so the ctypes call is driven through a stand-in
library whose functions are real C callables (ctypes callbacks) with the same signature: the pointer
plumbing, the free of launchd's array and the errno mapping run as they would on a Mac. The plists are
loaded with plistlib and checked for the keys docs/architecture.md#running-as-a-service names.
"""

from __future__ import annotations

import ctypes
import errno
import os
import plistlib
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from chock.errors import ChockError
from chock.platform import launchd
from chock.platform.launchd import activate_socket, bind

PLISTS = Path(__file__).resolve().parent.parent / "packaging" / "launchd"
ACTIVATE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t)
)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class FakeLibSystem:
    """launch_activate_socket and free as C callables: hands out `fds` (or fails with `error`)."""

    def __init__(self, fds: list[int], error: int = 0) -> None:
        self.names: list[bytes] = []
        self.freed: list[int] = []
        self.array = (ctypes.c_int * max(len(fds), 1))(*fds)
        self.handed: int | None = None

        def activate(name, fds_out, count_out) -> int:
            self.names.append(name)
            if error:
                return error
            fds_out[0] = ctypes.cast(self.array, ctypes.POINTER(ctypes.c_int))
            count_out[0] = len(fds)
            self.handed = ctypes.addressof(self.array)
            return 0

        self.launch_activate_socket = ACTIVATE(activate)
        self.free = FREE(self.freed.append)


def test_refuses_off_macos() -> None:
    assert sys.platform != "darwin"
    with pytest.raises(ChockError, match="macOS only"):
        activate_socket("control")


def test_bind_gives_the_c_signatures() -> None:
    lib = SimpleNamespace(launch_activate_socket=ACTIVATE(lambda *_: 0), free=FREE(lambda _: None))
    activate, free = bind(lib)
    assert activate.argtypes == [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_int)),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    assert activate.restype is ctypes.c_int
    assert free.argtypes == [ctypes.c_void_p]
    assert free.restype is None


def test_activate_socket_adopts_what_launchd_hands_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listeners = []
    for name in ("a.sock", "b.sock"):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(tmp_path / name))
        listener.listen()
        listener.set_inheritable(True)  # launchd's fds arrive without FD_CLOEXEC
        listeners.append(listener)
    fds = [os.dup(listener.fileno()) for listener in listeners]
    lib = FakeLibSystem(fds)
    monkeypatch.setattr(launchd.sys, "platform", "darwin")
    monkeypatch.setattr(launchd.ctypes, "CDLL", lambda path, use_errno: lib if path == launchd.LIBSYSTEM else None)
    sockets: list[socket.socket] = []
    try:
        sockets = activate_socket("control")
        assert [sock.fileno() for sock in sockets] == fds
        assert [sock.getsockname() for sock in sockets] == [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]
        assert not any(sock.get_inheritable() for sock in sockets)
        assert lib.names == [b"control"]
        assert lib.freed == [lib.handed]  # launchd's malloc'd array is freed, once
    finally:
        for listener in listeners:
            listener.close()
        for sock in sockets:
            sock.close()


def test_activate_socket_refuses_a_socket_that_does_not_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    left, right = socket.socketpair()
    with left, right:
        monkeypatch.setattr(launchd.sys, "platform", "darwin")
        monkeypatch.setattr(launchd.ctypes, "CDLL", lambda *_a, **_k: FakeLibSystem([left.fileno()]))
        with pytest.raises(ChockError, match=r"fd \d+ \('http'\), a stream socket that is not listening"):
            activate_socket("http")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (errno.ESRCH, []),  # not started by launchd: the caller binds its own socket
        (errno.ENOENT, []),  # started under another job's plist (e.g. from a terminal app): the same
        (errno.EALREADY, "already handed over the 'control' sockets"),
        (errno.EPERM, r"launch_activate_socket\('control'\) failed: EPERM"),
    ],
)
def test_launchd_errors(error: int, outcome: list | str) -> None:
    lib = FakeLibSystem([], error=error)
    if isinstance(outcome, list):
        assert launchd._activate(lib, "control") == outcome
    else:
        with pytest.raises(ChockError, match=outcome):
            launchd._activate(lib, "control")
    assert lib.freed == []  # nothing was allocated, nothing is freed


# --- the plists -------------------------------------------------------------------------------------------


def load(name: str) -> dict:
    with (PLISTS / name).open("rb") as file:
        return plistlib.load(file)


def substituted(name: str, home: str = "/Users/ada", chock: str = "/usr/local/bin/chock") -> dict:
    """What `chock daemon install` writes: the placeholders replaced, still a valid plist."""
    text = (PLISTS / name).read_text().replace("@HOME@", home).replace("@CHOCK@", chock)
    return plistlib.loads(text.encode())


@pytest.mark.parametrize(
    ("name", "verb", "key", "sock"),
    [
        ("dev.chock.daemon.plist", "daemon", "control", "daemon.sock"),
        ("dev.chock.serve.plist", "serve", "http", "serve.sock"),
    ],
)
def test_plists_start_on_demand_from_a_private_socket(name: str, verb: str, key: str, sock: str) -> None:
    plist = load(name)
    assert plist["Label"] == name.removesuffix(".plist")
    assert plist["ProgramArguments"] == ["@CHOCK@", verb, "--idle-exit", "600"]
    assert plist["RunAtLoad"] is False and plist["KeepAlive"] is False
    assert plist["LimitLoadToSessionType"] == "Aqua"
    assert list(plist["Sockets"]) == [key]
    entry = plist["Sockets"][key]
    assert entry["SockPathMode"] == 384 == 0o600
    state = "@HOME@/Library/Application Support/chock/state"
    assert entry["SockPathName"] == f"{state}/{sock}"
    assert plist["EnvironmentVariables"] == {
        "CHOCK_CONFIG": "@HOME@/.config/chock/config.zon",
        "CHOCK_STATE_DIR": state,
        "CHOCK_DATA_DIR": "@HOME@/Library/Application Support/chock",
    }
    assert plist["StandardOutPath"].startswith(f"{state}/") and plist["StandardErrorPath"].startswith(f"{state}/")

    installed = substituted(name)
    paths = [installed["Sockets"][key]["SockPathName"], installed["StandardOutPath"], installed["StandardErrorPath"]]
    paths += [*installed["EnvironmentVariables"].values(), installed["ProgramArguments"][0]]
    assert all(path.startswith("/") and "@" not in path and "~" not in path for path in paths)
    # macOS's sun_path limit is 104 bytes: a typical home leaves plenty of room.
    assert len(installed["Sockets"][key]["SockPathName"].encode()) < 104
