"""How each server refuses a prompt too long for its window, as its source or documentation shapes the answer
(chock/providers/failures.py cites each): `REFUSALS[shape](tokens, window, body)` is the error body such a
server answers with HTTP 400 (or the status `STATUSES` names), or None when the request fits.
`FakeProvider(refuse_as=shape)` answers with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _anthropic_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    if tokens <= window:
        return None
    message = f"prompt is too long: {tokens} tokens > {window} maximum"
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _anthropic_max_tokens_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    reserved = int(body.get("max_tokens") or 0)
    if tokens + reserved <= window:
        return None
    message = (
        f"input length and `max_tokens` exceed context limit: {tokens} + {reserved} > {window}, "
        "decrease input length or `max_tokens` and try again"
    )
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _anthropic_bytes_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    """The Messages API's 413 for a request past its size in bytes (answered with that status: `STATUSES`)."""
    if tokens <= window:
        return None
    message = "Request exceeds the maximum allowed number of bytes."
    return {"type": "error", "error": {"type": "request_too_large", "message": message}}


def _openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": "messages",
                      "code": "context_length_exceeded"}}  # fmt: skip


def _openai_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    if tokens <= window:
        return None
    return _openai_error(
        f"This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} "
        "tokens. Please reduce the length of the messages."
    )


def _openai_input_limit_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    if tokens <= window:
        return None
    return _openai_error(
        f"Input tokens exceed the configured limit of {window} tokens. Your messages resulted in {tokens} tokens. "
        "Please reduce the length of the messages."
    )


def _openai_code_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    """Only the code says it: words no pattern knows, no figure."""
    if tokens <= window:
        return None
    return _openai_error("Your input exceeds the context window of this model. Please adjust your input and try again.")


def _vllm_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    if tokens < window:
        return None
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested 0 output tokens and "
        f"your prompt contains at least {tokens} input tokens, for a total of at least {tokens} tokens. Please "
        "reduce the length of the input prompt or the number of requested output tokens. "
        f"(parameter=input_tokens, value={tokens})"
    )
    return {"error": {"message": message, "type": "BadRequestError", "param": "input_tokens", "code": 400}}


def _sglang_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    if tokens < window:
        return None
    message = f"The input ({tokens} tokens) is longer than the model's context length ({window} tokens)."
    return {"object": "error", "message": message, "type": "BadRequest", "param": None, "code": 400}


def _llama_cpp_refusal(tokens: int, window: int, body: dict[str, Any]) -> dict[str, Any] | None:
    if tokens < window:
        return None
    message = f"request ({tokens} tokens) exceeds the available context size ({window} tokens), try increasing it"
    return {"error": {"code": 400, "message": message, "type": "exceed_context_size_error",
                      "n_prompt_tokens": tokens, "n_ctx": window}}  # fmt: skip


REFUSALS: dict[str, Callable[[int, int, dict[str, Any]], dict[str, Any] | None]] = {
    "anthropic": _anthropic_refusal,
    "anthropic-max-tokens": _anthropic_max_tokens_refusal,
    "anthropic-bytes": _anthropic_bytes_refusal,
    "openai": _openai_refusal,
    "openai-input-limit": _openai_input_limit_refusal,
    "openai-code": _openai_code_refusal,
    "vllm": _vllm_refusal,
    "sglang": _sglang_refusal,
    "llama.cpp": _llama_cpp_refusal,
}

# The status a shape is answered with when it is not 400.
STATUSES = {"anthropic-bytes": 413}
