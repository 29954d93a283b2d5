"""File access confined to the workspace, and bounded: what the file tools read, write and walk.

The file tools run in the session process, outside the sandbox, on files a shell command in the sandbox may
have written. So every path is resolved and refused unless it lies inside the workspace, and then opened one
component at a time with O_NOFOLLOW: a symlink swapped in after the check must not lead outside. Nothing is
read whole: lines are read with a bound on what is held of each, a call reads through at most `SCAN_LIMIT`
bytes in all, text ends at the first NUL byte (a sparse or binary file is not text), and a walk reads at most
`WALK_LIMIT` directory entries and goes at most `WALK_DEPTH` levels down. A file is written whole to a new file
renamed over it, so a write that fails leaves it as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from io import BufferedReader, FileIO
from pathlib import Path

from chock.session.tools.tool import ToolRefused

CHUNK = 64 * 1024  # one read; what is held of a line being read through
RUN = 1024 * 1024  # one read of `Scan.runs`: whole lines searched at once
# Bytes one call may read through, across every file it opens: a bound on its time (a few seconds), so that
# a search of a tree of generated files, or an offset far into a log, ends with a note instead of running on.
SCAN_LIMIT = 256 * 1024 * 1024
# Directory entries one walk may read: a real source tree has tens of thousands; a directory the agent filled
# with millions of empty files must not take the session's memory or time.
WALK_LIMIT = 200_000
# Directory descriptors one walk keeps open (one per level it is in); far below the usual limit of 1024.
OPEN_DIRECTORIES = 64
# Levels below its root a walk goes down, as a finish's walk of the worktree (chock.session.survey.MAX_DEPTH):
# each level's path is as long as the levels above it, so a walk of a chain of 40,000 directories would make
# paths of a gigabyte between them.
WALK_DEPTH = 200
NOTE_PATH = 200  # characters of a path shown in a note, its end
BINARY_PROBE = 8000  # a NUL byte this near the start makes a file binary, as git's own test decides
SKIPPED = {".git"}  # the repository itself, never the work (a linked worktree's .git is a file)


def inside(workspace: Path, relative: str) -> Path:
    """Resolve `relative` against the workspace, refusing anything that leaves it (.., symlinks, absolute)."""
    if not isinstance(relative, str) or not relative:
        raise ToolRefused("a path is required")
    if "\0" in relative:
        raise ToolRefused("a path cannot hold a NUL character")
    root = workspace.resolve()
    try:
        candidate = (root / relative).resolve()
    except RuntimeError:  # symlinks that name each other (`ln -s b a; ln -s a b`): Python before 3.13 raises this
        raise ToolRefused(f"{relative} is a loop of symlinks; name the file itself") from None
    if candidate.is_symlink():  # a symlink resolving left as it was (Python 3.13 on a loop) leads nowhere
        raise ToolRefused(f"{relative} is a loop of symlinks; name the file itself")
    if candidate != root and root not in candidate.parents:
        raise ToolRefused(f"{relative} is outside the workspace; tools work only on files inside it")
    return candidate


def shown(workspace: Path, path: Path) -> str:
    """`path` as the model names it: relative to the workspace root."""
    return os.path.relpath(path, workspace.resolve())


def open_at(workspace: Path, path: Path, flags: int, *, make_parents: bool = False) -> int:
    """Open `path` (resolved inside the workspace) from the workspace root down, following no symlink."""
    parts = path.relative_to(workspace.resolve()).parts
    if not parts:
        directory = _directory_of(workspace, path, parts)
        if flags & os.O_DIRECTORY:
            return directory
        os.close(directory)
        raise ToolRefused("the workspace itself is not a file")
    directory = _directory_of(workspace, path, parts, make_parents=make_parents)
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=directory)
    except OSError as error:
        raise _refusal(workspace, path, error) from None
    finally:
        os.close(directory)


def _directory_of(workspace: Path, path: Path, parts: tuple[str, ...], *, make_parents: bool = False) -> int:
    """The directory holding the last of `parts` (the workspace root when there are none), opened from the root
    down without following a symlink, each directory on the way made first when `make_parents`."""
    directory = os.open(workspace.resolve(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if make_parents:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=directory)
                    os.fsync(directory)  # the new directory's name is durable, as the file written in it will be
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            os.close(directory)
            directory = below
    except OSError as error:
        os.close(directory)
        raise _refusal(workspace, path, error) from None
    return directory


def _refusal(workspace: Path, path: Path, error: OSError) -> Exception:
    """What an open's OSError means to the model: a symlink or a FIFO swapped in is refused; the rest is as it is."""
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        return ToolRefused(f"{shown(workspace, path)} changed to a symlink while it was opened")
    if error.errno == errno.ENXIO:  # a FIFO with no reader, opened to write
        return ToolRefused(f"{shown(workspace, path)} is not a file")
    return error


def _regular(workspace: Path, path: Path, fd: int) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolRefused(f"{shown(workspace, path)} is not a file")
    return fd


def _reader(workspace: Path, path: Path, fd: int) -> BufferedReader:
    return BufferedReader(FileIO(_regular(workspace, path, fd), "rb", closefd=True), CHUNK)  # what open() builds


def open_file(workspace: Path, path: Path) -> BufferedReader:
    """A regular file opened for reading; O_NONBLOCK so a FIFO swapped in can never hang the session."""
    return _reader(workspace, path, open_at(workspace, path, os.O_RDONLY | os.O_NONBLOCK))


def write(workspace: Path, path: Path, text: str) -> None:
    """Create or replace a regular file (never a FIFO or device swapped in) with `text`, synced with the name that
    holds it before the call returns: the `tool.result` that reports it is logged after (docs/log.md#durability).

    A text UTF-8 cannot encode is refused before anything is opened. A file of our own with no other name is
    replaced by a new file written beside it and renamed over it with its mode, so a write that fails (a full
    disk) leaves it as it was; any other file (another's, hard-linked, in a directory we may not write) is written
    in place, as its owner and its other names expect."""
    name = shown(workspace, path)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ToolRefused(
            f"{name} was left as it was: the text holds {text[error.start : error.end]!r} at character {error.start}, "
            "half of a surrogate pair, which UTF-8 cannot encode; write the character itself"
        ) from None
    parts = path.relative_to(workspace.resolve()).parts
    if not parts:
        raise ToolRefused("the workspace itself is not a file")
    try:
        directory = _directory_of(workspace, path, parts)
    except FileNotFoundError:
        directory = _directory_of(workspace, path, parts, make_parents=True)
    try:
        try:
            before: os.stat_result | None = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            before = None
        if before is not None and stat.S_ISLNK(before.st_mode):
            raise ToolRefused(f"{name} changed to a symlink while it was opened")
        if before is not None and not stat.S_ISREG(before.st_mode):
            raise ToolRefused(f"{name} is not a file")
        if before is not None and not _ours_alone(directory, parts[-1], before):
            _overwrite(directory, parts[-1], data, name)
            return
        try:
            _replace(directory, parts[-1], data, None if before is None else stat.S_IMODE(before.st_mode))
        except OSError as error:
            if before is None or error.errno not in (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EROFS):
                raise
            _overwrite(directory, parts[-1], data, name)  # a directory we may not write in, a file bound over
            return
        os.fsync(directory)  # the name now holds the new file
    finally:
        os.close(directory)


def _ours_alone(directory: int, name: str, before: os.stat_result) -> bool:
    """Whether the file may be replaced by another of the same name: ours and of our group (a new file would be
    ours), writable by us, with no other name."""
    return (
        before.st_uid == os.geteuid()
        and before.st_gid == os.getegid()
        and before.st_nlink == 1
        and os.access(name, os.W_OK, dir_fd=directory, effective_ids=True, follow_symlinks=False)
    )


def _overwrite(directory: int, name: str, data: bytes, shown_name: str) -> None:
    """`data` written over the file `name` itself (never a FIFO or device swapped in), and synced."""
    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolRefused(f"{shown_name} is not a file")
        os.ftruncate(fd, 0)  # only now that it is known to be a regular file
        _write_synced(fd, data)
    finally:
        os.close(fd)


def _write_synced(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _replace(directory: int, name: str, data: bytes, mode: int | None) -> None:
    """`data` written and synced to a new file in `directory`, renamed to `name` with `mode` (None: a new file's)."""
    temporary = f".chock-write-{secrets.token_hex(6)}"  # short: `name` may already be as long as a name can be
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=directory
    )
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            _write_synced(fd, data)
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise


class Scan:
    """One call's reading of text lines, within `SCAN_LIMIT` bytes across every file it opens."""

    def __init__(self) -> None:
        self.left = SCAN_LIMIT
        self.spent = False  # the call stopped reading because its bound ran out
        self.binary = ""  # where the last file read showed it is not text (a NUL byte), or ""
        self.long_lines = 0  # of the last file read, the lines searched in their first bytes only

    def _read(self, handle: BufferedReader, size: int) -> bytes:
        data = handle.readline(min(size, self.left + 1))
        if len(data) > self.left:  # more is there than the call may read
            self.spent, self.left = True, 0
            return b""
        self.left -= len(data)
        return data

    def lines(self, handle: BufferedReader, keep: int) -> Iterator[tuple[bytes, bool]]:
        """Each line as (at most its first `keep` bytes, whether that is the whole line with its newline).

        Holds no more than `keep` bytes of a line: the rest is read through in chunks when the next line is
        asked for. A NUL byte ends the text: within the first `BINARY_PROBE` bytes nothing is given (the file
        is binary, as git decides), later the line is given up to it; either way `binary` says where.
        """
        self.binary = ""
        if b"\0" in handle.peek(BINARY_PROBE)[:BINARY_PROBE]:
            self.binary = f"a NUL byte in its first {BINARY_PROBE} bytes"
            return
        number = 0
        while head := self._read(handle, keep + 1):
            number += 1
            ended = head.endswith(b"\n") or len(head) <= keep  # this read reached the line's end
            nul = head.find(b"\0")
            if nul >= 0:
                self.binary = f"a NUL byte in line {number}"
                yield head[: min(nul, keep)], False
                return
            yield head[:keep], len(head) <= keep
            while not ended and (part := self._read(handle, CHUNK)):  # read through the rest of a long line
                if b"\0" in part:
                    self.binary = f"a NUL byte in line {number}"
                    return
                ended = part.endswith(b"\n")

    def runs(self, handle: BufferedReader, keep: int) -> Iterator[tuple[int, bytes, int]]:
        """What `lines` gives, in runs of whole lines read `RUN` bytes at a time: (the number of the run's first
        line, its lines, how many of them were cut at `keep` bytes). Each line but perhaps the file's last ends
        with a newline; a cut line is its first `keep` bytes and a newline. A NUL byte ends the text as in
        `lines`; the call's bound ends it before the line that does not fit."""
        self.binary = ""
        if b"\0" in handle.peek(BINARY_PROBE)[:BINARY_PROBE]:
            self.binary = f"a NUL byte in its first {BINARY_PROBE} bytes"
            return
        number, rest, skipping = 1, b"", False  # rest: an unended line's first bytes (at most `keep`)
        while data := self._read_run(handle):
            nul = data.find(b"\0")
            if nul >= 0:
                data = data[:nul]
            if skipping:  # the tail of a line already cut
                end = data.find(b"\n")
                skipping = end < 0
                data = b"" if skipping else data[end + 1 :]
            text = rest + data
            last = text.rfind(b"\n") + 1
            whole, rest = text[:last], text[last:]
            long = 0
            if len(whole) > keep:
                whole, long = _cut_long_lines(whole, keep)
            if len(rest) > keep and nul < 0:
                whole, rest, skipping, long = whole + rest[:keep] + b"\n", b"", True, long + 1
            if whole:
                yield number, whole, long
                number += whole.count(b"\n")
            if nul >= 0:
                self.binary = f"a NUL byte in line {number}"
                if rest:
                    yield number, rest[:keep], 0
                return
        if rest and not self.spent:
            yield number, rest, 0

    def _read_run(self, handle: BufferedReader) -> bytes:
        data = handle.read(min(RUN, self.left + 1))
        if len(data) > self.left:  # more is there than the call may read
            self.spent, self.left = True, 0
            return data[: len(data) - 1]
        self.left -= len(data)
        return data


def _cut_long_lines(lines: bytes, keep: int) -> tuple[bytes, int]:
    """`lines` with each line longer than `keep` bytes cut to its first `keep` (its newline kept), and how many."""
    cut = 0

    def first(match: re.Match[bytes]) -> bytes:
        nonlocal cut
        cut += 1
        return match[0][:keep]

    return re.sub(rb"(?m)^[^\n]{%d,}" % (keep + 1), first, lines), cut


class Walk:
    """Every file below a directory of the workspace, depth first in name order, as `os.walk` gives them;
    symlinks left out (one may point anywhere on the host), and `.git` too.

    Each directory is opened from its parent's descriptor without following a symlink, and read within the
    walk's bound of `WALK_LIMIT` entries; `open_file` opens a file it gave the same way. No recursion, and no
    deeper than `WALK_DEPTH` levels below its root (what is deeper is named in `notes`); each level keeps only
    its own name, a directory's path is made when its files are given. At most `OPEN_DIRECTORIES` descriptors
    stay open, and an ancestor closed to keep to that is opened again from the workspace root when the walk
    comes back to it.
    """

    def __init__(self, workspace: Path, root: Path) -> None:
        self.workspace, self.root = workspace, root
        self.stopped = False  # the walk read WALK_LIMIT entries and stopped
        self.too_deep = 0  # directories not walked, `WALK_DEPTH` levels below the root
        self.first_too_deep = ""  # the first of them, as the model names it
        self._directory = -1  # the descriptor of the directory whose files are being given

    def open_file(self, path: Path) -> BufferedReader:
        """A file this walk has just given, opened for reading like `open_file`."""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        return _reader(self.workspace, path, os.open(path.name, flags, dir_fd=self._directory))

    def notes(self, advice: str) -> list[str]:
        """What the walk left out, each a line for the model ending with `advice`."""
        notes = []
        if self.too_deep:
            first = self.first_too_deep
            if len(first) > NOTE_PATH:
                first = "…" + first[-NOTE_PATH:]
            notes.append(
                f"[not walked: {self.too_deep} director{'y' if self.too_deep == 1 else 'ies'} more than "
                f"{WALK_DEPTH} levels below the directory walked, the first {first}; {advice}]"
            )
        if self.stopped:
            notes.append(f"[stopped after reading {WALK_LIMIT} directory entries; {advice}]")
        return notes

    def __iter__(self) -> Iterator[Path]:
        left = WALK_LIMIT
        try:
            fd, name = open_at(self.workspace, self.root, os.O_RDONLY | os.O_DIRECTORY), ""
        except (OSError, ToolRefused):
            return
        chain: list[
            list
        ] = []  # [descriptor or -1, name ("" for the root), names of the subdirectories left, last first]
        try:
            while fd >= 0:
                files: list[str] = []
                subdirs: list[str] = []
                with contextlib.suppress(OSError), os.scandir(fd) as entries:  # unreadable: walked as far as read
                    for entry in entries:
                        left -= 1
                        if left < 0:
                            self.stopped = True
                            break
                        if entry.name in SKIPPED or entry.is_symlink():
                            continue
                        (subdirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
                chain.append([fd, name, sorted(subdirs, reverse=True)])
                directory = self._path(chain)
                if subdirs and len(chain) > WALK_DEPTH:  # the subdirectories would be deeper than WALK_DEPTH
                    if not self.too_deep:
                        self.first_too_deep = shown(self.workspace, directory / chain[-1][2][-1])
                    self.too_deep += len(subdirs)
                    chain[-1][2] = []
                if len(chain) > OPEN_DIRECTORIES and chain[-OPEN_DIRECTORIES - 1][0] >= 0:
                    os.close(chain[-OPEN_DIRECTORIES - 1][0])
                    chain[-OPEN_DIRECTORIES - 1][0] = -1
                self._directory = fd
                for file in sorted(files):
                    yield directory / file
                if self.stopped:
                    return
                fd, name = self._next(chain)
        finally:
            for link in chain:
                if link[0] >= 0:
                    os.close(link[0])

    def _path(self, chain: list[list]) -> Path:
        """The path of the last directory of `chain`."""
        return self.root.joinpath(*(link[1] for link in chain[1:]))

    def _next(self, chain: list[list]) -> tuple[int, str]:
        """The next directory to read, opened, and its name; (-1, "") when the walk is done."""
        while chain:
            link = chain[-1]
            if not link[2]:
                if link[0] >= 0:
                    os.close(link[0])
                chain.pop()
                continue
            name = link[2].pop()
            try:
                if link[0] < 0:
                    link[0] = open_at(self.workspace, self._path(chain), os.O_RDONLY | os.O_DIRECTORY)
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                return os.open(name, flags, dir_fd=link[0]), name
            except (OSError, ToolRefused):
                continue  # gone, or swapped for a symlink, since it was listed
        return -1, ""
