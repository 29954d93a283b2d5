"""What every provider failure says, shared by both wires, so a rejected key reads the same at login and
mid-session and a cut stream reads the same whichever wire an instance speaks. Each function returns the
error for its caller to raise.

Every message names the instance (when there is one), the address, the HTTP status and the provider's own
words, and ends with what to do next. None holds the credential: the provider's words pass through `redact`
first (a lax server may echo the key it refused), and an address is shown without any user:password part.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from chock.providers import ProviderError
from chock.providers.kinds import DEFAULT_ADDRESSES, EXAMPLE_ADDRESS, without_userinfo
from chock.providers.lean_http import httpx
from chock.value import Value

# The provider's own message is quoted; a proxy's HTML error page is not a message, and a long one is cut.
QUOTE_LIMIT = 300
REDACTED = "[redacted]"
# Statuses a refusal for the prompt's size comes with: 400 everywhere, 413 from a proxy that says it in words.
TOO_LONG_STATUSES = frozenset({400, 413})


class TooLongShape(Value):
    """One documented way a server refuses a prompt for its size in tokens: an error object field that says so
    (`field`, `value`), or the message's words (`words`, whose named groups read what the server states:
    `limit` its context window, `output` the part of it reserved for the answer, `prompt` the request's size)."""

    __slots__ = ("field", "source", "value", "words")

    def __init__(self, source: str, words: str | None = None, field: str = "", value: str = "") -> None:
        self.source = source
        self.words = words  # a pattern, matched with WORDS_FLAGS
        self.field = field
        self.value = value


# How a shape's words match: case aside, `.` taking newlines too. Each pattern is compiled at its first use (re
# keeps it), not when a session's start imports this module.
WORDS_FLAGS = re.I | re.S


# Every refusal Chock hears as "too long", each with where its shape is documented. A server's window is read
# from the first shape that states it; a shape that states none still leads to compaction.
TOO_LONG_SHAPES = (
    # Anthropic, docs.anthropic.com/en/api/errors (invalid_request_error, 400): "prompt is too long: 208310
    # tokens > 200000 maximum".
    TooLongShape(
        "anthropic: prompt is too long", r"prompt is too long(?::\s*(?P<prompt>\d+) tokens > (?P<limit>\d+))?"
    ),
    # Anthropic, docs.anthropic.com/en/docs/build-with-claude/context-windows: newer models refuse input plus
    # `max_tokens` over the window: "input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000,
    # decrease input length or `max_tokens` and try again".
    TooLongShape(
        "anthropic: input length and max_tokens exceed context limit",
        (
            r"input length and `?max_tokens`? exceed context limit"
            r"(?::\s*(?P<prompt>\d+) \+ (?P<output>\d+) > (?P<limit>\d+))?"
        ),
    ),
    # Anthropic, docs.anthropic.com/en/api/errors (request_too_large, 413): "Request exceeds the maximum allowed
    # number of bytes." — a request past the API's size in bytes (32 MB for the Messages API), which compacting the
    # conversation brings under it too.
    TooLongShape("anthropic: type request_too_large", field="type", value="request_too_large"),
    # OpenAI, platform.openai.com/docs/guides/error-codes: the error object's `code: "context_length_exceeded"`,
    # whatever its message says.
    TooLongShape("openai: code context_length_exceeded", field="code", value="context_length_exceeded"),
    # OpenAI's newer input limit (gpt-5: 272,000 input tokens): "Input tokens exceed the configured limit of
    # 272000 tokens. Your messages resulted in 509178 tokens. Please reduce the length of the messages."
    TooLongShape(
        "openai: input tokens exceed the configured limit",
        r"input tokens exceed the configured limit of (?P<limit>\d+) tokens(?:.*?resulted in (?P<prompt>\d+))?",
    ),
    # OpenAI's classic words, which vLLM repeats (vllm/entrypoints/renderer.py, serving_engine.py): "This
    # model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens" /
    # "However, your request has 40000 input tokens" / "However, you requested 0 output tokens and your prompt
    # contains at least 40961 input tokens, for a total of at least 40961 tokens".
    TooLongShape(
        "openai, vllm: maximum context length is N tokens",
        (
            r"maximum context length is (?P<limit>\d+) tokens"
            r"(?:.*?(?:requested (?P<output>\d+) output tokens.*?)?"
            r"(?:resulted in|request has|contains(?: at least)?) (?P<prompt>\d+))?"
        ),
    ),
    # vLLM's engine (vllm/v1/engine/processor.py, _validate_model_input): "The decoder prompt (length 8825) is
    # longer than the maximum model length of 8192."
    TooLongShape(
        "vllm: prompt is longer than the maximum model length",
        r"prompt \(length (?P<prompt>\d+)\) is longer than the maximum model length of (?P<limit>\d+)",
    ),
    # SGLang (python/sglang/srt/managers/tokenizer_manager.py, _validate_one_request), in its top-level
    # ErrorResponse: "The input (N tokens) is longer than the model's context length (M tokens)." and
    # "Requested token count exceeds the model's maximum context length of M tokens. You requested a total of
    # T tokens: N tokens from the input messages and X tokens for the completion."
    TooLongShape(
        "sglang: the input is longer than the model's context length",
        r"input \((?P<prompt>\d+) tokens\) is longer than the model's context length \((?P<limit>\d+) tokens\)",
    ),
    TooLongShape(
        "sglang: requested token count exceeds the model's maximum context length",
        (
            r"exceeds the model's maximum context length of (?P<limit>\d+) tokens"
            r"(?:.*?(?P<prompt>\d+) tokens from the input messages and (?P<output>\d+) tokens for the completion)?"
        ),
    ),
    # llama.cpp's server (tools/server/server-context.cpp, ERROR_TYPE_EXCEED_CONTEXT_SIZE; server-task.cpp adds
    # `n_prompt_tokens` and `n_ctx` to the error object): type "exceed_context_size_error", "request (4476
    # tokens) exceeds the available context size (4096 tokens), try increasing it"; older builds say "the
    # request exceeds the available context size, try increasing it".
    TooLongShape("llama.cpp: type exceed_context_size_error", field="type", value="exceed_context_size_error"),
    TooLongShape(
        "llama.cpp: exceeds the available context size",
        r"(?:\((?P<prompt>\d+) tokens\) )?exceeds the available context size(?: \((?P<limit>\d+) tokens\))?",
    ),
)


class TooLong(Value):
    """A refusal for the prompt's size: the input window the server stated (its context less what it reserved
    for the answer), and the prompt's size as it counted it; None where it did not say."""

    __slots__ = ("prompt", "window")

    def __init__(self, window: int | None, prompt: int | None) -> None:
        self.window = window
        self.prompt = prompt


def _quoted_forms(credential: str) -> list[str]:
    """The forms a credential is quoted in, longest first: as it is, as Python's repr writes it (of text and of
    bytes), and as a JSON text does (`"` and `\\` escaped, `/` as it is, as `\\/` or as `\\u002f`)."""
    escaped = json.dumps(credential)[1:-1]
    forms = {credential, repr(credential)[1:-1], repr(credential.encode("utf-8", "replace"))[2:-1], escaped}
    forms |= {escaped.replace("/", "\\/"), escaped.replace("/", "\\u002f")}
    return sorted(forms, key=len, reverse=True)


def redact(text: str, credential: str | None) -> str:
    """`text` without the credential, in any form it is quoted in (`_quoted_forms`)."""
    for form in _quoted_forms(credential) if credential else ():
        text = text.replace(form, REDACTED)
    return text


def redact_json(data: bytes, credential: str | None) -> bytes:
    """`redact` of a JSON text as bytes: what a server that echoes the key in its answer sends."""
    for form in _quoted_forms(credential) if credential else ():
        data = data.replace(form.encode("utf-8", "replace"), REDACTED.encode())
    return data


def unusable_credential(kind: str, address: str, instance: str | None) -> ProviderError:
    """A key no HTTP header can carry, refused before it is sent, and not quoted."""
    who = describe(instance, address)
    again = (
        f"run `{login_hint(kind, address, instance)}` to store it again" if instance else "check the key and try again"
    )
    return ProviderError(
        f"{who}: the credential holds characters no HTTP header can carry (a space, a line break or a "
        f"non-ASCII letter); {again}"
    )


def shown_address(address: str) -> str:
    """The address as messages show it: without a user:password part, should someone have written one."""
    return without_userinfo(address)


def describe(instance: str | None, address: str) -> str:
    """Who failed: `instance 'work' at https://…/v1`, or the bare address for login's check."""
    shown = shown_address(address)
    return f"instance '{instance}' at {shown}" if instance else shown


def error_object(body: bytes | str, credential: str | None = None) -> dict[str, Any] | None:
    """The error object of an error answer or event: `error` on both wires (and llama.cpp, vLLM), or the body
    itself when it is one (SGLang's and older vLLM's top-level `{"object": "error", "message": …}`)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(redact(text, credential))
    except (ValueError, RecursionError):  # not JSON, or nested deeper than json follows: no error object
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        return error
    return data if isinstance(data.get("message"), str) else None


def provider_words(body: bytes | str, credential: str | None) -> str | None:
    """The provider's own error message from a response body (both wires nest it as `error.message`)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = redact(text, credential).strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    except RecursionError:  # JSON nested deeper than json follows: no words of the provider's, and not quoted
        return None
    words: object = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            words = error.get("message") or error.get("type") or error.get("code")
        elif isinstance(error, str):
            words = error
        else:
            words = data.get("message") or data.get("detail")
    elif data is None and not text.startswith("<"):
        words = text
    if not words:
        return None
    words = redact(" ".join(str(words).split()), credential)  # a JSON escape hid it from the first look
    return words if len(words) <= QUOTE_LIMIT else words[:QUOTE_LIMIT] + "…"


def login_hint(kind: str, address: str, instance: str | None) -> str:
    """The command that stores a (new) credential for this instance."""
    import shlex  # for a refusal: a session's start imports only what its first request uses

    own = DEFAULT_ADDRESSES.get(kind)
    provider = kind if own is not None and own == address.rstrip("/") else f"{kind}={shown_address(address)}"
    name = f" --name {shlex.quote(instance)}" if instance and instance != kind else ""
    return f"chock login --provider {shlex.quote(provider)}{name}"


def status_failure(
    status: int,
    body: bytes | str,
    *,
    kind: str,
    address: str,
    credential: str | None,
    instance: str | None = None,
    wait: float | None = None,
) -> ProviderError:
    """A non-2xx answer, as a person reads it: who, the status and the provider's words, then what to do. How
    long a rate limit asks to wait is `wait`, as the caller read it from the answer's headers (`retry.retry_after`:
    their retry-after, else the reset of the limit that refused the call)."""
    words = provider_words(body, credential)
    return _failure(
        status,
        body,
        f"HTTP {status}: {words}" if words else f"HTTP {status}",
        kind=kind,
        address=address,
        credential=credential,
        instance=instance,
        wait=wait,
    )


def _failure(
    status: int,
    body: bytes | str,
    detail: str,
    *,
    kind: str,
    address: str,
    credential: str | None,
    instance: str | None,
    wait: float | None = None,
) -> ProviderError:
    """The error for a failure with this HTTP status, whether an answer's or an error event's (`detail`: the
    status and the provider's words), each saying what to do next; marked as a refusal for size when it is one,
    and as not worth sending again when the account's quota is used up."""
    refusal = too_long(status, body, credential)
    quota = quota_used_up(error_object(body, credential))
    who = describe(instance, address)
    if quota:
        text = (
            f"{who}: the account's quota or credit is used up ({detail}); check its plan and billing with the "
            "provider: sending the request again cannot help until then"
        )
    elif status == 401:
        if not credential:
            text = (
                f"{who}: the provider wants a credential and none was sent ({detail}); "
                f"run `{login_hint(kind, address, instance)}` to store one"
            )
        elif instance is None:
            text = f"{who}: the credential was rejected ({detail}); check the key and try again"
        else:
            text = (
                f"{who}: the credential was rejected ({detail}); "
                f"run `{login_hint(kind, address, instance)}` to store a new one"
            )
    elif status == 403:
        text = f"{who}: the request was refused ({detail}); the credential may not have access to this model"
    elif status == 404:
        example = DEFAULT_ADDRESSES.get(kind, EXAMPLE_ADDRESS)
        text = (
            f"{who}: not found ({detail}); check the address (a versioned base URL such as {example}) "
            "and the model name"
        )
    elif status == 429:
        # A wait past any a server means (a year; `inf`) is said as none: only a number a person can act on.
        waited = f"wait {math.ceil(wait)} s" if wait and wait < MOST_SAID_WAIT else "wait a little"
        text = f"{who}: rate limited ({detail}); {waited} and try again"
    elif status >= 500:
        text = f"{who}: the provider failed ({detail}); try again later"
    elif refusal is not None:
        stated = f", which holds {refusal.window:,} tokens by the server's own account" if refusal.window else ""
        text = f"{who}: the request is larger than the model's context window{stated} ({detail})"
    else:
        text = f"{who}: the provider rejected the request ({detail})"
    error = ProviderError(redact(text, credential))
    error.retryable = not quota
    return _with_refusal(error, refusal)


# The longest wait a rate limit's message says, in seconds: a year.
MOST_SAID_WAIT = 365 * 24 * 3600

# The error codes and types that say the account's quota or credit is used up: waiting does not bring it back, so
# such a failure is never sent again, and says so. OpenAI's 429 `insufficient_quota`
# (platform.openai.com/docs/guides/error-codes), the Messages API's `billing_error` (docs.anthropic.com/en/api/errors).
QUOTA_USED_UP = frozenset({"insufficient_quota", "billing_error"})


def quota_used_up(error: dict[str, Any] | None) -> bool:
    """Whether an error object says the account's quota or credit is used up (its `code` or its `type`)."""
    said = (error.get("code"), error.get("type")) if error else ()
    return any(isinstance(word, str) and word in QUOTA_USED_UP for word in said)


def _with_refusal(error: ProviderError, refusal: TooLong | None) -> ProviderError:
    """`error`, marked as a refusal for the prompt's size with what the server stated, when it is one."""
    if refusal is not None:
        error.too_long = True
        error.window = refusal.window
        error.prompt_tokens = refusal.prompt
    return error


def too_long(status: int, body: bytes | str, credential: str | None = None) -> TooLong | None:
    """The refusal of a request for its size in tokens, in any shape of `TOO_LONG_SHAPES`; None for any other
    answer. What the server stated is read from the error object's own numbers first (llama.cpp's `n_ctx`),
    else from the shape's words."""
    if status not in TOO_LONG_STATUSES:
        return None
    error = error_object(body, credential) or {}
    message = error.get("message")
    words = message if isinstance(message, str) else provider_words(body, credential) or ""
    matched = False
    found: dict[str, int] = {}
    for shape in TOO_LONG_SHAPES:
        if shape.field:
            hit = str(error.get(shape.field, "")) == shape.value
            groups: dict[str, str | None] = {}
        else:
            match = re.search(shape.words, words, WORDS_FLAGS) if shape.words is not None else None
            hit = match is not None
            groups = match.groupdict() if match is not None else {}
        if not hit:
            continue
        matched = True
        for name, value in groups.items():
            if value is not None and name not in found:
                found[name] = int(value)
    if not matched:
        return None
    limit = _stated(error, "n_ctx") or found.get("limit")
    prompt = _stated(error, "n_prompt_tokens") or found.get("prompt")
    output = found.get("output", 0)
    window = limit - output if limit and 0 < output < limit else limit
    return TooLong(window or None, prompt or None)


def _stated(error: dict[str, Any], name: str) -> int | None:
    value = error.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def incomplete_failure(address: str, instance: str | None, reason: str | None = None) -> ProviderError:
    prefix = f"instance '{instance}': " if instance else ""
    because = f" ({reason})" if reason else ""
    return ProviderError(
        f"{prefix}the response from {shown_address(address)} ended before it was complete{because}; try again"
    )


def oversized_answer(address: str, instance: str | None, limit: int) -> ProviderError:
    prefix = f"instance '{instance}': " if instance else ""
    return ProviderError(
        f"{prefix}the model's answer from {shown_address(address)} passed {limit // (1024 * 1024)} MiB, the most "
        "one answer may take, and was not read further; `chock run --continue` asks again (a tool call that "
        "large is better written to a file in steps)"
    )


# What an error event inside a stream stands for, as the HTTP status its type is answered with before a stream
# begins: the Messages API's error types (docs.anthropic.com/en/api/errors), OpenAI's rate-limit code and
# server error type, llama.cpp's unavailable type (tools/server/server-common.cpp, format_error_response).
# llama.cpp and vLLM put the status itself in the error object's `code`, which is read first.
STREAM_ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "unavailable_error": 503,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def stream_status(error: dict[str, Any] | None) -> int | None:
    """The HTTP status an in-stream error object stands for; None when it names none Chock knows."""
    if not error:
        return None
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return code
    for name in ("type", "code"):
        status = STREAM_ERROR_STATUSES.get(str(error.get(name, "")))
        if status is not None:
            return status
    return None


def stream_failure(
    address: str, instance: str | None, payload: str, credential: str | None, kind: str
) -> ProviderError:
    """An error the provider reported inside a stream (`payload`: the event's JSON, or a line of words). It
    carries the HTTP status it stands for (`status`), so one that arrives before any content can be sent again
    as that status would be, and says what to do as that status's answer would (`_failure`): a rate limit to wait
    out, a request rejected, a refusal for size, a quota used up; a failure of the provider's, to try again."""
    found = error_object(payload)
    status = stream_status(found)
    words = provider_words(payload, credential) or redact(payload, credential) or "an error with no message"
    if quota_used_up(found) or (status is not None and status < 500):
        detail = f"during the response: {words}"
        error = _failure(status or 0, payload, detail, kind=kind, address=address, credential=credential,
                         instance=instance)  # fmt: skip
    else:
        error = ProviderError(
            f"{describe(instance, address)}: the provider failed during the response ({words}); try again later"
        )
    error.status = status
    return error


def not_an_api_stream(who: str, stream: str, payload: str, credential: str | None) -> ProviderError:
    """A `data:` line that is not JSON (or is nested deeper than any of the API's) came from something other
    than the API."""
    quoted = redact(payload, credential)[:80]
    return ProviderError(f"{who}: the response is not {stream} (it sent {quoted!r}); check the address")


def malformed_event(who: str, stream: str, what: str) -> ProviderError:
    """An event whose JSON holds a value of a type its wire never sends where the reader reads it (`what` says
    which): not the API's answer, whatever stands at the address."""
    return ProviderError(
        f"{who}: the response is not {stream}: {what}; check that the address is the API's versioned base URL, "
        "or try again later"
    )


# How an error names a JSON value's type: what a reader found, and what the wire says it is.
JSON_KINDS = ((bool, "true or false"), (str, "a string"), (int, "a whole number"), (float, "a number"),
              (list, "an array"), (dict, "an object"), (type(None), "null"))  # fmt: skip


def json_kind(found: object) -> str:
    """The JSON type of a value (or of a Python type), in words."""
    for kind, words in JSON_KINDS:
        if found is kind or isinstance(found, kind):
            return words
    return type(found).__name__


def broken_tool_call(who: str, name: str, *, limit: str | None, what: str = "not JSON") -> ProviderError:
    """A tool call whose arguments are `what` (not JSON, not an object): cut where the answer reached its output
    `limit`, if it did (then smaller steps are the remedy), or simply malformed."""
    if limit:
        return ProviderError(
            f"{who}: the answer reached {limit} in the middle of the tool call {name}; ask for smaller steps"
        )
    return ProviderError(f"{who}: the arguments of the tool call {name} are {what}")


def not_an_event_stream(content_type: str | None, address: str, instance: str | None) -> ProviderError:
    """A 2xx answer that is not server-sent events came from something other than the API (a web page, a
    proxy); waiting for its end would only report a cut stream."""
    return ProviderError(
        f"{describe(instance, address)}: the answer is {content_type or 'untyped'}, not an event stream; "
        "check that the address is the API's versioned base URL"
    )


def not_a_model_list(address: str) -> ProviderError:
    """A 2xx answer to `GET /models` that is not the API's listing: the address is not the API's."""
    return ProviderError(
        f"{describe(None, address)}: the answer to GET /models is not the API's list of models; "
        "check that the address is the API's versioned base URL"
    )


def transport_failure(
    exc: httpx.HTTPError,
    *,
    address: str,
    instance: str | None,
    credential: str | None,
    connect_timeout: float,
    read_timeout: float,
) -> ProviderError:
    """No HTTP answer at all: refused, unreachable, silent, or cut off."""
    who = describe(instance, address)
    # A header value the HTTP library refuses is quoted in its message, and that value may be the key.
    reason = redact(str(exc), credential) or type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout):
        return ProviderError(f"{who}: no connection within {connect_timeout:g} s; check the address and network")
    if isinstance(exc, httpx.TimeoutException):
        return ProviderError(f"{who}: nothing arrived for {read_timeout:g} s; gave up waiting for the response")
    if isinstance(exc, httpx.ConnectError):
        return ProviderError(
            f"{who}: cannot connect ({reason}); check that the server is running and the address is right"
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return incomplete_failure(address, instance, reason)
    return ProviderError(f"{who}: the request failed ({reason})")


def _span(seconds: float) -> str:
    return f"{seconds / 60:g} minutes" if seconds >= 60 else f"{seconds:g} s"


def overdue_answer(address: str, instance: str | None, seconds: float) -> ProviderError:
    """A call that went on past the most one may take as a whole (a stream kept alive by pings or comments, or
    headers trickled, never finishing), however often something arrived."""
    return ProviderError(
        f"{describe(instance, address)}: the call went on past {_span(seconds)}, the most one call may take, and "
        "was given up; `chock run --continue` asks again"
    )


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit // 1024:,} KiB"


def oversized_model_list(address: str, limit: int) -> ProviderError:
    """A 2xx answer to `GET /models` past `limit` bytes: not read further, and not the API's listing."""
    return ProviderError(
        f"{describe(None, address)}: the answer to GET /models passed {_size(limit)} and is not the API's "
        "list of models; check that the address is the API's versioned base URL"
    )


def overdue_check(address: str, seconds: float) -> ProviderError:
    """Login's `GET /models` that went on past the most it may take as a whole."""
    return ProviderError(
        f"{describe(None, address)}: the answer to GET /models went on past {_span(seconds)} and was given up; "
        "check the address and the network, then try again"
    )


def unreadable_answer(who: str, line: str | None, credential: str | None) -> ProviderError:
    """An event of a stream the wire's reader cannot make sense of (`line`; None: the events read, but they do
    not make an answer) came from something other than the API."""
    what = "its events do not make an answer"
    if line is not None:
        what = f"an event it sent cannot be read: {redact(line, credential)[:80]!r}"
    return ProviderError(f"{who}: the response is not the API's ({what}); check the address")
