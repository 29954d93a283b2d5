"""Shell completion: the script `chock completion bash|zsh|fish` prints, and what completes beyond the
command tree (this project's session ids on this machine, `NAME:` for each host, instance names, and the hosts
`--daemon` and `--on` take: `local` and config.zon's connection names). A session id is described by its task's first
line, which zsh and fish show beside it (bash shows the ids alone).

At each Tab the shell runs `chock` with `_CHOCK_COMPLETE` set, and click answers from the command tree
(`click.shell_completion`, the same on click 8.1 as Debian 12 ships and on later ones). The zsh and fish scripts
are click's, which quote what they insert (fish's splits an answer at its first comma only: a description keeps
its commas); the bash script is click's with its loop made safe (`BASH_SOURCE`): click's expands each answer
unquoted, so a name like `$(touch x)` would be inserted as it is, and run when the line is. A completer here
offers only names a terminal shows as themselves (`chock.terminal.safe`), so none holds a newline, reads only
files (it never opens a connection), and never fails in a person's shell: anything that
goes wrong completes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from chock.paths import Layout

if TYPE_CHECKING:
    import click
    from click.shell_completion import CompletionItem

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

# click's fish script, but each answer is split at its first comma only, so a description holding a comma is shown
# whole, printed with printf (an answer beginning with `-` is no option of echo's), and kept in chock's order.
FISH_SOURCE = """\
function %(complete_func)s;
    set -l response (env %(complete_var)s=fish_complete COMP_WORDS=(commandline -cp) \
COMP_CWORD=(commandline -t) %(prog_name)s);

    for completion in $response;
        set -l metadata (string split -m 1 "," -- $completion);

        if test $metadata[1] = "dir";
            __fish_complete_directories $metadata[2];
        else if test $metadata[1] = "file";
            __fish_complete_path $metadata[2];
        else if test $metadata[1] = "plain";
            printf '%%s\\n' $metadata[2];
        end;
    end;
end;

complete --no-files --keep-order --command %(prog_name)s --arguments "(%(complete_func)s)";
"""
_SOURCES = {"bash": BASH_SOURCE, "fish": FISH_SOURCE}


def script(cli: click.Command, shell: str) -> str:
    """The completion script for `shell`, to be sourced (bash, zsh) or installed (fish)."""
    from click.shell_completion import get_completion_class

    completion = get_completion_class(shell)
    if completion is None:
        raise ValueError(f"no completion for {shell!r}")
    if shell in _SOURCES:
        completion = type(f"Safe{completion.__name__}", (completion,), {"source_template": _SOURCES[shell]})
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


def described(text: str) -> str:
    """A task as a completion's description: its first line, cut to 60 characters, with every character the safe
    printer would escape (and tabs) removed, so that no shell's menu shows a control character or a forged line."""
    import re

    from chock.commands.picker import first_line
    from chock.terminal import UNSAFE

    return first_line(re.sub(f"[{UNSAFE}]+", "", text.replace("\t", " ")))


def session_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """This project's session ids on this machine (its --project, else the current directory's), newest first,
    each described by its task's first line (zsh and fish show it; bash shows ids), then `NAME:` for each
    connection of config.zon: another host's ids are never asked for, and no daemon is asked for anything."""
    from click.shell_completion import CompletionItem

    try:
        from chock.log import catalog
        from chock.project import find_root

        project = find_root(Path(ctx.params.get("project") or Path.cwd()))
        tasks = {str(row["id"]): str(row.get("message") or "") for row in reversed(catalog.rows(_layout(ctx), project))}
    except Exception:
        tasks = {}
    hosts = [f"{name}:" for name in _hosts(ctx)[1:]]
    return [
        CompletionItem(name, help=described(tasks[name]) or None if name in tasks else None)
        for name in offered([*tasks, *hosts], incomplete)
    ]


def first_session_id(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """`chock say`'s first word: a session id (as `session_ids`); after it, the message, which completes nothing."""
    return [] if ctx.params.get(param.name or "") else session_ids(ctx, param, incomplete)


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
