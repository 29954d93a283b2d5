"""A session's whole work as a person reviews it: the diff of its branch against its base, bounded.

The event that records the branch (`workspace.close`) carries it (docs/log.md#event-types), so the log stays the
interface: the page and any reader show it without running git. Host git computes it (chock.session.hostgit),
tree to tree, so nothing of the workspace is read, and every option that shapes the output is given on the
command line, never left to the project's config or attributes: no external diff driver, no textconv filter, no
colour, no pager, no renames, the usual `a/` and `b/` prefixes. Past DIFF_BYTES the text is cut at a line and
git is stopped; past FILES_LISTED files (or FILES_BYTES of their names) the rest of the files are only counted.
A binary file is named in the list (`binary`) and in the text, as git says it ("Binary files … differ").
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

from chock.session.hostgit import GitFailed, Repo

DIFF_BYTES = 256 * 1024  # of diff text on the event
FILES_LISTED = 1000  # files named on the event; the rest are counted
FILES_BYTES = 256 * 1024  # of their names in all, so the event stays well below the log's line bound
CHUNK = 64 * 1024

# What `git diff` takes from config that would change the text or run something, each overridden here.
OPTIONS = (
    "--no-ext-diff",  # no diff.external, no diff driver's command
    "--no-textconv",  # no textconv filter
    "--no-color",
    "--no-renames",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--inter-hunk-context=0",
    "--diff-algorithm=default",
    "--submodule=short",
    "--ignore-submodules=none",
    "-O/dev/null",  # no diff.orderFile: git would open whatever file it names
)
CONFIG = ("diff.suppressBlankEmpty=false", "core.quotePath=true", "color.ui=false")


def whole(repo: Repo, base: str, commit: str) -> dict[str, Any]:
    """The fields of `workspace.close` that say what the branch at `commit` changed against `base`: `base`,
    `diff` (cut: `diff_truncated`), `files` (each `{path, status, added, deleted, binary}`) and `files_left_out`.

    The three git commands are started together, so their starts overlap; each is read in turn."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for extra in (["--name-status", "-z"], ["--numstat", "-z"], []):
            started.append(_run(repo, extra, base, commit))
        names, numbers, patch = started
        statuses, left_out = _listed(names, pairs=True)
        # The same files in the same order (both sorted by path), their counts for those listed.
        counts, _ = _listed(numbers, pairs=False, budget=2 * FILES_BYTES)
        text, cut = _text(patch)
    finally:
        for process in started:
            if process.returncode is None:  # one before it failed: this one is not wanted
                process.kill()
                process.communicate()
    files = []
    for (status, path), count in zip(statuses, counts, strict=False):
        added, deleted, _ = count.split("\t", 2)
        binary = added == "-"
        files.append(
            {
                "path": path,
                "status": status[:1],
                "added": None if binary else int(added),
                "deleted": None if binary else int(deleted),
                "binary": binary,
            }
        )
    fields: dict[str, Any] = {"base": base, "diff": text, "files": files}
    if cut:
        fields["diff_truncated"] = True
    if left_out:
        fields["files_left_out"] = left_out
    return fields


def _run(repo: Repo, extra: list[str], base: str, commit: str) -> subprocess.Popen[bytes]:
    return repo.stream(["diff", *OPTIONS, *extra, base, commit, "--"], config=CONFIG)


def _records(process: subprocess.Popen[bytes]) -> Iterator[bytes]:
    """The NUL-ended records git writes, read a chunk at a time."""
    assert process.stdout is not None
    pending = b""
    while chunk := process.stdout.read(CHUNK):
        pending += chunk
        *records, pending = pending.split(b"\0")
        yield from records


def _listed(
    process: subprocess.Popen[bytes], *, pairs: bool, most: int = FILES_LISTED, budget: int = FILES_BYTES
) -> tuple[list[Any], int]:
    """The first files `process` lists with `--name-status -z` (`pairs`: status, then path) or `--numstat -z`
    (one record each, the path last) — at most `most`, and `budget` bytes of their records — and how many more
    there were."""
    kept: list[Any] = []
    size = more = 0
    with _finished(process, "list the files"):
        records = _records(process)
        for record in records:
            path = next(records, b"") if pairs else b""
            size += len(record) + len(path)
            if len(kept) < most and size <= budget:
                text = record.decode("utf-8", "replace")
                kept.append((text, path.decode("utf-8", "replace")) if pairs else text)
            else:
                more += 1
    return kept, more


def _text(process: subprocess.Popen[bytes]) -> tuple[str, bool]:
    """The diff's text `process` writes, up to DIFF_BYTES, cut after its last whole line there; whether it was
    cut."""
    assert process.stdout is not None
    data = b""
    with _finished(process, "show the diff"):
        while len(data) <= DIFF_BYTES and (chunk := process.stdout.read(CHUNK)):
            data += chunk
        if len(data) > DIFF_BYTES:
            process.kill()  # the rest is not wanted: git stops writing it
    if len(data) <= DIFF_BYTES:
        return data.decode("utf-8", "replace"), False
    kept = data[:DIFF_BYTES]
    kept = kept[: kept.rfind(b"\n") + 1] or kept
    return kept.decode("utf-8", "ignore"), True


@contextlib.contextmanager
def _finished(process: subprocess.Popen[bytes], doing: str) -> Iterator[None]:
    """Wait for git once its output is read (or it was killed, its output no longer wanted); a failure quotes
    git."""
    try:
        yield
    except BaseException:
        process.kill()
        raise
    finally:
        _, errors = process.communicate()
    if process.returncode not in (0, -signal.SIGKILL):
        detail = errors.decode(errors="replace").strip() or f"exit status {process.returncode}"
        raise GitFailed(f"git diff could not {doing} of the session's work: {detail}")
