"""The project's own instructions for agents: `AGENTS.md` at its root (the convention Codex, opencode and
others share), added to the system prompt.

It is read from the commit the session starts from, through host git's plumbing (`chock.session.hostgit`),
never from a checkout: the file git holds is what the project says. Only a regular file is read; a symlink is
refused, whatever it points at, so a link to `tokens.zon` or `~/.ssh` never sends a byte of its target to a
provider. What was read is logged in `session.start` (docs/log.md), so every later owner of the session, on
this machine or another, builds the same system prompt from the log alone.
"""

from __future__ import annotations

from chock.session.hostgit import Repo
from chock.value import Value

NAME = "AGENTS.md"
# The bound Codex puts on a project's instructions (`project_doc_max_bytes`): enough for any real guide, small
# enough to leave the context window to the work.
LIMIT = 32 * 1024


class ProjectInstructions(Value):
    __slots__ = ("note", "text")

    def __init__(self, text: str = "", note: str = "") -> None:
        self.text = text  # what goes into the system prompt ("" for none)
        self.note = note  # what a person is told: why the file was not read, or that it was cut


def read(repo: Repo, commit: str) -> ProjectInstructions:
    """`AGENTS.md` at the root of `commit`, bounded to `LIMIT` bytes."""
    entry = repo.tree_entry(commit, NAME)
    if entry is None:
        return ProjectInstructions()
    if not entry.regular:
        return ProjectInstructions(
            note=f"{NAME} at the project root is {entry.what()} in commit {commit[:12]}, so it was not read: "
            f"commit the instructions as a regular file"
        )
    whole = entry.size
    text = repo.blob_head(entry.oid, LIMIT).decode("utf-8", "ignore" if whole > LIMIT else "replace")
    if whole <= LIMIT:
        return ProjectInstructions(text=text)
    cut = f"{NAME} is {whole:,} bytes; only its first {LIMIT // 1024} KiB are used"
    return ProjectInstructions(text=f"{text}\n[{cut}]", note=cut)


def system_prompt(base: str, instructions: str) -> str:
    """The system prompt: Chock's own, then the project's instructions when it has any."""
    if not instructions:
        return base
    return (
        f"{base}\n\nThe project's own instructions for agents ({NAME} at its root) follow; follow them in all "
        f"your work here.\n\n<project_instructions>\n{instructions}\n</project_instructions>"
    )
