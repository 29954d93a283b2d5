"""What Chock knows of model families: how many tokens of input each one accepts (the provider's documented
input limit, which for some families is less than the context window: the rest is kept for the answer).

A session compacts its conversation before it outgrows the window (docs/log.md, "Compaction"). The window is
the instance's `.context_window` when config.zon sets one, else the family's here; a model Chock does not know
has none, and is never compacted unless its instance says how large its window is (a local server loads its
model with whatever context size it was started with, so no name can tell it).
"""

from __future__ import annotations

# By name prefix; the longest matching prefix wins. The providers' own model pages give these figures. A window
# a provider's refusal states is learned as the session goes (chock.session.compaction, `window_from`).
CONTEXT_WINDOWS = {
    "claude-": 200_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4.1": 1_047_576,
    # A 400,000-token context of which 128,000 are kept for the answer: 272,000 of input, the figure its refusal
    # names ("Input tokens exceed the configured limit of 272000 tokens").
    "gpt-5": 272_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
}


def context_window(model: str) -> int | None:
    """The context window of `model`'s family in tokens, or None for a model Chock does not know."""
    found = [prefix for prefix in CONTEXT_WINDOWS if model.startswith(prefix)]
    return CONTEXT_WINDOWS[max(found, key=len)] if found else None
