"""From an instance's kind to the thing that talks to it: the only map from kind to wire, the one place that
builds a `Provider`, and the credential check `chock login` runs before it stores a key.

The wire modules and httpx are imported only when a provider of that kind is built or a key is checked, so
`chock sessions` and the daemon's start stay fast.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from chock.providers import Provider
from chock.providers.kinds import (
    AIAND,
    ANTHROPIC,
    CREDENTIAL_KINDS,
    DEFAULT_MODELS,
    OPENAI_COMPAT,
    REPLAY,
    KindError,
    parse_kind,
)
from chock.providers.wire import Wire


def wire_for(kind: str) -> Wire:
    """The wire a kind speaks: the Messages API for `anthropic`, chat completions for `aiand` and
    `openai-compat`."""
    if kind == ANTHROPIC:
        from chock.providers import anthropic

        return anthropic.WIRE
    if kind in (AIAND, OPENAI_COMPAT):
        from chock.providers import openai

        return openai.WIRE
    wired = ", ".join(CREDENTIAL_KINDS)
    raise KindError(f"kind {kind} speaks no wire and sends no credential (the kinds that do: {wired})")


def make_provider(
    kind: str,
    address: str | None,
    model: str | None,
    credential: str | None,
    *,
    instance: str,
    retries: int | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> Provider:
    """Build the provider for one instance. `kind` may carry its address (`openai-compat=http://…/v1`); an
    `address` given apart wins over it, and a kind with an address of its own needs neither. `retries` is how
    often a call that failed before its answer began is sent again (None: `retry.DEFAULT_RETRIES`), `sleep`
    how the wait before each is waited (the session's clock; None: asyncio.sleep)."""
    try:
        kind, address = parse_kind(kind, address=address)
    except KindError as exc:
        raise KindError(f"instance '{instance}': {exc}") from None
    if kind == REPLAY:
        # The file's path travels as the address; whoever resolved the instance made it absolute against
        # config.zon's directory.
        from chock.providers.replay import ReplayProvider, entries_for, load_entries

        return ReplayProvider(entries_for(load_entries(Path(address)), None), source=f"the replay file {address}")
    import asyncio

    from chock.providers.retry import DEFAULT_RETRIES
    from chock.providers.transport import HTTPProvider

    return HTTPProvider(
        wire_for(kind),
        kind,
        address,
        model or DEFAULT_MODELS[kind],
        credential,
        instance=instance,
        retries=DEFAULT_RETRIES if retries is None else retries,
        sleep=sleep or asyncio.sleep,
    )


def check_credential(kind: str, address: str | None, credential: str) -> None:
    """`GET <address>/models` with the kind's auth headers; returns when the provider accepts the key, and
    raises ProviderError (the status and the provider's words, or the address when nothing answers) when
    not. `kind` may carry its address, as for `make_provider`."""
    kind, address = parse_kind(kind, address=address)
    wire = wire_for(kind)
    from chock.providers.transport import list_models

    list_models(wire, kind, address, credential)
