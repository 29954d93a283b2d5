"""A cache file of N bytes costs at most 4·N + 16 MiB of memory to `chock sessions` and to the daemon's first
`list` (docs/log.md#rows-and-the-catalog), whether it holds real rows or was made to be expensive to parse:
each is measured as the peak RSS of a real process, against the same process with an empty cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chock.log import rowcache
from chock.log.index import key_of
from chock.log.row import RowState
from chock.paths import Layout
from tests.test_catalog import write_session

MIB = 1024 * 1024
SIZE = 24 * MIB

# Runs its arguments as a child and prints the child's peak RSS in bytes (Linux gives ru_maxrss in KiB).
PEAK = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "assert done.returncode == 0, done\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
)
# The daemon's first `list`: every session of the state dir, from a watched catalog.
DAEMON_LIST = (
    "from chock.log.catalog import Catalog\n"
    "from chock.paths import Layout\n"
    "assert Catalog(Layout.from_env(), watched=True).every()\n"
)


def _fake_id(n: int) -> str:
    return f"20250101-000000-{n:06x}"  # sorts before the real sessions' ids, and has no log


def _row(message: str, pending: int = 0) -> RowState:
    row = RowState()
    row.message = message
    row.pending_approvals = {f"{n}": {} for n in range(pending)}
    return row


def _fill(directory: str, key: str, rows: dict[str, rowcache.Cached], row: RowState, size: int) -> None:
    """Merge `rows`, then rows of sessions that have no log like `row`, until the file is about `size` bytes."""
    if rows:
        assert rowcache.merge(directory, key, rows)
    per = len(json.dumps([_fake_id(0), 1, 0, 0, 10, "/elsewhere", row.to_json()], separators=(",", ":"))) + 1
    fake = {_fake_id(n): rowcache.Cached((1, n), 0, 10, row, "/elsewhere") for n in range(size // per)}
    assert rowcache.merge(directory, key, fake)


def _peak(home, project: Path, cache: Path, command: list[str]) -> int:  # type: ignore[no-untyped-def]
    env = {**home.env, "CHOCK_CACHE_DIR": os.fspath(cache)}
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *command], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def _cache_bytes(cache: Path) -> int:
    return sum(path.stat().st_size for path in cache.rglob("*") if path.is_file())


@pytest.fixture
def sessions(home, project):  # type: ignore[no-untyped-def]
    """20 ended sessions of `project`."""
    return [write_session(home.layout, n, os.path.realpath(project)) for n in range(1, 21)]


def _real_rows(layout: Layout, ids: list[str], row: RowState, real: str) -> dict[str, rowcache.Cached]:
    """Rows for the real sessions that cover their logs exactly (so a reader would take them as they are)."""
    rows = {}
    for sid in ids:
        info = layout.log_path(sid).stat()
        rows[sid] = rowcache.Cached((info.st_dev, info.st_ino), info.st_mtime_ns, info.st_size, row, real)
    return rows


@pytest.mark.parametrize("contents", ["real rows", "expensive rows", "expensive index"])
@pytest.mark.parametrize("reader", ["chock sessions", "daemon list"])
def test_a_cache_file_of_n_bytes_costs_at_most_4n_plus_16_mib(home, project, sessions, tmp_path, contents, reader):
    command = [sys.executable, "-m", "chock", "sessions"] if reader == "chock sessions" else [
        sys.executable, "-c", DAEMON_LIST]  # fmt: skip
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    baseline = _peak(home, project, empty, command)

    # The cache a listing writes, then more: rows of sessions that have no log, until it is SIZE bytes.
    warm = tmp_path / "cache"
    layout = home.layout.replace(cache=warm)
    real = os.path.realpath(project)
    directory, key = os.fspath(layout.rows_dir), key_of(real)
    _peak(home, project, warm, [sys.executable, "-m", "chock", "sessions"])  # writes the cache and the index
    if contents == "real rows":
        _fill(directory, key, {}, _row("a task that took a while to say " * 6), SIZE)
    elif contents == "expensive rows":
        # Rows that cover the real logs exactly, each a dict of 12,000 tiny dicts (150 KB), and more like them.
        expensive = _row("x", pending=12_000)
        _fill(directory, key, _real_rows(layout, sessions, expensive, real), expensive, SIZE)
    else:
        # The index of sessions by project as 24 MiB of empty lists, with no stamp: every reader reads it.
        (layout.rows_dir / "stamp.json").unlink()
        listing = b'{"v":2,"projects":{"k":[' + b"[]," * (SIZE // 3) + b'[]]},"pending":[]}'
        (layout.rows_dir / "listing.json").write_bytes(listing)
    size = _cache_bytes(warm)
    peak = _peak(home, project, warm, command)
    assert peak - baseline <= 4 * size + 16 * MIB, (
        f"{reader} with {size / MIB:.1f} MiB of {contents} in the cache: peak RSS {peak / MIB:.0f} MiB, "
        f"{(peak - baseline) / MIB:.0f} MiB over an empty cache's {baseline / MIB:.0f} MiB"
    )
