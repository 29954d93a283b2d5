"""A `list` never holds the daemon's selector loop: one that must read files (the first, which folds every log)
is answered in a thread, and the daemon answers other connections meanwhile (docs/architecture.md#daemon)."""

from __future__ import annotations

import os
import threading

from chock.control import daemon_protocol as dp
from chock.control.client import events_of
from chock.log.events import encode
from tests.fakes.wait import wait_until
from tests.test_catalog import log_bytes, session_id, write_session


def _writer(path: str) -> int | None:
    """A write end of the FIFO at `path` once something holds its read end (the daemon's list), else None."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None


def test_a_first_list_that_waits_on_a_log_leaves_other_connections_answered(home, project, daemons, tmp_path):
    layout, real = home.layout, os.path.realpath(project)
    ids = [write_session(layout, n, real) for n in range(1, 4)]
    # One more session whose log is a FIFO for now: reading it waits until this test writes its first line, as a
    # log on a slow disk, a huge log or a cache being read would hold a listing.
    slow = session_id(4)
    layout.session_dir(slow).mkdir(parents=True)
    fifo = os.fspath(layout.log_path(slow))
    os.mkfifo(fifo)
    daemon = daemons.start()
    listed: list[list[str]] = []
    lister = threading.Thread(target=lambda: listed.append(_ids(daemon, project)))
    lister.start()
    writer = wait_until(lambda: _writer(fifo), what="the daemon's first list to read the slow log")
    try:
        # The list is under way, waiting on the log: another connection is answered all the same.
        assert daemon.client.ping() == 1
        events = events_of(daemon.client.stream(dp.ReadRequest(ids[0], 0)))
        assert [event["type"] for event in events] == ["session.start", "session.end"]
    finally:
        start = {"type": "session.start", "session": slow, "project": real, "message": "task 4"}
        whole = log_bytes([start, {"type": "session.end", "reason": "completed", "exit_code": 0}])
        (tmp_path / "log").write_bytes(whole)
        os.replace(tmp_path / "log", fifo)  # the log is a file from now on
        os.write(writer, encode({"id": 1, **start}))  # and the first line the list waits for arrives
        os.close(writer)
        lister.join(60)
    assert listed == [[*ids, slow]]
    # Warm, the next list is answered from memory, in the loop.
    assert _ids(daemon, project) == [*ids, slow]


def _ids(daemon, project) -> list[str]:
    return [line.row["id"] for line in daemon.client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)]
