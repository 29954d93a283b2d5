"""Instance kinds (SPEC §5 "Providers"): which wire a kind speaks, its own address and its default model.

`make_provider` is the one place that turns a resolved instance into a `Provider`; the wire modules are
imported only when a provider of that kind is built, so `chock sessions` and the daemon's start stay fast.
"""

from __future__ import annotations

from pathlib import Path

from chock.errors import Refused
from chock.providers import Provider

ANTHROPIC = "anthropic"
AIAND = "aiand"
OPENAI_COMPAT = "openai-compat"
REPLAY = "replay"

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

KINDS = (ANTHROPIC, AIAND, OPENAI_COMPAT, REPLAY)


class UnknownKind(Refused):
    """The instance's kind is not one Chock speaks, or lacks the address it needs: refused before starting."""


def split_kind(kind: str, address: str | None = None) -> tuple[str, str | None]:
    """`KIND=VALUE` means kind KIND at address VALUE (SPEC §5); an explicit address wins over VALUE."""
    name, sep, value = kind.partition("=")
    if sep and address is None:
        address = value
    return name, address


def default_address(kind: str) -> str | None:
    return DEFAULT_ADDRESSES.get(kind)


def make_provider(
    kind: str, address: str | None, model: str | None, credential: str | None, *, instance: str
) -> Provider:
    """Build the provider for one instance. `kind` may carry its address (`openai-compat=http://…/v1`)."""
    kind, address = split_kind(kind, address)
    if kind == REPLAY:
        # The lead's module (chock/providers/replay.py); the file's path travels as the address. A relative
        # path must already be resolved against config.zon's directory by whoever resolved the instance.
        from chock.providers.replay import ReplayProvider, load_entries, parent_entries

        if not address:
            raise UnknownKind(f"instance '{instance}': kind replay needs a file, as replay=<path>")
        return ReplayProvider(parent_entries(load_entries(Path(address))), source=f"the replay file {address}")
    if kind not in KINDS:
        raise UnknownKind(
            f"instance '{instance}': unknown kind {kind!r}; the kinds are anthropic, aiand, "
            "openai-compat=<url> and replay=<path>"
        )
    address = address or default_address(kind)
    if address is None:
        raise UnknownKind(
            f"instance '{instance}': kind {kind} needs an address, as {kind}=<url> "
            "(e.g. openai-compat=http://127.0.0.1:5000/v1)"
        )
    if kind == ANTHROPIC:
        from chock.providers.anthropic import AnthropicProvider

        return AnthropicProvider(address, model, credential, instance=instance)
    from chock.providers.openai import OpenAIProvider

    return OpenAIProvider(address, model, credential, instance=instance, kind=kind)
