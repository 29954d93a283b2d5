"""`chock config` (the configuration in force, each value with where it came from) and `chock config check FILE`.

Both read chock.config's one table of keys (`KEYS`): a value is shown under its key path with its origin — the
file and line it is written at, the environment variable that overrides it, or `default` (the table's words). A
secret (`.token`) is never shown, only "set (hidden)". The file is validated first, so a config that loading
refuses is refused here with the same message (exit 3).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from chock.commands.base import group, pass_layout
from chock.paths import Layout
from chock.terminal import shown

TYPE_CHECKING = False  # chock.config and chock.zon are imported by the commands (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from chock.config import Key

HIDDEN = "set (hidden)"


@dataclass(frozen=True)
class Shown:
    """One value in force: its key path (names filled in), the value as written, and where it came from."""

    path: str
    value: str
    origin: str
    entry: str = ""  # the named entry it belongs to (`.instances.work`), if any


def in_force(path: Path, env: dict[str, str]) -> list[Shown]:
    """Every key of the table with the value in force, for the config at `path` (validated by the caller)."""
    from chock import zon
    from chock.config import KEYS

    try:
        data = zon.load(path, placed=True)
    except FileNotFoundError:
        data = {}
    found: list[Shown] = []
    for key in KEYS:
        found += _expand(key, key.path.split(".")[1:], data, "", path)
    # Each named entry's keys together (`.instances.work.*`, then `.instances.demo.*`), in the table's order.
    groups: dict[str, int] = {}
    for item in found:
        groups.setdefault(item.entry or item.path, len(groups))
    found.sort(key=lambda item: groups[item.entry or item.path])
    return [_overridden(item, env) for item in found]


def _expand(key: Key, segments: list[str], node: Any, prefix: str, path: Path, *, entry: str = "") -> list[Shown]:
    """The values of `key` under `node` (the struct at `prefix`, None when it is absent from the file); `entry` is
    the named entry `prefix` is in."""
    from chock import zon

    segment, rest = segments[0], segments[1:]
    if segment == "NAME":
        if not isinstance(node, dict):
            return []
        return [
            item
            for name, value in node.items()
            for item in (
                _expand(key, rest, value, prefix + zon.dot_name(name), path, entry=prefix + zon.dot_name(name))
                if rest
                else _leaf(
                    key, prefix + zon.dot_name(name), value, path, _line(node, name), prefix + zon.dot_name(name)
                )
            )
        ]
    here = f"{prefix}.{segment}"
    present = isinstance(node, dict) and segment in node
    if rest:
        if not present and entry:
            return []  # an instance's .price or .budget that is not there: nothing under it to show
        return _expand(key, rest, node[segment] if present else None, here, path, entry=entry)
    if present:
        return _leaf(key, here, node[segment], path, _line(node, segment), entry)
    if entry and not isinstance(node, dict):
        return []
    return [Shown(here, key.default, "default", entry)]


def _leaf(key: Key, path_text: str, value: Any, path: Path, line: int | None, entry: str) -> list[Shown]:
    """A value the file gives: a list of structs (`.approvals.rules`) is shown an item a row, each at its line."""
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        lines = getattr(value, "lines", [])
        return [
            Shown(f"{path_text}[{index}]", _one_line(item), _where(path, lines[index] if index < len(lines) else line))
            for index, item in enumerate(value)
        ]
    return [Shown(path_text, HIDDEN if key.secret else _one_line(value), _where(path, line), entry)]


def _line(node: Any, name: str) -> int | None:
    lines = getattr(node, "lines", None)
    return lines.get(name) if isinstance(lines, dict) else None


def _where(path: Path, line: int | None) -> str:
    return f"{path}:{line}" if line else str(path)


def _one_line(value: Any) -> str:
    """A value as ZON, on one line; a URL's user:password part shown as `***`."""
    from chock import zon
    from chock.providers.kinds import without_userinfo

    if isinstance(value, dict):
        if not value:
            return ".{}"
        return ".{ " + ", ".join(f"{zon.dot_name(name)} = {_one_line(item)}" for name, item in value.items()) + " }"
    if isinstance(value, list):
        return ".{ " + ", ".join(_one_line(item) for item in value) + " }" if value else ".{}"
    return zon.as_written(without_userinfo(value) if isinstance(value, str) else value)


def _overridden(item: Shown, env: dict[str, str]) -> Shown:
    """A value a CHOCK_* variable overrides is the variable's, named with what it overrides."""
    from chock.config import KEYS

    for key in KEYS:
        if key.env and key.path == item.path and env.get(key.env):
            over = "" if item.origin == "default" else f", over {item.origin}"
            return Shown(item.path, _one_line([env[key.env]]), f"${key.env}{over}")
    return item


def _file_origin(ctx: click.Context) -> str:
    """How the config file was named: --config, $CHOCK_CONFIG, or the default place."""
    root = ctx.find_root()
    source = root.get_parameter_source("config")
    if source is click.core.ParameterSource.COMMANDLINE:
        return "--config"
    if source is click.core.ParameterSource.ENVIRONMENT:
        return "$CHOCK_CONFIG"
    return "the default place"


@group(invoke_without_command=True)
@pass_layout
@click.pass_context
def config(ctx: click.Context, layout: Layout) -> None:
    """The configuration in force: every key of config.zon with its value and where it came from (FILE:LINE, the
    environment variable that overrides it, or default). A secret such as .token is shown only as set (hidden).
    `man 5 chock-config` describes every key."""
    if ctx.invoked_subcommand is not None:
        return
    from chock.config import load_config

    path = layout.config
    loaded = load_config(path)  # refused as every command refuses it (exit 3)
    state = "" if loaded.exists else "; it does not exist, so every value is its default"
    click.echo(shown(f"config file {path} (from {_file_origin(ctx)}){state}", one_line=True))
    rows = in_force(path, dict(os.environ))
    width = max(len(row.path) for row in rows)
    value_width = min(40, max(len(row.value) for row in rows))
    for row in rows:
        click.echo(shown(f"{row.path:<{width}}  {row.value:<{value_width}}  {row.origin}", one_line=True))


@config.command("check")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(file: Path) -> None:
    """Whether FILE is a config.zon Chock accepts: exit 0 when it is, 3 (with the error loading it gives) when not,
    2 on a usage error (no FILE, or one that does not exist)."""
    from chock.config import load_config

    load_config(file)
    click.echo(shown(f"{file}: valid", one_line=True))
    sys.stdout.flush()
