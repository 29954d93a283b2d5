"""systemd glue for `chock daemon` and `chock serve`: socket activation, readiness, session scopes.

- `listen_fds()`: the listening sockets a .socket unit passed (LISTEN_FDS / LISTEN_PID / LISTEN_FDNAMES),
  grouped by `FileDescriptorName=`, each checked to be a listening stream socket.
- `notify()` and `watchdog_interval()`: sd_notify readiness, status and watchdog (through `sdnotify`).
- `under_user_manager()` and `move_to_scope()`: put a session child in its own transient scope unit on the
  user manager over D-Bus, so it outlives a daemon restart and a crash takes down one session only.

Imports stay light (os, socket, stat): `chock daemon` imports this on a socket-activated start; sdnotify is
loaded by the first `notify()` under a manager, and jeepney only by `move_to_scope()`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time

from chock.errors import ChockError

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from jeepney import MatchRule, Message

# sd_listen_fds(3): passed descriptors start at 3, after stdin, stdout and stderr.
LISTEN_FDS_START = 3
# Removed from os.environ whatever they held, so no child (a session, a tool) inherits them: python-systemd's
# unset_environment=True unsets them at C level only, and os.environ, which subprocess copies, keeps them.
LISTEN_VARIABLES = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
# What sd_listen_fds_with_names(3) calls a descriptor when LISTEN_FDNAMES is missing.
UNNAMED = "unknown"

# A READY=1 must not be lost to a manager that is briefly busy, nor may a wedged one stall the daemon's loop.
NOTIFY_TIMEOUT = 1.0

SLICE = "app-chock.slice"
# StartTransientUnit returns once the job is queued; the scope is running when its JobRemoved says `done`.
# Starting a scope is a cgroup write, milliseconds normally: 10 s is a manager that is not going to answer.
SCOPE_TIMEOUT = 10.0
# D-Bus authentication is a few lines; a socket that takes longer is not a D-Bus server worth waiting for.
AUTH_TIMEOUT = 2.0
_SYSTEMD = "org.freedesktop.systemd1"
_MANAGER_PATH = "/org/freedesktop/systemd1"
_MANAGER_INTERFACE = "org.freedesktop.systemd1.Manager"
# A session bus with no systemd manager on it (e.g. a `dbus-run-session` bus): try the manager's own socket.
# The call may auto-start the name: on a bus started by the manager (dbus-user-session) that waits for the
# manager to join, which it does moments after the bus starts; elsewhere it runs the activation file systemd
# ships for org.freedesktop.systemd1 (Exec=/bin/false) and fails with Spawn.ChildExited.
_NO_MANAGER_ON_BUS = ("org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner")
_SPAWN_FAILED = "org.freedesktop.DBus.Error.Spawn."


# --- socket activation ------------------------------------------------------------------------------------


def listen_fds(expected: tuple[str, ...] = ()) -> dict[str, list[socket.socket]]:
    """The sockets socket activation passed us, by FileDescriptorName; `{}` when we were not activated.

    Each is checked to be a listening stream socket and gets FD_CLOEXEC (they arrive without it); the three
    LISTEN_* variables are removed from os.environ in every case. With `expected`, any other name is an error.
    """
    try:
        passed = _passed_fds()
    finally:
        for name in LISTEN_VARIABLES:
            os.environ.pop(name, None)
    if expected:
        for fd, name in sorted(passed.items()):
            if name not in expected:
                raise ChockError(
                    f"socket activation passed fd {fd} named {name!r}; expected {' or '.join(map(repr, expected))} "
                    "(set FileDescriptorName= in the .socket unit)"
                )
    sockets: dict[str, list[socket.socket]] = {}
    for fd, name in sorted(passed.items()):
        sockets.setdefault(name, []).append(adopt_listener(fd, name))
    return sockets


def _passed_fds() -> dict[int, str]:
    """{fd: name} from LISTEN_*; python-systemd's sd_listen_fds_with_names where it is installed."""
    if "LISTEN_FDS" not in os.environ:
        return {}
    try:
        from systemd.daemon import listen_fds_with_names
    except ImportError:
        return _parse_listen_variables(dict(os.environ), os.getpid())
    try:
        return dict(listen_fds_with_names(unset_environment=True))
    except OSError as exc:
        raise ChockError(f"the socket activation variables are malformed ({exc.strerror or exc})") from exc


def _parse_listen_variables(environ: dict[str, str], pid: int) -> dict[int, str]:
    """sd_listen_fds_with_names(3) without libsystemd: nothing unless LISTEN_PID is this process."""
    if environ.get("LISTEN_PID", "").strip() != str(pid):
        return {}
    count_text = environ.get("LISTEN_FDS", "").strip()
    if not count_text.isdigit():
        raise ChockError(f"LISTEN_FDS={count_text!r} is not a number of descriptors")
    count = int(count_text)
    names = environ["LISTEN_FDNAMES"].split(":") if "LISTEN_FDNAMES" in environ else [UNNAMED] * count
    if len(names) != count:
        raise ChockError(f"LISTEN_FDNAMES names {len(names)} descriptors but LISTEN_FDS says {count}")
    return {LISTEN_FDS_START + index: name for index, name in enumerate(names)}


def adopt_listener(fd: int, name: str) -> socket.socket:
    """Wrap an inherited fd as a socket once it is known to be a listening stream socket; set FD_CLOEXEC.

    Shared with launchd's `launch_activate_socket`, whose fds need the same checks.
    """
    what = f"fd {fd} ({name!r})"
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise ChockError(f"socket activation named {what}, but it is not open ({exc.strerror})") from exc
    if not stat.S_ISSOCK(mode):
        raise ChockError(f"socket activation passed {what}, which is {_file_kind(mode)}, not a listening socket")
    sock = socket.socket(fileno=fd)
    kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
    if kind != socket.SOCK_STREAM:
        sock.detach()
        raise ChockError(f"socket activation passed {what}, which is {_socket_kind(kind)}, not a stream socket")
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        sock.detach()
        raise ChockError(f"socket activation passed {what}, a stream socket that is not listening")
    sock.set_inheritable(False)
    return sock


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a pipe"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((text for test, text in kinds if test(mode)), "not a socket")


def _socket_kind(kind: int) -> str:
    names: dict[int, str] = {socket.SOCK_DGRAM: "a datagram socket", socket.SOCK_SEQPACKET: "a seqpacket socket",
             socket.SOCK_RAW: "a raw socket"}  # fmt: skip
    return names.get(kind, f"a socket of type {kind}")


# --- readiness and watchdog -------------------------------------------------------------------------------


def notify(*states: str) -> None:
    """sd_notify(3) through the `sdnotify` package: `states` ("READY=1", "STATUS=…", "STOPPING=1",
    "WATCHDOG=1") in one datagram, as one call's newline-separated assignments.

    A no-op without NOTIFY_SOCKET; never raises (sdnotify swallows a socket that is gone or full). Three
    things sdnotify 0.3 does not do are done here: a newline inside a state becomes a space, so a STATUS=
    cannot smuggle in another assignment; the text reaches the manager as UTF-8 (sdnotify encodes Latin-1,
    which the manager drops as unclean, and would silently drop a STATUS= outside Latin-1), by handing it
    a string whose Latin-1 bytes are the UTF-8 ones (a path's undecodable bytes, kept as surrogates, become `?`);
    and its socket gets a send timeout and is closed.
    """
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not states or not address.startswith(("/", "@")):
        return  # not started by a manager (or an address family sdnotify does not speak, e.g. vsock)
    from sdnotify import SystemdNotifier

    # One state per line: a newline inside STATUS= would smuggle in another assignment.
    message = "\n".join(state.replace("\n", " ") for state in states)
    notifier = SystemdNotifier()  # connects to NOTIFY_SOCKET, or keeps socket None when it cannot
    sock = notifier.socket
    if sock is None:
        return  # the manager went away (or never listened): readiness is advisory to us
    try:
        sock.settimeout(NOTIFY_TIMEOUT)
        notifier.notify(message.encode("utf-8", "replace").decode("latin-1"))
    finally:
        sock.close()


def watchdog_interval() -> float | None:
    """sd_watchdog_enabled(3): the watchdog timeout in seconds (send WATCHDOG=1 at half of it), or None.

    WATCHDOG_PID, when set, names the process the watchdog is for: a child that inherited the variables is
    not it.
    """
    usec = os.environ.get("WATCHDOG_USEC", "").strip()
    pid = os.environ.get("WATCHDOG_PID", "").strip()
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000


# --- sessions as transient scopes on the user manager -----------------------------------------------------


def _private_socket() -> str | None:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "systemd", "private") if runtime else None


def under_user_manager() -> bool:
    """A systemd user manager is reachable: its private socket exists in $XDG_RUNTIME_DIR (one stat, no I/O).

    Every running user manager creates that socket, and systemd's own tools find the manager through
    XDG_RUNTIME_DIR too; with no runtime dir (macOS, a bare `su` shell) there is no manager to ask.
    """
    path = _private_socket()
    try:
        return path is not None and stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def move_to_scope(pid: int, unit: str, *, description: str, slice: str = SLICE) -> None:
    """Put process `pid` in a new transient scope unit `unit` (e.g. chock-session-<id>.scope) in `slice`.

    StartTransientUnit on the user manager, over the session bus when DBUS_SESSION_BUS_ADDRESS is set, else
    over the manager's peer-to-peer socket $XDG_RUNTIME_DIR/systemd/private; the JobRemoved match is in place
    before the call, and this returns once that job ended `done`. No PartOf= the service: a daemon restart
    must not stop sessions. CollectMode=inactive-or-failed: a session that failed does not linger as a unit.
    Blocking, up to SCOPE_TIMEOUT; failures are ChockErrors carrying the D-Bus error name and message.
    """
    if not unit.endswith(".scope"):
        raise ChockError(f"{unit!r} is not a scope unit name (it must end in .scope)")
    properties = [
        ("PIDs", ("au", [pid])),
        ("Description", ("s", description)),
        ("Slice", ("s", slice)),
        ("CollectMode", ("s", "inactive-or-failed")),
    ]
    deadline = time.monotonic() + SCOPE_TIMEOUT
    tried: list[str] = []
    for transport, address, is_bus in _transports():
        try:
            wire = _Wire.connect(address, is_bus=is_bus, deadline=deadline)
        except (OSError, ValueError) as exc:  # ValueError: jeepney's AuthenticationError
            tried.append(f"{transport} ({exc})")
            continue
        try:
            _start_scope(wire, unit, properties, deadline)
            return
        except _DBusError as exc:
            if is_bus and (exc.name in _NO_MANAGER_ON_BUS or exc.name.startswith(_SPAWN_FAILED)):
                tried.append(f"{transport} ({exc.name})")
                continue
            raise ChockError(f"systemd refused to start {unit}: {exc.name}: {exc.text}") from exc
        except TimeoutError as exc:
            raise ChockError(
                f"the systemd user manager did not start {unit} within {SCOPE_TIMEOUT:g} s (via {transport})"
            ) from exc
        except OSError as exc:
            raise ChockError(f"lost the systemd user manager ({transport}) while starting {unit}: {exc}") from exc
        finally:
            wire.close()
    where = "; ".join(tried) or "neither DBUS_SESSION_BUS_ADDRESS nor XDG_RUNTIME_DIR is set"
    raise ChockError(f"no systemd user manager to start {unit} with: {where}")


def _transports() -> list[tuple[str, str, bool]]:
    """(description, socket address, is a bus broker): the session bus first, then the manager's private socket."""
    from jeepney.bus import get_bus

    found: list[tuple[str, str, bool]] = []
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        # An address jeepney cannot connect to (e.g. tcp:) is skipped: the private socket may still do.
        with contextlib.suppress(KeyError, ValueError, RuntimeError, StopIteration):
            found.append(("the session bus", get_bus("SESSION"), True))
    private = _private_socket()
    if private is not None and os.path.exists(private):
        found.append((private, private, False))
    return found


def _start_scope(wire: _Wire, unit: str, properties: list, deadline: float) -> None:
    from jeepney import DBusAddress, MatchRule, new_method_call
    from jeepney.bus_messages import message_bus

    job_removed = MatchRule(type="signal", interface=_MANAGER_INTERFACE, member="JobRemoved", path=_MANAGER_PATH)
    if wire.is_bus:
        # On the peer-to-peer socket the manager sends every signal to every client; a broker needs a match.
        wire.call(message_bus.AddMatch(job_removed), deadline)
    manager = DBusAddress(_MANAGER_PATH, bus_name=_SYSTEMD, interface=_MANAGER_INTERFACE)
    call = new_method_call(manager, "StartTransientUnit", "ssa(sv)a(sa(sv))", (unit, "fail", properties, []))
    (job,) = wire.call(call, deadline).body
    # The job can end before its reply reaches us: look at what arrived meanwhile first.
    while True:
        message = wire.next_signal(job_removed, deadline)
        _id, path, _unit, result = message.body
        if path != job:
            continue
        if result != "done":  # failed, canceled, timeout, dependency, skipped…
            raise ChockError(f"systemd could not start {unit}: its start job ended {result!r}")
        return


class _DBusError(Exception):
    def __init__(self, name: str, text: str) -> None:
        super().__init__(f"{name}: {text}")
        self.name, self.text = name, text


class _Wire:
    """A blocking D-Bus connection with deadlines, on jeepney's sans-I/O parser and authenticator.

    Not jeepney.io.blocking.DBusConnection: that always says Hello, which the manager's peer-to-peer socket
    (no broker behind it) refuses; the same small loop serves both transports.
    """

    def __init__(self, sock: socket.socket, is_bus: bool) -> None:
        from jeepney import Parser

        self.sock, self.is_bus = sock, is_bus
        self.parser = Parser()
        self.serial = 0
        self.signals: list[Message] = []

    @classmethod
    def connect(cls, address: str, *, is_bus: bool, deadline: float) -> _Wire:
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import prep_socket

        sock = prep_socket(address, timeout=min(AUTH_TIMEOUT, max(deadline - time.monotonic(), 0.01)))
        sock.set_inheritable(False)
        wire = cls(sock, is_bus)
        if is_bus:
            try:
                wire.call(message_bus.Hello(), deadline)
            except BaseException:
                wire.close()
                raise
        return wire

    def close(self) -> None:
        self.sock.close()

    def call(self, message: Message, deadline: float) -> Message:
        from jeepney import HeaderFields, MessageType

        self.serial += 1
        serial = self.serial
        self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        self.sock.sendall(message.serialise(serial=serial))
        while True:
            reply = self._receive(deadline)
            fields = reply.header.fields
            if fields.get(HeaderFields.reply_serial) != serial:
                if reply.header.message_type == MessageType.signal:
                    self.signals.append(reply)
                continue
            if reply.header.message_type == MessageType.error:
                text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
                raise _DBusError(fields.get(HeaderFields.error_name, "unknown error"), text)
            return reply

    def next_signal(self, rule: MatchRule, deadline: float) -> Message:
        while True:
            while self.signals:
                signal = self.signals.pop(0)
                if rule.matches(signal):
                    return signal
            self.signals.append(self._receive(deadline))

    def _receive(self, deadline: float) -> Message:
        while (message := self._parse()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("the connection closed")
            self.parser.add_data(data)
        return message

    def _parse(self) -> Message | None:
        try:
            return self.parser.get_next_message()
        except Exception as exc:  # jeepney raises KeyError, ValueError, struct.error… on bytes that are not D-Bus
            raise ConnectionError(f"the peer does not speak D-Bus ({exc!r})") from exc
