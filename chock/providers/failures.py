"""What every provider failure says, shared by both wires, so a rejected key reads the same at login and
mid-session and a cut stream reads the same whichever wire an instance speaks. Each function returns the
error for its caller to raise.

Every message names the instance (when there is one), the address, the HTTP status and the provider's own
words, and ends with what to do next. None holds the credential: the provider's words pass through `redact`
first (a lax server may echo the key it refused), and an address is shown without any user:password part.
"""

from __future__ import annotations

import json
import re
import shlex
from urllib.parse import urlsplit, urlunsplit

import httpx

from chock.providers import ProviderError
from chock.providers.kinds import DEFAULT_ADDRESSES, EXAMPLE_ADDRESS

# The provider's own message is quoted; a proxy's HTML error page is not a message, and a long one is cut.
QUOTE_LIMIT = 300
TOO_LONG = re.compile(r"prompt is too long|maximum context length|context_length_exceeded|context size", re.I)
REDACTED = "[redacted]"


def redact(text: str, credential: str | None) -> str:
    """`text` without the credential, also in the escaped forms a library quotes it in (b'…', '…')."""
    if not credential:
        return text
    forms = {credential, repr(credential)[1:-1], repr(credential.encode("utf-8", "replace"))[2:-1]}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text


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
    parts = urlsplit(address)
    if "@" not in parts.netloc:
        return address
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def describe(instance: str | None, address: str) -> str:
    """Who failed: `instance 'work' at https://…/v1`, or the bare address for login's check."""
    shown = shown_address(address)
    return f"instance '{instance}' at {shown}" if instance else shown


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
    words = " ".join(str(words).split())
    return words if len(words) <= QUOTE_LIMIT else words[:QUOTE_LIMIT] + "…"


def login_hint(kind: str, address: str, instance: str | None) -> str:
    """The command that stores a (new) credential for this instance."""
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
    retry_after: str | None = None,
) -> ProviderError:
    """A non-2xx answer, as a person reads it: who, the status and the provider's words, then what to do."""
    words = provider_words(body, credential)
    detail = f"HTTP {status}: {words}" if words else f"HTTP {status}"
    who = describe(instance, address)
    if status == 401:
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
        wait = f"wait {retry_after} s" if retry_after and retry_after.isdigit() else "wait a little"
        text = f"{who}: rate limited ({detail}); {wait} and try again"
    elif status >= 500:
        text = f"{who}: the provider failed ({detail}); try again later"
    elif too_long(status, words):
        text = f"{who}: the request is larger than the model's context window ({detail})"
    else:
        text = f"{who}: the provider rejected the request ({detail})"
    error = ProviderError(redact(text, credential))
    error.too_long = too_long(status, words)
    return error


def too_long(status: int, words: str | None) -> bool:
    """The provider refused a request for its size in tokens, in the words each documents for it: the Messages
    API's "prompt is too long", OpenAI's `context_length_exceeded` ("maximum context length"), llama.cpp's
    "context size"."""
    return status in (400, 413) and bool(words) and TOO_LONG.search(words or "") is not None


def incomplete_failure(address: str, instance: str | None, reason: str | None = None) -> ProviderError:
    prefix = f"instance '{instance}': " if instance else ""
    because = f" ({reason})" if reason else ""
    return ProviderError(
        f"{prefix}the response from {shown_address(address)} ended before it was complete{because}; try again"
    )


def stream_failure(address: str, instance: str | None, words: str) -> ProviderError:
    """An error the provider reported inside a stream that had already begun."""
    return ProviderError(
        f"{describe(instance, address)}: the provider failed during the response ({words}); try again later"
    )


def not_an_api_stream(who: str, stream: str, payload: str) -> ProviderError:
    """A `data:` line that is not JSON came from something other than the API."""
    return ProviderError(f"{who}: the response is not {stream} (it sent {payload[:80]!r}); check the address")


def broken_tool_call(who: str, name: str, *, limit: str | None, what: str = "JSON") -> ProviderError:
    """A tool call whose arguments are not `what`: cut where the answer reached its output `limit`, if it did
    (then smaller steps are the remedy), or simply malformed."""
    if limit:
        return ProviderError(
            f"{who}: the answer reached {limit} in the middle of the tool call {name}; ask for smaller steps"
        )
    return ProviderError(f"{who}: the arguments of the tool call {name} are not {what}")


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
