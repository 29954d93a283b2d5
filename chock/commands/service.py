"""`chock daemon` (and its `install`, `uninstall`, `start`, `stop`, `wake`, `status`) and `chock serve`: the two
services, and their units (chock/platform/install.py does the work).

`chock daemon` alone is chock/daemon/options.py's, which the executable also runs without click
(docs/architecture.md#start-up); this is its click command, built from the same table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from chock.commands.base import command, options, pass_layout, table_group
from chock.commands.shared_options import DAEMON
from chock.daemon import options as daemon_options
from chock.paths import Layout

daemon = table_group(
    "daemon", daemon_options, "Own sessions so they outlive terminals, and serve their logs over the control protocol."
)


@daemon.command("install")
@click.option(
    "--over-package",
    is_flag=True,
    help="Write them even where a package installed chock's units: yours shadow its until uninstall.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace a unit of chock's name that was edited or written by hand (each is kept as <name>.bak).",
)
@pass_layout
def daemon_install(layout: Layout, over_package: bool, force: bool) -> None:
    """Write the user units (LaunchAgents on macOS) for this installation's chock; where a package installed
    them already, explain and write nothing (unless --over-package); a unit edited since an install wrote it
    is not replaced (unless --force)."""
    from chock.platform import install

    for path in install.install(layout, over_package=over_package, force=force):
        click.echo(f"wrote {path}")
    click.echo("start listening with: chock daemon start  (systemctl --user enable --now chock.socket)")


@daemon.command("uninstall")
@pass_layout
def daemon_uninstall(layout: Layout) -> None:
    """Stop the service and remove the units `chock daemon install` wrote; a package's units stay as they were."""
    from chock.platform import install

    done = install.uninstall(layout)
    for path in done.removed:
        click.echo(f"removed {path}")
    for path in done.kept:
        click.echo(f"left {path}: not as chock daemon install wrote it (edited, or written by hand)")
    if not done.removed:
        click.echo("chock daemon install wrote no units here: nothing removed")
    if done.packaged:
        click.echo(f"the package's units ({', '.join(done.packaged)}) stay as you had them", nl=False)
        click.echo(f"; listening again: {', '.join(done.restarted)}" if done.restarted else "")


@daemon.command("start")
@pass_layout
def daemon_start(layout: Layout) -> None:
    """Listen on the daemon's and serve's sockets; the first connection starts each."""
    from chock.platform import install

    install.start(layout)
    click.echo("listening: the first connection starts the daemon")


@daemon.command("stop")
def daemon_stop() -> None:
    """Stop the daemon and serve and their sockets; running sessions keep running."""
    from chock.platform import install

    install.stop()
    click.echo("stopped; running sessions keep running in their own scopes")


@daemon.command("wake")
@pass_layout
def daemon_wake(layout: Layout) -> None:
    """Connect to the daemon once, so it starts (chock-resume.service runs this at boot)."""
    from chock.control.client import ControlClient

    ControlClient(f"unix:{layout.daemon_socket}").ping()
    click.echo("the daemon answered")


@daemon.command("status")
@pass_layout
def daemon_status(layout: Layout) -> None:
    """The units as the service manager sees them, and the daemon's own status record."""
    from chock.platform import install

    for what, state in install.status(layout):
        click.echo(f"{what:<22} {state}")


@command()
@options((DAEMON,))
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path),
    help="Serve the browser on this unix socket (default: <state>/serve.sock).",
)
@click.option("--host", help="Serve on TCP at this address instead (no identity check).")
@click.option("--port", type=int, help="TCP port for --host (default 7891; 0 picks a free one).")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host header to accept on TCP (repeatable).",
)
@click.option("--idle-exit", type=float, metavar="SECONDS", help="Exit 0 after this long with no client.")
@options(daemon_options.LOG_OPTIONS)
@pass_layout
def serve(
    layout: Layout,
    daemon_address: tuple[str, ...],
    socket_path: Path | None,
    host: str | None,
    port: int | None,
    allow_hosts: tuple[str, ...],
    idle_exit: float | None,
    log_target: str,
    log_level: str,
) -> None:
    """A browser front end: purely a client of daemons — --daemon, repeatable (each `local` or a connection's
    name; one address alone is served as `local`), else $CHOCK_DAEMON, else config.zon's .serve.daemons, else
    the state dir's; its --port is the port it listens on."""
    from chock.platform import journal
    from chock.serve.app import run as run_serve

    journal.configure(journal.SERVE, log_target, log_level)

    sys.exit(
        run_serve(
            layout,
            daemon=daemon_address,
            socket_path=None if socket_path is None else socket_path.absolute(),  # the address it says is whole
            host=host,
            port=port,
            allow_hosts=list(allow_hosts),
            idle_exit=idle_exit,
        )
    )
