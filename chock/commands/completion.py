"""Shell completion: the script `chock completion bash|zsh|fish` prints, and what completes beyond the
command tree (this project's session ids on this machine, `NAME:` for each host, instance names, and the hosts
`--daemon` and `--on` take: `local` and config.zon's connection names).

At each Tab the shell runs `chock` with `_CHOCK_COMPLETE` set, and click answers from the command tree
(`click.shell_completion`, the same on click 8.1 as Debian 12 ships and on later ones). The zsh and fish scripts
are click's, which quote what they insert; the bash script is click's with its loop made safe (`BASH_SOURCE`):
click's expands each answer unquoted, so a name like `$(touch x)` would be inserted as it is, and run when the
line is. A completer here offers only names a terminal shows as themselves (`chock.terminal.safe`), so none holds
a newline, reads only files (it never opens a connection), and never fails in a person's shell: anything that
goes wrong completes nothing.
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

# click's bash script, but each answer line is read whole (`read -r`, no glob, no word splitting) and each name is
# inserted quoted (`printf %q`): `$(touch x)` becomes `\$\(touch\ x\)`, which the shell reads back as that name.
BASH_SOURCE = """\
%(complete_func)s() {
    local IFS=$'\\n'
    local response type value

    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD %(complete_var)s=bash_complete $1)

    while IFS=',' read -r type value; do
        if [[ $type == 'dir' ]]; then
            COMPREPLY=()
            compopt -o dirnames
        elif [[ $type == 'file' ]]; then
            COMPREPLY=()
            compopt -o default
        elif [[ $type == 'plain' ]]; then
            COMPREPLY+=("$(printf '%%q' "$value")")
        fi
    done <<< "$response"

    return 0
}

%(complete_func)s_setup() {
    complete -o nosort -F %(complete_func)s %(prog_name)s
}

%(complete_func)s_setup;
"""


def script(cli: click.Command, shell: str) -> str:
    """The completion script for `shell`, to be sourced (bash, zsh) or installed (fish)."""
    from click.shell_completion import BashComplete, get_completion_class

    completion = get_completion_class(shell)
    if completion is None:
        raise ValueError(f"no completion for {shell!r}")
    if completion is BashComplete:
        completion = type("SafeBashComplete", (BashComplete,), {"source_template": BASH_SOURCE})
    return completion(cli, {}, PROGRAM, COMPLETE_VARIABLE).source()


def offered(names: list[str], incomplete: str) -> list[str]:
    """The names starting with `incomplete` that a terminal shows as themselves: one holding a newline, an escape
    or a bidi override is left out rather than inserted into a person's command line."""
    from chock.terminal import safe

    return [name for name in names if name.startswith(incomplete) and safe(name, styled=False, one_line=True) == name]


def _layout(ctx: click.Context) -> Layout:
    """The layout the command being completed would use: its --config, else the environment's."""
    return Layout.from_env(ctx.find_root().params.get("config"))


def _hosts(ctx: click.Context) -> list[str]:
    """`local` and each connection config.zon names: read from the file, no connection opened."""
    try:
        from chock.config import load_config
        from chock.control.endpoint import LOCAL

        return [LOCAL, *load_config(_layout(ctx).config).connections]
    except Exception:
        return []


def host_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """The hosts a `--daemon` or `--on` can name: `local` and config.zon's connections."""
    return offered(_hosts(ctx), incomplete)


def session_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """This project's session ids on this machine (its --project, else the current directory's), newest first,
    then `NAME:` for each connection of config.zon: another host's ids are never asked for."""
    try:
        from chock.log import catalog
        from chock.project import find_root

        project = find_root(Path(ctx.params.get("project") or Path.cwd()))
        ids = [str(row["id"]) for row in reversed(catalog.rows(_layout(ctx), project))]
    except Exception:
        ids = []
    return offered(ids + [f"{name}:" for name in _hosts(ctx)[1:]], incomplete)


def instance_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Every instance: config.zon's and the ones `chock login` stored."""
    try:
        from chock.config import load_config
        from chock.instances import available

        layout = _layout(ctx)
        names = available(layout, load_config(layout.config))
    except Exception:
        return []
    return offered(sorted(names), incomplete)
