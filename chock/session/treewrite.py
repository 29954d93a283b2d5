"""A tree that differs from a known one in a few paths, written by reading and writing only the trees on the way
to a change, as git's cache-tree spares `write-tree` the unchanged ones (docs/architecture.md, "Finishing by
what changed").

The trees on the way are read with one `git cat-file --batch` and written, deepest first, with one
`git mktree --batch -z`, which refuses an entry whose object the repository does not hold. Each tree's id is
computed here too, so a parent can name its new child before git has answered, and git's answers are checked
against them: a tree git wrote differently is an error, never a wrong commit.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Mapping
from typing import IO

from chock.session.hostgit import GitFailed, Repo

TREE, GITLINK = "040000", "160000"
_TYPES = {TREE: b"tree", GITLINK: b"commit"}  # every other mode names a blob
_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_ALGORITHMS = {40: "sha1", 64: "sha256"}

# A directory's entries: name -> `mode + oid` (six digits, then the hex id), as chock.session.tree keys them.
Entries = dict[str, str]


def build(repo: Repo, base_tree: str, changed: Mapping[str, str | None]) -> str:
    """The id of the tree `base_tree` with each path of `changed` set to its `mode + oid` key, or taken out
    (None); the trees that differ are written to the repository. A directory left empty is left out, as git
    leaves it out; a path whose leading directory is a file in `base_tree` replaces that file."""
    if not changed:
        return base_tree
    algorithm = _ALGORITHMS.get(len(base_tree))
    if algorithm is None:
        raise GitFailed(f"{base_tree!r} is no tree id git could have given")
    files: dict[str, dict[str, str | None]] = {}  # directory -> its own entries that change
    for path, key in changed.items():
        directory, _, name = path.rpartition("/")
        files.setdefault(directory, {})[name] = key
    touched = {""}
    for directory in list(files):
        while directory not in touched:
            touched.add(directory)
            directory = directory.rpartition("/")[0]
    by_depth = sorted(touched, key=_depth)
    # Started now, so its start overlaps reading the trees; it reads the new trees once they are computed.
    making = repo.stream(["mktree", "--batch", "-z"], stdin=subprocess.PIPE)
    try:
        root, written = _built(files, by_depth, _read(repo, base_tree, by_depth), algorithm)
        answer, errors = making.communicate(b"".join(text for text, _ in written))
    finally:
        if making.returncode is None:
            making.kill()
            making.communicate()
    if making.returncode != 0:
        detail = errors.decode(errors="replace").strip() or f"exit status {making.returncode}"
        raise GitFailed(f"git mktree --batch -z failed in {repo.work_tree}: {detail}")
    answered = answer.decode().split()
    expected = [oid for _, oid in written]
    if answered != expected:
        raise GitFailed(f"git mktree wrote the trees {answered}, where {expected} were computed")
    return root


def _built(
    files: dict[str, dict[str, str | None]], by_depth: list[str], existing: dict[str, Entries], algorithm: str
) -> tuple[str, list[tuple[bytes, str]]]:
    """The new root tree's id, and each tree that differs (mktree's input for it, and the id it must answer),
    deepest first: `files` are the changes by directory, `existing` the trees they change."""
    built: dict[str, dict[str, str | None]] = {}  # directory -> its subdirectories' new tree ids (None: empty)
    written: list[tuple[bytes, str]] = []  # (mktree's input for a tree, the id it must answer)
    root = ""
    for directory in reversed(by_depth):  # deepest first: a parent names its children's new ids
        entries = existing.get(directory, {})
        for name, key in files.get(directory, {}).items():
            if key is None:
                entries.pop(name, None)
            else:
                entries[name] = key
        # After the files: a file taken out where a directory now is must not take the directory with it.
        for name, oid in built.get(directory, {}).items():
            if oid is not None:
                entries[name] = TREE + oid
            elif entries.get(name, "").startswith(TREE):
                del entries[name]
        oid = _write(entries, algorithm, written) if entries or not directory else None
        if directory:
            parent, _, name = directory.rpartition("/")
            built.setdefault(parent, {})[name] = oid
        else:
            root = str(oid)
    return root, written


def _depth(directory: str) -> int:
    return directory.count("/") + 1 if directory else 0


def _write(entries: Entries, algorithm: str, written: list[tuple[bytes, str]]) -> str:
    """Add the tree of `entries` to `written`, with its id, and return the id."""
    named = [(name.encode(_ENCODING, _ERRORS), key) for name, key in entries.items()]
    # Git's tree order: by name, a tree's name compared as if it ended with "/".
    named.sort(key=lambda item: item[0] + b"/" if item[1].startswith(TREE) else item[0])
    body = b"".join(b"%s %s\0%s" % (key[:6].lstrip("0").encode(), name, bytes.fromhex(key[6:])) for name, key in named)
    oid = hashlib.new(algorithm, b"tree %d\0%s" % (len(body), body)).hexdigest()
    lines = b"".join(
        b"%s %s %s\t%s\0" % (key[:6].encode(), _TYPES.get(key[:6], b"blob"), key[6:].encode(), name)
        for name, key in named
    )
    written.append((lines + b"\0", oid))
    return oid


def _read(repo: Repo, base_tree: str, by_depth: list[str]) -> dict[str, Entries]:
    """The entries of each directory of `by_depth` (shallowest first) that is a tree in `base_tree`, read with
    one `git cat-file --batch` that is asked for each tree once its parent has named it."""
    process = repo.stream(["cat-file", "--batch"], stdin=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    found: dict[str, Entries] = {}
    try:
        for directory in by_depth:
            if directory:
                parent, _, name = directory.rpartition("/")
                key = found.get(parent, {}).get(name, "")
                if not key.startswith(TREE):
                    continue  # new here, or a file there now: it starts empty
                oid = key[6:]
            else:
                oid = base_tree
            process.stdin.write(b"%s\n" % oid.encode())
            process.stdin.flush()
            found[directory] = _entries(process.stdout.readline(), process.stdout, oid)
    finally:
        process.stdin.close()
        process.stdout.close()
        error = process.stderr.read().decode(errors="replace").strip()
        process.stderr.close()
        code = process.wait()
    if code != 0:
        raise GitFailed(f"git cat-file --batch failed in {repo.work_tree}: {error or code}")
    return found


def _entries(header: bytes, stream: IO[bytes], oid: str) -> Entries:
    """The entries of the tree `oid` that `git cat-file --batch` answers with `header` and then its body."""
    parts = header.split()
    if len(parts) != 3 or parts[1] != b"tree" or parts[0].decode() != oid:
        raise GitFailed(f"git cat-file answered {header!r} for the tree {oid}")
    size = int(parts[2])
    body = stream.read(size + 1)
    if len(body) != size + 1:
        raise GitFailed(f"git cat-file ended in the middle of the tree {oid}")
    width = len(oid) // 2
    entries: Entries = {}
    at = 0
    while at < size:
        space = body.index(b" ", at)
        end = body.index(b"\0", space)
        name = body[space + 1 : end].decode(_ENCODING, _ERRORS)
        entries[name] = body[at:space].decode().zfill(6) + body[end + 1 : end + 1 + width].hex()
        at = end + 1 + width
    return entries
