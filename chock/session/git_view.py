"""The project's git config as the git inside a sandbox reads it (docs/architecture.md#what-the-sandbox-may-write).

A tool's git needs the project's own config to read the repository (its format, its extensions) and to work the
way the person does (their name, colours, diff and merge settings, which branch tracks which remote). It needs
nothing that reaches another machine, which is where a config keeps secrets: an `http.<url>.extraHeader` a CI
checkout writes, a credential helper, a `url.<base>.insteadOf` holding a token, a remote's URL with a password.
So each config file of the project's `.git` — its own, `config.worktree`, each submodule's under `modules/` — is
shown as a copy holding only the sections below, every URL in a value kept without its password and its query
(a remote's, and one `git push -u <url>` wrote as a branch's remote), and no `include` (a file it names may hold
anything). A copy is written again when its file changes (`Views.refresh`).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from chock.errors import ChockError
from chock.paths import ensure_dir, replace_file
from chock.session.hostgit import file_settings

# The sections a tool's git is shown. `remote` keeps only a remote's URLs and refspecs.
SHOWN_SECTIONS = frozenset(
    {"core", "extensions", "user", "init", "i18n", "color", "diff", "merge", "status", "log", "advice", "branch"}
)
REMOTE_KEYS = frozenset({"url", "pushurl", "fetch", "push"})
# An ssh URL's user is who logs in, never a secret (`ssh://git@host/…`); its password would be.
_SSH = ("ssh://", "git+ssh://", "ssh+git://")
# A URL's user[:password] part, to the authority's last `@` as URL parsers read it; and its query.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#\s]*)@")
_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^?#\s]*)\?[^#\s]*")
# Config files of submodules looked for under `.git/modules`, at most, and how deep.
MOST_SUBMODULES = 64
_DEPTH = 8


def shown(settings: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """Those of `settings` (key, value) a tool's git is shown, each value without a URL's password or query."""
    kept: list[tuple[str, str | None]] = []
    for key, value in settings:
        section, _, rest = key.partition(".")
        if (section == "remote" and (rest.rpartition(".")[2] in REMOTE_KEYS or rest == "pushdefault")) or (
            section in SHOWN_SECTIONS
        ):
            kept.append((key, None if value is None else without_secrets(value)))
    return kept


def without_secrets(value: str) -> str:
    """`value` with each URL in it shown without its password (an ssh URL keeps its user, who logs in) and
    without its query (`?access_token=…`): a remote's URL, and any other value that holds one — `git push -u`
    writes the URL it was given as `branch.<name>.remote`."""
    if "://" not in value:
        return value
    return _QUERY.sub(r"\1?***", _USERINFO.sub(_userinfo, value))


def _userinfo(match: re.Match[str]) -> str:
    scheme, user = match[1], match[2]
    if scheme.lower() in _SSH and ":" not in user:
        return match[0]
    return f"{scheme}***@"


def _quoted(text: str, *, subsection: bool = False) -> str:
    """`text` in double quotes as git reads it back: in a value `\\n` and `\\t` too, in a subsection's name only
    `\\` and `"` (git drops any other backslash there, and a name holds no newline)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    if not subsection:
        escaped = escaped.replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def config_text(settings: list[tuple[str, str | None]]) -> str:
    """`settings` (key, value) as a config file git reads back as the same settings, in their order."""
    lines: list[str] = []
    header = None
    for key, value in settings:
        section, _, rest = key.partition(".")
        subsection, dot, name = rest.rpartition(".")
        wanted = f"[{section} {_quoted(subsection, subsection=True)}]" if dot else f"[{section}]"
        if wanted != header:
            lines.append(wanted)
            header = wanted
        lines.append(f"\t{name}" if value is None else f"\t{name} = {_quoted(value)}")
    return "".join(line + "\n" for line in lines)


def write_view(config: Path, target: Path) -> Path:
    """The copy of the config file `config` a sandbox is shown, written whole at `target` (`paths.replace_file`:
    replaced, never written through, so concurrent sessions of one project each write it whole)."""
    text = config_text(shown(file_settings(config)))
    ensure_dir(target.parent)
    replace_file(str(target), text.encode("utf-8", "surrogateescape"))
    if not target.is_file():
        raise ChockError(f"the sandbox's copy of {config} could not be written to {target}; make room there")
    return target


def config_files(git_dir: Path) -> list[Path]:
    """The config files of the project's `.git`: its own, `config.worktree`, and each submodule's (at most
    MOST_SUBMODULES, as deep as _DEPTH: a submodule's name may hold `/`)."""
    found = [path for path in (git_dir / "config", git_dir / "config.worktree") if path.is_file()]

    def look(directory: Path, depth: int) -> None:
        try:
            children = sorted(child for child in directory.iterdir() if child.is_dir() and not child.is_symlink())
        except OSError:
            return
        for child in children:
            if len(found) >= MOST_SUBMODULES + 2 or depth > _DEPTH:
                return
            if (child / "HEAD").is_file() and (child / "config").is_file():  # a submodule's git dir
                found.append(child / "config")
                look(child / "modules", depth + 1)
            else:
                look(child, depth + 1)  # a part of a name holding `/`

    look(git_dir / "modules", 0)
    return found


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


class Views:
    """The copies one sandbox binds over the config files of the project's `.git`, in `directory` (outside
    every bind), each named by its file's path; `refresh` writes again those whose file changed."""

    def __init__(self, git_dir: Path, directory: Path) -> None:
        self.binds: list[tuple[Path, Path]] = []  # (copy, the config file it stands for)
        self._seen: dict[Path, tuple[int, ...] | None] = {}
        for config in config_files(git_dir):
            digest = hashlib.sha256(os.fsencode(config.relative_to(git_dir))).hexdigest()[:16]
            self.binds.append((directory / digest, config))
        if not self.refresh():
            raise FileNotFoundError(f"a config file of {git_dir} went while its copy was made; try again")

    def refresh(self) -> bool:
        """Write again each copy whose config file changed since it was written (a `git config` on the host,
        a remote added): one `stat` a file when none did. False when a config file is gone (a submodule
        removed): the binds are then made again."""
        for view, config in self.binds:
            now = _identity(config)
            if now is None:
                return False
            if now != self._seen.get(config) or not view.exists():
                write_view(config, view)
                self._seen[config] = now
        return True
