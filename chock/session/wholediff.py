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

    One git command says it all: `--raw --numstat --patch -z` writes each file's raw record (its status, then
    its path), then each file's counts, an empty record, and the patch's text."""
    process = _run(repo, ["--raw", "--numstat", "--patch", "-z"], base, commit)
    with _finished(process):
        statuses, counts, left_out, start = _listed(process)
        text, cut = _text(process, start)
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


def _listed(process: subprocess.Popen[bytes]) -> tuple[list[tuple[str, str]], list[str], int, bytes]:
    """The first files git lists — (status, path) from the raw records, and the counts records, at most
    FILES_LISTED files and FILES_BYTES of their status and path (twice that of counts) — how many more there
    were, and what was read past the empty record that ends the lists (the patch's first bytes)."""
    assert process.stdout is not None
    statuses: list[tuple[str, str]] = []
    counts: list[str] = []
    size = counts_size = more = 0
    pending, at, path_of = b"", 0, b""  # path_of: the status whose path is the next record
    while True:
        end = pending.find(b"\0", at)
        if end < 0:
            chunk = process.stdout.read(CHUNK)
            if not chunk:
                return statuses, counts, more, b""  # no change: no lists, no patch
            pending, at = pending[at:] + chunk, 0
            continue
        record, at = pending[at:end], end + 1
        if path_of:
            size += len(path_of) + len(record)
            if len(statuses) < FILES_LISTED and size <= FILES_BYTES:
                statuses.append((path_of.decode("utf-8", "replace"), record.decode("utf-8", "replace")))
            else:
                more += 1
            path_of = b""
        elif record.startswith(b":"):  # `:<modes> <ids> <status>`, its path next
            path_of = record.rpartition(b" ")[2] or b"?"
        elif record:
            counts_size += len(record)
            if len(counts) < len(statuses) and counts_size <= 2 * FILES_BYTES:
                counts.append(record.decode("utf-8", "replace"))
        else:
            return statuses, counts, more, pending[at:]


def _text(process: subprocess.Popen[bytes], start: bytes) -> tuple[str, bool]:
    """The diff's text, `start` and what `process` writes after it, up to DIFF_BYTES, cut after its last whole
    line there; whether it was cut."""
    assert process.stdout is not None
    data = start
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
def _finished(process: subprocess.Popen[bytes]) -> Iterator[None]:
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
        raise GitFailed(f"git diff could not show the session's work: {detail}")
