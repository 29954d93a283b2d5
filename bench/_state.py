"""State dirs full of sessions, written directly as files (about 200 bytes an event), for the benchmarks
that list them: what a model call leaves in a log, over and over, and a project that is the top of a git
work tree without running git. With `remembered`, each session's row is left in the cache dir as the
session's owner leaves it when it lets go of its log (`chock.log.catalog.remember`), written in one merge
rather than one a session."""

from __future__ import annotations

import os
from pathlib import Path

import _common  # also puts the checkout first on sys.path

from chock.log import rowcache
from chock.log.events import encode
from chock.log.index import key_of
from chock.log.row import RowState

AT = "2026-12-01T07:34:50.123Z"

# What a model call leaves in a log, over and over: its message, the tool call, the tool's output (with a
# terminal escape, as real output has) and the usage.
CYCLE = [
    {
        "type": "assistant.message",
        "text": "Looking at the failing test first.",
        "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "pytest -q tests/test_x.py"}}],
    },
    {"type": "tool.call", "call_id": "c1", "name": "shell", "args": {"command": "pytest -q tests/test_x.py"}},
    {"type": "tool.result", "call_id": "c1", "name": "shell", "output": "\x1b[32m" + "." * 150 + "\x1b[0m ok"},
    {"type": "usage", "input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 1000, "cache_write_tokens": 0},
]


def make_project(path: Path) -> Path:
    """A directory that is the top of a git work tree (what `chock sessions` looks for), made without git."""
    (path / ".git" / "objects").mkdir(parents=True)
    (path / ".git" / "refs").mkdir()
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return path.resolve()


def log_body(events: int, *, ended: bool = True) -> bytes:
    """Every line of a log after its session.start: `events` lines in all with the start."""
    lines = [encode({"id": n, "at": AT, **CYCLE[n % len(CYCLE)]}) for n in range(2, events + (0 if ended else 1))]
    if ended:
        lines.append(encode({"id": events, "at": AT, "type": "session.end", "reason": "completed", "exit_code": 0}))
    return b"".join(lines)


def write_sessions(
    root: Path, project: Path, count: int, events: int, *, first: int = 0, remembered: bool = False
) -> list[str]:
    """`count` ended sessions of `project` with `events` events each, in the state dir of
    `_common.layout(root)` (with `remembered`, their rows left in its cache dir); their ids, oldest first."""
    layout = _common.layout(root)
    body = log_body(events)
    ids = []
    folded: RowState | None = None
    owners: dict[str, rowcache.Cached] = {}
    for number in range(first, first + count):
        session_id = f"20260101-{number:06d}-{number:06x}"
        layout.session_dir(session_id).mkdir(parents=True, mode=0o700)
        start = {"type": "session.start", "session": session_id, "project": str(project), "message": "task"}
        head = encode({"id": 1, "at": AT, **start})
        with open(layout.log_path(session_id), "wb") as handle:
            handle.write(head)
            handle.write(body)
        ids.append(session_id)
        if remembered:
            if folded is None:  # the owner's row: the fold of every line it wrote
                folded = RowState()
                folded.feed(head + body)
            row = folded.copy()  # these logs differ only in the id their first line names
            row.id = session_id
            info = os.stat(layout.log_path(session_id))
            identity = (info.st_dev, info.st_ino)
            real = os.path.realpath(project)
            owners[session_id] = rowcache.Cached(identity, info.st_mtime_ns, info.st_size, row, real)
    if remembered:
        rows_dir = os.fspath(layout.rows_dir)
        if rowcache.merge(rows_dir, key_of(os.path.realpath(project)), owners) is None:
            raise SystemExit(f"could not write the row cache under {rows_dir}")
    return ids
