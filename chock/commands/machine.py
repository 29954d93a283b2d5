"""Setting Chock up on this machine: `chock login`, `chock logout`, `chock credentials` (chock/credentials/ does
the work), `chock doctor` (chock/commands/doctor.py) and `chock completion` (chock/commands/completion.py)."""

from __future__ import annotations

import sys

import click

from chock.commands.base import command, options, pass_layout
from chock.commands.completion import SHELLS, instance_names
from chock.commands.shared_options import DAEMON_OPTIONS
from chock.control.address import named_address
from chock.paths import Layout
from chock.terminal import colour, shown


@command()
@click.option(
    "--provider",
    "provider_text",
    required=True,
    metavar="KIND[=URL]",
    help="anthropic, aiand, or openai-compat=URL (anthropic=URL / aiand=URL for another address); mcp=URL for "
    "a remote MCP server.",
)
@click.option("--name", help="The instance's name (default: the kind).")
@click.option("--model", help="The model this instance asks by default.")
@click.option(
    "--password-method",
    metavar="prompt|stdin|file=PATH",
    help="Where the credential comes from (default: a hidden prompt at a terminal, else stdin).",
)
@click.option("--replace", is_flag=True, help="Replace a credential of the same name without asking.")
@pass_layout
def login(
    layout: Layout, provider_text: str, name: str | None, model: str | None, password_method: str | None, replace: bool
) -> None:
    """Check a provider credential and store it in the configured store (never an argument or variable)."""
    from chock.config import load_config
    from chock.credentials.login import login as store_login

    result = store_login(
        layout,
        load_config(layout.config),
        provider_text,
        name=name,
        model=model,
        password_method=password_method,
        replace=replace,
        say=lambda text: click.echo(shown(text, sys.stderr), err=True),
    )
    if result.stored:
        from chock.providers.kinds import without_userinfo

        where = without_userinfo(result.address)
        click.echo(shown(f"stored the credential of {result.name!r} ({result.kind} at {where}) in {result.store}"))
    else:
        click.echo("nothing was stored")


@command()
@click.argument("name", shell_complete=instance_names)
@pass_layout
def logout(layout: Layout, name: str) -> None:
    """Remove an instance's stored credential and its index entry."""
    from chock.config import load_config
    from chock.credentials.login import logout as remove_login

    entry = remove_login(layout, load_config(layout.config), name)
    click.echo(shown(f"removed {name!r} ({entry.kind}) from {entry.stored}"))


@command()
@pass_layout
def credentials(layout: Layout) -> None:
    """Every instance with its kind, address and the source its credential comes from (never a value)."""
    from chock.config import load_config
    from chock.credentials.lookup import sources
    from chock.providers.kinds import without_userinfo

    found = sources(layout, load_config(layout.config))
    for source in found:
        line = (
            f"{source.name:<16} {source.kind or '?':<14} {without_userinfo(source.address or '-'):<40} "
            f"{source.source or 'none (no credential is sent)'}"
        )
        click.echo(shown(line, one_line=True))
    if not found:
        click.echo("no instances: `chock login --provider KIND` stores one")


@command()
@options(DAEMON_OPTIONS)
@pass_layout
def doctor(layout: Layout, daemon_address: tuple[str, ...], port: int | None) -> None:
    """Whether each piece works here (bwrap, git, systemd, the journal, the credential store, daemon, serve),
    with fixes, and how to read Chock's records. The daemon checked is the one named, else the state dir's."""
    from chock.commands.doctor import examine

    findings = examine(layout, named_address(daemon_address, port=port, acting="chock doctor"))
    for finding in findings:
        mark = "ok " if finding.ok else "no "
        if colour():  # (never with $NO_COLOR: chock.terminal decides)
            mark = click.style(mark, fg="green" if finding.ok else "red" if finding.essential else "yellow")
        # A finding quotes what it met (a daemon's refusal, a path, a store's words): shown safe, one line each.
        click.echo(f"{mark} {finding.name:<17} {shown(finding.detail, one_line=True)}")
        if not finding.ok and finding.fix:
            click.echo(f"    {'':<17} fix: {shown(finding.fix, one_line=True)}")
        for note in finding.notes:
            click.echo(f"    {'':<17} {shown(note, one_line=True)}")
    sys.exit(0 if all(f.ok or not f.essential for f in findings) else 1)


@command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL; commands, options, session ids and instance names complete.

    \b
    bash:  eval "$(chock completion bash)"     (in ~/.bashrc)
    zsh:   eval "$(chock completion zsh)"      (in ~/.zshrc)
    fish:  chock completion fish > ~/.config/fish/completions/chock.fish
    """
    from chock.commands.completion import script

    click.echo(script(ctx.find_root().command, shell), nl=False)
