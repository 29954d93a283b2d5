"""connect + hello + `list` of a project with 100 sessions, against a bare unix-socket echo round trip.

Both are measured in the same run on the same machine, with the same raw socket client: the echo is one
connect, one line each way and a close with nothing behind it, so the ratio is what the daemon adds (the
greeting, the rows — folded once, and looked at again only for a log inotify says changed —, the lock probe
of each unfinished session, and the rows' bytes). What a client then makes of the rows is its own cost: the
blocking client's parse of the same reply is timed on its own.

    python bench/daemon_list.py           # prints the figures
    python bench/daemon_list.py --quick   # under a minute: asserts every row is delivered, every time
"""

from __future__ import annotations

import socket
import statistics
import time

import _common
from _state import make_project, write_sessions

from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient
from chock.log.index import RACY_NS

SESSIONS = 100
EVENTS_PER_SESSION = 40


def main() -> None:
    options = _common.parse(_common.arguments(__doc__, "fewer rounds; assert delivery only", installed=True))
    repeats = 20 if options.quick else 300
    with _common.scratch() as root:
        project = make_project(root / "project")
        ids = write_sessions(root, project, SESSIONS, EVENTS_PER_SESSION)
        echo = _common.Echo(root / "echo.sock")
        with _common.running_daemon(root) as socket_path:
            client = ControlClient(f"unix:{socket_path}")
            request = f"hello chock-control 1\nlist {project}\n".encode()

            def listing() -> bytes:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(str(socket_path))
                    sock.sendall(request)
                    reply = bytearray()
                    while chunk := sock.recv(1 << 20):
                        reply += chunk
                return bytes(reply)

            def parsed() -> None:
                rows = [
                    (line.started_at, line.row)
                    for line in client.collect(dp.ListRequest(project), most=dp.MAX_SESSIONS)
                ]
                assert [row["id"] for _, row in rows] == ids, "every session's row, oldest first"
                assert all(row["status"] == "ended" for _, row in rows)

            parsed()  # the first list folds every log; later ones find them unchanged
            # A listing of the sessions dir within a second of its last change is made again by the next
            # reader (chock/log/index.py, RACY_NS): measured here is the steady state a page's polling meets.
            time.sleep(max(0.0, RACY_NS / 1e9 - (time.time() - (root / "state" / "sessions").stat().st_mtime)))
            parsed()
            lines = listing().splitlines()
            assert lines[0] == b"ok chock-control 1" and len(lines) == SESSIONS + 1, lines[:2]
            echo.round_trip()
            baseline = _common.timed(echo.round_trip, repeats * 5)
            measured = _common.timed(listing, repeats)
            with_parse = _common.timed(parsed, repeats)
            # The client's own share, in CPU time of this thread (the daemon's time and the wait for it left out):
            # on a shared machine it moves far less than the wall-clock figures.
            cpu = time.thread_time()
            for _ in range(repeats):
                parsed()
            client_cpu = (time.thread_time() - cpu) / repeats
            body = listing().split(b"\n", 1)[1]
            assert len(dp.ListRow.decode_block(body) or ()) == SESSIONS, "the reply is read in one pass"
            cpu = time.thread_time()
            for _ in range(repeats):
                dp.ListRow.decode_block(body)
            parse_cpu = (time.thread_time() - cpu) / repeats
    if options.quick:
        print(f"daemon_list: quick mode: {repeats} lists delivered all {SESSIONS} rows in order")
        return
    base, median, p99 = statistics.median(baseline), statistics.median(measured), _common.percentile(measured, 99)
    print(f"echo round trip (connect, one line each way, close): median {base * 1e6:.0f} µs")
    print(f"connect + hello + list of {SESSIONS} sessions: median {median * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")
    print(f"ratio {median / base:.1f}")
    low, high = min(with_parse), max(with_parse)
    client = statistics.median(with_parse)
    print(
        f"the same through the blocking client, rows parsed: low {low * 1e3:.2f} median {client * 1e3:.2f} "
        f"high {high * 1e3:.2f} ms, ratio {client / base:.1f} (goal <= 10)"
    )
    print(f"the client's own CPU per call: {client_cpu * 1e6:.0f} µs, the rows' parse {parse_cpu * 1e6:.0f} µs of it")


if __name__ == "__main__":
    main()
