"""httpx, imported without its command-line tool.

Debian's httpx (0.23) imports `httpx._main` from its `__init__` whenever rich, click and pygments are installed,
which costs a session's start 100–180 ms for a tool it never runs. Its `__init__` falls back to a stub `main`
when that import fails, so the first import of httpx here marks `httpx._main` as absent (`None` in
`sys.modules`, which makes the import raise ImportError) and then takes the mark away again: httpx itself is
untouched, and a later `import httpx._main` works. Every module of Chock that uses httpx imports it from here.
"""

from __future__ import annotations

import sys

_CLI = "httpx._main"

if "httpx" not in sys.modules and _CLI not in sys.modules:
    sys.modules[_CLI] = None  # type: ignore[assignment]  # the import system's own "known absent" mark
    try:
        import httpx
    finally:
        del sys.modules[_CLI]

import httpx as httpx  # noqa: E402 - re-exported: `from chock.providers.lean_http import httpx`

__all__ = ["httpx"]
