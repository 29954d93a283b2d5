"""The names the model is given for MCP servers' tools: `mcp__<server>__<tool>`.

Providers take a tool name only when it matches `^[A-Za-z0-9_-]{1,64}$`. A name that fits is given as it is;
one that does not is mapped: each invalid character becomes `_`, and it is cut to 64. When a mapped name
collides (with a name given as it is, or another mapped one), each colliding mapped name gets `_` and a 4-hex
suffix from a hash of its server and original tool name. Names depend only on the set of tools, never on their
order, so a re-listed server keeps its names and the prompt cache holds. The log keeps both names
(`tool.call`'s `name` and `tool`).
"""

from __future__ import annotations

import hashlib
import re

LIMIT = 64
VALID = re.compile(r"[A-Za-z0-9_-]{1,64}")
INVALID = re.compile(r"[^A-Za-z0-9_-]")
SUFFIX = 5  # "_" and 4 hex digits


def plain_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, mapped to fit: invalid characters to `_`, cut to LIMIT."""
    return INVALID.sub("_", f"mcp__{server}__{tool}")[:LIMIT]


def model_names(tools: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The model's name for each (server, tool) pair: distinct, valid, and independent of the pairs' order."""
    names: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    mapped: dict[str, list[tuple[str, str]]] = {}
    for server, tool in sorted(set(tools)):
        name = f"mcp__{server}__{tool}"
        if VALID.fullmatch(name):
            names[server, tool] = name
            taken.add(name)
        else:
            mapped.setdefault(plain_name(server, tool), []).append((server, tool))
    for name, pairs in sorted(mapped.items()):
        if len(pairs) == 1 and name not in taken:
            names[pairs[0]] = name
            taken.add(name)
            continue
        for server, tool in pairs:
            salt = 0
            while True:
                suffixed = name[: LIMIT - SUFFIX] + "_" + _hex(server, tool, salt)
                if suffixed not in taken and suffixed not in mapped:
                    break
                salt += 1  # a hash collision, or a name another tool has as it is: rare, and still deterministic
            names[server, tool] = suffixed
            taken.add(suffixed)
    return names


def _hex(server: str, tool: str, salt: int) -> str:
    text = f"{server}\0{tool}" + (f"\0{salt}" if salt else "")
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:4]
