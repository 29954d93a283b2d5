"""The one catalog of the state dir: the row fold, incremental rows, the row cache, the index by project, and
the project resolution every command shares."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chock.control import daemon_protocol as dp
from chock.control.client import expect
from chock.errors import Refused
from chock.log import catalog as catalog_module
from chock.log import rowcache
from chock.log.catalog import Catalog, Entry
from chock.log.events import encode
from chock.log.fold import SessionState, fold
from chock.log.index import RACY_NS, key_of
from chock.log.reader import read_events
from chock.log.row import RowState
from chock.log.writer import SessionLog
from chock.paths import Layout
from chock.project import find_root
from chock.session import workspace
from tests.fakes.daemon import short_dir
from tests.fakes.projects import git, git_value, make_project
from tests.fakes.wait import wait_until

AT = "2026-12-01T07:34:50.123Z"


def session_id(number: int) -> str:
    return f"20260101-{number:06d}-{number:06x}"


def log_bytes(events: list[dict]) -> bytes:
    return b"".join(encode({"id": n, "at": AT, **event}) for n, event in enumerate(events, 1))


def write_session(layout: Layout, number: int, project: Path | str, events: list[dict] | None = None) -> str:
    """A session of `project` whose log is `events` after its session.start (an ended session by default)."""
    sid = session_id(number)
    start = {"type": "session.start", "session": sid, "project": str(project), "message": f"task {number}"}
    body = events if events is not None else [{"type": "session.end", "reason": "completed", "exit_code": 0}]
    layout.session_dir(sid).mkdir(parents=True, exist_ok=True)
    layout.log_path(sid).write_bytes(log_bytes([start, *body]))
    return sid


def append(layout: Layout, sid: str, data: bytes) -> None:
    with open(layout.log_path(sid), "ab") as handle:
        handle.write(data)


def rows_of(data: bytes) -> str:
    """The rows (owner alive, owner dead) of a log's bytes by the row fold, and every field it keeps (the
    workspace, the owner's pid: what `chock workspace` and `chock detach` read besides the row), as JSON (so
    a float where the log has an int, or the reverse, is a difference)."""
    state = RowState()
    state.feed(data)
    return _as_json(state)


def full_rows(data: bytes, path: Path) -> str:
    """The same of the same bytes by the conversation fold, read the way `chock run` reads a log."""
    path.write_bytes(data)
    return _as_json(fold(read_events(path)))


def _as_json(state: RowState) -> str:
    return json.dumps([state.row(True), state.row(False), state.to_json()], sort_keys=True)


def complete_lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)[: data.count(b"\n")]


# The row fold equals the row of the conversation fold --------------------------------------------------

RICH = [
    {"text": "", "tool_calls": [
        {"call_id": "c1", "name": "shell", "args": {"command": "echo in-background", "background": True}},
        {"call_id": "c2", "name": "subagent", "args": {"task": "look around"}},
    ]},
    {"for": "subagent", "text": "found \"usage\" and session.end", "tool_calls": []},
    {"text": "", "tool_calls": [
        {"call_id": "c3", "name": "shell", "args": {"command": "printf '\\033[1mbold\\033[0m'"}},
    ]},
    {"text": "All done.", "tool_calls": []},
    {"text": "Noted.", "tool_calls": []},  # when the background note arrives after "All done."
]  # fmt: skip


def _real_logs(home, project) -> list[bytes]:
    """Logs of real sessions: one with background work, a subagent and escapes, run to its end; one killed
    while it waits for an approval; one continued after it ended (two spans)."""
    home.replay_instance(RICH)
    assert home.chock("run", "--yes", "rich", cwd=project).returncode == 0
    home.replay_instance([{"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "ls"}}]}])
    before = set(os.listdir(home.layout.sessions_dir))
    process = home.spawn("run", "asks", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        waiting = wait_until(lambda: set(os.listdir(home.layout.sessions_dir)) - before, what="the new session")
        waiting_id = waiting.pop()
        log = home.layout.log_path(waiting_id)  # its directory is made a moment before its log
        wait_until(lambda: log.exists() and b'"approval.request"' in log.read_bytes(), what="its approval request")
    finally:
        process.kill()
        process.wait(10)
    home.replay_instance([{"text": "First.", "tool_calls": []}, {"text": "Second.", "tool_calls": []}])
    before = set(os.listdir(home.layout.sessions_dir))
    assert home.chock("run", "first", cwd=project).returncode == 0
    (continued,) = set(os.listdir(home.layout.sessions_dir)) - before
    assert home.chock("run", "--continue", continued, "again", cwd=project).returncode == 0
    return [home.layout.log_path(sid).read_bytes() for sid in sorted(os.listdir(home.layout.sessions_dir))]


def test_the_row_fold_equals_the_conversation_folds_row_after_every_line_of_real_sessions(home, project, tmp_path):
    logs = _real_logs(home, project)
    types = {json.loads(line)["type"] for data in logs for line in complete_lines(data)}
    assert {"background.start", "background.end", "subagent.start", "subagent.end", "approval.request"} <= types
    assert {"session.adopt", "usage", "workspace.close"} <= types
    listed = home.chock("sessions", "--json", cwd=project).stdout.splitlines()
    assert sorted(json.loads(line)["status"] for line in listed) == ["abandoned", "ended", "ended"]
    for data in logs:
        lines = complete_lines(data)
        for count in range(len(lines) + 1):
            prefix = b"".join(lines[:count])
            assert rows_of(prefix) == full_rows(prefix, tmp_path / "log.jsonl"), (count, lines[count - 1 : count])


_NAMES = [
    "session.start", "session.adopt", "session.end", "workspace.open", "workspace.close", "user.message",
    "assistant.message", "tool.call", "tool.result", "approval.request", "approval.answer", "background.start",
    "background.end", "subagent.start", "subagent.end", "usage", "future.event", "session.later", "usages",
]  # fmt: skip
_TEXT = st.sampled_from(["", "r1", "r2", "bg-1", "/w", '"usage"', '"session.end"', "\\u0075", "\u00e9\u001b[0m"])
_VALUE = st.one_of(_TEXT, st.integers(-3, 10**6), st.booleans(), st.none(), st.floats(allow_nan=True))
_EVENT = st.fixed_dictionaries(
    {"type": st.sampled_from(_NAMES)},
    optional={
        key: _VALUE
        for key in (
            "session", "project", "message", "owner", "via", "pid", "reason", "exit_code", "directory", "commit",
            "admin", "request_id", "handle", "command", "task", "input_tokens", "output_tokens", "cache_read_tokens",
            "cache_write_tokens", "cost", "for", "output", "whatever",
        )
    },
)  # fmt: skip
_COUNT = st.integers(0, 10**9)
# `usage` as the session writes it (chock.session.calls), which the row fold reads without a JSON parser.
_USAGE = st.builds(
    lambda counts, cache, cost, purpose: {
        "type": "usage",
        "input_tokens": counts[0],
        "output_tokens": counts[1],
        **({"cache_read_tokens": cache[0], "cache_write_tokens": cache[1]} if cache else {}),
        **({"cost": cost} if cost is not None else {}),
        **({"for": purpose} if purpose is not None else {}),
    },
    st.tuples(_COUNT, _COUNT),
    st.none() | st.tuples(_COUNT, _COUNT),
    st.none() | st.floats(0, 100) | st.integers(0, 9) | st.sampled_from([1e-06, 2.5e-07, 0.0, 3.0]),
    st.none() | st.sampled_from(["subagent", "compaction", ""]),
)


def _spell(line: bytes, how: int) -> bytes:
    """The same event spelled another way JSON allows: a type name with an escaped letter, or an odd line."""
    if how == 1:
        return line.replace(b'"type": "s', b'"type": "\\u0073', 1).replace(b'"type": "u', b'"type": "\\u0075', 1)
    if how == 2:  # a repeated key: the last one wins
        return line.replace(b'{"id": ', b'{"type": "x", "id": ', 1)
    if how == 5:
        return line[:-2] + b', "type": "tool.result"}\n'
    if how == 6:
        return line.replace(b'"type": "session.', b'"type": "session\\u002E', 1)
    if how == 3:
        return b"not json at all\n"
    if how == 4:
        return line.replace(b'{"id": ', b'{"id": "seven", "was": ', 1)  # an id that is not a number
    return line


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_EVENT | _USAGE, st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4, 5, 6])), max_size=40), st.data())
def test_the_row_fold_equals_the_conversation_folds_row_for_any_events(tmp_path, events, data):
    _fold_equals_conversation_fold(tmp_path, events, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_EVENT | _USAGE | _USAGE, st.sampled_from([0, 0, 0, 0, 2, 3, 4, 5])), max_size=40), st.data())
def test_the_row_fold_equals_the_conversation_folds_row_with_no_escaped_type(tmp_path, events, data):
    """With no type spelled with an escape, the usage lines are found in one scan (`row._plain_usages`)."""
    _fold_equals_conversation_fold(tmp_path, events, data)


def _fold_equals_conversation_fold(tmp_path, events, data):
    lines = [_spell(encode({"id": n, "at": AT, **event}), how) for n, (event, how) in enumerate(events, 1)]
    whole = b"".join(lines)
    assert rows_of(whole) == full_rows(whole, tmp_path / "log.jsonl")
    # Folded in pieces (as appends arrive) it is the same row.
    cut = sorted(data.draw(st.lists(st.integers(0, len(lines)), max_size=4)))
    state = RowState()
    for start, end in zip([0, *cut], [*cut, len(lines)], strict=True):
        state.feed(b"".join(lines[start:end]))
    assert _as_json(state) == rows_of(whole)
    # And what a cache keeps of it comes back as the same row.
    back = RowState.from_json(json.loads(json.dumps(state.to_json())))
    assert back is not None and _as_json(back) == _as_json(state)


def test_the_conversation_fold_is_the_row_fold_plus_the_conversation():
    state = SessionState()
    state.feed(log_bytes([
        {"type": "session.start", "session": "s", "project": "/p", "message": "m" * 500, "instance": "demo"},
        {"type": "user.message", "text": "hi"},
        {"type": "tool.result", "call_id": "c", "output": "x" * 1000},
    ]))  # fmt: skip
    assert len(state.message) == 500 and state.row(False)["message"] == "m" * 200  # whole, and a preview
    assert [m["role"] for m in state.conversation] == ["user", "tool"] and state.instance == "demo"
    row_only = RowState()
    row_only.feed(log_bytes([{"type": "tool.result", "call_id": "c", "output": "x" * 1000}]))
    assert not hasattr(row_only, "conversation") and "x" * 1000 not in json.dumps(row_only.to_json())


# Incremental rows ----------------------------------------------------------------------------------------


def test_a_catalog_folds_only_what_was_appended_and_never_a_torn_tail(home, tmp_path):
    layout, project = home.layout, tmp_path / "p"
    sid = write_session(layout, 1, project, [{"type": "usage", "input_tokens": 5, "output_tokens": 1}])
    catalog = Catalog(layout, cache=False)
    first = catalog.entry(sid)
    assert first.state.input_tokens == 5 and first.offset == layout.log_path(sid).stat().st_size
    assert catalog.entry(sid) is first  # nothing appended: nothing read
    # Rewrite the folded part in place (a log is never rewritten; this shows what is read again): the
    # catalog keeps what it folded and reads only the appended bytes.
    data = layout.log_path(sid).read_bytes()
    layout.log_path(sid).write_bytes(data.replace(b"task 1", b"TASK 1"))
    more = encode({"id": 3, "at": AT, "type": "usage", "input_tokens": 7, "output_tokens": 2})
    append(layout, sid, more[:20])  # a torn tail: not folded
    torn = catalog.entry(sid)
    assert torn.state.input_tokens == 5 and torn.offset == len(data) and torn.state.last_event_id == 2
    append(layout, sid, more[20:])  # now whole
    grown = catalog.entry(sid)
    assert (grown.state.input_tokens, grown.state.last_event_id, grown.offset) == (12, 3, len(data) + len(more))
    assert grown.row(False)["message"] == "task 1"  # the start was not read again
    assert first.state.input_tokens == 5  # an entry a reader holds never changes under it


def test_a_rows_instance_and_approve_all_are_what_a_move_reads_and_outlive_the_reader(home, tmp_path):
    """A move takes the session's instance and `--yes` from its row (cached), not from a fold of its whole log:
    the start's instance, and approve_all as the latest span's start or adopt says."""
    layout = home.layout
    sid = write_session(layout, 1, tmp_path / "p", [
        {"type": "session.end", "reason": "completed", "exit_code": 0},
        {"type": "session.adopt", "via": "terminal", "approve_all": True},
    ])  # fmt: skip
    path = layout.log_path(sid)
    path.write_bytes(path.read_bytes().replace(b'"task 1"', b'"task 1", "instance": "demo"'))
    row = Catalog(layout, cache=False).entry(sid).state
    assert (row.instance, row.approve_all) == ("demo", True)
    back = RowState.from_json(json.loads(json.dumps(row.to_json())))
    assert back is not None and (back.instance, back.approve_all) == ("demo", True)
    append(layout, sid, encode({"id": 4, "at": AT, "type": "session.adopt", "via": "daemon", "approve_all": False}))
    assert Catalog(layout, cache=False).entry(sid).state.approve_all is False


def test_a_log_that_shrank_or_was_replaced_is_folded_again_from_its_start(home, tmp_path):
    layout, project = home.layout, tmp_path / "p"
    sid = write_session(
        layout, 1, project, [{"type": "usage", "input_tokens": 5}, {"type": "usage", "input_tokens": 6}]
    )
    catalog = Catalog(layout, cache=False)
    assert catalog.entry(sid).state.input_tokens == 11
    path = layout.log_path(sid)
    lines = complete_lines(path.read_bytes())
    with open(path, "r+b") as handle:  # same inode, shorter
        handle.truncate(len(b"".join(lines[:2])))
    assert catalog.entry(sid).state.input_tokens == 5
    replacement = path.with_name("new")
    replacement.write_bytes(b"".join(lines).replace(b"task 1", b"TASK 1"))
    os.replace(replacement, path)  # another inode, longer
    entry = catalog.entry(sid)
    assert entry.state.input_tokens == 11 and entry.row(False)["message"] == "TASK 1"
    path.unlink()
    assert catalog.entry(sid) is None


# Rows that survive a restart ---------------------------------------------------------------------------


def _cache_file(layout: Layout, project: Path) -> Path:
    return Path(rowcache.project_path(os.fspath(layout.rows_dir), key_of(os.path.realpath(project))))


def _cache_lines(path: Path) -> tuple[dict, dict[str, list]]:
    """A cache file's head, and its rows by session id: [device, inode, mtime, offset, project, row state]."""
    head, *lines = path.read_text().splitlines()
    return json.loads(head), {row[0]: row[1:] for row in map(json.loads, lines)}


def _write_cache_lines(path: Path, head: dict, rows: dict[str, list]) -> None:
    lines = [json.dumps(head), *(json.dumps([sid, *row]) for sid, row in sorted(rows.items()))]
    path.write_text("".join(f"{line}\n" for line in lines))


def _cached(layout: Layout, project: Path, sid: str) -> list:
    """What the cache holds of one session: [device, inode, mtime, offset, project, row state]."""
    return _cache_lines(_cache_file(layout, project))[1][sid]


def _listed(layout: Layout, project: Path) -> dict[str, Entry]:
    """A new reader's look at `project` (a new process, a restarted daemon)."""
    return {entry.session_id: entry for entry in Catalog(layout).of_project(project)}


def test_an_ended_sessions_row_is_cached_privately_and_a_new_reader_starts_from_it(home, project):
    layout = home.layout
    sid = write_session(layout, 1, project)
    assert _listed(layout, project)[sid].state.ended
    cached = _cache_file(layout, project)
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600
    for directory in (cached.parent, layout.rows_dir, layout.rows_dir.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert _cached(layout, project, sid)[3] == layout.log_path(sid).stat().st_size
    # A new reader takes the cached row and reads no byte it covers.
    data = layout.log_path(sid).read_bytes()
    layout.log_path(sid).write_bytes(data.replace(b"task 1", b"TASK 1"))
    assert _listed(layout, project)[sid].row(False)["message"] == "task 1"
    more = encode({"id": 3, "at": AT, "type": "usage", "input_tokens": 4})
    append(layout, sid, more)
    grown = _listed(layout, project)[sid]  # folds only the appended line onto the cached row
    assert grown.row(False)["message"] == "task 1" and grown.state.input_tokens == 4
    assert _cached(layout, project, sid)[3] == len(data) + len(more)  # ended: written again at once
    # So does `chock sessions`, a real process; and one session's lookup (`chock detach`, the daemon's verbs).
    listed = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert listed["message"] == "task 1" and listed["input_tokens"] == 4
    assert Catalog(layout).entry(sid).row(False)["message"] == "task 1"


def _remembered_as_folded(layout: Layout, project: Path, sid: str) -> None:
    """The cache holds the session's row as its owner left it: the whole log, and the row its fold gives."""
    path = layout.log_path(sid)
    info = path.stat()
    dev, ino, mtime, offset, real, state = _cached(layout, project, sid)
    assert (dev, ino, mtime, offset) == (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
    assert real == os.path.realpath(project)
    assert _as_json(RowState.from_json(state)) == rows_of(path.read_bytes())


def _changed_behind_the_cache(path: Path, old: bytes, new: bytes) -> None:
    """Rewrite bytes of a log in place, keeping its size and mtime: only a reader that reads it can tell."""
    info = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    with open(path, "r+b") as handle:
        handle.write(data.replace(old, new))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_a_session_leaves_its_row_in_the_cache_as_it_ends_so_no_reader_reads_its_log(home, project):
    layout = home.layout
    home.replay_instance([{"text": "First.", "tool_calls": []}, {"text": "Second.", "tool_calls": []}])
    assert home.chock("run", "the first task", cwd=project).returncode == 0
    (sid,) = os.listdir(layout.sessions_dir)
    _remembered_as_folded(layout, project, sid)  # no reader has looked at it yet
    # An owner that took the log over (--continue) folds what it added onto the row its predecessor left.
    assert home.chock("run", "--continue", sid, "and more", cwd=project).returncode == 0
    _remembered_as_folded(layout, project, sid)
    # The first `chock sessions` takes that row and reads none of the log: a log changed behind the cache's
    # back (the same size and mtime) still lists as the cache says.
    _changed_behind_the_cache(layout.log_path(sid), b"the first task", b"THE FIRST TASK")
    listed = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert listed["id"] == sid and listed["message"] == "the first task" and listed["status"] == "ended"


def _owned_session(layout: Layout, number: int, project: Path, events: list[dict], behind: bytes = b"") -> str:
    """A session written and let go of by its owner, as `chock run` does (its row left in the cache); `behind`
    is appended by another writer after the owner's last line, before it lets go."""
    sid = session_id(number)
    layout.session_dir(sid).mkdir(parents=True)
    remember = lambda fd, row, end: catalog_module.remember(layout, sid, fd, row, end)  # noqa: E731
    with SessionLog.create(layout.log_path(sid), remember=remember) as log:
        log.append("session.start", session=sid, project=str(project), message=f"task {number}")
        for event in events:
            log.append(**event)
        append(layout, sid, behind)
    return sid


def test_an_owners_row_covers_only_its_own_lines_so_a_line_added_before_it_let_go_is_counted(home, project):
    """The owner's row is the fold of the lines it wrote, and says it ends where they do: a line another writer
    added after its end (a test, a newer version, a hand), before the owner let go, is folded by the next look
    rather than taken as covered (`chock serve`'s page waited for ever for such a line under load)."""
    layout = home.layout
    stranger = encode({"id": 3, "at": AT, "type": "from.the.future", "text": "nobody knows me"})
    sid = _owned_session(layout, 1, project, [{"type": "session.end", "reason": "completed", "exit_code": 0}], stranger)
    _remembered_as_folded(layout, project, sid)  # the whole log, the stranger's line folded too
    assert Catalog(layout).entry(sid).row(False)["last_event_id"] == 3
    listed = json.loads(home.chock("sessions", "--json", cwd=project).stdout)
    assert (listed["id"], listed["last_event_id"], listed["status"]) == (sid, 3, "ended")


def test_a_long_lived_reader_takes_the_rows_owners_leave_after_it_read_the_cache(home, tmp_path):
    layout, project = home.layout, tmp_path / "p"
    first = _owned_session(layout, 1, project, [{"type": "session.end", "reason": "completed", "exit_code": 0}])
    daemon_like = Catalog(layout)
    assert [entry.session_id for entry in daemon_like.of_project(project)] == [first]
    written = _cache_file(layout, project).read_bytes()
    second = _owned_session(layout, 2, project, [{"type": "usage", "input_tokens": 7}, {"type": "session.end"}])
    owners = _cache_file(layout, project).read_bytes()
    assert owners != written
    _changed_behind_the_cache(layout.log_path(second), b"task 2", b"TASK 2")
    listed = {entry.session_id: entry.row(False) for entry in daemon_like.of_project(project)}
    assert listed[second]["message"] == "task 2" and listed[second]["input_tokens"] == 7  # the owner's row, unread
    assert _cache_file(layout, project).read_bytes() == owners  # and nothing to write: the rows are the file's
    assert Catalog(layout).of_project(project)[-1].row(False)["message"] == "task 2"
    assert set(_cache_lines(_cache_file(layout, project))[1]) == {first, second}


@pytest.mark.parametrize("cache", ["unreadable", "unwritable"])
def test_a_cache_that_cannot_be_read_or_written_never_fails_an_owner_letting_go(home, tmp_path, cache):
    layout, project = home.layout, tmp_path / "p"
    path = _cache_file(layout, project)
    path.parent.mkdir(parents=True)
    if cache == "unreadable":
        path.write_text("[" * 100_000 + "]" * 100_000)  # deeper than the JSON parser goes
    else:
        path.mkdir()  # a directory where the file would be
    sid = _owned_session(layout, 1, project, [{"type": "session.end", "reason": "completed", "exit_code": 0}])
    with SessionLog.take(layout.log_path(sid)) as log:  # the lock was let go
        assert log.last_id == 2
    assert [entry.row(False)["status"] for entry in Catalog(layout).of_project(project)] == ["ended"]


def test_concurrent_writers_of_a_projects_cached_rows_never_undo_each_other(home, tmp_path):
    """Owners recording their ends, and readers recording listings, each merge under the project's lock: 4
    processes writing 25 rows each, one at a time, leave all 100; a stale reader's row never replaces one
    that covers more of the same log, and a row the reader did not look at stays."""
    directory = os.fspath(home.layout.rows_dir)
    script = (
        "import sys\n"
        "from chock.log import rowcache\n"
        "from chock.log.row import RowState\n"
        "directory, first = sys.argv[1], int(sys.argv[2])\n"
        "for n in range(first, first + 25):\n"
        "    row = RowState(); row.id = f'20260101-{n:06d}-000000'\n"
        "    assert rowcache.merge(directory, 'k', {row.id: rowcache.Cached((1, n), 0, 10, row, '/p')}, wait=5)\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", script, directory, str(first)]) for first in (0, 25, 50, 75)]
    assert [writer.wait(60) for writer in writers] == [0, 0, 0, 0]
    ids = [f"20260101-{n:06d}-000000" for n in range(100)]
    assert set(rowcache.read(directory, "k").rows) == set(ids)

    stale = rowcache.read(directory, "k")  # a reader's snapshot, then an owner's end
    ended, new = RowState(), session_id(100)
    ended.ended = True
    owner = {ids[0]: rowcache.Cached((1, 0), 5, 99, ended, "/p"), new: stale.rows[ids[1]]}
    assert rowcache.merge(directory, "k", owner, wait=rowcache.OWNER_WAIT)
    behind = rowcache.Cached((1, 0), 0, 10, RowState(), "/p")  # what the reader folded before that end
    written = rowcache.merge(directory, "k", {ids[0]: behind}, known=stale, gone=lambda sid: sid == ids[2])
    assert written is not None and written.rows[ids[0]].offset == 99 and written.rows[ids[0]].state.ended
    assert new in written.rows and ids[2] not in written.rows
    assert rowcache.read(directory, "k").rows.keys() == written.rows.keys()
    # A reader's refusal of a cached row overrules only that row: not the owner's that has replaced it since.
    refused = {ids[0]: (behind.identity, behind.offset)}
    assert rowcache.merge(directory, "k", {ids[0]: behind}, force=refused).rows[ids[0]].offset == 99
    refused = {ids[0]: ((1, 0), 99)}
    assert rowcache.merge(directory, "k", {ids[0]: behind}, force=refused).rows[ids[0]].offset == 10
    # A merge that changes nothing writes nothing (a daemon's listing of an unchanged project costs no write).
    path, current = Path(rowcache.project_path(directory, "k")), rowcache.read(directory, "k")
    unchanged = path.read_bytes()
    assert rowcache.merge(directory, "k", {ids[0]: current.rows[ids[0]]}, known=current) is not None
    assert path.read_bytes() == unchanged


@pytest.mark.parametrize("disagreement", ["identity", "past the end", "not after a newline", "corrupt", "version"])
def test_a_cache_that_disagrees_with_the_log_loses_to_it(home, tmp_path, disagreement):
    layout, project = home.layout, tmp_path / "p"
    sid = write_session(layout, 1, project, [{"type": "usage", "input_tokens": 5}])
    _listed(layout, project)
    cached = _cache_file(layout, project)
    head, rows = _cache_lines(cached)
    rows[sid][5]["input_tokens"] = 1000  # what the cache would wrongly show
    path = layout.log_path(sid)
    data = path.read_bytes()
    if disagreement == "identity":  # the log was replaced: the same bytes under another inode
        copy = path.with_name("copy")
        copy.write_bytes(data)
        os.replace(copy, path)
    elif disagreement == "past the end":
        rows[sid][3] = len(data) + 10
    elif disagreement == "not after a newline":
        rows[sid][3] = len(data) - 5
    elif disagreement == "version":
        head["v"] = 99
    _write_cache_lines(cached, head, rows)
    if disagreement == "corrupt":
        cached.write_text(cached.read_text().replace(f'["{sid}",', f'["{sid}",{{not json'))
    entry = _listed(layout, project)[sid]
    assert entry.state.input_tokens == 5 and entry.offset == len(data)
    assert _cached(layout, project, sid)[5]["input_tokens"] == 5  # and the cache is written again from the log


def test_a_running_sessions_cached_row_is_rewritten_at_most_every_interval(home, tmp_path, monkeypatch):
    layout, project = home.layout, tmp_path / "p"
    sid = write_session(layout, 1, project, [])  # no end: running (or abandoned)
    _listed(layout, project)
    covered = _cached(layout, project, sid)[3]
    append(layout, sid, encode({"id": 2, "at": AT, "type": "usage", "input_tokens": 4}))
    assert _listed(layout, project)[sid].state.input_tokens == 4
    assert _cached(layout, project, sid)[3] == covered  # written moments ago: not again yet
    monkeypatch.setattr(catalog_module, "CACHE_EVERY", 0.0)
    _listed(layout, project)
    assert _cached(layout, project, sid)[3] == layout.log_path(sid).stat().st_size


def test_an_unwritable_cache_dir_changes_nothing_but_speed(home, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache dir would be")
    layout = home.layout.replace(cache=blocked)
    sid = write_session(layout, 1, tmp_path / "p")
    assert [entry.session_id for entry in Catalog(layout).of_project(tmp_path / "p")] == [sid]
    assert Catalog(layout).entry(sid).state.ended


# The index by project ----------------------------------------------------------------------------------


def test_listing_a_project_reads_none_of_the_other_projects_logs(home, tmp_path):
    layout, mine, other = home.layout, make_project(tmp_path / "mine"), tmp_path / "other"
    ours = [write_session(layout, n, mine) for n in range(3)]
    theirs = [write_session(layout, n, other) for n in range(3, 8)]
    assert [e.session_id for e in Catalog(layout).of_project(mine)] == ours  # builds the index
    time.sleep(1.2)  # past the racy window: the listing is trusted from now on
    assert [e.session_id for e in Catalog(layout).of_project(mine)] == ours
    # Every other project's log becomes a FIFO: opening one to read would block this reader forever.
    for sid in theirs:
        layout.log_path(sid).unlink()
        os.mkfifo(layout.log_path(sid))
    listed = home.chock("sessions", "--json", "--project", str(mine), cwd=tmp_path, timeout=20)
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ours[::-1]
    assert [e.session_id for e in Catalog(layout).of_project(tmp_path / "empty")] == []


def test_the_index_follows_sessions_that_come_go_or_are_still_being_made(home, tmp_path):
    layout, project = home.layout, tmp_path / "p"
    first = write_session(layout, 1, project)
    catalog = Catalog(layout)
    assert [e.session_id for e in catalog.of_project(project)] == [first]
    time.sleep(1.2)
    # A session being made: its directory, then a log with no complete first line yet.
    making = session_id(2)
    layout.session_dir(making).mkdir()
    assert [e.session_id for e in catalog.of_project(project)] == [first]
    line = log_bytes([{"type": "session.start", "session": making, "project": str(project), "message": "m"}])
    layout.log_path(making).write_bytes(line[:10])
    assert [e.session_id for e in Catalog(layout).of_project(project)] == [first]
    layout.log_path(making).write_bytes(line)  # inside its own directory: the sessions dir does not change
    assert [e.session_id for e in catalog.of_project(project)] == [first, making]
    assert [e.session_id for e in Catalog(layout).of_project(project)] == [first, making]
    # One removed.
    layout.log_path(first).unlink()
    layout.session_dir(first).rmdir()
    assert [e.session_id for e in catalog.of_project(project)] == [making]
    assert [e.session_id for e in Catalog(layout).of_project(project)] == [making]


def test_a_session_made_in_the_same_clock_tick_as_a_listing_is_found(home, tmp_path):
    layout, project = home.layout, tmp_path / "p"
    write_session(layout, 1, project)
    Catalog(layout).of_project(project)
    stamp = json.loads((layout.rows_dir / "stamp.json").read_text())
    # A session made right after the listing, within the same tick of the file system's clock, leaves the
    # directory's mtime where the listing saw it.
    late = write_session(layout, 2, project)
    os.utime(layout.sessions_dir, ns=(stamp["mtime"], stamp["mtime"]))
    assert late in [e.session_id for e in Catalog(layout).of_project(project)]


@pytest.mark.parametrize("damage", ["project file gone", "project file corrupt", "everything but the stamp gone"])
def test_a_damaged_index_loses_to_the_sessions_dir(home, tmp_path, damage):
    layout, project = home.layout, tmp_path / "p"
    ids = [write_session(layout, n, project) for n in range(3)]
    Catalog(layout).of_project(project)
    time.sleep(1.2)
    Catalog(layout).of_project(project)  # the stamp is trusted from now on
    project_file = layout.rows_dir / "projects" / f"{key_of(os.path.realpath(project))}.json"
    assert json.loads(project_file.read_text())["ids"] == ids
    if damage == "project file gone":
        project_file.unlink()
    elif damage == "project file corrupt":
        project_file.write_text('{"v": 1, "ids": "')
    else:
        (layout.rows_dir / "listing.json").unlink()
        project_file.unlink()
    assert [e.session_id for e in Catalog(layout).of_project(project)] == ids
    assert json.loads(project_file.read_text())["ids"] == ids  # and the index is whole again


def test_projects_compare_by_resolved_real_path(home, tmp_path):
    layout, project = home.layout, tmp_path / "p"
    project.mkdir()
    (tmp_path / "link").symlink_to(project)
    sid = write_session(layout, 1, tmp_path / "link" / ".")
    assert [e.session_id for e in Catalog(layout).of_project(project)] == [sid]
    assert [e.session_id for e in Catalog(layout).of_project(tmp_path / "link")] == [sid]


# One project resolution ----------------------------------------------------------------------------------


def _toplevel(path: Path) -> Path:
    return Path(git_value(path, "rev-parse", "--show-toplevel"))


def test_the_project_is_the_one_git_names_in_a_subdirectory_a_linked_worktree_and_a_submodule(project, tmp_path):
    (project / "sub" / "deeper").mkdir(parents=True)
    linked = tmp_path / "linked"
    git(project, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "inside").mkdir()
    library = make_project(tmp_path / "library", {"lib.py": "x = 1\n"})
    git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "vendor/library")
    (project / "vendor" / "library" / "inner").mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "src").mkdir()
    places = [
        project, project / "sub" / "deeper", linked, linked / "inside", project / "vendor",
        project / "vendor" / "library", project / "vendor" / "library" / "inner", empty / "src",
    ]  # fmt: skip
    for place in places:
        assert find_root(place) == _toplevel(place), place
    assert find_root(linked / "inside") == linked.resolve() != project
    assert find_root(project / "vendor" / "library" / "inner") == (project / "vendor" / "library").resolve()
    # `chock run` finds the same root and refuses only the repository with no commit.
    assert workspace.project_root(linked / "inside") == linked.resolve()
    with pytest.raises(Refused, match="has no commit yet"):
        workspace.project_root(empty / "src")


def test_what_is_not_in_a_work_tree_is_refused_by_name(project, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(Refused, match="is not a git repository"):
        find_root(plain)
    with pytest.raises(Refused, match="inside a git directory"):
        find_root(project / ".git" / "refs")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".git").write_text("gitdir: /nowhere/at/all\n")
    with pytest.raises(Refused, match="points at /nowhere/at/all"):
        find_root(broken)


def _fake_git(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose `git` records that it ran (and then runs nothing)."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "git-ran"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 1\n')
    (bin_dir / "git").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, marker


def test_sessions_and_usage_start_no_git_and_work_in_a_repository_with_no_commit(home, tmp_path):
    empty = tmp_path / "empty"
    (empty / "src").mkdir(parents=True)
    git(empty, "init", "-q")
    sid = write_session(home.layout, 1, empty.resolve(), [{"type": "usage", "input_tokens": 3, "output_tokens": 1}])
    env, marker = _fake_git(tmp_path)
    listed = home.chock("sessions", cwd=empty / "src", env=env)
    assert listed.returncode == 0 and sid in listed.stdout and "abandoned" in listed.stdout
    used = home.chock("usage", cwd=empty / "src", env=env)
    assert used.returncode == 0 and used.stdout.splitlines()[-1].split()[:5] == ["total", "in", "3", "out", "1"]
    assert not marker.exists()
    refused = home.chock("sessions", cwd=tmp_path, env=env)
    assert refused.returncode == 3 and "is not a git repository" in refused.stderr


def test_sessions_imports_only_what_it_uses(home, project):
    code = (
        "import sys\nsys.argv = ['chock', 'sessions']\nfrom chock.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=project, env=home.env, capture_output=True, text=True, timeout=60
    )
    loaded = set(done.stderr.split())
    assert "chock.log.catalog" in loaded  # it read the state dir
    unwanted = {"click", "typing", "dataclasses", "subprocess", "asyncio", "chock.commands.cli", "chock.control.client"}
    unwanted |= {"chock.session.workspace", "httpx", "hashlib", "pickle", "chock.log.cold_fold"}
    assert not loaded & unwanted, loaded & unwanted
    assert not {name for name in loaded if name.startswith(("chock.providers", "chock.session", "chock.credentials"))}


# The daemon's rows and the local ones ----------------------------------------------------------------------


def test_sessions_prints_the_same_rows_from_the_daemon_and_from_the_state_dir(home, project, daemons):
    state = short_dir()  # the state dir's own socket must fit a unix socket path
    home.env["CHOCK_STATE_DIR"] = str(state)
    home.layout = home.layout.replace(state=state)
    ended = write_session(
        home.layout,
        1,
        project,
        [
            {"type": "usage", "input_tokens": 9, "output_tokens": 2},
            {"type": "session.end", "reason": "failed", "exit_code": 1},
        ],
    )
    abandoned = write_session(home.layout, 2, project, [{"type": "approval.request", "request_id": "r1"}])
    write_session(home.layout, 3, project / "elsewhere")
    local = {args: home.chock(*args, cwd=project).stdout for args in COMMANDS}
    assert [json.loads(line)["id"] for line in local["sessions", "--json"].splitlines()] == [abandoned, ended]
    # A socket file with nobody behind it: read around it, at once.
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(home.layout.daemon_socket))
    dead.close()
    assert home.chock("sessions", "--json", cwd=project).stdout == local["sessions", "--json"]
    home.layout.daemon_socket.unlink()
    daemon = daemons.start(socket_path=home.layout.daemon_socket)
    for args in COMMANDS:
        served = _served(home)
        asked = home.chock(*args, cwd=project)  # through the state dir's socket
        assert asked.returncode == 0 and asked.stdout == local[args]
        wait_until(lambda: _served(home) > served, what="the daemon to count the list it served")  # noqa: B023
        named = home.chock(*args, "--daemon", daemon.address, cwd=project)
        expected = local[args]
        if args == ("usage",):  # a daemon named is named on the total line: the host it counted on
            expected = expected.replace("\ntotal", f"\ntotal on {daemon.address}")
        assert named.returncode == 0 and " ".join(named.stdout.split()) == " ".join(expected.split()), named.stdout
    daemon.stop()
    gone = home.chock("sessions", "--daemon", daemon.address, cwd=project)  # a daemon named must answer
    assert gone.returncode != 0 and "chock daemon" in gone.stderr


COMMANDS = [("sessions", "--json"), ("sessions",), ("usage",)]


def _served(home) -> int:
    """How many verbs the daemon has answered, as its status record says (rewritten every half second)."""
    try:
        record = json.loads((home.layout.state / "daemon-status.json").read_text())
    except (FileNotFoundError, ValueError):
        return 0
    return record["connections"]["served"]


# The daemon's list: every change at once ------------------------------------------------------------------
#
# The daemon's catalog takes an entry as it is until inotify says its log changed (chock/log/freshness.py):
# each test makes one kind of change and lists at once, with no wait between the change and the list.


def _rows(daemon, project: Path) -> dict[str, dict]:
    return {line.row["id"]: line.row for line in daemon.client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)}


def _usage(event_id: int, tokens: int = 1) -> bytes:
    return encode({"id": event_id, "at": AT, "type": "usage", "input_tokens": tokens})


def test_the_daemons_list_shows_each_line_a_writer_appends_at_once(home, project, daemons):
    layout = home.layout
    sid = write_session(layout, 1, project, [])  # no end yet: its writer appends as it goes
    daemon = daemons.start()
    assert _rows(daemon, project)[sid]["last_event_id"] == 1
    # The writer keeps its log open, as a session does, and the daemon lists after every line.
    with open(layout.log_path(sid), "ab", buffering=0) as log:
        for event_id in range(2, 12):
            log.write(_usage(event_id))
            row = _rows(daemon, project)[sid]
            assert (row["last_event_id"], row["input_tokens"]) == (event_id, event_id - 1)
        torn = _usage(12)
        log.write(torn[:20])  # half a line: not a row yet
        assert _rows(daemon, project)[sid]["last_event_id"] == 11
        log.write(torn[20:])
        assert _rows(daemon, project)[sid]["last_event_id"] == 12
        log.write(encode({"id": 13, "at": AT, "type": "session.end", "reason": "failed", "exit_code": 1}))
        row = _rows(daemon, project)[sid]
        assert (row["status"], row["end_reason"]) == ("ended", "failed")


def test_the_daemons_list_shows_an_ended_session_carried_on_at_once(home, project, daemons):
    asks = {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "ls"}}]}
    home.replay_instance([{"text": "First.", "tool_calls": []}, asks])  # the second reply is the carried-on turn's
    assert home.chock("run", "first", cwd=project).returncode == 0
    (sid,) = os.listdir(home.layout.sessions_dir)
    daemon = daemons.start()
    assert _rows(daemon, project)[sid]["status"] == "ended"
    # `chock run --continue`, in a process of its own, appends to the ended log and waits for an approval.
    process = home.spawn("run", "--continue", sid, "again", cwd=project, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: b'"approval.request"' in home.layout.log_path(sid).read_bytes(), what="the approval request")
        row = _rows(daemon, project)[sid]
        assert (row["status"], row["pending_approvals"]) == ("waiting", 1)
        assert row["last_event_id"] == home.events(sid)[-1]["id"]
    finally:
        process.kill()
        process.wait(10)
    assert _rows(daemon, project)[sid]["status"] == "abandoned"


@pytest.mark.parametrize("how", ["renamed over it, the old one still open", "moved away, then another moved in"])
def test_the_daemons_list_shows_a_log_replaced_by_another_file_at_once(home, project, daemons, how):
    layout = home.layout
    sid = write_session(layout, 1, project, [{"type": "usage", "input_tokens": 5}])
    daemon = daemons.start()
    assert _rows(daemon, project)[sid]["input_tokens"] == 5
    path = layout.log_path(sid)
    other = path.with_name("other")
    other.write_bytes(path.read_bytes().replace(b'"input_tokens": 5', b'"input_tokens": 7'))
    assert b'"input_tokens": 7' in other.read_bytes()
    if how == "renamed over it, the old one still open":
        with open(path, "rb"):  # a reader of the old log (a watch, `chock attach`) keeps it in being
            os.replace(other, path)
            assert _rows(daemon, project)[sid]["input_tokens"] == 7
    else:
        os.rename(path, path.with_name("old"))
        assert sid not in _rows(daemon, project)  # no log: no session
        os.rename(other, path)
        assert _rows(daemon, project)[sid]["input_tokens"] == 7


@pytest.mark.parametrize("how", ["chock sessions remove", "its directory moved elsewhere"])
def test_a_session_removed_leaves_the_daemons_list_and_verbs_at_once(home, project, daemons, tmp_path, how):
    from chock.control.daemon_protocol import RemoveRequest
    from chock.control.framing import ProtocolError

    layout = home.layout
    kept, gone = write_session(layout, 1, project), write_session(layout, 2, project)
    daemon = daemons.start()
    assert list(_rows(daemon, project)) == [kept, gone]
    if how == "chock sessions remove":
        assert home.chock("sessions", "remove", gone, cwd=project).returncode == 0
    else:
        os.rename(layout.session_dir(gone), tmp_path / "archived")
    assert list(_rows(daemon, project)) == [kept]
    with pytest.raises(ProtocolError) as refused:  # one session's verbs look it up on its own
        daemon.client.call(RemoveRequest(str(project), gone))
    assert refused.value.code == "not-found"


def test_the_daemons_list_shows_a_new_session_at_once_and_relisting_writes_nothing(home, project, daemons):
    layout = home.layout
    sessions, stamp = layout.sessions_dir, layout.rows_dir / "stamp.json"
    daemon = daemons.start()
    ids = [write_session(layout, 0, project)]
    assert list(_rows(daemon, project)) == ids
    for number in range(1, 6):
        # Each made in the same tick of the file system's clock as the listing before it: the directory's
        # mtime stays where that listing saw it.
        seen = sessions.stat().st_mtime_ns
        ids.append(write_session(layout, number, project))
        os.utime(sessions, ns=(seen, seen))
        assert list(_rows(daemon, project)) == ids

    # Listing again while nothing changes writes nothing: not within the second after the change, and once
    # a listing past it has written the stamp other readers trust, not again.
    def stamped() -> int:
        return json.loads(stamp.read_text())["at"]  # when the listing the stamp records was made

    written = stamped()
    for _ in range(3):
        assert list(_rows(daemon, project)) == ids
    assert stamped() == written
    time.sleep(1.2)
    assert list(_rows(daemon, project)) == ids
    trusted = stamped()
    assert trusted - sessions.stat().st_mtime_ns > 1e9
    for _ in range(3):
        assert list(_rows(daemon, project)) == ids
    assert stamped() == trusted


def test_a_list_answered_from_memory_still_shows_each_change_to_ended_sessions_at_once(
    home, project, daemons, tmp_path
):
    """Every session has ended and nothing has changed: the daemon answers a list from the reply it made last. A
    line appended to one of the logs (looked at first by another verb, or not), a session removed and one added
    are each in the very next list."""
    layout = home.layout
    first, second = write_session(layout, 1, project), write_session(layout, 2, project)
    daemon = daemons.start()
    assert list(_rows(daemon, project)) == [first, second]
    time.sleep(RACY_NS / 1e9 + 0.2)  # a second past the sessions dir's last change: its listing is trusted
    for _ in range(3):
        assert list(_rows(daemon, project)) == [first, second]
    append(layout, first, _usage(3, tokens=7))
    assert _rows(daemon, project)[first]["input_tokens"] == 7
    assert _rows(daemon, project)[first]["input_tokens"] == 7
    os.rename(layout.session_dir(second), tmp_path / "archived")
    assert list(_rows(daemon, project)) == [first]
    third = write_session(layout, 3, project)
    assert list(_rows(daemon, project)) == [first, third]
    time.sleep(RACY_NS / 1e9 + 0.2)
    for _ in range(3):
        assert list(_rows(daemon, project)) == [first, third]
    append(layout, third, _usage(3, tokens=9))
    assert expect(daemon.client.call(dp.FindRequest(third)), dp.ListRow).row["input_tokens"] == 9
    assert [row["input_tokens"] for row in _rows(daemon, project).values()] == [7, 9]


def test_a_list_answered_from_memory_follows_a_symlink_moved_to_another_project(home, daemons, tmp_path):
    layout = home.layout
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    ids = {first: write_session(layout, 1, first), second: write_session(layout, 2, second)}
    link = tmp_path / "current"
    link.symlink_to(first)
    daemon = daemons.start()
    assert list(_rows(daemon, link)) == [ids[first]]
    time.sleep(RACY_NS / 1e9 + 0.2)  # a second past the sessions dir's last change: its listing is trusted
    for _ in range(3):
        assert list(_rows(daemon, link)) == [ids[first]]
    link.unlink()
    link.symlink_to(second)
    assert list(_rows(daemon, link)) == [ids[second]]
    assert list(_rows(daemon, link)) == [ids[second]]


def test_events_the_kernel_could_not_queue_leave_no_row_stale(home, project, daemons):
    layout = home.layout
    busy = [write_session(layout, n, project, []) for n in (1, 2)]
    quiet = write_session(layout, 3, project, [])
    daemon = daemons.start()
    assert {sid: row["last_event_id"] for sid, row in _rows(daemon, project).items()} == dict.fromkeys(
        [*busy, quiet], 1
    )
    # More events than the kernel queues for the daemon, between two lists (two logs in turn: the kernel
    # merges only an event equal to the one before it), then one more for a third log: that one is lost.
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    with (
        open(layout.log_path(busy[0]), "ab", buffering=0) as first,
        open(layout.log_path(busy[1]), "ab", buffering=0) as second,
    ):
        for event_id in range(2, queued // 2 + 10):
            first.write(_usage(event_id))
            second.write(_usage(event_id))
    append(layout, quiet, _usage(2))
    rows = _rows(daemon, project)
    assert rows[quiet]["last_event_id"] == 2
    assert rows[busy[0]]["last_event_id"] == rows[busy[1]]["last_event_id"] == queued // 2 + 9


@pytest.mark.parametrize("limit", [{"watches": 3}, {"instances": 0}], ids=["watch limit", "no inotify instance"])
def test_without_inotify_the_daemons_list_is_right_all_the_same(home, project, daemons, tmp_path, limit):
    from tests.fakes.limits import inotify_limited

    layout = home.layout
    ids = [write_session(layout, n, project, []) for n in range(4)]
    # The kernel's own refusal: with 3 watches, the sessions dir and two logs have one, the other logs none.
    daemon = daemons.start(prefix=inotify_limited(**limit))
    assert list(_rows(daemon, project)) == ids
    for event_id in range(2, 5):
        for sid in ids:
            append(layout, sid, _usage(event_id))
            assert _rows(daemon, project)[sid]["last_event_id"] == event_id
    path = layout.log_path(ids[0])
    replacement = path.with_name("other")
    replacement.write_bytes(path.read_bytes() + _usage(5, 10))
    with open(path, "rb"):
        os.replace(replacement, path)
        assert _rows(daemon, project)[ids[0]]["input_tokens"] == 13
    os.rename(layout.session_dir(ids[1]), tmp_path / "archived")
    assert list(_rows(daemon, project)) == [ids[0], *ids[2:]]


def _in_place_of(path: Path, kind: str, tmp_path: Path) -> None:
    """A FIFO, a symlink (to a FIFO: followed, it would hang) or a directory where a cache file was."""
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "symlink":
        target = tmp_path / f"fifo-{path.name}"
        if not target.exists():
            os.mkfifo(target, 0o600)
        path.symlink_to(target)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
@pytest.mark.parametrize("which", ["rows", "stamp.json", "listing.json", "project file"])
def test_a_fifo_symlink_or_directory_in_place_of_a_cache_file_is_a_file_that_is_not_there(
    home, project, daemons, tmp_path, kind, which
):
    """Nothing waits on it (a FIFO's open would block until a writer came) and nothing follows it: `chock
    sessions` and a daemon's first `list` answer, and list every session."""
    layout = home.layout
    ids = [write_session(layout, n, os.path.realpath(project)) for n in (1, 2)]
    Catalog(layout).of_project(project)  # the cache and the index are written
    key = key_of(os.path.realpath(project))
    path = {
        "rows": _cache_file(layout, project),
        "stamp.json": layout.rows_dir / "stamp.json",
        "listing.json": layout.rows_dir / "listing.json",
        "project file": layout.rows_dir / "projects" / f"{key}.json",
    }[which]
    assert path.is_file()
    _in_place_of(path, kind, tmp_path)
    listed = home.chock("sessions", cwd=project, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert all(sid in listed.stdout for sid in ids), listed.stdout
    _in_place_of(path, kind, tmp_path)  # the listing may have written a file over it
    daemon = daemons.start()
    assert [line.row["id"] for line in daemon.client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)] == ids


def test_the_daemons_first_list_imports_no_pathlib(tmp_path):
    """The daemon's first `list` (the catalog, the index, the row cache, the reply) makes no pathlib object:
    pathlib costs a cold interpreter tens of milliseconds (docs/architecture.md#start-up). Run with -S, so no
    site hook has imported it first."""
    state, project = tmp_path / "state", tmp_path / "project"
    project.mkdir()
    for n in range(3):
        session_id = f"20261201-07345{n}-00000{n}"
        (state / "sessions" / session_id).mkdir(parents=True)
        start = {"id": 1, "at": AT, "type": "session.start", "session": session_id, "project": str(project)}
        end = {"id": 2, "at": AT, "type": "session.end", "reason": "completed", "exit_code": 0}
        (state / "sessions" / session_id / "log.jsonl").write_bytes(encode(start) + encode(end))
    code = (
        "import sys\n"
        "from chock.paths import Layout\n"
        "from chock.log.catalog import Catalog\n"
        "from chock.daemon.verbs import _list_line\n"
        f"layout = Layout({str(tmp_path / 'c.zon')!r}, {str(state)!r}, {str(tmp_path / 'data')!r}, "
        f"{str(tmp_path / 'cache')!r})\n"
        f"data, save = Catalog(layout, watched=True).reply_then_save({str(project)!r}, _list_line)\n"
        "save()\n"
        "print(data.count(b'\\n'), 'pathlib' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["3", "False"], done.stdout + done.stderr
