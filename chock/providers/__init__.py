"""Model providers: one small interface, one module per wire format (as httpx keeps transports apart).

A provider turns a conversation into a stream of `TextDelta`s followed by exactly one `Reply` (with a
`Retrying` before them for each attempt that failed before its answer began and is tried again). The
conversation is provider-neutral (the fold of the session log builds it); each wire module converts it.

    kinds.py      the instance kinds, their own addresses and default models, the `KIND=VALUE` reader
    models.py     what Chock knows of model families: their context windows
    failures.py   what every failure says, the same for both wires
    wire.py       what a wire format is (`Wire`), and the server-sent-event helpers both wires read with
    anthropic.py  the Messages API wire: `WIRE`, its request body and its stream's reader, no I/O
    openai.py     the chat-completions wire (`aiand`, `openai-compat`), the same way
    retry.py      which failures before an answer's first byte are tried again, and how long to wait
    lean_http.py  httpx, imported without its command-line tool
    warm.py       the HTTP client imported in a thread while a session's start waits on git and bwrap
    sse_lines.py  the lines of an event stream, split from its bytes and counted, no I/O
    transport.py  HTTP for both wires: the streamed POST (`HTTPProvider`) with its retries, and `GET /models`
    replay.py     the `replay` kind, a file of answers played back
    registry.py   kind → wire, `make_provider`, and the credential check `chock login` runs

Each module imports only modules listed above it, so none of them imports another back.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol

from chock.errors import ChockError
from chock.log.events import USAGE_FIELDS
from chock.value import Value


class TextDelta(Value):
    """Text as it arrives."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class ToolCall(Value):
    __slots__ = ("args", "call_id", "name")

    def __init__(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        self.call_id = call_id
        self.name = name
        self.args = args

    def as_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name, "args": self.args}


class Retrying(Value):
    """The call failed before its answer's first byte and is sent again after `wait_seconds`; the session logs
    it (`provider.retry`, and `usage` for what the failed attempt reported) while the provider waits."""

    __slots__ = ("attempt", "error", "status", "usage", "wait_seconds")

    def __init__(
        self, attempt: int, status: int | None, wait_seconds: float, error: str, usage: dict[str, int] | None = None
    ) -> None:
        self.attempt = attempt  # the attempt that failed, from 1
        self.status = status  # its HTTP status; None when no answer came (a connection error)
        self.wait_seconds = wait_seconds
        self.error = error  # what the failed attempt said, as a person reads it
        self.usage = usage  # what the failed attempt's stream reported, as a `usage` event's fields; None: nothing


class Reply(Value):
    """The whole answer of one model call, after its last delta. `stop_reason` is why the model stopped, in the
    provider's own word (the Messages API's `stop_reason`, chat completions' `finish_reason`; None when it gave
    none): the session hears a refusal, an answer cut at a limit and a paused turn in it (docs/log.md)."""

    __slots__ = (
        "cache_read_tokens", "cache_write_tokens", "input_tokens", "output_tokens", "stop_reason", "text", "tool_calls"
    )  # fmt: skip

    def __init__(
        self,
        text: str,
        tool_calls: list[ToolCall] | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        stop_reason: str | None = None,
    ) -> None:
        self.text = text
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_read_tokens = cache_read_tokens
        self.cache_write_tokens = cache_write_tokens
        self.stop_reason = stop_reason

    @property
    def usage(self) -> dict[str, int]:
        """What the call cost, as a `usage` event's fields."""
        return {name: getattr(self, name) for name in USAGE_FIELDS}


class ProviderError(ChockError):
    """The provider refused or failed; the message names the instance's address and status, never a key.

    `usage` is what the provider had reported of the call when it failed (the `usage` event's fields), so a
    failed call's tokens are still counted; `too_long` says the provider refused the request for its size, and
    `window` and `prompt_tokens` what it stated (its input window, the request's size; None where it did not).
    `status` is the HTTP status an error inside a stream stands for (its type's), None for any other;
    `retryable` False says that sending the call again cannot help, whatever its status (a quota used up)."""

    usage: dict[str, int] | None = None
    too_long = False
    window: int | None = None
    prompt_tokens: int | None = None
    status: int | None = None
    retryable = True


class Provider(Protocol):
    def stream(
        self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str
    ) -> AsyncGenerator[TextDelta | Retrying | Reply, None]: ...

    async def aclose(self) -> None: ...
