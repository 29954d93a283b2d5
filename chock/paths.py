"""Where Chock keeps things: config, state, data and cache directories, and what lives in them.

Every path a client hands us that names a session goes through `check_session_id` first, so an id like
`../../etc/passwd` never reaches the file system.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time

from chock.errors import ChockError

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import TypeVar

    P = TypeVar("P", str, Path)

# sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS, including the terminating NUL.
SOCKET_PATH_LIMIT = 104 if sys.platform == "darwin" else 108

DIR_MODE = 0o700
FILE_MODE = 0o600

_HEX = frozenset("0123456789abcdef")


def is_session_id(value: object) -> bool:
    """Whether `value` has a session id's form, `YYYYMMDD-HHMMSS-hhhhhh` (ASCII digits, lowercase hex)."""
    return (
        isinstance(value, str)
        and len(value) == 22
        and value[8] == value[15] == "-"
        and (value[:8] + value[9:15]).isascii()
        and (value[:8] + value[9:15]).isdigit()
        and _HEX.issuperset(value[16:])
    )


def _path(text: str) -> Path:
    """`text` as a Path, pathlib imported at the first one: the daemon's way to its greeting makes none."""
    from pathlib import Path

    return Path(text)


class BadDirectoryVariable(ChockError):
    exit_code = 3  # chock.errors.EXIT_REFUSED: nothing was made


def _directory_variable(variable: str) -> str | None:
    """The directory `$variable` names (None when it is unset or empty), refused when it cannot be one: a file
    stands at it or above it, a name in it is longer than a file system takes, or it cannot be looked at. What
    does not exist yet is made when it is needed."""
    value = os.environ.get(variable)
    if not value:
        return None
    refusal = f"${variable} is {value!r}, which cannot be Chock's directory"
    if any(len(os.fsencode(name)) > 255 for name in value.split(os.sep)):  # NAME_MAX
        raise BadDirectoryVariable(f"{refusal}: a name in it is longer than 255 bytes; set it to a shorter path")
    probe = value
    while True:
        try:
            mode = os.stat(probe).st_mode
        except FileNotFoundError:
            parent = os.path.dirname(probe)
            if parent == probe or not parent:
                return value
            probe = parent
            continue
        except OSError as error:
            raise BadDirectoryVariable(f"{refusal}: {error.strerror or error}; set it to a directory") from None
        if not stat.S_ISDIR(mode):
            raise BadDirectoryVariable(f"{refusal}: {probe} is a file, not a directory; set it to a directory")
        return value


class BadSessionId(ChockError):
    """A session id of the wrong form: a usage error, whichever command was given it."""

    exit_code = 2  # chock.errors.EXIT_USAGE


class SocketPathTooLong(ChockError):
    pass


def check_session_id(value: str) -> str:
    """Return `value` if it is a well-formed session id; refuse anything else before it touches a path."""
    if not is_session_id(value):
        raise BadSessionId(f"{value!r} is not a session id (expected the form 20261201-073450-a1b2c3)")
    return value


def new_session_id(now: float | None = None) -> str:
    """UTC start time plus random hex, so ids sort by start time and never collide in practice."""
    import secrets  # lazily: only a new session needs it, and `chock sessions` must start fast

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def replace_file(path: str, data: bytes) -> None:
    """Write `path` whole and atomically (a temporary file beside it, renamed over it; mode FILE_MODE), so a
    reader never sees half of it. A failure leaves the old file and no temporary behind (and is not raised:
    the status records written this way are for people to read, never worth stopping a service for)."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def private_file(path: str, flags: int) -> int:
    """An `opener` for `open`: the file made 0600 (never through a symlink), closed on exec."""
    return os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


def plain_file(path: str, flags: int) -> int:
    """An `opener` for `open` that reads: never through a symlink, never waiting on a FIFO or a device, closed on
    exec."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def ensure_dir(path: P) -> P:
    """Create `path` (and missing parents) as 0700; an existing directory is left as the person made it."""
    missing = []
    probe = os.fspath(path) or os.curdir  # "": the directory of a bare file name
    while not os.path.exists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe) or os.curdir  # a relative path's last parent is the working directory
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, DIR_MODE)  # mkdir's mode is filtered by the umask
    return path


def sync_directory(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so the names made in it survive a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_socket_path(path: P, remedy: str = "choose a shorter one with --socket") -> P:
    """Refuse a socket path the kernel cannot hold, naming the path, the limit and the remedy."""
    if len(os.fsencode(path)) >= SOCKET_PATH_LIMIT:
        raise SocketPathTooLong(
            f"the socket path {path} is {len(os.fsencode(path))} bytes; this platform allows at most "
            f"{SOCKET_PATH_LIMIT - 1}: {remedy}"
        )
    return path


def project_key(project: str | os.PathLike[str]) -> str:
    """A stable digest of the resolved project path, naming its knowledgebase and toolchain dirs."""
    import hashlib  # lazily: loading OpenSSL costs milliseconds that `chock sessions` does not spend

    return hashlib.sha256(os.fsencode(os.path.realpath(project))).hexdigest()[:16]


# A file name longer than this stands for its path by the path's digest instead (names stop at 255 bytes).
_PATH_NAME_LIMIT = 200


def path_name(real: str) -> str:
    """A file name that stands for the resolved path `real`, one to one: the path itself with `%` and `/`
    escaped (so a cache dir says what it holds), or `project_key`'s digest when that would be too long."""
    name = real.replace("%", "%25").replace("/", "%2F")
    return name if len(os.fsencode(name)) <= _PATH_NAME_LIMIT else "#" + project_key(real)


def _home() -> str:
    return os.environ.get("HOME") or os.path.expanduser("~")


def _xdg(variable: str, default: str) -> str:
    value = os.environ.get(variable)
    if value and os.path.isabs(value):
        return value
    return os.path.join(_home(), default)


def runtime_socket_dir() -> Path:
    """`$XDG_RUNTIME_DIR/chock`, or `/tmp/chock-<uid>` refused unless it is ours alone."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return ensure_dir(_path(runtime) / "chock")
    directory = _path(f"/tmp/chock-{os.getuid()}")
    ensure_dir(directory)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ChockError(
            f"{directory} is not a directory owned by you with mode 0700; remove it or set XDG_RUNTIME_DIR"
        )
    return directory


class Layout:
    """The roots and every path derived from them, computed the same way by every process.

    The roots are kept as text (`config_file`, `state_dir`, `data_dir`, `cache_dir`) and every path is a Path
    made when it is asked for: a socket-activated daemon imports this first thing and reaches its greeting
    through the text and `os.path` alone, without pathlib, and without `inspect`, which a dataclass would import
    (docs/architecture.md#start-up)."""

    __slots__ = ("cache_dir", "config_file", "data_dir", "state_dir")
    ROOTS = ("config", "state", "data", "cache")

    def __init__(
        self,
        config: str | os.PathLike[str],
        state: str | os.PathLike[str],
        data: str | os.PathLike[str],
        cache: str | os.PathLike[str] | None = None,
    ) -> None:
        self.config_file = os.fspath(config)
        self.state_dir = os.fspath(state)
        self.data_dir = os.fspath(data)
        self.cache_dir = None if cache is None else os.fspath(cache)  # None: the platform's default

    @property
    def config(self) -> Path:
        return _path(self.config_file)

    @property
    def state(self) -> Path:
        return _path(self.state_dir)

    @property
    def data(self) -> Path:
        return _path(self.data_dir)

    @property
    def cache(self) -> Path | None:
        return None if self.cache_dir is None else _path(self.cache_dir)

    def _roots(self) -> tuple[str, str, str, str | None]:
        return (self.config_file, self.state_dir, self.data_dir, self.cache_dir)

    def replace(self, **changes: str | os.PathLike[str] | None) -> Layout:
        """This layout with some roots changed."""
        roots: dict[str, str | os.PathLike[str] | None] = dict(zip(self.ROOTS, self._roots(), strict=True))
        return Layout(**{**roots, **changes})  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self._roots() == other._roots()

    def __hash__(self) -> int:
        return hash(self._roots())

    def __repr__(self) -> str:
        roots = ", ".join(f"{name}={root!r}" for name, root in zip(self.ROOTS, self._roots(), strict=True))
        return f"Layout({roots})"

    @classmethod
    def from_env(cls, config: str | os.PathLike[str] | None = None) -> Layout:
        if sys.platform == "darwin":
            support = os.path.join(_home(), "Library", "Application Support", "chock")
            state_default, data_default = os.path.join(support, "state"), support
        else:
            state_default = os.path.join(_xdg("XDG_STATE_HOME", ".local/state"), "chock")
            data_default = os.path.join(_xdg("XDG_DATA_HOME", ".local/share"), "chock")
        config_path = config or os.environ.get("CHOCK_CONFIG")
        return cls(
            config=config_path or os.path.join(_xdg("XDG_CONFIG_HOME", ".config"), "chock/config.zon"),
            state=_directory_variable("CHOCK_STATE_DIR") or state_default,
            data=_directory_variable("CHOCK_DATA_DIR") or data_default,
            cache=_directory_variable("CHOCK_CACHE_DIR") or _default_cache(),
        )

    # State dir ------------------------------------------------------------------------------------

    @property
    def sessions_dir(self) -> Path:
        return self.state / "sessions"

    @property
    def sessions_text(self) -> str:
        """`sessions_dir` as a string, made without pathlib: the daemon's first `list` imports none
        (docs/architecture.md#start-up)."""
        return os.path.join(self.state_dir, "sessions")

    def session_dir(self, session_id: str) -> Path:
        return self.sessions_dir / check_session_id(session_id)

    def log_path(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "log.jsonl"

    def run_log_path(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "run.log"

    def move_dir(self, session_id: str) -> Path:
        """Where a session's parts wait while it moves between hosts: `out/` on the source (staged by `chock run
        --move-out`), `in/` on the target (received by the daemon, taken by `chock run --move-in`)."""
        return self.state / "moves" / check_session_id(session_id)

    def session_socket(self, session_id: str, kind: str) -> Path:
        """`approval` or `handover` socket: beside the log when it fits, else in the runtime dir.

        Both ends call this, so both compute the same path by the same rule (docs/protocol.md#session-sockets).
        """
        beside = self.session_dir(session_id) / f"{kind}.sock"
        if len(os.fsencode(beside)) < SOCKET_PATH_LIMIT:
            return beside
        return check_socket_path(
            runtime_socket_dir() / f"{session_id}.{kind}.sock", "set XDG_RUNTIME_DIR to a shorter directory"
        )

    @property
    def daemon_socket(self) -> Path:
        return _path(self.daemon_socket_text)

    @property
    def daemon_socket_text(self) -> str:
        """`daemon_socket` as text: what `chock dial-stdio`, which every remote request starts, joins without
        importing pathlib."""
        return os.path.join(self.state_dir, "daemon.sock")

    @property
    def serve_socket(self) -> Path:
        return self.state / "serve.sock"

    @property
    def serve_status_text(self) -> str:
        """Where serve says where it listens (`serve-status.json`), as `daemon-status.json` says the daemon's."""
        return os.path.join(self.state_dir, "serve-status.json")

    # Data dir -------------------------------------------------------------------------------------

    @property
    def instances_path(self) -> Path:
        return self.data / "instances.zon"

    @property
    def tokens_path(self) -> Path:
        return self.data / "tokens.zon"

    @property
    def login_lock_path(self) -> Path:
        return self.data / "login.lock"

    @property
    def secretspec_dir(self) -> Path:
        """The secretspec store's own directory: the manifest Chock gives SecretSpec, and where a relative
        provider path (`dotenv://.env`) is resolved (docs/credentials.md#the-stores)."""
        return self.data / "secretspec"

    @property
    def workspaces_dir(self) -> Path:
        return self.data / "workspaces"

    def workspace_dir(self, session_id: str) -> Path:
        return self.workspaces_dir / check_session_id(session_id)

    def scratchpad_path(self, session_id: str) -> Path:
        return self.data / "scratchpads" / f"{check_session_id(session_id)}.md"

    def project_dir(self, project: Path) -> Path:
        return self.data / "projects" / project_key(project)

    def knowledgebase_dir(self, project: Path) -> Path:
        return self.project_dir(project) / "knowledgebase"

    def toolchains_dir(self, project: Path) -> Path:
        return self.project_dir(project) / "toolchains"

    def mcp_home(self, project: Path, server: str) -> Path:
        """A stdio MCP server's private HOME for one project: its own, never bound into an agent's sandbox."""
        return self.data / "mcp" / project_key(project) / server

    # Cache dir: nothing here is the truth; everything can be deleted at any time ------------------

    @property
    def rows_dir(self) -> Path:
        """Session rows and the index by project, folded from this state dir's logs (`chock.log.catalog`).
        Per state dir, so two state dirs (a test's, a benchmark's) can share one cache dir."""
        return _path(self.rows_text)

    @property
    def rows_text(self) -> str:
        """`rows_dir` as a string, made without pathlib."""
        return os.path.join(self.cache_dir or _default_cache(), "rows", path_name(os.path.realpath(self.state_dir)))


def _default_cache() -> str:
    if sys.platform == "darwin":
        return os.path.join(_home(), "Library", "Caches", "chock")
    return os.path.join(_xdg("XDG_CACHE_HOME", ".cache"), "chock")
