"""How listing scales: `chock sessions` and the daemon's `list` as sessions and their logs grow.

For 10, 100, 1,000 and 5,000 sessions of one project, of 100 and of 10,000 events each (logs written
directly as files, about 200 bytes an event, each session's row left in the cache dir as its owner leaves it
when it ends: `_state.write_sessions`), it measures:

- `chock sessions --json`, a real process: the first run over the state as the sessions left it, and warm
  (again), against `python3 -c pass` (the same interpreter, measured in the same run);
- a new daemon's first `list`, its warm `list`, and a restarted daemon's first `list` (the cache rebuilt by
  the daemon before it), each against a unix-socket echo round trip;
- the same first listings once the cache dir is deleted (every byte of every log is read again: what these
  cost is the disk's and the fold's speed, not a target).

Then: a project's list beside 5,000 sessions of another project against the same list alone (the index by
project keeps other projects' logs unread); and what a running session of 100,000 events that keeps
appending adds to the daemon's `list` of its project.

    python bench/scaling.py             # prints the figures (several minutes; writes up to 10 GB under /tmp)
    python bench/scaling.py --quick     # small sizes, asserts correctness only
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import _common
from _state import AT, CYCLE, log_body, make_project, write_sessions

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient
from chock.log import rowcache
from chock.log.events import encode
from chock.log.index import key_of

FULL_SESSIONS = (10, 100, 1000, 5000)
FULL_EVENTS = (100, 10_000)
QUICK_SESSIONS = (10, 100)
QUICK_EVENTS = (100, 1000)


def sessions_command(root: Path, project: Path) -> tuple[float, list[dict]]:
    """`chock sessions --json` in `project`: its wall time and its rows (oldest first)."""
    started = time.perf_counter()
    done = subprocess.run(
        _common.chock("sessions", "--json"),
        cwd=project, env=_common.environment(root), capture_output=True, text=True, check=True,
    )  # fmt: skip
    took = time.perf_counter() - started
    return took, [json.loads(line) for line in reversed(done.stdout.splitlines())]


# A daemon's first `list` of thousands of long logs with no row cache folds gigabytes: it may take minutes.
COLD_SECONDS = 3600.0


def listed(socket_path: Path, project: Path, timeout: float = COLD_SECONDS) -> tuple[float, list[dict]]:
    """connect + hello + `list`: its time and its rows."""
    client = ControlClient(f"unix:{socket_path}", timeout=timeout)
    started = time.perf_counter()
    rows = [line.row for line in client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)]
    return time.perf_counter() - started, rows


def check(rows: list[dict], ids: list[str], events: int, what: str) -> None:
    assert [row["id"] for row in rows] == ids, f"{what}: every session's row, oldest first"
    assert all(row["status"] == "ended" and row["last_event_id"] == events for row in rows), what
    expected = 1200 * sum(1 for n in range(2, events) if CYCLE[n % len(CYCLE)]["type"] == "usage")
    assert all(row["input_tokens"] == expected for row in rows), what


def forget_cache(root: Path) -> None:
    shutil.rmtree(root / "cache", ignore_errors=True)


def cell(root: Path, sessions: int, events: int, repeats: int) -> dict[str, float]:
    """Every figure for one size: a fresh state dir of `sessions` sessions of `events` events."""
    shutil.rmtree(root / "state", ignore_errors=True)
    forget_cache(root)
    project = root / "project"
    ids = write_sessions(root, project, sessions, events, remembered=True)
    left = cache_generation(root, project)
    figures = {}
    figures["sessions first"], rows = sessions_command(root, project)
    check(rows, ids, events, "chock sessions, the first")
    assert cache_generation(root, project) == left, "the first `chock sessions` took every row from the cache"
    warm = []
    for _ in range(repeats):
        took, rows = sessions_command(root, project)
        warm.append(took)
    check(rows, ids, events, "chock sessions, warm")
    figures["sessions warm"] = statistics.median(warm)
    with _common.running_daemon(root) as socket_path:
        figures["list first"], rows = listed(socket_path, project)
        check(rows, ids, events, "the daemon's first list")
        assert cache_generation(root, project) == left, "the daemon's first list took every row from the cache"
        samples = []
        for _ in range(repeats * 4):
            took, rows = listed(socket_path, project)
            samples.append(took)
        check(rows, ids, events, "the daemon's warm list")
        figures["list warm"] = statistics.median(samples)
    forget_cache(root)
    figures["sessions uncached"], rows = sessions_command(root, project)
    check(rows, ids, events, "chock sessions with no cache")
    forget_cache(root)
    with _common.running_daemon(root) as socket_path:
        figures["list uncached"], rows = listed(socket_path, project)
    check(rows, ids, events, "the daemon's first list with no cache")
    restarts = []
    for _ in range(3):
        with _common.running_daemon(root) as socket_path:
            took, rows = listed(socket_path, project)
        check(rows, ids, events, "a restarted daemon's first list")
        restarts.append(took)
    figures["list restarted"] = statistics.median(restarts)
    figures["an end"] = statistics.median(owners_end(root, project, sessions + n) for n in range(repeats))
    return figures


def cache_generation(root: Path, project: Path) -> str | None:
    """The generation of the project's cached rows: another once anyone has written them again."""
    directory = os.fspath(_common.layout(root).rows_dir)
    return rowcache.generation(rowcache.project_path(directory, key_of(os.path.realpath(project))))


def owners_end(root: Path, project: Path, number: int) -> float:
    """What the owner of one more session of `project` spends as it lets go of its log: writing its row into
    the project's cached rows (`chock.log.catalog.remember`)."""
    from chock.log import catalog
    from chock.log.writer import SessionLog

    layout = _common.layout(root)
    session_id = f"20260101-{number:06d}-{number:06x}"
    layout.session_dir(session_id).mkdir(mode=0o700)
    remember = lambda fd, row, end: catalog.remember(layout, session_id, fd, row, end)  # noqa: E731 - what `chock run` passes
    log = SessionLog.create(layout.log_path(session_id), remember=remember)
    log.append("session.start", session=session_id, project=str(project), message="one more")
    for n in range(98):
        log.append(**CYCLE[n % len(CYCLE)])
    log.append("session.end", reason="completed", exit_code=0)
    started = time.perf_counter()
    log.release()
    took = time.perf_counter() - started
    cached = rowcache.read(os.fspath(layout.rows_dir), key_of(os.path.realpath(project))).rows[session_id]
    assert cached.offset == layout.log_path(session_id).stat().st_size, "the owner left its row in the cache"
    return took


def home(root: Path, name: str) -> Path:
    """A second root beside the first (its own state, cache and daemon), for runs interleaved with it."""
    other = root / name
    (other / "runtime").mkdir(parents=True, mode=0o700)
    return other


def independence(root: Path, others: int, repeats: int) -> dict[str, float]:
    """A project of 10 sessions listed from a state dir of its own and from one that also holds `others`
    sessions of another project, interleaved."""
    mine = root / "project"
    alone, beside = home(root, "alone"), home(root, "beside")
    ids = write_sessions(alone, mine, 10, 100, remembered=True)
    write_sessions(beside, mine, 10, 100, remembered=True)
    theirs = make_project(root / "other")
    write_sessions(beside, theirs, others, 100, first=10, remembered=True)
    figures = {}
    figures["sessions beside, first"], rows = sessions_command(beside, mine)  # reads every first line once
    check(rows, ids, 100, "chock sessions beside, the first time")
    sessions_command(alone, mine)
    time.sleep(1.1)  # past the index's racy window, as a person's next command would be

    def sessions_of(where: Path) -> float:
        took, rows = sessions_command(where, mine)
        check(rows, ids, 100, f"chock sessions from {where.name}")
        return took

    figures["sessions alone"], figures["sessions beside"] = _common.interleaved(
        {"alone": lambda: sessions_of(alone), "beside": lambda: sessions_of(beside)}, repeats
    ).values()

    def first_list(where: Path) -> float:
        with _common.running_daemon(where) as socket_path:
            took, rows = listed(socket_path, mine)
        check(rows, ids, 100, f"a restarted daemon's first list from {where.name}")
        return took

    figures["list first alone"], figures["list first beside"] = _common.interleaved(
        {"alone": lambda: first_list(alone), "beside": lambda: first_list(beside)}, 5
    ).values()
    with _common.running_daemon(alone) as alone_socket, _common.running_daemon(beside) as beside_socket:

        def warm_list(socket_path: Path) -> float:
            took, rows = listed(socket_path, mine)
            check(rows, ids, 100, "a warm list")
            return took

        figures["list warm alone"], figures["list warm beside"] = _common.interleaved(
            {"alone": lambda: warm_list(alone_socket), "beside": lambda: warm_list(beside_socket)}, repeats * 10
        ).values()
    return figures


def running_session(root: Path, events: int, repeats: int) -> tuple[float, float]:
    """The daemon's warm `list` of a project of 100 ended sessions and one running session of `events` events
    that appends 50 more before each list (a busy session between two polls of the page), interleaved with
    the `list` of a project of the same 101 sessions, all ended."""
    from chock.log.writer import SessionLog

    busy, quiet = root / "project", make_project(root / "quiet")
    where = home(root, "running")
    ids = write_sessions(where, busy, 100, 100, remembered=True)
    quiet_ids = write_sessions(where, quiet, 101, 100, first=100, remembered=True)
    running_id = "20260102-000000-000001"
    directory = where / "state" / "sessions" / running_id
    directory.mkdir(mode=0o700)
    start = {"type": "session.start", "session": running_id, "project": str(busy), "message": "busy"}
    (directory / "log.jsonl").write_bytes(encode({"id": 1, "at": AT, **start}) + log_body(events, ended=False))
    with _common.running_daemon(where) as socket_path, SessionLog.take(directory / "log.jsonl") as log:
        listed(socket_path, busy)  # the first fold of every log
        listed(socket_path, quiet)

        def busy_list() -> float:
            for n in range(50):
                log.append(**CYCLE[n % len(CYCLE)])
            took, rows = listed(socket_path, busy)
            assert [row["id"] for row in rows] == [*ids, running_id]
            assert rows[-1]["status"] == "running" and rows[-1]["last_event_id"] == log.last_id
            return took

        def quiet_list() -> float:
            took, rows = listed(socket_path, quiet)
            assert [row["id"] for row in rows] == quiet_ids
            return took

        quiet, busy = _common.interleaved({"quiet": quiet_list, "busy": busy_list}, repeats).values()
        return quiet, busy


def compiled(root: Path) -> None:
    """A first run of each command measured, so that every later one runs from compiled modules
    (`_common.environment` keeps them under `root`)."""
    (root / "warm").mkdir()
    warm = make_project(root / "warm" / "project")
    sessions_command(root, warm)
    with _common.running_daemon(root) as socket_path:
        listed(socket_path, warm)


def anchors(root: Path, repeats: int) -> tuple[float, float]:
    """`python3 -c pass` and the echo round trip, measured now."""
    python = _common.timed(_common.bare_interpreter, repeats)
    echo = _common.Echo(root / "echo.sock")
    echo.round_trip()
    return statistics.median(python), statistics.median(_common.timed(echo.round_trip, repeats * 20))


def main() -> None:
    parser = _common.arguments(
        __doc__, "10 and 100 sessions of 100 and 1,000 events; assert every row only", installed=True
    )
    parser.add_argument(
        "--largest", type=int, default=5000, help="Leave out cells with more sessions than this (default 5000)."
    )
    options = _common.parse(parser)
    quick = options.quick
    with _common.scratch() as root:
        make_project(root / "project")
        sizes = [
            (sessions, events)
            for events in (QUICK_EVENTS if quick else FULL_EVENTS)
            for sessions in (QUICK_SESSIONS if quick else FULL_SESSIONS)
            if sessions <= options.largest
        ]
        repeats = 3 if quick else 7
        compiled(root)
        python, echo = anchors(root, repeats)
        cells = {size: cell(root, *size, repeats) for size in sizes}
        others = 200 if quick else 5000
        alone_beside = independence(root, others, repeats)
        busy = 2000 if quick else 100_000
        quiet, running = running_session(root, busy, repeats * 3)
    if quick:
        print(
            f"scaling: quick mode: {', '.join(f'{s} x {e}' for s, e in sizes)} sessions x events, a project beside "
            f"{others} others, a running session of {busy} events: every row right in every listing"
        )
        return
    print(f"anchors: python3 -c pass {python * 1e3:.1f} ms; echo round trip {echo * 1e6:.0f} µs")
    print(
        f"{'':>18}  {'chock sessions':^30}  {'the daemon':^43}  {'with no cache':^22}\n"
        f"{'sessions x events':>18}  {'first':>13}  {'warm':>14}  {'first list':>10}  {'warm':>14}  "
        f"{'restarted':>15}  {'sessions':>10}  {'first list':>10}  {'an end':>8}"
    )
    for (sessions, events), f in cells.items():
        print(
            f"{sessions:>8} x {events:>7}  {f['sessions first'] * 1e3:>6.0f} ms {f['sessions first'] / python:>4.1f}x  "
            f"{f['sessions warm'] * 1e3:>6.0f} ms {f['sessions warm'] / python:>4.1f}x  "
            f"{f['list first'] * 1e3:>7.0f} ms  {f['list warm'] * 1e3:>7.2f} ms {f['list warm'] / echo:>4.0f}x  "
            f"{f['list restarted'] * 1e3:>12.0f} ms  {f['sessions uncached']:>8.2f} s  {f['list uncached']:>8.2f} s  "
            f"{f['an end'] * 1e3:>5.0f} ms"
        )
    print("an end: what a session's owner spends writing its row into the project's cached rows as it ends")
    listings = ("sessions first", "sessions warm", "list first", "list warm", "list restarted")
    slowest = max(f[what] for f in cells.values() for what in listings)
    print(f"the slowest listing of a project whose sessions left their rows: {slowest * 1e3:.0f} ms (goal: under 1 s)")
    a = alone_beside
    print(f"a project of 10 sessions, in a state dir of its own and beside {others} sessions of another project:")
    for what in ("sessions", "list first", "list warm"):
        print(
            f"  {what:<11} alone {a[what + ' alone'] * 1e3:8.2f} ms, beside {a[what + ' beside'] * 1e3:8.2f} ms: "
            f"ratio {a[what + ' beside'] / a[what + ' alone']:.2f}"
        )
    print(f"  the first `chock sessions` after the others appeared: {a['sessions beside, first'] * 1e3:.0f} ms")
    print(
        f"a running session of {busy} events appending 50 between lists adds "
        f"{(running - quiet) * 1e3:.2f} ms to the list of its project ({quiet * 1e3:.2f} -> {running * 1e3:.2f} ms)"
    )


if __name__ == "__main__":
    main()
