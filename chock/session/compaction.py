"""Compaction: before a call that would outgrow the model's context window, the model summarizes the work so
far, and the conversation starts again from that summary (docs/log.md, "Compaction").

The decision is made before every turn's call, from the request's estimated size: what the provider reported
for the last call (its input and output tokens) plus what came after, or the whole request's bytes / 4,
whichever is larger, so one huge tool output is noticed before it is sent. Past `COMPACT_AT` of the window,
the model is asked for a summary with the same system prompt and tools and the conversation as it stands (so
the provider's prompt cache serves it), and the session logs `compaction {summary, through, cut}`. The fold
then starts the conversation from that summary, followed by the latest assistant message and what came after
it, their tool outputs and notes cut to `cut` bytes; when even that would be too large, the summary covers
everything. Nothing else ever changes what was sent, so the prefix of consecutive requests stays the same
between two compactions and the cache keeps hitting. A call the provider refuses as larger than its window (any
shape of `chock.providers.failures.TOO_LONG_SHAPES`) is compacted and sent once more: a model whose window
Chock does not know, or a tokenizer that counts more tokens than bytes / 4, still goes on. The window such a
refusal teaches (the server's own when it states one, else less than the refused request) is logged as
`compaction {window, window_from: "refusal"}`, and the fold keeps it for the rest of the session, through
`--continue` and handovers, so the server is not asked to refuse again. A refused request that cannot be made
to fit ends the session with an error naming the server's window; nothing is sent a third time.
"""

from __future__ import annotations

import json
from typing import Any

from chock.config import Price
from chock.errors import ChockError
from chock.log.fold import SessionState, cut_message
from chock.providers import Provider, ProviderError
from chock.session.calls import Emit, call, record_usage
from chock.value import Value

# Compact when a request would fill this much of the window: the rest is room for the answer and for the
# turn's tool outputs, and for the error of estimating tokens from bytes.
COMPACT_AT = 0.8
# What is kept word for word after a compaction (the latest turn) may take this much of the window; past it,
# the summary covers that turn too.
KEEP_AT_MOST = 0.25
# A summary request is itself cut down to this much of the window when it is larger than `SEND_AT_MOST`.
SEND_AT_MOST = 0.85
SHRINK_TO = 0.7
# Bytes per token of the estimate: the usual figure for English and code with the providers' tokenizers.
BYTES_PER_TOKEN = 4
# The tool outputs and notes of a summary request are cut to these sizes in turn, until it fits.
SHRINK_STEPS = (4096, 1024, 256)
# The least a kept tool output is cut to, however small the window.
MIN_CUT = 512

SUMMARY_PROMPT = """Your context window is nearly full, so this conversation is about to be replaced by a summary
that you write now. Write it for yourself, to carry on the task from it alone: the task and every request the
person made, word for word; what has been done and what was found (files, functions, commands, results, errors);
the decisions made and why; what remains to be done, and what you were doing last. Be complete but brief, and
do not call any tool: answer with the summary only."""


class CallSetup(Value):
    """What every call of the session sends besides the conversation."""

    __slots__ = ("price", "provider", "system", "tools", "window")

    def __init__(
        self,
        provider: Provider,
        tools: list[dict[str, Any]],
        system: str,
        window: int | None,
        price: Price | None,
    ) -> None:
        self.provider = provider
        self.tools = tools
        self.system = system
        self.window = window  # the context window in tokens; None: never compacted
        self.price = price


def estimate(conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str) -> int:
    """A request's size in tokens, from its bytes."""
    data = json.dumps([system, tools, conversation], ensure_ascii=False, separators=(",", ":"))
    return len(data.encode("utf-8")) // BYTES_PER_TOKEN


def session_window(configured: int | None, state: SessionState) -> int | None:
    """The window the session's calls must fit: the instance's (config.zon's, else its model family's), or the
    smaller one a refusal taught, which the fold keeps (`SessionState.learned_window`)."""
    windows = [w for w in (configured, state.learned_window) if w]
    return min(windows) if windows else None


def request_size(state: SessionState, request: CallSetup) -> int:
    """The next call's size: the provider's own count of the last call plus what came after it, or the
    estimate of the whole request, whichever is larger."""
    whole = estimate(state.conversation, request.tools, request.system)
    if not state.context_tokens:
        return whole
    return max(whole, state.context_tokens + estimate(state.conversation[state.context_items :], [], ""))


async def compact_if_needed(
    state: SessionState, request: CallSetup, emit: Emit, *, refused: ProviderError | None = None
) -> None:
    """Log a compaction when the next call would pass `COMPACT_AT` of the window, or when the provider `refused`
    the call as larger than its window: that window is then the one the server stated, else at most the
    refused request's size, and the compaction aims below it."""
    size = request_size(state, request)
    window = request.window
    fields: dict[str, Any] = {}
    if refused is not None:
        counted = refused.prompt_tokens or 0
        window = min(w for w in (request.window, refused.window or max(1, size)) if w)
        fields["window_from"] = "refusal"
        # The server counted more than the estimate: aim lower by as much, or the resent request meets the same
        # refusal.
        aim = int(COMPACT_AT * window * min(1.0, size / counted)) if counted > size else int(COMPACT_AT * window)
        size = max(size, counted)
        request = request.replace(window=aim)
    elif window is None or size < COMPACT_AT * window:
        return
    # The window is the server's own when a refusal stated it, now or earlier in the session.
    servers = refused is not None or window == state.learned_window
    if len(state.conversation) < 2:
        raise _overflow(size, window, refused=servers)
    limit = request.window or window
    through, cut = _plan_kept(state, request)
    covered = state.conversation[: _index_after(state, through)]
    asked = _fit([*covered, {"role": "user", "text": SUMMARY_PROMPT}], request, limit)
    reply = await call(request.provider, asked, request.tools, request.system, emit, price=request.price,
                       purpose="compaction")  # fmt: skip
    record_usage(emit, reply.usage, request.price, "compaction")
    summary = reply.text.strip()
    if not summary:
        raise ChockError(
            "the model answered the request for a summary with no text, so the conversation could not be "
            "compacted; `chock run --continue` tries again"
        )
    fields = {"summary": summary, "through": through, "tokens": size, "window": window, **fields}
    if cut:
        fields["cut"] = cut
    emit("compaction", **fields)
    after = estimate(state.conversation, request.tools, request.system)
    if after >= limit:
        raise _overflow(after, window, refused=servers)


def _plan_kept(state: SessionState, request: CallSetup) -> tuple[int, int]:
    """(through, cut): the last event the summary covers, and the size kept tool outputs are cut to (0: none
    kept). The latest assistant message and what follows it are kept when, cut, they fit `KEEP_AT_MOST`."""
    everything = state.last_event_id, 0
    first = 1 if state.compactions else 0  # a compacted conversation starts with its summary
    latest = max((i for i, m in enumerate(state.conversation) if m["role"] == "assistant"), default=-1)
    if latest < first + 2:  # no whole exchange before the latest turn to summarize
        return everything
    window = request.window or 0
    kept = state.conversation[latest:]
    room = KEEP_AT_MOST * window * BYTES_PER_TOKEN
    cut = max(MIN_CUT, int(room / max(1, len(kept))))
    if estimate([cut_message(m, cut) for m in kept], [], "") > KEEP_AT_MOST * window:
        return everything
    return state.conversation_ids[latest] - 1, cut


def _index_after(state: SessionState, through: int) -> int:
    """How many messages of the conversation come from events up to `through`."""
    return sum(1 for event_id in state.conversation_ids if event_id <= through)


def _fit(conversation: list[dict[str, Any]], request: CallSetup, window: int) -> list[dict[str, Any]]:
    """The summary request, cut down to fit the window: long tool outputs and notes first, then the oldest
    turns after the first message (the task, or the previous summary)."""
    if estimate(conversation, request.tools, request.system) <= SEND_AT_MOST * window:
        return conversation
    budget = SHRINK_TO * window
    first, rest, last = conversation[0], conversation[1:-1], conversation[-1]
    for limit in SHRINK_STEPS:
        rest = [cut_message({**m, "note": m["role"] == "user"}, limit) for m in rest]
        if estimate([first, *rest, last], request.tools, request.system) <= budget:
            return [first, *rest, last]
    while rest and estimate([first, *rest, last], request.tools, request.system) > budget:
        # Drop the oldest turn: an assistant message with the results and notes that answer it.
        end = next((i for i, m in enumerate(rest[1:], 1) if m["role"] == "assistant"), len(rest))
        rest = rest[end:]
    return [first, *rest, last]


def _overflow(size: int, window: int, *, refused: bool = False) -> ChockError:
    """The conversation cannot be made to fit `window`: the server's own when it `refused` a request (a larger
    `.context_window` in config.zon would not help then), else the configured one."""
    if refused:
        return ChockError(
            f"the next request takes about {size:,} tokens and the server refused it: its context window holds "
            f"{window:,} tokens, and compacting the conversation cannot make the request fit; give the model a "
            "larger context on the server (llama.cpp's --ctx-size, vLLM's --max-model-len) or start a new session"
        )
    return ChockError(
        f"the next request takes about {size:,} tokens and the model's context window holds {window:,}, and "
        "compacting the conversation cannot make it smaller; set a larger .context_window for the instance in "
        "config.zon if the model has one"
    )
