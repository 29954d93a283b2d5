"""The project's own instructions for agents: `AGENTS.md` at its root (the convention Codex, opencode and
others share), added to the system prompt.

It is read from the commit the session starts from, through host git's plumbing (`chock.session.hostgit`),
never from a checkout: the file git holds is what the project says. Only a regular file is read; a symlink is
refused, whatever it points at, so a link to `tokens.zon` or `~/.ssh` never sends a byte of its target to a
provider. What was read is logged in `session.start` (docs/log.md), so every later owner of the session, on
this machine or another, builds the same system prompt from the log alone.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from chock.session.hostgit import Repo

NAME = "AGENTS.md"
# The bound Codex puts on a project's instructions (`project_doc_max_bytes`): enough for any real guide, small
# enough to leave the context window to the work.
LIMIT = 32 * 1024
REGULAR_MODES = ("100644", "100755")


@dataclass(frozen=True)
class ProjectInstructions:
    text: str = ""  # what goes into the system prompt ("" for none)
    note: str = ""  # what a person is told: why the file was not read, or that it was cut


def read(repo: Repo, commit: str) -> ProjectInstructions:
    """`AGENTS.md` at the root of `commit`, bounded to `LIMIT` bytes."""
    listing = repo.run(["ls-tree", "-z", "-l", "--full-tree", commit, "--", NAME]).stdout
    if not listing:
        return ProjectInstructions()
    fields = listing.split(b"\t", 1)[0].decode("ascii", "replace").split()
    mode, kind, oid, size = fields if len(fields) == 4 else ("", "", "", "")
    if kind != "blob" or mode not in REGULAR_MODES:
        what = "a symlink" if mode == "120000" else "not a regular file"
        return ProjectInstructions(
            note=f"{NAME} at the project root is {what} in commit {commit[:12]}, so it was not read: "
            f"commit the instructions as a regular file"
        )
    whole = int(size)
    text = _head(repo, oid, LIMIT).decode("utf-8", "ignore" if whole > LIMIT else "replace")
    if whole <= LIMIT:
        return ProjectInstructions(text=text)
    cut = f"{NAME} is {whole:,} bytes; only its first {LIMIT // 1024} KiB are used"
    return ProjectInstructions(text=f"{text}\n[{cut}]", note=cut)


def _head(repo: Repo, oid: str, limit: int) -> bytes:
    """The first `limit` bytes of a blob, however large it is."""
    process = repo.stream(["cat-file", "blob", oid], stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    try:
        return process.stdout.read(limit)
    finally:
        process.stdout.close()
        process.kill()
        process.wait()


def system_prompt(base: str, instructions: str) -> str:
    """The system prompt: Chock's own, then the project's instructions when it has any."""
    if not instructions:
        return base
    return (
        f"{base}\n\nThe project's own instructions for agents ({NAME} at its root) follow; follow them in all "
        f"your work here.\n\n<project_instructions>\n{instructions}\n</project_instructions>"
    )
