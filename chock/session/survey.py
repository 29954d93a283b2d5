"""The walk of a worktree at finish, and what its stamps say of what it found (docs/architecture.md, "Finishing
by what changed").

The walk keeps each directory's files and symlinks sorted by name with their identities (one `lstat` of each
name, which also says which are directories), as the stamps keep them (chock.session.stamps): a directory whose
files are all as recorded is known by comparing two byte strings, and nothing is done per file for it. Only the
directories where something changed are compared file by file.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import stat

from chock.session import stamps

GITLINK = "160000"  # a submodule's tree entry (chock.session.tree)
NESTED = "a nested repository"
TOO_DEEP = "directories nested too deep"

# Each level holds one open directory while the walk is below it; the agent's tree is not allowed to
# exhaust the process's descriptors or Python's stack.
MAX_DEPTH = 200

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MODE = operator.attrgetter("st_mode")
_KEPT = {stat.S_IFREG, stat.S_IFLNK}  # what a tree holds of the files found


class Survey:
    """What the walk found: each directory (`a/b/`, "" for the top) holding files, with their names (sorted) and
    identities; what was left out, and the `.gitignore` files."""

    __slots__ = ("_found", "directories", "files", "gitignores", "gitlinks", "kept_gitlinks", "name_bytes", "skipped")

    def __init__(self, gitlinks: set[str]) -> None:
        self.gitlinks = gitlinks  # the base's submodules: a directory there keeps its entry and is not entered
        self.directories: dict[str, tuple[list[str], list[stamps.Identity]]] = {}
        self.kept_gitlinks: list[str] = []
        self.skipped: list[tuple[str, str]] = []
        self.gitignores: list[str] = []
        self.files = 0
        self.name_bytes = 0  # of every file's path, about
        self._found: dict[str, stamps.Identity] | None = None

    @property
    def found(self) -> dict[str, stamps.Identity]:
        """path -> identity of every file found (made once, when it is wanted)."""
        if self._found is None:
            self._found = {
                prefix + name: found
                for prefix, (names, identities) in self.directories.items()
                for name, found in zip(names, identities, strict=True)
            }
        return self._found

    def room(self) -> int:
        """The most a record of these files may take."""
        return stamps.room_for(self.files, self.name_bytes, len(self.directories))

    def walk(self, fd: int, prefix: str, depth: int = 0) -> None:
        """Note each file and symlink below `fd` with its identity (the hot loop of a finish: the names, then one
        `lstat` each relative to `fd`, each step over the directory's entries a C loop)."""
        names = os.listdir(fd)
        if ".git" in names:
            if prefix:
                self.skipped.append((prefix[:-1], NESTED))  # a `.git` of any kind below the top: a nested repository
                return
            names.remove(".git")  # the top-level `.git`, whatever it is
        names.sort()
        found = list(map(functools.partial(os.lstat, dir_fd=fd), names))
        kinds = list(map(stat.S_IFMT, map(_MODE, found)))
        subdirectories: list[str] = []
        if not _KEPT.issuperset(kinds):  # a directory, or a FIFO, socket or device (left out)
            subdirectories = [name for name, kind in zip(names, kinds, strict=True) if kind == stat.S_IFDIR]
            kept = list(map(_KEPT.__contains__, kinds))
            names, found = list(itertools.compress(names, kept)), list(itertools.compress(found, kept))
        if names:
            self.directories[prefix] = (names, list(map(stamps.identity, found)))
            self.files += len(names)
            self.name_bytes += sum(map(len, names)) + len(names) * len(prefix)
            if ".gitignore" in names and stat.S_ISREG(found[names.index(".gitignore")].st_mode):
                self.gitignores.append(prefix + ".gitignore")
        for name in subdirectories:
            self._directory(fd, name, prefix + name, depth)

    def _directory(self, parent: int, name: str, path: str, depth: int) -> None:
        if path in self.gitlinks:
            self.kept_gitlinks.append(path)
            return
        if depth + 1 >= MAX_DEPTH:
            self.skipped.append((path, TOO_DEEP))
            return
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        try:
            self.walk(fd, path + "/", depth + 1)
        finally:
            os.close(fd)


def walk(root: int, listed: dict[str, str]) -> Survey:
    """The walk of the worktree open at `root`, entering no directory that is a submodule in `listed`."""
    survey = Survey({path for path, key in listed.items() if key.startswith(GITLINK)})
    survey.walk(root, "")
    return survey


class Compared:
    """What a record says of a walk's files."""

    __slots__ = ("changed", "clean", "found", "new", "others", "trusted")

    def __init__(self) -> None:
        self.clean: dict[str, stamps.Stored] = {}  # directories whose files are all as recorded
        self.trusted: dict[str, str] = {}  # path -> tree key, of the other directories' files
        self.found: dict[str, stamps.Identity] = {}  # path -> identity, the same files
        self.changed: list[str] = []  # recorded, but not as they are now (or racy)
        self.new: list[str] = []  # not in the record
        self.others: dict[str, str] = {}  # path -> recorded tree key: the changed, and the gone

    def every_trusted(self) -> dict[str, str]:
        """path -> tree key of every file found as recorded, the clean directories' too."""
        keys = dict(self.trusted)
        for prefix, stored in self.clean.items():
            keys.update(zip(_paths(prefix, stored), stored.keys_of(), strict=True))
        return keys


def _paths(prefix: str, stored: stamps.Stored) -> list[str]:
    names = stored.names.decode(stamps.ENCODING, stamps.ERRORS).split("\0")
    names.pop()  # after the last \0
    return [prefix + name for name in names]


def compare(survey: Survey, record: stamps.Record) -> Compared:
    """What `record` says of the files `survey` found, a directory at a time."""
    compared = Compared()
    recorded_directories = record.directories
    for prefix, (names, identities) in survey.directories.items():
        stored = recorded_directories.get(prefix)
        if stored is not None and stored.holds(names, identities):
            compared.clean[prefix] = stored
            continue
        recorded = stored.entries() if stored is not None else {}
        for name, now in zip(names, identities, strict=True):
            path = prefix + name
            compared.found[path] = now
            was = recorded.pop(name, None)
            if was is None:
                compared.new.append(path)
            elif was[0] == now:
                compared.trusted[path] = was[1]
            else:
                compared.changed.append(path)
                compared.others[path] = was[1]
        compared.others.update((prefix + name, key) for name, (_, key) in recorded.items())
    for prefix, stored in recorded_directories.items():
        if prefix not in survey.directories:  # every file of it is gone
            compared.others.update(zip(_paths(prefix, stored), stored.keys_of(), strict=True))
    return compared
