"""The bubblewrap command line one stdio MCP server runs under (docs/mcp.md#the-sandbox-of-a-server).

A server gets what a shell command's sandbox starts from (chock.session.sandbox.isolation: the system
directories read-only with `/etc`'s private files masked, a private `/tmp`, `/proc` and `/dev`, no network), then:

- the workspace at its own path, read-only, or read-write when its entry says `.workspace = "write"` (which
  cannot be combined with `.network = true`: a server that can both write the branch and talk to the world
  is a way out for whatever the agent writes);
- a private HOME, `<data dir>/mcp/<project key>/<server>` (0700), which no agent's sandbox ever binds, and
  which is its working directory (never the workspace);
- each absolute path its argv names outside the system directories (a script, a server's install dir),
  read-only at its resolved path and nothing around it;
- the network only with `.network = true`;
- an environment of PATH, HOME, LANG and CHOCK_WORKSPACE (the workspace's path, which its working directory is
  not) alone: no variable of the person's reaches it.

The project's `.git` is not bound: a server reads the checked-out files, and the worktree's `.git` file
points at a directory it cannot see, so `git` inside a server fails (a server that needs history is not one
the agent's branch should feed).

Its argv[0] is a bare name found on the sandbox's PATH or an absolute path; resolved (symlinks too), it must
exist and lie outside the workspace and the toolchains HOME, which the agent can rewrite: code the agent can
change is never a server. Nor may any other argument name an existing path inside them (absolute, or relative
to its working directory, the HOME): `python3 tools/srv.py` is refused as `tools/srv` is. Everything here is
refused before anything starts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from chock.errors import Refused
from chock.mcp.declarations import NAME, ServerSpec
from chock.paths import Layout, ensure_dir
from chock.session.sandbox import SYSTEM_DIRS, TOOL_PATH, find_bwrap, isolation

LANG = "C.UTF-8"
# Where a server finds the files it serves: its working directory is its HOME, never the workspace.
WORKSPACE_VARIABLE = "CHOCK_WORKSPACE"
# Never given to a server by naming them: the sandbox has its own /proc and /dev, and what lies there or in /sys
# and /run on the host (another process's environment, a daemon's socket) is a way out, never a server's code.
HOST_ONLY = ("/proc", "/sys", "/dev", "/run")


def server_argv(
    spec: ServerSpec,
    *,
    layout: Layout,
    workspace: Path,
    project: Path,
    home: Path | None = None,
    bwrap: str | None = None,
    status_fd: int | None = None,
) -> list[str]:
    """The bwrap command line running `spec`'s server over `workspace`, in its private HOME (`home`, else its
    project's, `<data dir>/mcp/<project key>/<server>`), which is also its working directory; refused (naming
    the server and what to change) when its declaration asks for what a server may not have. Creates the HOME.
    With `status_fd`, bwrap reports on it (`sandbox.setup_failed` reads it)."""
    if not NAME.fullmatch(spec.name):
        raise Refused(f"MCP server name {spec.name!r} is not [a-z0-9-]{{1,16}}; rename it in its declaration")
    if not spec.command:
        raise Refused(f'MCP server {spec.name} has no .command to run; give its argv, e.g. .{{ "docs-mcp" }}')
    if spec.workspace not in ("read", "write"):
        raise Refused(f'MCP server {spec.name}: .workspace must be "read" or "write", not {spec.workspace!r}')
    if spec.workspace == "write" and spec.network:
        raise Refused(
            f'MCP server {spec.name} asks for both .workspace = "write" and .network = true; a server may have '
            "one or the other, never both: drop one from its declaration"
        )
    root = Path(os.path.realpath(workspace))
    if not root.is_dir():
        raise Refused(f"MCP server {spec.name}: the workspace {workspace} does not exist")
    toolchains = Path(os.path.realpath(layout.toolchains_dir(project)))
    rewritable = (root, toolchains)
    program = resolve_program(spec.name, spec.command[0], rewritable=rewritable)
    private = _private_paths(layout)
    home = Path(os.path.realpath(home if home is not None else layout.mcp_home(project, spec.name)))
    for argument in spec.command[1:]:
        _refuse_rewritable(spec.name, argument, home=home, rewritable=rewritable)

    command = [spec.command[0]]
    binds: list[str] = []
    for index, argument in enumerate([program, *spec.command[1:]]):
        shown = _outside_system(spec.name, argument, root=root, private=private)
        if shown is not None:
            binds += ["--ro-bind", shown, shown]
            if index == 0:
                command[0] = shown
            else:
                argument = shown
        if index:
            command.append(argument)

    os.chmod(ensure_dir(home), 0o700)
    args = isolation(bwrap or find_bwrap(), network=spec.network, status_fd=status_fd)
    # Order matters: the named paths first, so a workspace below one of them is bound over it; the HOME last.
    args += binds
    args += ["--bind" if spec.workspace == "write" else "--ro-bind", str(root), str(root)]
    args += ["--bind", str(home), str(home)]
    args += ["--remount-ro", "/", "--chdir", str(home), "--clearenv"]
    args += ["--setenv", "PATH", TOOL_PATH, "--setenv", "HOME", str(home), "--setenv", "LANG", LANG]
    args += ["--setenv", WORKSPACE_VARIABLE, str(root)]
    return [*args, "--", *command]


def resolve_program(server: str, program: str, *, rewritable: tuple[Path, ...]) -> str:
    """The real path of a server's argv[0]: a bare name on the sandbox's PATH, or an absolute path, which must
    exist and resolve (symlinks too) outside every directory of `rewritable`."""
    if "/" not in program:
        found = shutil.which(program, path=TOOL_PATH)
        if found is None:
            raise Refused(
                f"MCP server {server}: {program!r} is not on the sandbox's PATH ({TOOL_PATH}); install it there "
                "or give its absolute path"
            )
        path = found
    elif not os.path.isabs(program):
        raise Refused(
            f"MCP server {server}: its program {program!r} is a relative path; give an absolute path outside "
            "the workspace, or a bare name on PATH"
        )
    else:
        path = program
    real = Path(os.path.realpath(path))
    for directory in rewritable:
        if real == directory or directory in real.parents:
            raise Refused(
                f"MCP server {server}: its program {program} resolves to {real}, inside {directory}, which the "
                "agent can rewrite; a server must be installed outside the workspace and the toolchains HOME"
            )
    if not real.is_file() or not os.access(real, os.X_OK):
        raise Refused(f"MCP server {server}: its program {program} ({real}) is not an executable file")
    return str(real)


def _refuse_rewritable(server: str, argument: str, *, home: Path, rewritable: tuple[Path, ...]) -> None:
    """Refuse an argument (or the value of an `--option=value` one) naming an existing path inside a directory of
    `rewritable`: absolute, or relative to the server's working directory, its HOME. `python3 tools/srv.py`
    would run code the agent can rewrite as a server as surely as an argv[0] in the workspace would."""
    candidates = [argument] + ([argument.split("=", 1)[1]] if "=" in argument else [])
    for candidate in candidates:
        if not candidate:
            continue
        path = os.path.join(home, candidate)  # an absolute candidate stays as it is
        if not os.path.lexists(path):
            continue
        real = Path(os.path.realpath(path))
        for directory in rewritable:
            if _within(real, directory):
                raise Refused(
                    f"MCP server {server}: its argument {argument!r} names {real}, inside {directory}, which the "
                    "agent can rewrite; a server's code, scripts and configuration must be installed outside the "
                    "workspace and the toolchains HOME: name them by an absolute path there"
                )


def _private_paths(layout: Layout) -> tuple[Path, ...]:
    """What a server's argv may never bring into its sandbox: Chock's own directories (credentials, logs)."""
    roots = (layout.data, layout.state, layout.config.parent)
    return tuple(Path(os.path.realpath(root)) for root in roots)


def _outside_system(server: str, argument: str, *, root: Path, private: tuple[Path, ...]) -> str | None:
    """The resolved path to bind for an argument naming an existing absolute path the sandbox would not show
    otherwise; None when it is no such path, or already visible (system directories, the workspace)."""
    if not os.path.isabs(argument) or not os.path.exists(argument):
        return None
    real = Path(os.path.realpath(argument))
    if any(_within(real, Path(system)) for system in SYSTEM_DIRS if not os.path.islink(system)) or _within(real, root):
        return None
    if any(_within(real, Path(path)) for path in HOST_ONLY) or not (real.is_file() or real.is_dir()):
        raise Refused(
            f"MCP server {server}: its argument {argument} ({real}) is not a file or directory a server may be given "
            f"(nothing below {', '.join(HOST_ONLY)}, no socket or device); name the server's own files"
        )
    home = Path(os.path.realpath(os.path.expanduser("~")))
    hidden_in_home = _within(real, home) and real != home and real.relative_to(home).parts[0].startswith(".")
    if (
        real == Path("/")
        or any(_within(real, path) or _within(path, real) for path in private)
        or _within(home, real)
        or hidden_in_home
    ):
        raise Refused(
            f"MCP server {server}: its argument {argument} ({real}) would show the server Chock's own files, a "
            "HOME or a hidden directory of it; name a directory that holds only the server"
        )
    return str(real)


def _within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents
