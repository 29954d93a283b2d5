"""Where a lookup goes (docs/credentials.md#lookup): the one function a session asks for an instance's credential.

First match wins:
  1. the store the instance's index entry names (`.stored`, written by the login that stored it, not whatever
     store is configured today), consulted only when there is an entry; an error from it is an error, never
     a skip on to a less protected source;
  2. the instance's own `.token` in config.zon, a file the person maintains and Chock never writes;
  3. `<data>/tokens.zon`, the file store, which Chock rewrites.
Every file source is refused, by name, when group or others can read it. Nothing found is None: no
credential is sent, which is what a local llama.cpp server needs. An instance with no index entry never
touches a keystore.

`mcp_credential` is the lookup for a remote MCP server's `.credential` (docs/mcp.md#credentials): only the
index's entry of that name, and only for the origin it was stored for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from chock import zon
from chock.config import Config
from chock.credentials.files import check_private
from chock.credentials.instance_index import read_index
from chock.credentials.refusals import CredentialError
from chock.credentials.stores import STORE_NAMES, open_store
from chock.credentials.stores.file import FileStore
from chock.paths import Layout
from chock.providers.kinds import MCP_SERVER
from chock.value import Value

if TYPE_CHECKING:
    from chock.mcp.declarations import ServerSpec

CONFIG_SOURCE = "config.zon"
TOKENS_SOURCE = "tokens.zon"


class Source(Value):
    """Where an instance's credential would come from, for `chock credentials`. Never a value."""

    __slots__ = ("address", "kind", "name", "source")

    def __init__(self, name: str, kind: str | None, address: str | None, source: str | None) -> None:
        self.name = name
        self.kind = kind
        self.address = address
        self.source = source  # a store name (from the index), "config.zon", "tokens.zon", or None: none is sent


def lookup(
    layout: Layout,
    config: Config,
    instance_name: str,
    *,
    can_prompt: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The credential for `instance_name`, or None when no source has one.

    `can_prompt`: a person at a terminal may be shown a keystore's unlock prompt (default: standard input is a
    terminal and CI is not set).
    """
    entry = read_index(layout).get(instance_name)
    if entry is not None:
        if entry.stored not in STORE_NAMES:
            raise CredentialError(
                f"{layout.instances_path}: instance {instance_name!r} is stored in {entry.stored!r}, which "
                "is not a store Chock has; run `chock login` for it again"
            )
        if can_prompt is None:
            environ = os.environ if environ is None else environ
            can_prompt = sys.stdin.isatty() and not environ.get("CI")
        found = open_store(entry.stored, layout, can_prompt=can_prompt).get(instance_name)
        if found is not None:
            return found
    configured = config.instances.get(instance_name)
    if configured is not None and configured.token is not None:
        check_private(config.path, f"the .token of instance {instance_name!r}")
        return configured.token
    return FileStore(layout.tokens_path).get(instance_name)


def mcp_credential(layout: Layout, config: Config, spec: ServerSpec, *, can_prompt: bool | None = None) -> str | None:
    """The credential a remote MCP server's entry names (`.credential`), or None when it names none. Given only
    when `chock login --provider mcp=URL` stored it for the very origin of the entry's `.url` (scheme, host and
    port): an entry pointed elsewhere, by a mistake or by anyone who can edit config.zon, is refused, and the
    credential is never sent there. The refusal names the origins, never a value."""
    if not spec.credential:
        return None
    import shlex  # here, not at a session's start, which imports only what its first request uses

    from chock.mcp.declarations import origin_of

    name, wanted = spec.credential, origin_of(spec.url)
    login = shlex.quote("mcp=" + spec.url)
    entry = read_index(layout).get(name)
    where = f"{config.path}: .mcp.servers{zon.dot_name(spec.name)}.credential"
    if entry is None or entry.kind != MCP_SERVER:
        what = "no credential" if entry is None else f"a {entry.kind} instance's credential, not an MCP server's,"
        raise CredentialError(
            f"{where} names {name!r}, but chock login stored {what} by that name; store it with "
            f"`chock login --provider {login} --name {name}`"
        )
    if entry.address != wanted:
        raise CredentialError(
            f"{where} names {name!r}, which was stored for {entry.address}, but the server's .url is at {wanted}: "
            f"it is sent only to the origin it was stored for. Log in for this origin (`chock login --provider "
            f"{login} --name {name} --replace`), or fix .url"
        )
    if entry.stored not in STORE_NAMES:
        raise CredentialError(f"{layout.instances_path}: {name!r} is stored in {entry.stored!r}, which is not a store")
    if can_prompt is None:
        can_prompt = sys.stdin.isatty() and not os.environ.get("CI")
    found = open_store(entry.stored, layout, can_prompt=can_prompt).get(name)
    if found is None:
        raise CredentialError(
            f"{where} names {name!r}, but the {entry.stored} store no longer holds it; run `chock login "
            f"--provider {login} --name {name} --replace`"
        )
    return found


def sources(layout: Layout, config: Config) -> list[Source]:
    """Every instance with where its credential would come from, by name; no store is asked for a value."""
    index = read_index(layout)
    tokens = set(FileStore(layout.tokens_path).names())
    found = []
    for name in sorted(set(index) | set(config.instances) | tokens):
        configured = config.instances.get(name)
        entry = index.get(name)
        kind: str | None
        address: str | None
        if configured is not None:
            kind, address = configured.kind, configured.address
        elif entry is not None:
            kind, address = entry.kind, entry.address
        else:
            kind = address = None
        if entry is not None:
            source: str | None = entry.stored
        elif configured is not None and configured.token is not None:
            source = CONFIG_SOURCE
        elif name in tokens:
            source = TOKENS_SOURCE
        else:
            source = None
        found.append(Source(name, kind, address, source))
    return found
