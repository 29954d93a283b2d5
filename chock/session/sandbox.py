"""The one sandbox builder: the bubblewrap command line every tool process runs under.

A `Sandbox` says what a tool may see; `argv` turns it into a bwrap command line and `environment` into the
tool's whole environment. The shell tool spawns the process itself, from the command line the session's
tool runner (chock.session.ports.Sandboxed) builds:

    create_subprocess_exec(*sandbox.argv(["/bin/sh", "-c", cmd], bwrap=find_bwrap()),
                           env=host_environment())

so neither the tool nor the bwrap process holds anything of the person's environment.

What is visible inside: the system directories read-only (never `/`: tests run as root, and `/` would
expose `/root` and the data dir), a private `/tmp`, minimal `/proc` and `/dev`, the workspace read-write, the
project's `.git` read-only with this worktree's admin dir read-write over it, and the project's toolchain dir
as a read-write HOME with the knowledgebase at `$HOME/knowledgebase`. Binding a subdirectory creates its
parents as empty directories on the sandbox's own root, so nothing else of the data dir, the state dir or the
person's HOME is there.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import weakref
from collections.abc import Iterator
from pathlib import Path

from chock.errors import ChockError, Refused
from chock.paths import Layout, ensure_dir
from chock.session.workspace import Worktree
from chock.value import Value

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from chock.session.git_view import Views

BWRAP_MISSING = (
    "bwrap (bubblewrap) is not installed: install it with `apt install bubblewrap`; "
    "Chock never runs tools without a sandbox"
)

# Bound read-only, when they exist; never / itself, which would show the person's home (and /root when Chock runs
# as root) and Chock's data dir (docs/architecture.md#what-the-sandbox-may-write). On a merged-/usr system /bin,
# /sbin and /lib* are symlinks into /usr; they are recreated as the same symlinks so that /bin/sh resolves to the
# bound /usr/bin/sh.
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# /etc is readable by every user of the machine, except the few files it keeps from them (shadow, private
# TLS keys, …). A tool runs as the person's uid; when that is root, owning those files makes them readable
# even with every capability dropped, so whatever the machine's other users cannot read is hidden here too.
MASKED_ROOT = "/etc"

TOOL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_PATH = TOOL_PATH  # bwrap itself needs nothing but a PATH


def find_bwrap(path: str | None = None) -> str:
    """The bwrap executable on PATH (or on `path`); refused when there is none, since nothing falls back."""
    found = shutil.which("bwrap", path=path)
    if not found:
        raise Refused(BWRAP_MISSING)
    return found


def check_bwrap(bwrap: str) -> None:
    """Refuse before anything starts when bwrap is there but cannot build a sandbox (no namespaces, …)."""
    BwrapCheck(bwrap).result()


class BwrapCheck:
    """`check_bwrap` begun now and answered by `result()`, so a start can do other work (its git lookups) while
    bwrap builds its test sandbox; leaving it as a context (or `abandon()`) ends it when that work failed first."""

    def __init__(self, bwrap: str) -> None:
        self.bwrap = bwrap
        argv = [bwrap, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL", *_system_binds(), "--", "true"]
        try:
            self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
                argv, env=host_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            self.error: OSError | None = None
        except OSError as error:
            self.process, self.error = None, error

    def result(self) -> None:
        """Return when bwrap built its sandbox; a Refused saying why not, when it could not."""
        if self.process is None:
            raise Refused(f"bwrap at {self.bwrap} cannot run: {self.error}")
        try:
            _, stderr = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired as error:
            self.abandon()
            raise Refused(f"bwrap at {self.bwrap} cannot run: {error}") from None
        if self.process.returncode != 0:
            detail = stderr.decode(errors="replace").strip() or f"exit status {self.process.returncode}"
            raise Refused(
                f"bwrap at {self.bwrap} cannot build a sandbox on this machine: {detail}; "
                "Chock never runs tools without a sandbox"
            )

    def abandon(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> BwrapCheck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abandon()  # when the work alongside failed first: no bwrap is left behind


def host_environment() -> dict[str, str]:
    """The environment for the bwrap process itself: PATH and nothing else, so not even it holds a secret."""
    return {"PATH": HOST_PATH}


class Sandbox(Value):
    """What one session's tools may see; `argv` and `environment` are all a spawner needs."""

    __slots__ = (
        "__weakref__", "git_config", "git_dir", "home", "knowledgebase", "network", "workspace", "worktree_admin"
    )  # fmt: skip

    def __init__(
        self,
        workspace: Path,
        git_dir: Path,
        worktree_admin: Path,
        home: Path,
        knowledgebase: Path,
        network: bool = False,
        git_config: Path | None = None,
    ) -> None:
        self.workspace = workspace  # the linked worktree, read-write at its own path
        self.git_dir = git_dir  # the project's (common) .git directory, read-only at its own path
        self.worktree_admin = worktree_admin  # .git/worktrees/<name>, read-write over the read-only .git
        self.home = home  # the project's toolchains dir: HOME, read-write
        self.knowledgebase = knowledgebase  # mounted at $HOME/knowledgebase, read-write
        self.network = network
        # Where the copies of the project's git config files a tool's git reads are written (chock.session.git_view),
        # outside every bind; None: none is made, and each file is seen as it is.
        self.git_config = git_config

    def environment(self) -> dict[str, str]:
        """The tool's whole environment, built from scratch: no key of the person's reaches it."""
        return {
            "PATH": TOOL_PATH,
            "HOME": str(self.home.resolve()),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            # A Python test the agent runs would leave `__pycache__/*.pyc` in the workspace, and so on the
            # session's branch: the branch holds what the agent made.
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    @staticmethod
    def host_environment() -> dict[str, str]:
        """The bwrap process's own environment (the module's `host_environment`, at hand on the sandbox)."""
        return host_environment()

    def argv(self, command: list[str], *, bwrap: str, status_fd: int | None = None) -> list[str]:
        """The bwrap command line running `command` in the sandbox; with `status_fd`, bwrap reports on it
        (`--json-status-fd`), which tells its own failure to build the sandbox from the command's (`setup_failed`).

        Creates the HOME and knowledgebase dirs (0700) when missing, so the mount points exist; refuses when
        the workspace or its git dirs are gone, naming the path, rather than let bwrap fail in a tool call.
        """
        if not command:
            raise ChockError("no command to run in the sandbox")
        isolated = isolation(bwrap, network=self.network, status_fd=status_fd)
        built = _built.get(self)
        # A config file that changed since has its copy written again, at the same path; one gone, new binds.
        if built is None or not all(os.path.isdir(path) for path in built[1]) or not _views_hold(built[2]):
            built = _built[self] = self._binds()
        return [*isolated, *built[0], "--", *command]

    def _binds(self) -> tuple[list[str], tuple[str, ...], Views | None]:
        """What `argv` adds after `isolation`, and the directories it names (each checked again at every call;
        the whole is built again when one is gone)."""
        worktree = self._existing(self.workspace, "the workspace")
        git_dir = self._existing(self.git_dir, "the project's .git directory")
        admin = self._existing(self.worktree_admin, "the worktree's admin directory")
        home = ensure_dir(self.home).resolve()
        knowledgebase = ensure_dir(self.knowledgebase).resolve()
        mount_point = ensure_dir(home / "knowledgebase")
        # Order matters: /tmp's tmpfs first, so paths below /tmp (tests) are bound on top of it; .git
        # read-only before its worktree admin dir read-write over it; HOME before the knowledgebase in it.
        args = ["--bind", str(worktree), str(worktree)]
        args += ["--ro-bind", str(git_dir), str(git_dir)]
        views = None
        if self.git_config is not None:  # each config file as a copy without what reaches other machines
            from chock.session.git_view import Views

            views = Views(git_dir, self.git_config)
            for view, config in views.binds:
                args += ["--ro-bind", str(view), str(config)]
        args += ["--bind", str(admin), str(admin)]
        args += ["--bind", str(home), str(home)]
        args += ["--bind", str(knowledgebase), str(mount_point)]
        # bwrap's own root is a writable tmpfs holding the mount points; with it read-only, a write anywhere
        # but the workspace, HOME and /tmp fails instead of vanishing with the sandbox.
        args += ["--remount-ro", "/"]
        args += ["--chdir", str(worktree), "--clearenv"]
        for name, value in self.environment().items():
            args += ["--setenv", name, value]
        return args, tuple(map(str, (worktree, git_dir, admin, home, knowledgebase, mount_point))), views

    @staticmethod
    def _existing(path: Path, what: str) -> Path:
        resolved = path.resolve()
        if not resolved.is_dir():
            raise ChockError(f"{what} {path} does not exist; the sandbox cannot be built without it")
        return resolved


def _views_hold(views: Views | None) -> bool:
    """Whether the copies of the project's git config files still stand for them (written again where one
    changed); True when there are none."""
    return views is None or views.refresh()


# The binds each sandbox's `argv` adds, built at its first command line and again only when a directory they
# name is gone; held while the sandbox is.
_built: weakref.WeakKeyDictionary[Sandbox, tuple[list[str], tuple[str, ...], Views | None]] = (
    weakref.WeakKeyDictionary()
)


def for_workspace(layout: Layout, worktree: Worktree, *, network: bool = False) -> Sandbox:
    """The sandbox for a session's worktree, as Chock recorded it (never as its `.git` file says)."""
    if not worktree.admin.is_dir():
        raise ChockError(
            f"the worktree's admin directory {worktree.admin} is gone, so {worktree.directory} cannot be used; "
            "remove it with `chock workspace remove`, then continue"
        )
    project = worktree.repo.work_tree
    return Sandbox(
        workspace=worktree.directory.resolve(),
        git_dir=worktree.repo.common_dir,
        worktree_admin=worktree.admin,
        home=layout.toolchains_dir(project),
        knowledgebase=layout.knowledgebase_dir(project),
        network=network,
        git_config=layout.project_dir(project) / "git-config",  # a directory of copies
    )


def isolation(bwrap: str, *, network: bool, status_fd: int | None = None) -> list[str]:
    """The start of every sandbox's command line (a tool's, an MCP server's): every namespace unshared (the
    network too unless `network`), no capability, bound to its parent's life and in a session of its own; the
    system directories read-only with what other users cannot read in `/etc` masked; a private `/tmp`, minimal
    `/proc` and `/dev`. What a sandbox may see beyond that is bound after it."""
    args = [bwrap, "--unshare-all"]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    if network:
        args.append("--share-net")
    args += ["--die-with-parent", "--cap-drop", "ALL", "--new-session"]
    args += _system_binds()
    for kind, path in _hidden(MASKED_ROOT):
        if kind == "file":
            args += ["--ro-bind", "/dev/null", path]
        else:
            args += ["--tmpfs", path, "--remount-ro", path]
    return [*args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


def _system_binds() -> list[str]:
    """The system directories, read-only (symlinks recreated as they are)."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def setup_failed(status: bytes, returncode: int | None) -> bool:
    """Whether bwrap exited before the command ran: it exits 1 having reported no `exit-code` on its status fd
    (it reports one for every command that ran, whatever its exit). A masked `/etc` file that vanished since
    the command line was built is the usual cause ("Can't create file at /etc/group.lock")."""
    return returncode == 1 and b'"exit-code"' not in status


def forget_masks() -> None:
    """Walk `/etc` again at the next command line: bwrap could not build the sandbox from the last one."""
    _known_masks.clear()


class _Masks(Value):
    """The entries below a root that the machine's other users cannot read, and the identity (mtime and ctime)
    of every directory read to find them: an entry added, removed or renamed in one of them, or a directory's
    own mode changed, changes them."""

    __slots__ = ("directories", "masked")

    def __init__(self, masked: tuple[tuple[str, str], ...], directories: tuple[tuple[str, int, int], ...]) -> None:
        self.masked = masked
        self.directories = directories

    def current(self) -> bool:
        for path, mtime, ctime in self.directories:
            try:
                now = os.stat(path, follow_symlinks=False)
            except OSError:
                return False
            if (now.st_mtime_ns, now.st_ctime_ns) != (mtime, ctime):
                return False
        return True


_known_masks: dict[str, _Masks] = {}


def _hidden(root: str) -> tuple[tuple[str, str], ...]:
    """("file" | "dir", path) for each entry below `root` that the machine's other users cannot read.

    Walked once, then again only when a directory it read changed (a stat of each, ~160 for /etc, where the
    walk stats every entry, ~1,300). A file whose mode alone changed (`chmod o-r`) in a directory that did not
    is masked from the session's next start on."""
    known = _known_masks.get(root)
    if known is None or not known.current():
        directories: list[tuple[str, int, int]] = []
        masked = tuple(_walk(root, directories))
        known = _known_masks[root] = _Masks(masked, tuple(directories))
    return known.masked


def _walk(root: str, directories: list[tuple[str, int, int]]) -> Iterator[tuple[str, str]]:
    try:
        identity = os.stat(root, follow_symlinks=False)
        entries = list(os.scandir(root))
    except OSError:
        return
    directories.append((root, identity.st_mtime_ns, identity.st_ctime_ns))
    for entry in entries:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            if mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
                yield "dir", entry.path
            else:
                yield from _walk(entry.path, directories)
        elif stat.S_ISREG(mode) and not mode & stat.S_IROTH:
            yield "file", entry.path
