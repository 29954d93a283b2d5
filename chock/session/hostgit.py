"""The only way Chock runs git on the host (docs/architecture.md, "What the sandbox may write").

The sandbox writes the workspace and its worktree's admin dir, so git on the host takes none of its behaviour
from either. Every command names its repository by explicit paths (`GIT_DIR`, `GIT_COMMON_DIR`,
`GIT_WORK_TREE`), so git discovers nothing: it never reads a worktree's `.git` file or an admin dir's
`commondir`, and the work tree is the person's project or a directory Chock wrote itself — never a
workspace. The environment is cleaned of every `GIT_*` variable, system and global config are off, and
`HARDENING` turns off what the project's own config could make git execute. The person's settings Chock
needs (identity, global excludes file) are read with a plain `git config --get`, which executes nothing,
and passed on the command line where they are used.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from chock.errors import ChockError
from chock.value import Value

# Checked against git 2.39 with each setting in the project's own config: the first four change what the
# commands Chock runs do (hooks and fsmonitor: tests/test_hostgit.py); the rest guard commands Chock does
# not run today, should it ever.
HARDENING = (
    "core.hooksPath=/dev/null",  # no hook (post-checkout, reference-transaction, …): nothing to look up there
    "core.fsmonitor=false",  # no fsmonitor program is asked what changed when an index is read
    "core.untrackedCache=false",  # a private index holds entries only, no cache of directory stat data
    "core.splitIndex=false",  # a private index is one file, never a shared index written into the .git
    "core.attributesFile=/dev/null",  # no attributes file names a filter or a diff driver
    "commit.gpgSign=false",  # no gpg.program runs for a commit Chock makes
    "gc.auto=0",  # no automatic gc (and its pre-auto-gc hook) after a command that writes objects
    "maintenance.auto=false",  # nor automatic maintenance
    "submodule.recurse=false",  # no command reaches into a submodule's repository and its config
)

# Every object and ref host git writes is on disk before the command returns (git 2.36 and later): a branch's
# commit is durable before the session's log says so (docs/log.md#durability).
DURABLE = ("core.fsync=committed",)

# The person's own choice of config files, honoured only when Chock reads one of their settings.
PERSON_CONFIG_ENV = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")


class GitFailed(ChockError):
    """A git command failed; the message quotes git's own stderr."""


def _environment(*, person: bool = False) -> dict[str, str]:
    """The person's environment with every `GIT_*` variable removed; system and global config off unless
    reading one of the person's own settings (`person`)."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("GIT_") or (person and name in PERSON_CONFIG_ENV)
    }
    kept["GIT_TERMINAL_PROMPT"] = "0"
    if not person:
        kept["GIT_CONFIG_NOSYSTEM"] = "1"
        kept["GIT_CONFIG_GLOBAL"] = "/dev/null"
    return kept


def _argv(args: Sequence[str], config: Sequence[str]) -> list[str]:
    settings = [part for setting in (*HARDENING, *DURABLE, *config) for part in ("-c", setting)]
    return ["git", "--no-pager", *settings, *args]


def _spawn_error(args: Sequence[str], where: Path, error: OSError) -> ChockError:
    if isinstance(error, FileNotFoundError) and error.filename in ("git", None):
        return ChockError("git is not installed; chock run works in a git project (apt install git)")
    return GitFailed(f"git {' '.join(args)} could not run in {where}: {error}")


def _completed(
    args: Sequence[str], where: Path, done: subprocess.CompletedProcess[bytes], check: bool
) -> subprocess.CompletedProcess[bytes]:
    if check and done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        raise GitFailed(f"git {' '.join(args)} failed in {where}: {detail}")
    return done


T = TypeVar("T")


class GitStarted(Generic[T]):
    """A git command started now and waited for later (`result`), so its start overlaps the caller's own work;
    `then` makes the result of what it wrote. `stop` kills it when it is no longer wanted."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        args: Sequence[str],
        where: Path,
        check: bool,
        then: Callable[[subprocess.CompletedProcess[bytes]], T],
    ) -> None:
        self.process, self.args, self.where, self.check, self.then = process, args, where, check, then
        self._done: subprocess.CompletedProcess[bytes] | None = None
        self._made: tuple[T] | None = None  # what `then` made, once it made it

    def result(self) -> T:
        """What `then` makes of the command's output once it exited (raises GitFailed when it failed), made once
        however often it is asked for."""
        if self._made is None:
            if self._done is None:
                out, errors = self.process.communicate()
                self._done = subprocess.CompletedProcess(self.process.args, self.process.returncode, out, errors)
            self._made = (self.then(_completed(self.args, self.where, self._done, self.check)),)
        return self._made[0]

    def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            self.process.communicate()


def discover(path: Path, *, head: bool = False) -> subprocess.CompletedProcess[bytes]:
    """`git rev-parse` of the person's own directory `path`, the one place git looks for a repository: its
    top, git dir and common dir, one a line, and with `head` a fourth line, the commit HEAD names (exit 1 and
    no fourth line when HEAD names none) — one git process for all a session's start asks.

    It reads `path`'s `.git` as the person's git would (under their config, so their `safe.directory`
    applies); everything after names what it found explicitly. Never called on a workspace.
    """
    args = ["rev-parse", "--path-format=absolute", "--show-toplevel", "--absolute-git-dir", "--git-common-dir"]
    if head:
        args += ["--verify", "--quiet", "--end-of-options", "HEAD^{commit}"]
    try:
        return subprocess.run(
            _argv(args, ()),
            cwd=path,
            env=_environment(person=True),
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
    except OSError as error:
        raise _spawn_error(args, path, error) from None


def version() -> str:
    """`git --version`, or an error saying git is missing."""
    try:
        done = subprocess.run(
            _argv(["--version"], ()), env=_environment(), stdin=subprocess.DEVNULL, capture_output=True
        )
    except OSError as error:
        raise _spawn_error(["--version"], Path("."), error) from None
    return done.stdout.decode(errors="replace").strip()


# The modes of a file git holds as a regular file (not a symlink, a submodule or a tree).
REGULAR_MODES = ("100644", "100755")


def file_settings(path: Path) -> list[tuple[str, str | None]]:
    """The settings the one config file `path` holds, in its order, as (key, value), each key as git names it
    (section and name in lower case) and None for a key written with no value (a boolean's `true`): read by git
    with nothing included, and nothing executed."""
    args = ["config", "--file", str(path), "--no-includes", "--list", "-z"]
    try:
        done = subprocess.run(
            _argv(args, ()), cwd=path.parent, env=_environment(), stdin=subprocess.DEVNULL, capture_output=True
        )
    except OSError as error:
        raise _spawn_error(args, path.parent, error) from None
    _completed(args, path.parent, done, True)
    records = done.stdout.decode(errors="surrogateescape").split("\0")
    return [
        (key, value if newline else None)
        for key, newline, value in (record.partition("\n") for record in records if record)
    ]


class CommittedFile(Value):
    """One entry of a commit's tree, as `git ls-tree -l` gives it (`kind` blob, tree or commit)."""

    __slots__ = ("kind", "mode", "oid", "size")

    def __init__(self, mode: str, kind: str, oid: str, size: int) -> None:
        self.mode = mode
        self.kind = kind
        self.oid = oid
        self.size = size

    @property
    def regular(self) -> bool:
        """A regular file: never a symlink, whatever it points at."""
        return self.kind == "blob" and self.mode in REGULAR_MODES

    def what(self) -> str:
        """What it is when it is not a regular file, for a note saying why it was not read."""
        return "a symlink" if self.mode == "120000" else "not a regular file"


# What `Repo.tree_entries` read, by repository, commit id and path; cleared past a bound in a long-lived process.
_KEPT_ENTRIES: dict[tuple[Path, str, str], CommittedFile | None] = {}
_MOST_KEPT_ENTRIES = 256
_COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _ls_tree_record(record: bytes) -> tuple[str, CommittedFile]:
    """One `git ls-tree -z -l` record: its path and its entry (an entry of no kind when git's line is not the
    four fields this knows)."""
    head, _, path = record.partition(b"\t")
    fields = head.decode("ascii", "replace").split()
    name = os.fsdecode(path)
    if len(fields) != 4:
        return name, CommittedFile("", "", "", 0)
    mode, kind, oid, size = fields
    return name, CommittedFile(mode, kind, oid, int(size) if size.isdigit() else 0)


class Repo(Value):
    """A repository named by explicit paths: the person's project, as `discover` found it.

    `git_dir` is the project's own git dir (its HEAD and index), `common_dir` the one its worktrees share
    (objects, refs, config). `work_tree` is the project, or a directory Chock itself wrote (`with_work_tree`).
    """

    __slots__ = ("common_dir", "git_dir", "work_tree")

    def __init__(self, git_dir: Path, common_dir: Path, work_tree: Path) -> None:
        self.git_dir = git_dir
        self.common_dir = common_dir
        self.work_tree = work_tree

    def with_work_tree(self, work_tree: Path) -> Repo:
        return self.replace(work_tree=work_tree)

    def _env(self, index: Path | None, person: bool, objects: Path | None = None) -> dict[str, str]:
        env = _environment(person=person)
        env.update(GIT_DIR=str(self.git_dir), GIT_COMMON_DIR=str(self.common_dir), GIT_WORK_TREE=str(self.work_tree))
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        if objects is not None:  # a quarantine: new objects go there; the repository's own are read beside them
            env["GIT_OBJECT_DIRECTORY"] = str(objects)
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(self.common_dir / "objects")
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        index: Path | None = None,
        config: Sequence[str] = (),
        input: bytes | None = None,
        stdin: int = subprocess.DEVNULL,
        objects: Path | None = None,
        pass_fds: Sequence[int] = (),
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one git command; `index` is a private index file, `config` more `-c` settings, `stdin` a file
        descriptor it reads (unless `input`), `objects` a quarantine its new objects go to."""
        try:
            done = subprocess.run(
                _argv(args, config),
                cwd=self.work_tree,
                env=self._env(index, person=False, objects=objects),
                input=input,
                stdin=None if input is not None else stdin,
                capture_output=True,
                pass_fds=tuple(pass_fds),
            )
        except OSError as error:
            raise _spawn_error(args, self.work_tree, error) from None
        return _completed(args, self.work_tree, done, check)

    def stream(
        self,
        args: Sequence[str],
        *,
        stdin: int = subprocess.DEVNULL,
        config: Sequence[str] = (),
        objects: Path | None = None,
        stderr: int = subprocess.PIPE,
    ) -> subprocess.Popen[bytes]:
        """Start one git command reading `stdin` (a file descriptor) and writing to a pipe the caller reads;
        `objects` is a quarantine its new objects go to; its words go to `stderr` (a pipe, or a file descriptor)."""
        try:
            return subprocess.Popen(
                _argv(args, config),
                cwd=self.work_tree,
                env=self._env(None, person=False, objects=objects),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        except OSError as error:
            raise _spawn_error(args, self.work_tree, error) from None

    def tree_entry(self, commit: str, path: str) -> CommittedFile | None:
        """The entry at `path` (from the top) in `commit`'s tree, or None when there is none."""
        return self.tree_entries(commit, (path,))[path]

    def tree_entries(self, commit: str, paths: Sequence[str]) -> dict[str, CommittedFile | None]:
        """The entries at `paths` (from the top) in `commit`'s tree, None for each that is none, with one git
        command. A commit named by its id never changes, so what was read of it is kept (`_KEPT_ENTRIES`): a
        session's start reads its root's few files at once (chock.session.start) and each reader after reads
        its own from what is kept."""
        keep = _COMMIT_ID.fullmatch(commit) is not None
        found = {
            path: _KEPT_ENTRIES[key]
            for path in paths
            if keep and (key := (self.common_dir, commit, path)) in _KEPT_ENTRIES
        }
        wanted = [path for path in dict.fromkeys(paths) if path not in found]
        # ls-tree shows a directory's own entry only when no path asked for lies inside it: those ask alone.
        alone = [path for path in wanted if any(other.startswith(f"{path}/") for other in wanted)]
        listed: dict[str, CommittedFile] = {}
        for group in ([path for path in wanted if path not in alone], *([path] for path in alone)):
            if group:
                listing = self.run(["ls-tree", "-z", "-l", "--full-tree", commit, "--", *group]).stdout
                listed.update(_ls_tree_record(record) for record in listing.split(b"\0") if record)
        if wanted:
            if keep and len(_KEPT_ENTRIES) > _MOST_KEPT_ENTRIES:
                _KEPT_ENTRIES.clear()
            for path in wanted:
                found[path] = listed.get(path)
                if keep:
                    _KEPT_ENTRIES[(self.common_dir, commit, path)] = found[path]
        return found

    def blob_head(self, oid: str, limit: int) -> bytes:
        """The first `limit` bytes of a blob, however large it is."""
        process = self.stream(["cat-file", "blob", oid], stdin=subprocess.DEVNULL)
        assert process.stdout is not None
        try:
            return process.stdout.read(limit)
        finally:
            process.stdout.close()
            process.kill()
            process.wait()

    def start(
        self,
        args: Sequence[str],
        then: Callable[[subprocess.CompletedProcess[bytes]], T],
        *,
        input: bytes = b"",
        person: bool = False,
        check: bool = True,
    ) -> GitStarted[T]:
        """Start one git command now, its `input` (small: it must fit in a pipe) written and closed; `person`
        reads the person's own config (as `person_setting`). Its result is taken later (`GitStarted.result`)."""
        try:
            process = subprocess.Popen(
                _argv(args, ()),
                cwd=self.work_tree,
                env=self._env(None, person=person),
                stdin=subprocess.PIPE if input else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as error:
            raise _spawn_error(args, self.work_tree, error) from None
        if process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # it exited already: its exit status says why
                process.stdin.write(input)
                process.stdin.close()
            process.stdin.close()
            process.stdin = None  # written whole: `communicate` only reads
        return GitStarted(process, args, self.work_tree, check, then)

    def value(
        self, args: Sequence[str], *, index: Path | None = None, config: Sequence[str] = (), input: bytes | None = None
    ) -> str:
        """The stripped output of one command (a hash, a ref)."""
        return self.run(args, index=index, config=config, input=input).stdout.decode(errors="surrogateescape").strip()

    def person_settings(self, *keys: str) -> dict[str, str]:
        """Those of the person's own settings `keys` (lower case) that are set, read with one git command, the
        last value of each winning as with `--get`."""
        return self.start_person_settings(*keys).result()

    def start_person_settings(self, *keys: str) -> GitStarted[dict[str, str]]:
        """`person_settings`, its git command started now."""
        pattern = "^(" + "|".join(key.replace(".", "[.]") for key in keys) + ")$"

        def settings(done: subprocess.CompletedProcess[bytes]) -> dict[str, str]:
            found = {}
            for record in done.stdout.decode(errors="surrogateescape").split("\0"):
                key, _, value = record.partition("\n")
                if key in keys and value.strip():
                    found[key] = value.strip()
            return found

        return self.start(["config", "-z", "--get-regexp", pattern], settings, person=True, check=False)

    def person_setting(self, key: str, *, path: bool = False) -> str | None:
        """One of the person's own settings (system, global and this repository's config), or None.

        Reading config executes nothing; the value is passed on with `-c` where it is used.
        """
        done = self._read_config(["config", "--get", *(["--type=path"] if path else []), key])
        value = done.stdout.decode(errors="surrogateescape").strip()
        return value if done.returncode == 0 and value else None

    def _read_config(self, args: list[str]) -> subprocess.CompletedProcess[bytes]:
        """`git config …` over the person's own settings, whatever its exit status (1: nothing set)."""
        try:
            return subprocess.run(
                _argv(args, ()),
                cwd=self.work_tree,
                env=self._env(None, person=True),
                stdin=subprocess.DEVNULL,
                capture_output=True,
            )
        except OSError as error:
            raise _spawn_error(args, self.work_tree, error) from None
