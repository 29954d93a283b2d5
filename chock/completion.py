"""Shell completion: the script `chock completion bash|zsh|fish` prints, and what completes beyond the
command tree (this project's session ids, instance names).

The scripts are click's own (`click.shell_completion`, the same on click 8.1 as Debian 12 ships and on
later ones): at each Tab the shell runs `chock` with `_CHOCK_COMPLETE` set, and click answers from the
command tree. A completer here never fails in a person's shell: anything that goes wrong completes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from chock.paths import Layout

if TYPE_CHECKING:
    import click

SHELLS = ("bash", "zsh", "fish")
PROGRAM = "chock"
# The variable click's scripts set to ask for completions: `_<PROGRAM>_COMPLETE`, upper case.
COMPLETE_VARIABLE = "_CHOCK_COMPLETE"


def script(cli: click.Command, shell: str) -> str:
    """The completion script for `shell`, to be sourced (bash, zsh) or installed (fish)."""
    from click.shell_completion import get_completion_class

    completion = get_completion_class(shell)
    if completion is None:
        raise ValueError(f"no completion for {shell!r}")
    return completion(cli, {}, PROGRAM, COMPLETE_VARIABLE).source()


def _layout(ctx: click.Context) -> Layout:
    """The layout the command being completed would use: its --config, else the environment's."""
    return Layout.from_env(ctx.find_root().params.get("config"))


def session_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """This project's session ids (its --project, else the current directory's), newest first."""
    try:
        from chock.log import catalog
        from chock.project import find_root

        project = find_root(Path(ctx.params.get("project") or Path.cwd()))
        rows = catalog.rows(_layout(ctx), project)
    except Exception:
        return []
    return [row["id"] for row in reversed(rows) if row["id"].startswith(incomplete)]


def instance_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Every instance: config.zon's and the ones `chock login` stored."""
    try:
        from chock.config import load_config
        from chock.instances import available

        layout = _layout(ctx)
        names = available(layout, load_config(layout.config))
    except Exception:
        return []
    return sorted(name for name in names if name.startswith(incomplete))
