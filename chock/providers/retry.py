"""Which failed calls are sent again, and after how long: the policy alone, with no I/O (the transport acts on it).

Only a failure before the answer's first byte is retried: after it, what was shown would be shown twice. The
rules are the official SDKs' (anthropic-sdk-python and openai-python, `_should_retry` and
`_calculate_retry_timeout`): connection errors, 408, 409, 429 and every 5xx (Anthropic's 529 "overloaded"
among them) are retried, twice by default; a server's `x-should-retry: true|false` overrides the status; the
wait doubles from half a second up to eight, less up to a quarter of jitter so that many clients do not come
back in step, unless the server says how long to wait with `retry-after-ms` or `retry-after`, or else with the
rate-limit headers that say when the limit that refused the call resets (`RESETS`). A wait of zero, or a date
already past, says nothing: the backoff is waited, as the SDKs do (their `0 < retry_after` test). An error event
that opens a 2xx stream before any content is retried as the status its type stands for (transport,
`failures.stream_status`). A failure whose error says no attempt can help (`ProviderError.retryable`: a quota used
up) is not retried, whatever its status.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

TYPE_CHECKING = False
if TYPE_CHECKING:
    from chock.providers import ProviderError

DEFAULT_RETRIES = 2
# The SDKs' backoff: 0.5 s, 1 s, 2 s, … never more than 8 s between two attempts.
INITIAL_WAIT = 0.5
MAX_WAIT = 8.0
JITTER = 0.25  # up to this fraction of a backoff wait is taken off at random
# A server's own wait is honoured up to a minute (the SDKs' bound too). A longer one is not waited out: the
# session ends with the provider's words, which say how long, and `chock run --continue` goes on later.
RETRY_AFTER_CAP = 60.0

RETRY_STATUSES = frozenset({408, 409, 429})

# When a server sends no `retry-after`, its rate-limit headers say when each of its limits resets: OpenAI's as a
# duration (`1s`, `6m0s`, `20ms`; platform.openai.com/docs/guides/rate-limits), Anthropic's as an RFC 3339 time
# (docs.anthropic.com/en/api/rate-limits). Each reset header is paired with its limit's `remaining` one: a limit
# with some left is not what refused the call; of the others (none left, or not said) the latest reset is waited.
RESETS = (
    ("x-ratelimit-reset-requests", "x-ratelimit-remaining-requests"),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens"),
    *(
        (f"anthropic-ratelimit-{limit}-reset", f"anthropic-ratelimit-{limit}-remaining")
        for limit in ("requests", "tokens", "input-tokens", "output-tokens")
    ),
)
# A duration as OpenAI's headers write it (Go's form): numbers with units, largest first.
DURATION = re.compile(r"(?:\d+(?:\.\d*)?(?:h|ms|m|s|us|µs|ns))+")
DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(h|ms|m|s|us|µs|ns)")
UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def retryable(status: int | None, headers: Mapping[str, str] | None = None, error: ProviderError | None = None) -> bool:
    """Whether a failure with this HTTP status (None: no answer at all) is worth sending again; never one whose
    `error` says no attempt can help (`ProviderError.retryable`), whatever the server's `x-should-retry`."""
    if error is not None and not error.retryable:
        return False
    said = (headers or {}).get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    if status is None:
        return True
    return status in RETRY_STATUSES or status >= 500


def retry_after(headers: Mapping[str, str] | None, now: Callable[[], float] | None = None) -> float | None:
    """The wait a server asked for, in seconds: `retry-after-ms`, else `retry-after` as seconds or an HTTP
    date (RFC 9110 §10.2.3), else the latest reset of the rate limits that refused the call (`RESETS`); None
    when it asked for none, or for something that cannot be read."""
    if not headers:
        return None
    clock = now or time.time
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return _rate_limit_reset(headers, clock)
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - clock())


def _rate_limit_reset(headers: Mapping[str, str], now: Callable[[], float]) -> float | None:
    """The latest reset, in seconds from now, of the limits `RESETS` names that have nothing left (or do not
    say); None when no such header can be read."""
    waits = []
    for reset, remaining in RESETS:
        value, left = headers.get(reset), headers.get(remaining)
        if value is None or (left is not None and left.strip().isdigit() and int(left) > 0):
            continue
        wait = _duration(value.strip()) if reset.startswith("x-") else _until(value.strip(), now)
        if wait is not None:
            waits.append(wait)
    return max(waits, default=None)


def _duration(value: str) -> float | None:
    """Seconds of a duration such as `6m0s`, `1.5s`, `20ms`; None for anything else."""
    if not DURATION.fullmatch(value):
        return None
    return sum(float(number) * UNIT_SECONDS[unit] for number, unit in DURATION_PART.findall(value))


def _until(value: str, now: Callable[[], float]) -> float | None:
    """Seconds until an RFC 3339 time (0 for one past); None for anything else, or a time with no zone."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now())


def wait_seconds(
    attempt: int, headers: Mapping[str, str] | None = None, *, jitter: Callable[[], float] = random.random
) -> float | None:
    """How long to wait after failed attempt number `attempt` (from 1): the server's own wait when it gave one,
    else the backoff with jitter. None when the server's wait is past `RETRY_AFTER_CAP`: not worth waiting. A
    wait of zero (or a date past) is no wait asked for: coming straight back would meet the same overload."""
    asked = retry_after(headers)
    if asked:
        return asked if asked <= RETRY_AFTER_CAP else None
    backoff = min(INITIAL_WAIT * 2 ** (attempt - 1), MAX_WAIT)
    return backoff * (1 - JITTER * jitter())
