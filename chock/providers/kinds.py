"""The instance kinds Chock speaks, each kind's own address and default model, and the one reader of
`KIND` / `KIND=VALUE` that config.zon, `chock login --provider` and the registry all use.

`KIND=VALUE` means kind KIND at address VALUE: a versioned base URL (`openai-compat=http://127.0.0.1:5000/v1`),
or for `replay` the file to play back. Only the first `=` splits, so a URL may hold more. This module imports
nothing heavy: config.zon is read on every start.
"""

from __future__ import annotations

from pathlib import Path

from chock import zon
from chock.errors import Refused

# A URL's user:password part, wherever one stands in a text (a `.kind`'s value, an address): `without_userinfo`.
_USERINFO = r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@"  # to the authority's last `@`, as URL parsers read it


def without_userinfo(text: str) -> str:
    """`text` with any URL's user:password part shown as `***`, as every message shows an address."""
    if "@" not in text:
        return text
    import re

    return re.sub(_USERINFO, r"\1***@", text)


ANTHROPIC = "anthropic"
AIAND = "aiand"
OPENAI_COMPAT = "openai-compat"
REPLAY = "replay"

KINDS = (ANTHROPIC, AIAND, OPENAI_COMPAT, REPLAY)
# The kinds that send a credential; replay reads a file and sends nothing anywhere.
CREDENTIAL_KINDS = (ANTHROPIC, AIAND, OPENAI_COMPAT)

# Not an instance kind: what `chock login --provider mcp=URL` stores, a credential for a remote MCP server
# (docs/mcp.md#credentials), its index entry's address the URL's origin. No session talks to it as a model.
MCP_SERVER = "mcp"

# A kind's own address. `openai-compat` has none: it is always `openai-compat=<url>`.
DEFAULT_ADDRESSES = {
    ANTHROPIC: "https://api.anthropic.com/v1",
    AIAND: "https://api.aiand.com/v1",
}

# The model asked for when the instance names none. A local llama.cpp server serves whatever it loaded and
# ignores the name, so `openai-compat` sends a placeholder rather than guessing.
DEFAULT_MODELS = {
    ANTHROPIC: "claude-sonnet-4-5",
    AIAND: "default",
    OPENAI_COMPAT: "default",
}

# An address is a versioned base URL, so every kind but replay takes an http(s) URL as its VALUE.
URL_SCHEMES = ("http://", "https://")
# What an address looks like, for a kind that has none of its own.
EXAMPLE_ADDRESS = "http://127.0.0.1:5000/v1"


class KindError(Refused):
    """A kind Chock does not speak, or a VALUE it cannot use: refused before anything starts."""


def parse_kind(text: str, *, address: str | None = None, base_dir: Path | None = None) -> tuple[str, str]:
    """`KIND` or `KIND=VALUE` as (kind, the address to use): `("anthropic", "https://api.anthropic.com/v1")`,
    `("replay", "/abs/demo.jsonl")`. An `address` given apart (config.zon's `.address`) wins over VALUE."""
    kind, value = split_kind(text)
    return kind, kind_address(kind, value if address is None else address, base_dir=base_dir)


def split_kind(text: str) -> tuple[str, str | None]:
    """`KIND` or `KIND=VALUE` as (kind, VALUE or None), the kind checked; VALUE is not looked at."""
    kind, equals, value = text.partition("=")
    if kind not in KINDS:
        raise KindError(f"unknown instance kind {zon.as_written(kind)} (kinds: {', '.join(KINDS)})")
    if equals and not value:
        raise KindError(f"{kind}= needs a value after '=' (as in {example(kind)})")
    return kind, value if equals else None


def kind_address(kind: str, value: str | None, *, base_dir: Path | None = None) -> str:
    """The address a kind's VALUE names: a URL as given, the kind's own address when there is no VALUE, a
    replay path made absolute against `base_dir` (config.zon's directory) or else the current directory, so
    that it never depends on where a later step happens to run."""
    if kind == REPLAY:
        if value is None:
            raise KindError(f"replay needs the file to replay, as in {example(kind)}")
        base = base_dir if base_dir is not None else Path.cwd()
        return str((base / value).absolute())  # `/` keeps an absolute VALUE as it is
    if value is None:
        if kind not in DEFAULT_ADDRESSES:
            raise KindError(f"{kind} has no default address: give one, as in {example(kind)}")
        return DEFAULT_ADDRESSES[kind]
    if not value.startswith(URL_SCHEMES):
        raise KindError(f"{kind} address {zon.as_written(value)} is not an http:// or https:// URL")
    return value


def example(kind: str) -> str:
    """`KIND=VALUE` as a person would write it for `kind`."""
    if kind == REPLAY:
        return "replay=demo.jsonl"
    return f"{kind}={DEFAULT_ADDRESSES.get(kind, EXAMPLE_ADDRESS)}"
