"""How much a commit's checkout would write, read from git's listing of its tree with a bound
(docs/remote.md#moving-a-session).

A tree names each entry once, but one tree or blob may be named from any number of places: a few kilobytes of
objects can describe a checkout of terabytes (a "git bomb": 16 directories each holding the same 16 directories,
six deep, each holding one blob of a megabyte). `measure` streams `git ls-tree -r -t --long` of the commit, adding
up its entries (files, links, directories, submodules) and the bytes of its blobs, and stops reading — git is
killed — as soon as either passes its bound, or the listing takes longer than its deadline: its memory is one
chunk of the listing, whatever the tree names.
"""

from __future__ import annotations

import os
import selectors
import time
from typing import NamedTuple

from chock.errors import ChockError
from chock.session.hostgit import GitFailed, Repo

# The listing is read this much at a time; one entry (its path) longer than RECORD_LIMIT is no tree git checks out.
CHUNK = 1024 * 1024
RECORD_LIMIT = 64 * 1024

# How long one listing may take as a whole: a million entries take git a second or two.
DEADLINE_SECONDS = 120.0


class Size(NamedTuple):
    """A checkout's entries (each file, link, directory and submodule) and the bytes of its files and links."""

    entries: int
    bytes: int

    def past(self, most: Size) -> bool:
        return self.entries > most.entries or self.bytes > most.bytes


UNBOUNDED = Size(1 << 62, 1 << 62)


class TooSlow(ChockError):
    """git did not list the tree within the deadline."""


def measure(repo: Repo, commit: str, most: Size = UNBOUNDED, *, seconds: float = DEADLINE_SECONDS) -> Size:
    """The size of `commit`'s checkout, or, once it is past `most` in entries or bytes, what was counted when it
    was (`Size.past(most)` says so): nothing past that is read. TooSlow past `seconds`; GitFailed when git cannot
    list the commit."""
    process = repo.stream(["ls-tree", "-r", "-t", "-z", "--long", "--full-tree", "--end-of-options", commit])
    assert process.stdout is not None and process.stderr is not None
    entries = size = 0
    held = b""
    stopped = False
    deadline = time.monotonic() + seconds
    try:
        with selectors.DefaultSelector() as waiting:
            waiting.register(process.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not waiting.select(left):
                    raise TooSlow(f"git did not list the tree of {commit} within {seconds:g} s")
                chunk = os.read(process.stdout.fileno(), CHUNK)
                if not chunk:
                    break
                records = (held + chunk).split(b"\0")
                held = records.pop()  # the part of an entry the next chunk completes
                if len(held) > RECORD_LIMIT:
                    raise GitFailed(f"git listed an entry of {commit} longer than {RECORD_LIMIT} bytes")
                entries += len(records)
                for record in records:
                    found = record.partition(b"\t")[0].split()
                    if len(found) == 4 and found[3] != b"-":
                        size += int(found[3])
                if entries > most.entries or size > most.bytes:
                    stopped = True
                    break
    finally:
        if process.poll() is None:
            process.kill()
        said = process.communicate()[1]
    if not stopped and process.returncode != 0:
        detail = said.decode(errors="replace").strip() or f"exit status {process.returncode}"
        raise GitFailed(f"git ls-tree {commit} failed in {repo.work_tree}: {detail}")
    return Size(entries, size)
