"""What Chock knows of model families: how many tokens of input each one's context window holds.

A session compacts its conversation before it outgrows the window (docs/log.md, "Compaction"). The window is
the instance's `.context_window` when config.zon sets one, else the family's here; a model Chock does not know
has none, and is never compacted unless its instance says how large its window is (a local server loads its
model with whatever context size it was started with, so no name can tell it).
"""

from __future__ import annotations

# By name prefix; the longest matching prefix wins. The providers' own model pages give these figures.
CONTEXT_WINDOWS = {
    "claude-": 200_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
}


def context_window(model: str) -> int | None:
    """The context window of `model`'s family in tokens, or None for a model Chock does not know."""
    found = [prefix for prefix in CONTEXT_WINDOWS if model.startswith(prefix)]
    return CONTEXT_WINDOWS[max(found, key=len)] if found else None
