"""Declared MCP servers (a placeholder of the contract's `ServerSpec`; branch mcp-config replaces it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME = re.compile(r"[a-z0-9-]{1,16}")


@dataclass(frozen=True)
class ServerSpec:
    name: str
    origin: str  # "config" | "project"
    command: tuple[str, ...] = ()  # stdio: argv (never a shell string)
    url: str = ""  # Streamable HTTP
    credential: str = ""  # the login name (config only; never in .chock/mcp.zon)
    network: bool = False
    workspace: str = "read"  # "read" | "write" (write cannot be combined with network)
    timeout: float = 120.0  # a call's timeout, seconds
