"""What a session waiting on a person gives back (docs/architecture.md#approvals).

A session may wait hours for an approval, and a host holds many such sessions, so as the wait begins the session
collects its garbage (what the model call and the tool before it left: response objects, buffers, cycles) and
has the C allocator hand its free pages back to the kernel. Nothing is dropped that the session would have to
rebuild: its HTTP client holds no connection by then (a call reads its stream only to the wire's last event,
so the connection is closed rather than pooled), and closing the client too gained nothing measurable
(bench/waiting_memory.py).
"""

from __future__ import annotations


def _trim() -> None:
    """glibc's `malloc_trim(0)`: free memory at the top of the heap and whole free pages inside it go back to the
    kernel. Nothing where the C library has no such call (musl)."""
    import ctypes  # imported here: a session that never waits never needs it

    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)


def shed() -> None:
    """Give back what the wait does not need: the garbage, then the allocator's free pages."""
    import gc  # imported here, as `ctypes` is: the modules before a session's first request are a fixed list

    gc.collect()
    _trim()
