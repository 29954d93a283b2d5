"""The servers a session starts: config.zon's, then the project's once this host's person trusted them
(docs/mcp.md#trust).

A project's `.chock/mcp.zon` is read from the session's start commit. It is used when its exact bytes are the
ones trusted in this project on this host (chock.mcp.trust); else the person is asked, when someone is there to
ask (a terminal `chock run`, or `chock mcp trust`), with the declaration shown through the safe printer (every
byte of it is the project's writing, so none reaches the terminal as a control sequence), or, for a changed
declaration, what changed. With nobody to ask its servers are skipped, each with the reason, which the session
logs (`mcp.server {state: skipped, origin: project, reason}`). A declaration that cannot be read or parsed is
skipped the same way: a project's mistake never stops a session. A project server named as one of config.zon's
is skipped too: the person's own entry wins.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chock.mcp import trust
from chock.mcp.declarations import (
    PROJECT_FILE,
    DeclarationError,
    ServerSpec,
    parse_declaration,
    project_declaration,
)
from chock.paths import Layout
from chock.terminal import colour, safe
from chock.value import Value

if TYPE_CHECKING:
    from chock.config import Config
    from chock.session.hostgit import Repo

# The whole declaration counts as one "server" in a skip that concerns all of it (unreadable, unparsable).
WHOLE = ""
TRUST_ANSWERS = ("y", "yes")
DECLINED = "the person did not trust this declaration"


class Declaration(Value):
    """A project's declaration at one commit, read and parsed; `problem` says why it cannot be used."""

    __slots__ = ("commit", "data", "problem", "project", "servers")

    def __init__(
        self,
        project: Path,
        commit: str,
        data: bytes | None,
        servers: dict[str, ServerSpec],
        problem: str = "",
    ) -> None:
        self.project = project
        self.commit = commit
        self.data = data  # None: the commit holds no `.chock/mcp.zon` (or it could not be read)
        self.servers = servers
        self.problem = problem

    @property
    def source(self) -> str:
        return f"{PROJECT_FILE} in commit {self.commit[:12]}"


def read_declaration(repo: Repo, commit: str) -> Declaration:
    """The project's declaration at `commit`; a file that cannot be read or parsed is a `problem`, not an error."""
    project = repo.work_tree
    try:
        data = project_declaration(repo, commit)
    except DeclarationError as error:
        return Declaration(project, commit, None, {}, str(error))
    if data is None:
        return Declaration(project, commit, None, {})
    try:
        servers = parse_declaration(data, f"{PROJECT_FILE} (commit {commit[:12]})")
    except DeclarationError as error:
        return Declaration(project, commit, data, {}, str(error))
    return Declaration(project, commit, data, servers)


def servers_for_session(
    config: Config, repo: Repo, commit: str, layout: Layout, ask: Callable[[str], bool] | None
) -> tuple[list[ServerSpec], list[tuple[str, str]]]:
    """The servers to start (config.zon's by name, then the project's by name) and each skipped one as
    (server, reason); `ask(question) -> yes` puts the trust question, None when nobody can be asked."""
    specs = [config.mcp[name] for name in sorted(config.mcp)]
    found = read_declaration(repo, commit)
    if found.problem:
        return specs, [(WHOLE, found.problem)]
    if found.data is None or not found.servers:
        return specs, []
    skipped = [
        (name, f"config.zon declares a server {name!r} already, and the person's own entry wins")
        for name in sorted(found.servers)
        if name in config.mcp
    ]
    wanted = [found.servers[name] for name in sorted(found.servers) if name not in config.mcp]
    if not wanted:
        return specs, skipped
    if not trust.trusted(layout, found.project, found.data):
        before = trust.last_trusted(layout, found.project)
        if ask is None:
            why = f"{untrusted_reason(found, before)}, and nobody was there to ask: run `chock mcp trust` in "
            why += str(found.project)
            return specs, skipped + [(spec.name, why) for spec in wanted]
        if not ask(trust_question(found, before)):
            return specs, skipped + [(spec.name, DECLINED) for spec in wanted]
        trust.trust(layout, found.project, found.data)
    return specs + wanted, skipped


def untrusted_reason(found: Declaration, before: bytes | None) -> str:
    """That a declaration is not (or no longer) the one trusted on this host."""
    what = "changed since it was trusted" if before is not None else "not trusted"
    return f"{found.source} is {what} on this host"


def trust_question(found: Declaration, before: bytes | None, *, styled: bool | None = None) -> str:
    """The trust question: the declaration (or, when another was trusted before, what changed), every character
    a terminal would act on shown escaped, then `[y/N]`."""
    assert found.data is not None
    styled = colour(sys.stderr) if styled is None else styled
    new = found.data.decode("utf-8", "replace")
    if before is None:
        head = f"{found.project} declares MCP servers in {found.source}:"
        body = new
    else:
        head = f"{found.project} changed its MCP servers since you trusted them ({found.source}); what changed:"
        old = before.decode("utf-8", "replace")
        import difflib  # for this question alone: a session's start imports only what its first request uses

        body = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), "trusted", found.commit[:12]
            )
        )
    names = ", ".join(sorted(found.servers))
    # Split at "\n" alone: every other line break a string knows (\x0b, \x1c, U+2028…) is shown escaped.
    shown = "".join(f"    {safe(line, styled=styled)}\n" for line in body.rstrip("\n").split("\n"))
    return (
        f"{safe(head, styled=styled, one_line=True)}\n{shown}"
        "Each runs in its own sandbox on this machine (docs/mcp.md#the-sandbox-of-a-server); a call of its tools "
        f"asks first unless a rule decides it.\nTrust these servers ({names}) in this project? [y/N] "
    )


def ask_at_terminal(question: str) -> bool:
    """Put `question` on standard error and read the answer from the terminal: only `y` or `yes` is a yes.
    What was typed before the question is dropped: keys typed ahead answer nothing."""
    from chock.terminal import drop_typed_ahead

    drop_typed_ahead(sys.stdin.fileno())
    sys.stderr.write(question)
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in TRUST_ANSWERS
