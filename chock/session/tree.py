"""A workspace's files as a git tree and a commit's tree as files, with Chock's own file I/O.

Git never reads or writes a workspace (docs/architecture.md, "What the sandbox may write"): everything in it
is the agent's, and git would take filters, attributes, a `.git` file and more from there.

- `write_files` fills a fresh worktree from a commit's blobs, byte for byte: no smudge filter, no end-of-line
  conversion, so the agent sees exactly what the commit holds and an untouched file hashes back the same.
- `snapshot` walks the worktree without following a symlink, asks `git check-ignore` about what it found
  against a private copy of the `.gitignore` files (git reads them as data, nothing else), hashes what is
  kept and changed (a file its stamps vouch for keeps its blob id: chock.session.stamps) with
  `git hash-object --no-filters` through file descriptors it opened itself, and says what differs from the
  base commit (chock.session.treewrite writes only the trees that differ). A symlink becomes a
  120000 entry holding its target; the top-level `.git`, whatever it is, is skipped; a nested repository is
  left out and reported.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, NamedTuple

from chock.errors import ChockError
from chock.session import stamps
from chock.session.hostgit import GitFailed, Repo
from chock.session.survey import DIR_FLAGS, GITLINK, Compared, Survey, compare, walk
from chock.value import Value

FILE, EXECUTABLE, SYMLINK = "100644", "100755", "120000"

INVALID = "a path git cannot hold"

# Files hashed per `git hash-object` run: each is an open descriptor passed to it.
HASH_BATCH = 256
CHUNK = 1 << 20
# The `.gitignore` files asked about are copied out of the worktree: one longer than this is not applied (git
# itself skips one past 100 MiB, and an older git fails on a huge one), and copying stops at ALL_GITIGNORES, so
# that no file the agent writes, a sparse one of a terabyte say, fills the host's temporary directory.
GITIGNORE_BYTES = 1 << 20
ALL_GITIGNORES = 32 << 20

_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
S_ISREG, S_ISLNK, S_ISDIR = stat.S_ISREG, stat.S_ISLNK, stat.S_ISDIR


class TreeEntry(NamedTuple):
    mode: str
    oid: str


def listing(repo: Repo, commit: str) -> dict[str, TreeEntry]:
    """Every entry of `commit`'s tree by path, in tree order."""
    done = repo.run(["ls-tree", "-r", "-z", "--full-tree", commit])
    return _parse(done.stdout)


# `<path>\0<mode><oid>\0`: a path never holds a NUL, so the output splits into path and key alternately, and a
# dict is made of it in C. `--format` of ls-tree and ls-files needs git 2.38 (debian/control depends on it).
_KEYED = "--format=%(path)%x00%(objectmode)%(objectname)"


def tree_keys(repo: Repo, commit: str) -> dict[str, str]:
    """`mode + oid` of every entry of `commit`'s tree by path (six digits, then the oid)."""
    return _keyed(repo.run(["ls-tree", "-r", "-z", "--full-tree", _KEYED, commit]).stdout)


def index_keys(repo: Repo, index: Path) -> dict[str, str]:
    """`mode + oid` of every entry of a private index by path."""
    return _keyed(repo.run(["ls-files", "-z", _KEYED], index=index).stdout)


def _keyed(output: bytes) -> dict[str, str]:
    fields = output.decode(_ENCODING, _ERRORS).split("\0")  # the paths as os.fsdecode gives them
    fields.pop()  # after the last NUL
    if len(fields) % 2:
        raise GitFailed(f"git listed {len(fields)} fields, not pairs of a path and its entry")
    pairs = iter(fields)
    return dict(zip(pairs, pairs, strict=False))


def _parse(output: bytes) -> dict[str, TreeEntry]:
    entries = {}
    for record in output.split(b"\0"):
        if not record:
            continue
        info, _, path = record.partition(b"\t")
        fields = info.decode().split()
        entries[os.fsdecode(path)] = TreeEntry(fields[0], fields[2])
    return entries


def excludes(repo: Repo) -> tuple[str, ...]:
    """The person's own global excludes file, if they name one: it is data, and they expect it honoured."""
    path = repo.person_setting("core.excludesFile", path=True)
    return (f"core.excludesFile={path}",) if path else ()


# Filling a worktree ---------------------------------------------------------------------------------------


def write_files(repo: Repo, commit: str, directory: Path, recording: stamps.Recording | None = None) -> None:
    """Write every file of `commit` into the empty directory `directory` (a gitlink becomes an empty dir), and
    add each file as written, its identity with its blob id, to `recording`."""
    entries = listing(repo, commit)
    blobs = [entry.oid for entry in entries.values() if entry.mode != GITLINK]
    with tempfile.TemporaryFile() as wanted:
        wanted.write("".join(f"{oid}\n" for oid in blobs).encode())
        wanted.seek(0)
        process = repo.stream(["cat-file", "--batch"], stdin=wanted.fileno())
    assert process.stdout is not None and process.stderr is not None
    dirs = _Dirs(os.open(directory, DIR_FLAGS))
    try:
        for path, entry in entries.items():
            parent, name = dirs.parent_of(path)
            if entry.mode == GITLINK:
                os.mkdir(name, 0o777, dir_fd=parent)
                if recording is not None:
                    recording.tree = ""  # stamps of a tree stand for it only when it holds no submodule
                continue
            size = _blob_header(process.stdout.readline(), entry.oid)
            if entry.mode == SYMLINK:
                os.symlink(os.fsdecode(process.stdout.read(size)), name, dir_fd=parent)
                written = os.stat(name, dir_fd=parent, follow_symlinks=False)
            else:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(name, flags, 0o777 if entry.mode == EXECUTABLE else 0o666, dir_fd=parent)
                with open(fd, "wb") as out:
                    _copy(process.stdout, out, size)
                    out.flush()
                    written = os.fstat(fd)
            if recording is not None:
                recording.add(path, stamps.identity(written), entry.oid)
            process.stdout.read(1)  # the newline after each object
    finally:
        dirs.close()
        process.stdout.close()
        error = process.stderr.read().decode(errors="replace").strip()
        process.stderr.close()
        if process.wait() != 0:
            raise GitFailed(f"git cat-file --batch failed in {repo.work_tree}: {error or process.returncode}")


def _blob_header(line: bytes, oid: str) -> int:
    parts = line.split()
    if len(parts) != 3 or parts[1] != b"blob" or parts[0].decode() != oid:
        raise ChockError(f"git cat-file answered {line!r} for the blob {oid}")
    return int(parts[2])


def _copy(source: IO[bytes], target: IO[bytes], size: int) -> None:
    while size:
        chunk = source.read(min(size, CHUNK))
        if not chunk:
            raise ChockError("git cat-file --batch ended in the middle of a blob")
        target.write(chunk)
        size -= len(chunk)


class _Dirs:
    """The open directories from the root down to the last file written: a tree is written depth-first."""

    def __init__(self, root: int) -> None:
        self.stack: list[tuple[str, int]] = [("", root)]

    def parent_of(self, path: str) -> tuple[int, str]:
        *parts, name = path.split("/")
        while self.stack[-1][0] and not f"{'/'.join(parts)}/".startswith(self.stack[-1][0] + "/"):
            os.close(self.stack.pop()[1])
        depth = len(self.stack) - 1
        for index in range(depth, len(parts)):
            os.mkdir(parts[index], 0o777, dir_fd=self.stack[-1][1])
            fd = os.open(parts[index], DIR_FLAGS, dir_fd=self.stack[-1][1])
            self.stack.append(("/".join(parts[: index + 1]), fd))
        return self.stack[-1][1], name

    def close(self) -> None:
        for _, fd in self.stack:
            os.close(fd)
        self.stack.clear()


# Reading a worktree ---------------------------------------------------------------------------------------


class WorktreeSnapshot(Value):
    """A worktree's content as a commit would hold it, what differs from its base, and what was left out."""

    __slots__ = ("base", "changed", "clean", "current", "found", "fresh", "from_record", "hashed", "skipped")

    def __init__(
        self,
        base: dict[str, str],
        current: dict[str, str],
        changed: dict[str, str | None],
        skipped: list[tuple[str, str]] | None = None,
        found: dict[str, stamps.Identity] | None = None,
        fresh: set[str] | None = None,
        hashed: int = 0,
        from_record: bool = False,
        clean: dict[str, stamps.Stored] | None = None,
    ) -> None:
        self.base = base  # `mode + oid` by path of the base's entries, every one that may differ at least
        self.current = current  # what a commit of it holds: `mode + oid` by path (but the files of `clean`)
        self.changed = changed  # what differs from `base`: its `mode + oid`, None for a path gone
        self.skipped = [] if skipped is None else skipped  # (path, why)
        self.found = {} if found is None else found  # the identity of each file of `current`
        self.fresh = set() if fresh is None else fresh  # the files read and hashed; the rest kept their stamps' blob id
        self.hashed = hashed  # how many files were read and hashed; the rest kept the blob id the stamps recorded
        self.from_record = from_record  # the stamps stood for the base (exactly its tree): git did not list it
        # Directories whose files are all as the stamps recorded them (only when they stood for the base): the
        # commit holds them as recorded, and the next record copies their part.
        self.clean = {} if clean is None else clean


def snapshot(
    repo: Repo,
    directory: Path,
    base: Callable[[], tuple[str, str]],
    index: Path,
    *,
    write: bool,
    trust: bool = False,
) -> WorktreeSnapshot:
    """`directory`'s files as git would commit them on top of the commit `base` says (its id and its tree's,
    asked once the walk is done, so that git's answer can come while it runs), and what differs from it; the
    private `index` (a path that need not exist) is where git judges the names of paths the base does not hold.

    With `write`, the blobs are written to the repository (for a commit); without, only hashed. With `trust`,
    a file whose identity is the one its stamps recorded (chock.session.stamps) keeps the recorded blob id
    and is not read; stamps that are exactly the base's tree stand for it, and git does not list it.
    """
    # Stamps that name a tree are taken to stand for the base while the walk runs and git says what the base is;
    # when they do not, git lists the base after all.
    named = stamps.tree_of(directory) if trust else ""
    listed: dict[str, str] = {}  # path -> tree key of every entry of the base, unless the stamps stand for it
    if not named:
        commit, _ = base()
        listed = tree_keys(repo, commit)
    root = os.open(directory, DIR_FLAGS)
    try:
        try:
            found = walk(root, listed)
            record, said = _compared(found, stamps.read(directory, found.room()) if trust else stamps.NOTHING)
            commit, base_tree = base()
            from_record = bool(named) and record.tree == base_tree
            if named and not from_record:  # another tree's, or damaged after all: git lists the base
                listed = tree_keys(repo, commit)
                if any(key.startswith(GITLINK) for key in listed.values()):
                    found = walk(root, listed)
                    record, said = _compared(found, record)
            untracked = sorted(said.new) if from_record else sorted(found.found.keys() - listed.keys())
            ignored = _ignored(repo, root, found, untracked + [f"{path}/" for path, _ in found.skipped])
        except OSError as error:
            raise ChockError(f"cannot read the workspace {directory}: {error}") from None
        # Only untracked paths were asked about, so what is ignored is never a file the base holds.
        found.skipped = [(path, why) for path, why in found.skipped if path not in ignored]
        if from_record:  # only the directories where something changed are looked at file by file
            keys, identities = said.trusted, said.found
            unknown = said.changed + [path for path in said.new if path not in ignored]
        else:
            keys, identities = said.every_trusted(), found.found
            for path in ignored:
                keys.pop(path, None)
            unknown = [path for path in identities if path not in keys and path not in ignored]
        fresh = set()
        for path, mode, oid in _hash(repo, root, directory, identities, unknown, write):
            keys[path] = mode + oid
            fresh.add(path)
    finally:
        os.close(root)
    if from_record:  # the base is the record: only what was read again, or is gone, can differ from it
        base_keys = said.others
        changed: dict[str, str | None] = {path: keys[path] for path in fresh if base_keys.get(path) != keys[path]}
    else:
        base_keys = listed
        keys.update((path, listed[path]) for path in found.kept_gitlinks)
        changed = {path: key for path, key in keys.items() - listed.items()}
    refused = _refused(repo, index, {path: keys[path] for path in changed if path not in base_keys})
    for path in refused:
        del changed[path], keys[path]
    changed.update(dict.fromkeys(base_keys.keys() - keys.keys()))
    invalid = sorted(((path, INVALID) for path in refused), key=_in_tree_order)
    skipped = sorted(found.skipped, key=_in_tree_order) + invalid
    clean = said.clean if from_record else {}
    return WorktreeSnapshot(base_keys, keys, changed, skipped, identities, fresh, len(unknown), from_record, clean)


def _compared(found: Survey, record: stamps.Record) -> tuple[stamps.Record, Compared]:
    """What `record` says of what the walk found, and the record: NOTHING when it names a file twice."""
    try:
        return record, compare(found, record)
    except stamps.Damaged:
        return stamps.NOTHING, compare(found, stamps.NOTHING)


def _refused(repo: Repo, index: Path, added: dict[str, str]) -> list[str]:
    """Those of the paths `added` (path -> `mode + oid`) git refuses to hold (a `.GIT` directory, …), as
    `git update-index` judges them in the private `index`, which holds nothing else."""
    if not added:
        return []
    listed = "".join(f"{key[:6]} {key[6:]}\t{path}\0" for path, key in added.items()).encode(_ENCODING, _ERRORS)
    done = repo.run(["update-index", "-z", "--index-info"], index=index, input=listed)
    if not done.stderr.strip():  # "Ignoring path …"
        return []
    held = index_keys(repo, index)
    return [path for path in added if path not in held]


def _in_tree_order(skipped: tuple[str, str]) -> list[str]:
    """A skipped path's place in a depth-first walk by name (`a/b` before `a-c`)."""
    return skipped[0].split("/")


def _ignored(repo: Repo, root: int, survey: Survey, untracked: list[str]) -> set[str]:
    """Which of `untracked` (files, and directories left out, each with a trailing `/`) the `.gitignore` files
    and the person's excludes ignore, without that `/`.

    `git check-ignore` runs on a private tree of the worktree's regular `.gitignore` files, copied here with
    the directories that hold them, so git opens nothing of the agent's (a FIFO named `.gitignore` would hang
    it). Nothing else of the worktree is copied: git takes a leading directory of a path to be a directory, and
    a directory left out is asked about with a trailing `/`, so no pattern needs to find anything on disk — and
    60,000 directories the agent made cost no 60,000 copies. A `.gitignore` past GITIGNORE_BYTES, or past what
    is left of ALL_GITIGNORES, is not copied, so its rules do not apply: what it would hide is committed.
    """
    if not untracked:
        return set()
    with tempfile.TemporaryDirectory(prefix="chock-ignore-") as scratch:
        shadow = Path(scratch)
        for path in survey.gitignores:
            (shadow / path).parent.mkdir(parents=True, exist_ok=True)
        room = ALL_GITIGNORES
        for path in survey.gitignores:
            source = _open_beneath(root, path)
            if source is None:
                continue
            with open(source, "rb") as reading:
                rules = reading.read(min(GITIGNORE_BYTES, room) + 1)  # read past the bound: longer is not applied
            if len(rules) <= GITIGNORE_BYTES and len(rules) <= room:
                (shadow / path).write_bytes(rules)
                room -= len(rules)
        done = repo.with_work_tree(shadow).run(
            ["check-ignore", "--stdin", "-z", "--no-index"],
            config=excludes(repo),
            input=b"".join(os.fsencode(path) + b"\0" for path in untracked),
            index=shadow / ".no-index",
            check=False,
        )
    if done.returncode not in (0, 1):  # 1: nothing is ignored
        said = done.stderr.decode(errors="replace").strip() or f"it exited with status {done.returncode}"
        raise GitFailed(f"git check-ignore failed: {said}")
    return {os.fsdecode(raw).removesuffix("/") for raw in done.stdout.split(b"\0") if raw}


def _open_beneath(root: int, path: str) -> int | None:
    """A descriptor on the regular file `path` below `root`, reached without following any symlink."""
    name, parent = _parent_beneath(root, path)
    try:
        target = os.open(name, _READ_FLAGS, dir_fd=parent)
    finally:
        if parent != root:
            os.close(parent)
    if not stat.S_ISREG(os.fstat(target).st_mode):
        os.close(target)
        return None
    return target


def _link_target(root: int, path: str) -> bytes:
    """What the symlink `path` below `root` points at, reached without following any symlink."""
    name, parent = _parent_beneath(root, path)
    try:
        return os.fsencode(os.readlink(name, dir_fd=parent))
    finally:
        if parent != root:
            os.close(parent)


def _parent_beneath(root: int, path: str) -> tuple[str, int]:
    """`path`'s last name and a descriptor on the directory holding it (`root` itself for a top-level name),
    each directory on the way opened below the one before without following a symlink."""
    *parts, name = path.split("/")
    parent = root
    try:
        for part in parts:
            opened = os.open(part, DIR_FLAGS, dir_fd=parent)
            if parent != root:
                os.close(parent)
            parent = opened
    except BaseException:
        if parent != root:
            os.close(parent)
        raise
    return name, parent


def _hash(
    repo: Repo, root: int, directory: Path, found: dict[str, stamps.Identity], paths: list[str], write: bool
) -> list[tuple[str, str, str]]:
    """(path, mode, oid) for each of `paths` still there, hashed in batches from descriptors opened here."""
    records: list[tuple[str, str, str]] = []
    batch: list[tuple[str, str, int]] = []  # (path, mode, descriptor git reads)

    def flush() -> None:
        taken = list(batch)
        batch.clear()
        descriptors = [fd for _, _, fd in taken]
        try:
            done = repo.run(
                ["hash-object", "--no-filters", *(["-w"] if write else []), "--stdin-paths"],
                input=b"".join(b"/dev/fd/%d\n" % fd for fd in descriptors),
                pass_fds=descriptors,
            )
        finally:
            for fd in descriptors:
                os.close(fd)
        for (path, mode, _), oid in zip(taken, done.stdout.split(), strict=True):
            records.append((path, mode, oid.decode()))

    try:
        for path in paths:
            try:
                if S_ISLNK(found[path][5]):
                    read, written = os.pipe()
                    os.write(written, _link_target(root, path))
                    os.close(written)
                    batch.append((path, SYMLINK, read))
                else:
                    fd = _open_beneath(root, path)
                    if fd is None:
                        continue
                    executable = os.fstat(fd).st_mode & stat.S_IXUSR
                    batch.append((path, EXECUTABLE if executable else FILE, fd))
            except OSError as error:
                raise ChockError(f"cannot read {path} in the workspace {directory}: {error.strerror}") from None
            if len(batch) >= HASH_BATCH:
                flush()
        if batch:
            flush()
    finally:
        for _, _, fd in batch:
            os.close(fd)
    return records


# Deleting a worktree ---------------------------------------------------------------------------------------

# How deep `delete` goes before it moves a directory up to the top to carry on from there: the agent's
# nesting must not exhaust descriptors or the stack (shutil.rmtree recurses once per level).
DELETE_DEPTH = 64


def delete(path: Path) -> None:
    """Delete the directory `path` and everything in it without following a symlink, however deep it goes."""
    try:
        top = os.open(path, DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        os.fchmod(top, 0o700)
        while _clear(top, top, 0):
            pass  # directories moved up to the top are cleared in the next round
    finally:
        os.close(top)
    os.rmdir(path)


def _clear(directory: int, top: int, depth: int) -> bool:
    """Empty `directory`; True when some directory was moved up to `top` rather than emptied."""
    moved = False
    with os.scandir(directory) as listed:
        names = [entry.name for entry in listed]
    for name in names:
        if not stat.S_ISDIR(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=directory)
        elif depth >= DELETE_DEPTH:
            os.rename(name, f".chock-deep-{os.urandom(8).hex()}", src_dir_fd=directory, dst_dir_fd=top)
            moved = True
        else:
            sub = _open_to_clear(name, directory)
            try:
                moved = _clear(sub, top, depth + 1) or moved
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=directory)
    return moved


def _open_to_clear(name: str, parent: int) -> int:
    """Open a directory to empty it, giving back to the person's uid any permission the agent took away."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except PermissionError:  # mode 000: change the directory itself, through a descriptor that follows nothing
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        finally:
            os.close(handle)
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    os.fchmod(fd, 0o700)  # so its entries can be unlinked
    return fd


def changes(base: dict[str, str], changed: dict[str, str | None]) -> list[tuple[str, str]]:
    """(status, path) for each of `changed` (path -> its `mode + oid`, None when gone) against `base`, sorted by
    path: A added, D deleted, M modified, T type changed."""
    found = []
    for path in sorted(changed):
        before, after = base.get(path), changed[path]
        if before == after:
            continue
        if before is None:
            found.append(("A", path))
        elif after is None:
            found.append(("D", path))
        else:
            found.append(("M" if _kind(before[:6]) == _kind(after[:6]) else "T", path))
    return found


def _kind(mode: str) -> str:
    return "file" if mode in (FILE, EXECUTABLE) else mode
