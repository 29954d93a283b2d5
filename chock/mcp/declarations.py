"""Which MCP servers a session may start (docs/mcp.md#configuration): config.zon's `.mcp`, and a project's
committed `.chock/mcp.zon`, read into `ServerSpec`s.

    .mcp = .{ .servers = .{
        .docs = .{ .command = .{ "docs-mcp", "--stdio" } },
        .tracker = .{ .url = "https://tracker.example/mcp", .credential = "tracker" },
    } }

A person writes config.zon and the project's authors write `.chock/mcp.zon`; both are checked whole when read,
and every mistake is refused naming its key path. A stdio server is an argv, never a shell string; a remote one
a Streamable HTTP URL, https unless its host is this machine. `.credential` names a `chock login` credential and
only config.zon may name one: a project's file is the agent's neighbours' writing, and a credential it could name
would be sent wherever it points. The project's file is read from the session's start commit through host git, as
AGENTS.md is (chock.session.instructions), bounded to `MAX_DECLARATION_BYTES`.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING, Any

from chock import zon
from chock.errors import Refused
from chock.value import Value

if TYPE_CHECKING:
    from chock.session.hostgit import Repo

NAME = re.compile(r"[a-z0-9-]{1,16}")
# The keys of one server's entry, in the order config.zon's KEYS and the manual give them.
SERVER_KEYS = ("command", "url", "credential", "network", "workspace", "timeout")
WORKSPACE_ACCESS = ("read", "write")
DEFAULT_TIMEOUT = 120.0
MIN_TIMEOUT, MAX_TIMEOUT = 1.0, 3600.0
CONFIG, PROJECT = "config", "project"
# Where a project declares its servers, and how large that file may be (a declaration is a few lines).
PROJECT_FILE = ".chock/mcp.zon"
MAX_DECLARATION_BYTES = 64 * 1024
LOOPBACK_NAMES = ("localhost",)
EXAMPLE_COMMAND = '.command = .{ "docs-mcp", "--stdio" }'


class DeclarationError(Refused):
    """A server entry that cannot be used: the message names its key path and what would be accepted."""


class ServerSpec(Value):
    """One declared server: a stdio `command` (argv) or a Streamable HTTP `url`, never both."""

    __slots__ = ("command", "credential", "name", "network", "origin", "timeout", "url", "workspace")

    def __init__(
        self,
        name: str,
        origin: str,
        command: tuple[str, ...] = (),
        url: str = "",
        credential: str = "",
        network: bool = False,
        workspace: str = "read",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.name = name
        self.origin = origin  # "config" | "project"
        self.command = command
        self.url = url
        self.credential = credential  # the `chock login` name (config only)
        self.network = network
        self.workspace = workspace  # "read" | "write" (write is never combined with network)
        self.timeout = timeout  # one call's, in seconds


def parse_servers(value: Any, where: str, *, origin: str) -> dict[str, ServerSpec]:
    """The servers of an `.mcp`-shaped struct (`.{ .servers = .{ … } }`); `where` is its key path (`.mcp` in
    config.zon, "" at the top of `.chock/mcp.zon`). Raises DeclarationError naming the key path of a mistake."""
    section = _struct(value, where or "the declaration", ("servers",), where)
    servers = section.get("servers", {})
    at = f"{where}.servers"
    if not isinstance(servers, dict):
        raise DeclarationError(f"{at} must be a struct of named servers, as .{{ .docs = .{{ {EXAMPLE_COMMAND} }} }}")
    return {name: _server(name, entry, f"{at}{zon.dot_name(name)}", origin) for name, entry in servers.items()}


def is_loopback(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1: a host plain http may reach (nothing crosses a network)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    import ipaddress  # only for a plain http URL: config.zon is read on every start

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin_of(url: str) -> str:
    """A URL's origin, `scheme://host:port` with the port written out: what a credential is bound to."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{shown}:{port}"


def check_url(url: str, where: str) -> str:
    """A server's URL: https, or http to this machine only; a host, and no user or password in it."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError as error:
        raise DeclarationError(f"{where}: {zon.as_written(url)} is not a URL ({error})") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise DeclarationError(
            f'{where}: {zon.as_written(url)} is not an https:// URL with a host, as "https://tracker.example/mcp"'
        )
    if parts.username is not None or parts.password is not None:
        raise DeclarationError(
            f"{where}: a URL carries no user or password (it would be logged and sent anywhere it redirects); "
            "store the credential with `chock login --provider mcp=URL --name NAME` and name it in .credential"
        )
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise DeclarationError(
            f"{where}: plain http is allowed only to this machine (localhost, 127.0.0.1, ::1), where nothing "
            f"crosses a network; {parts.hostname} needs https://"
        )
    return url


def project_declaration(repo: Repo, commit: str) -> bytes | None:
    """`.chock/mcp.zon` as `commit` holds it, or None when it holds none. A symlink or a file past
    `MAX_DECLARATION_BYTES` is refused (DeclarationError), never followed or cut."""
    entry = repo.tree_entry(commit, PROJECT_FILE)
    if entry is None:
        return None
    if not entry.regular:
        raise DeclarationError(
            f"{PROJECT_FILE} is {entry.what()} in commit {commit[:12]}, so it was not read: commit the declaration "
            "as a regular file"
        )
    if entry.size > MAX_DECLARATION_BYTES:
        raise DeclarationError(
            f"{PROJECT_FILE} is {entry.size:,} bytes in commit {commit[:12]}; a declaration may have at most "
            f"{MAX_DECLARATION_BYTES // 1024} KiB, so it was not read"
        )
    return repo.blob_head(entry.oid, MAX_DECLARATION_BYTES)


def parse_declaration(declaration: bytes, source: str) -> dict[str, ServerSpec]:
    """A project's `.chock/mcp.zon` as its servers; `source` names it in every refusal."""
    try:
        text = declaration.decode("utf-8")
    except UnicodeDecodeError:
        raise DeclarationError(f"{source}: the file is not UTF-8 text") from None
    try:
        data = zon.loads(text, source=source)
    except zon.ZonError as error:
        raise DeclarationError(str(error)) from None
    try:
        return parse_servers(data, "", origin=PROJECT)
    except DeclarationError as error:
        raise DeclarationError(f"{source}: {error}") from None


# ---- one entry -------------------------------------------------------------------------------------------


def _struct(value: Any, shown: str, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DeclarationError(f"{shown} must be a struct .{{ ... }} (got {zon.as_written(value)})")
    for key in value:
        if key not in keys:
            raise DeclarationError(f"unknown key {where}{zon.dot_name(key)} (known keys in {shown}: {', '.join(keys)})")
    return value


def _server(name: str, value: Any, where: str, origin: str) -> ServerSpec:
    if not NAME.fullmatch(name):
        raise DeclarationError(
            f"{where}: a server's name is 1 to 16 lowercase letters, digits or '-' (it becomes part of each tool's "
            "name the model sees, mcp__<server>__<tool>)"
        )
    entry = _struct(value, where, SERVER_KEYS, where)
    if ("command" in entry) == ("url" in entry):
        raise DeclarationError(
            f"{where} needs exactly one of .command (a server run here, over stdio: {EXAMPLE_COMMAND}) or .url "
            '(a remote server, over Streamable HTTP: .url = "https://tracker.example/mcp")'
        )
    fields: dict[str, Any] = {}
    if "command" in entry:
        fields["command"] = _argv(entry["command"], f"{where}.command")
        if "credential" in entry:
            raise DeclarationError(
                f"{where}.credential: a stdio server is sent no credential (it runs here, in its sandbox); "
                ".credential belongs to a server with a .url"
            )
        fields.update(_confinement(entry, where))
    else:
        fields["url"] = check_url(_string(entry["url"], f"{where}.url"), f"{where}.url")
        for key in ("network", "workspace"):
            if key in entry:
                raise DeclarationError(
                    f"{where}.{key}: a remote server (.url) runs elsewhere, in no sandbox of Chock's; .{key} "
                    "belongs to a server with a .command"
                )
        if "credential" in entry:
            if origin != CONFIG:
                raise DeclarationError(
                    f"{where}.credential: a project's declaration cannot name a credential (the project decides "
                    "where it points); name the server in your config.zon's .mcp.servers with its .credential"
                )
            fields["credential"] = _string(entry["credential"], f"{where}.credential")
    if "timeout" in entry:
        fields["timeout"] = _timeout(entry["timeout"], f"{where}.timeout")
    return ServerSpec(name=name, origin=origin, **fields)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or isinstance(value, zon.EnumLiteral):
        raise DeclarationError(f'{where} must be a string "…" (got {zon.as_written(value)})')
    if not value:
        raise DeclarationError(f"{where} must not be empty")
    return str(value)


def _argv(value: Any, where: str) -> tuple[str, ...]:
    """An argv written as a list of strings: never a shell string, which something would have to split."""
    if isinstance(value, str):
        raise DeclarationError(
            f"{where} is a string, and no shell ever reads it: write the argv as a list, as {EXAMPLE_COMMAND}"
        )
    if value == {}:
        value = []  # `.{}`: an empty list reads as an empty struct
    if not isinstance(value, list):
        raise DeclarationError(f"{where} must be a list of strings, as {EXAMPLE_COMMAND} (got {zon.as_written(value)})")
    if not value:
        raise DeclarationError(f"{where} is empty: the argv needs at least the program, as {EXAMPLE_COMMAND}")
    argv = tuple(_string(item, f"{where}[{index}]") for index, item in enumerate(value))
    for index, item in enumerate(argv):
        if "\0" in item:
            raise DeclarationError(f"{where}[{index}] holds a NUL character, which no argument can carry")
    return argv


def _confinement(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """`.network` and `.workspace` of a stdio server; writing the workspace and reaching the network never
    go together (a server could carry the workspace away, or bring anything into it)."""
    fields: dict[str, Any] = {}
    if "network" in entry:
        if not isinstance(entry["network"], bool):
            raise DeclarationError(f"{where}.network must be true or false (got {zon.as_written(entry['network'])})")
        fields["network"] = entry["network"]
    if "workspace" in entry:
        access = entry["workspace"]
        if not isinstance(access, str) or access not in WORKSPACE_ACCESS:
            raise DeclarationError(f'{where}.workspace must be "read" or "write" (got {zon.as_written(access)})')
        fields["workspace"] = str(access)
    if fields.get("workspace") == "write" and fields.get("network"):
        raise DeclarationError(
            f'{where}: .workspace = "write" cannot be combined with .network = true (a server that writes the '
            "workspace must not reach the network); drop one of them"
        )
    return fields


def _timeout(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_TIMEOUT <= value <= MAX_TIMEOUT:
        raise DeclarationError(
            f"{where} must be a number of seconds from {MIN_TIMEOUT:g} to {MAX_TIMEOUT:g} (got {zon.as_written(value)})"
        )
    return float(value)
