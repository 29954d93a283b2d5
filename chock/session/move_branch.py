"""A moved session's branch into the target's project (docs/remote.md#moving-a-session): `refs/heads/chock/<id>`
from the bundle the source sent, and nothing else of it.

Every object is checked before the repository sees it: `git index-pack --strict` reads the bundle's pack into a
quarantine beside the repository's objects (as `git receive-pack` takes a push), and its pack is moved in only once
all of it passed — `git fetch` from a bundle checks no object before git 2.48, whatever `transfer.fsckObjects`
says. index-pack is a process of its own: `Unpacking` starts it as soon as the project is known, so git checks the
objects while the move-in checks the log, and `import_branch` waits for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from chock.errors import Refused
from chock.session import checkout_size, moving
from chock.session.hostgit import Repo

Undo = Callable[[], None]

# A bundle's header (its refs and prerequisites) is read up to this; ours names one ref and the base's boundary.
BUNDLE_HEADER_LIMIT = 1024 * 1024


def bad(why: str) -> Refused:
    """The refusal of a moved session whose parts fail a check: nothing was written."""
    return Refused(f"refused the moved session: {why}; nothing was written")


class Unpacking:
    """`git index-pack --strict --fix-thin` of the bundle's pack into a quarantine of `repo`'s object store,
    running from construction; `take` waits for it and moves the pack in when every object passed; leaving the
    block stops it and removes the quarantine. With no repository (the project is refused later, in its own
    words), or an empty bundle, nothing runs; nor when the bundle's `branch` is the one here already (a session
    coming back that did no work away): all its objects are here. A bundle whose header is wrong is refused by
    `take`, so a log's refusal comes first."""

    def __init__(self, repo: Repo | None, bundle: Path, branch: str) -> None:
        self.repo, self.bundle = repo, bundle
        self._process: subprocess.Popen[bytes] | None = None
        self._refusal: Refused | None = None
        self._quarantine: Path | None = None
        if repo is None or bundle.stat().st_size == 0:
            return
        with open(bundle, "rb") as handle:
            try:
                header = _skip_header(handle)
            except Refused as refusal:
                self._refusal = refusal
                return
            here = branch_tip(repo, branch)
            if here and f"{here} {branch}\n".encode() in header:
                return  # `import_branch` finds the tip here: nothing of the pack is needed
            self._quarantine = repo.common_dir / "objects" / f"incoming-chock-{os.getpid()}"
            shutil.rmtree(self._quarantine, ignore_errors=True)
            (self._quarantine / "pack").mkdir(parents=True)
            os.lseek(handle.fileno(), handle.tell(), os.SEEK_SET)  # git reads the pack from here on
            self._process = repo.stream(
                ["index-pack", "--strict", "--fix-thin", "--stdin"], stdin=handle.fileno(), objects=self._quarantine
            )

    def __enter__(self) -> Unpacking:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        if self._process is not None:
            self._process.communicate()
        if self._quarantine is not None:
            shutil.rmtree(self._quarantine, ignore_errors=True)

    def take(self, repo: Repo) -> None:
        """Wait for git's checks of every object; the pack into `repo`'s objects when all passed, else refused."""
        if self._refusal is not None:
            raise self._refusal
        if self._process is None or self._quarantine is None or self.repo is None:
            raise bad("its bundle could not be read into the project")
        if self.repo.common_dir != repo.common_dir:
            raise bad(f"the project's repository moved from {self.repo.common_dir} while the bundle was read")
        _, said = self._process.communicate()
        if self._process.returncode != 0:
            lines = said.decode(errors="replace").strip().splitlines()
            raise bad(f"its bundle fails git's object checks ({'; '.join(lines[-2:]) or 'index-pack failed'})")
        store = repo.common_dir / "objects"
        # The index last: git reads a pack only once its index is there.
        for made in sorted((self._quarantine / "pack").iterdir(), key=lambda path: path.suffix == ".idx"):
            os.replace(made, store / "pack" / made.name)


def _skip_header(handle: BinaryIO) -> list[bytes]:
    """Read a bundle's header (v2 or v3) up to its blank line, so `handle` is at its pack: its lines; Refused
    otherwise."""
    line = handle.readline(64)
    if line not in (b"# v2 git bundle\n", b"# v3 git bundle\n"):
        raise bad("its bundle is not a git bundle (v2 or v3)")
    lines = []
    while line not in (b"\n", b""):
        line = handle.readline(BUNDLE_HEADER_LIMIT)
        if handle.tell() > BUNDLE_HEADER_LIMIT:
            raise bad(f"its bundle's header is longer than {BUNDLE_HEADER_LIMIT} bytes")
        lines.append(line)
    if not line:
        raise bad("its bundle holds no pack")
    return lines


def branch_of(session_id: str) -> str:
    """The one ref a moved session's bundle carries into the project."""
    return f"refs/heads/chock/{session_id}"


def branch_tip(repo: Repo, branch: str) -> str:
    """The commit `branch` names in `repo`, or "" when it names none."""
    found = repo.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{branch}^{{commit}}"], check=False)
    return found.stdout.decode().strip() if found.returncode == 0 else ""


def import_branch(repo: Repo, unpacking: Unpacking, session_id: str, base: str, source: str) -> Undo:
    """`refs/heads/chock/<id>` from the bundle, and nothing else of it: its objects checked (`Unpacking`), its
    tip checked to descend from the base and from the branch already here, then the branch is moved to it. An
    empty bundle carries no branch (the work is the base). Returns how to put the branch back."""
    bundle, branch = unpacking.bundle, branch_of(session_id)
    here = branch_tip(repo, branch)
    if bundle.stat().st_size == 0:
        if here and not _ancestor(repo, here, base):
            raise _diverged(session_id, repo)
        return lambda: None
    listed = repo.run(["bundle", "list-heads", str(bundle), branch], check=False)
    tips = [line.split(" ", 1)[0] for line in listed.stdout.decode(errors="replace").splitlines()
            if line.endswith(f" {branch}")]  # fmt: skip
    if listed.returncode != 0 or len(tips) != 1 or not moving.COMMIT_ID.fullmatch(tips[0]):
        raise bad(f"its bundle holds no {branch}")
    tip = tips[0]
    if tip == here:  # it came back with no work done away: every object is here, reachable from the branch
        if not _ancestor(repo, base, tip):
            raise bad(f"its bundle's {branch} does not descend from the session's base {base}")
        return lambda: None
    unpacking.take(repo)
    fetched = repo.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{tip}^{{commit}}"], check=False)
    if fetched.stdout.decode().strip() != tip or not _ancestor(repo, base, tip):
        raise bad(f"its bundle's {branch} does not descend from the session's base {base}")
    if here and not _ancestor(repo, here, tip):
        raise _diverged(session_id, repo)
    repo.run(["update-ref", "-m", f"chock: moved in from {source}", branch, tip, here])

    def undo() -> None:
        if here:
            repo.run(["update-ref", "-m", "chock: move undone", branch, here, tip])
        else:
            repo.run(["update-ref", "-d", branch, tip])

    return undo


# A moved session's worktree may hold what the project's own checkout (HEAD) holds and this much more: entries, and
# bytes, to which four times the bundle's size is added (what the work carried may hold, unpacked).
GROWTH = checkout_size.Size(entries=100_000, bytes=512 * 1024 * 1024)
BUNDLE_GROWTH = 4


def check_checkout(repo: Repo, session_id: str, base: str, bundle_bytes: int) -> None:
    """Refused when the commit the session's worktree starts at here (its branch, else its base) would check out
    more than the project's own HEAD does and `GROWTH` more (`BUNDLE_GROWTH` times the bundle's bytes added to its
    bytes): a bundle of a few kilobytes can name a tree of terabytes, and the objects of a move refused after its
    bundle was taken stay in the repository, so no commit a move names is checked out unmeasured
    (chock.session.checkout_size). Measured before anything is written, each listing bounded as a whole."""
    branch = branch_of(session_id)
    start = branch_tip(repo, branch) or base
    own = branch_tip(repo, "HEAD")
    try:
        here = checkout_size.measure(repo, own) if own else checkout_size.Size(0, 0)
        growth = checkout_size.Size(GROWTH.entries, GROWTH.bytes + BUNDLE_GROWTH * bundle_bytes)
        most = checkout_size.Size(here.entries + growth.entries, here.bytes + growth.bytes)
        found = checkout_size.measure(repo, start, most)
    except checkout_size.TooSlow as slow:
        raise bad(f"its work ({branch} at {start}) could not be measured against the project's: {slow}") from None
    if not found.past(most):
        return
    what = (
        f"more than {most.entries:,} entries (files, links and directories)"
        if found.entries > most.entries
        else f"more than {most.bytes:,} bytes"
    )
    raise bad(
        f"its work ({branch} at {start}) would check out {what}: the project's own checkout here (HEAD) holds "
        f"{here.entries:,} entries and {here.bytes:,} bytes, and a moved session's worktree may hold at most "
        f"{growth.entries:,} entries and {growth.bytes:,} bytes more (a few kilobytes of git objects can name "
        "terabytes: one tree reached from many places). If the work is real, bring it into this project's "
        "checkout first (fetch and check out its branch), then move the session again"
    )


def _ancestor(repo: Repo, older: str, newer: str) -> bool:
    return repo.run(["merge-base", "--is-ancestor", older, newer], check=False).returncode == 0


def _diverged(session_id: str, repo: Repo) -> Refused:
    return Refused(
        f"the branch chock/{session_id} in {repo.common_dir} is not an ancestor of the one sent: it holds work the "
        f"moved session does not; rename it (`git branch -m chock/{session_id} …`) and move the session again. "
        "Nothing was written"
    )
