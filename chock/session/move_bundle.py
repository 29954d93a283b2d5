"""A moving session's branch as its source sends it (docs/remote.md#moving-a-session): `git bundle` written as git
writes it, and said piece by piece (chock/control/parts.py: `PIECE` bytes each but the last), so each piece travels
while git writes the next. git writes a pack object by object, each once it has compressed it (a single large file
comes out all at once, at the end): the pieces cross while git writes, not while it searches for deltas or
compresses one object.

git compresses again each loose object a bundle carries (a packed one it copies as it is), whether or not it
shrinks: a 50 MiB file of compressed or random bytes costs it seconds of zlib to come out as large as it went in.
So, as rsync skips compressing what is compressed already, a bundle made mostly of such objects is written stored
(`compression`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.control import parts
from chock.control.framing import size
from chock.errors import Refused
from chock.paths import plain_file, private_file
from chock.session.hostgit import GitFailed, Repo

LIMIT = parts.PART_BOUNDS[parts.BUNDLE]
READ = 1024 * 1024
# A bundle is written stored when the loose objects that do not compress (`_incompressible`: git's fastest level
# would shrink each by less than a tenth) are at least this share of the bytes it carries. Every other byte counted as
# one that would compress to nothing, storing adds at most a fifth of the work's own size to the bundle (random
# bytes: nothing); and the target keeps the pack as it came.
STORED_FROM = 0.9
# A loose object this large is looked at (smaller ones cost git little time: they count as compressing), and this
# much of its start compressed to check it.
SAMPLED_FROM = 64 * 1024
SAMPLE = 64 * 1024
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# What is kept of git's own words to say why it failed.
SAID_LIMIT = 8192


class Pieces:
    """A bundle written to a file as it comes, and described piece by piece as soon as each is whole (`parts.PIECE`
    bytes, the last what is left: fewer, maybe none), each description given to `staged`: the client sends a piece
    while git writes the next. Refused past LIMIT, before a byte past it is written."""

    def __init__(self, target: Path, staged: Callable[[dict[str, Any]], None], session_id: str) -> None:
        self._out = open(target, "wb", opener=private_file)  # noqa: SIM115 - closed by __exit__
        self._staged = staged
        self._session_id = session_id
        self._digest = hashlib.sha256()
        self._filled = 0  # bytes of the piece under way
        self.described: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        if self._out.tell() + len(data) > LIMIT:
            raise Refused(
                f"the branch chock/{self._session_id} makes a bundle of more than {size(LIMIT)}, more than a move "
                "carries; push the branch yourself and start a new session there"
            )
        view = memoryview(data)
        while view:
            taken = view[: parts.PIECE - self._filled]
            self._out.write(taken)
            self._digest.update(taken)
            self._filled += len(taken)
            view = view[len(taken) :]
            if self._filled == parts.PIECE:
                self._whole()

    def _whole(self) -> None:
        """The piece under way is whole: its bytes in the file (`send` reads them there), its description said."""
        self._out.flush()
        piece = {"part": parts.piece(len(self.described)), "length": self._filled, "sha256": self._digest.hexdigest()}
        self.described.append(piece)
        self._staged(piece)
        self._digest, self._filled = hashlib.sha256(), 0

    def __enter__(self) -> Pieces:
        return self

    def __exit__(self, failed: type[BaseException] | None, *exc: object) -> None:
        with self._out:
            if failed is None:
                self._whole()  # the last piece, shorter than the rest


def stream(repo: Repo, ref: str, left_out: list[str], pieces: Pieces) -> None:
    """`git bundle create - REF ^LEFT_OUT…` written to `pieces` as git writes it; GitFailed in git's words. A refusal
    stops git at once: its pipe is closed (git's pack-objects, which writes it, dies of that) before it is waited
    for, so nothing more is read."""
    import tempfile

    revisions = [ref, *(f"^{commit}" for commit in left_out)]
    args = ["bundle", "create", "--quiet", "-", *revisions]
    with tempfile.TemporaryFile() as said:  # git's words: a file, so git never waits on a full pipe of them
        git = repo.stream(args, config=compression(repo, revisions), stderr=said.fileno())
        assert git.stdout is not None
        with git.stdout as out:
            try:
                while chunk := os.read(out.fileno(), READ):
                    pieces.write(chunk)
            except BaseException:
                out.close()
                git.kill()
                git.wait()
                raise
        if git.wait() != 0:
            said.seek(0)
            detail = said.read(SAID_LIMIT).decode(errors="replace").strip() or f"exit status {git.returncode}"
            raise GitFailed(f"git {' '.join(args)} failed in {repo.work_tree}: {detail}")


def compression(repo: Repo, revisions: list[str]) -> tuple[str, ...]:
    """The `-c` settings the bundle of `revisions` is made with: `pack.compression=0` when the loose objects it
    carries that do not compress (`_incompressible`) are at least STORED_FROM of its bytes; none, git's own level,
    otherwise or when git cannot say (the bundle's own making then says why). The objects' ids pass from one git to
    the other, their sizes are read a line at a time: nothing held grows with the branch."""
    objects = repo.common_dir / "objects"
    kept = whole = 0
    started: list[subprocess.Popen[bytes]] = []
    try:
        listing = repo.stream(
            ["rev-list", "--objects", "--no-object-names", *revisions, "--"], stderr=subprocess.DEVNULL
        )
        started.append(listing)
        assert listing.stdout is not None
        with listing.stdout:
            sizes = repo.stream(
                ["cat-file", "--batch-check=%(objectname) %(objectsize) %(objectsize:disk)"],
                stdin=listing.stdout.fileno(),
                stderr=subprocess.DEVNULL,
            )
        started.append(sizes)
        assert sizes.stdout is not None
        with sizes.stdout:
            for line in sizes.stdout:
                fields = line.split()  # `<id> missing` for one git cannot find: the bundle's making says so
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    size = int(fields[1])
                    whole += size
                    if _incompressible(objects, fields[0].decode("ascii", "replace"), size, int(fields[2])):
                        kept += size
        said = [process.wait() for process in started]
    finally:
        for process in started:
            if process.returncode is None:
                process.kill()
                process.wait()
    return ("pack.compression=0",) if said == [0, 0] and kept and kept >= STORED_FROM * whole else ()


def _incompressible(objects: Path, name: str, size: int, disk: int) -> bool:
    """Whether an object the bundle carries is one git would compress again for nothing: loose, of SAMPLED_FROM
    bytes or more, its file (compressed whole at git's loose level) at least nine tenths of its size, and its first
    SAMPLE bytes shrinking by less than a tenth at zlib's fastest level — its file alone would not say, in a
    project that writes loose objects uncompressed (a packed object, or one that cannot be read as loose: no)."""
    if size < SAMPLED_FROM or disk * 10 < size * 9 or not _OBJECT_ID.fullmatch(name):
        return False
    try:
        with open(objects / name[:2] / name[2:], "rb", opener=plain_file) as loose:
            data = loose.read(2 * SAMPLE)
        whole = zlib.decompressobj().decompress(data, SAMPLE + 64)
    except (OSError, zlib.error):
        return False
    header, nul, content = whole.partition(b"\0")
    sample = content[:SAMPLE]
    return bool(nul and len(header) < 64 and sample) and len(zlib.compress(sample, 1)) * 10 >= len(sample) * 9


def held(repo: Repo, ref: str, commit: str) -> bytes:
    """A bundle of `ref` at `commit` whose every object the target holds (`commit` is its prerequisite): its header
    and an empty pack, as git writes them — `git bundle create` refuses a bundle with no object."""
    found = repo.run(["rev-parse", "--show-object-format"], check=False).stdout.decode().strip() or "sha1"
    header = "# v2 git bundle\n" if found == "sha1" else f"# v3 git bundle\n@object-format={found}\n"
    pack = b"PACK" + (2).to_bytes(4, "big") + (0).to_bytes(4, "big")  # version 2, no object
    return f"{header}-{commit}\n{commit} {ref}\n\n".encode() + pack + hashlib.new(found, pack).digest()
