"""The project's git config as the git inside a sandbox reads it (docs/architecture.md#what-the-sandbox-may-write).

A tool's git needs the project's own config to read the repository (its format, its extensions) and to work the
way the person does (their name, colours, diff and merge settings, which branch tracks which remote). It needs
nothing that reaches another machine, which is where a config keeps secrets: an `http.<url>.extraHeader` a CI
checkout writes, a credential helper, a `url.<base>.insteadOf` holding a token, a remote's URL with a password.
So the sandbox's `.git/config` is a copy holding only the sections below, each remote's URL without its
user:password part, and no `include` (a file it names may hold anything).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from chock.providers.kinds import without_userinfo
from chock.session.hostgit import file_settings

# The sections a tool's git is shown. `remote` keeps only a remote's URLs and refspecs.
SHOWN_SECTIONS = frozenset(
    {"core", "extensions", "user", "init", "i18n", "color", "diff", "merge", "status", "log", "advice", "branch"}
)
REMOTE_KEYS = frozenset({"url", "pushurl", "fetch", "push"})


def shown(settings: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """Those of `settings` (key, value) a tool's git is shown, a remote's URL without its user:password part."""
    kept: list[tuple[str, str | None]] = []
    for key, value in settings:
        section, _, rest = key.partition(".")
        if section == "remote" and rest.rpartition(".")[2] in REMOTE_KEYS:
            kept.append((key, None if value is None else without_userinfo(value)))
        elif section in SHOWN_SECTIONS:
            kept.append((key, value))
    return kept


def _quoted(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def config_text(settings: list[tuple[str, str | None]]) -> str:
    """`settings` (key, value) as a config file git reads back as the same settings, in their order."""
    lines: list[str] = []
    header = None
    for key, value in settings:
        section, _, rest = key.partition(".")
        subsection, dot, name = rest.rpartition(".")
        wanted = f"[{section} {_quoted(subsection)}]" if dot else f"[{section}]"
        if wanted != header:
            lines.append(wanted)
            header = wanted
        lines.append(f"\t{name}" if value is None else f"\t{name} = {_quoted(value)}")
    return "".join(line + "\n" for line in lines)


def write_view(config: Path, target: Path) -> Path:
    """The copy of the config file `config` a sandbox is shown, written whole at `target` (replaced, never
    written through: concurrent sessions of one project each write it whole)."""
    text = config_text(shown(file_settings(config)))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".git-config-", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise
    return target
