"""A new daemon's first `list` of a project of 5,000 sessions with no row cache (goal < 1 s).

The sessions are ended logs of 100 events each (`_state.write_sessions`, about 20 kB a log), their files in the
page cache; the cache dir is deleted before each daemon starts, so the first `list` folds every log. Prints
low / median / high over the rounds, each a fresh daemon; a warm `list` and the echo round trip for scale.

    python bench/list_cold.py           # 5,000 sessions, 5 rounds
    python bench/list_cold.py --quick   # 200 sessions, 2 rounds: asserts every row only
"""

from __future__ import annotations

import _common
from _state import make_project, write_sessions
from scaling import check, forget_cache, listed

EVENTS = 100
GOAL_SECONDS = 1.0


def main() -> None:
    parser = _common.arguments(__doc__ or "", "200 sessions, 2 rounds; asserts every row only", installed=True)
    parser.add_argument("--sessions", type=int, default=5000, help="sessions of the project (5000)")
    parser.add_argument("--rounds", type=int, default=5, help="fresh daemons, each with no cache (5)")
    options = _common.parse(parser)
    sessions, rounds = (200, 2) if options.quick else (options.sessions, options.rounds)
    with _common.scratch() as root:
        project = make_project(root / "project")
        ids = write_sessions(root, project, sessions, EVENTS)
        cold, warm = [], []
        for _ in range(rounds):
            forget_cache(root)
            with _common.running_daemon(root) as socket_path:
                took, rows = listed(socket_path, project)
                check(rows, ids, EVENTS, "the daemon's first list with no cache")
                cold.append(took)
                took, rows = listed(socket_path, project)
                check(rows, ids, EVENTS, "the daemon's warm list")
                warm.append(took)
    if options.quick:
        print(f"list_cold: quick mode: {rounds} daemons listed all {sessions} sessions with no cache")
        return
    print(f"{sessions:,} sessions x {EVENTS} events, {rounds} daemons (low / median / high):")
    print(f"  first list, no row cache  {_common.spread(cold)}   (goal < {GOAL_SECONDS:g} s)")
    print(f"  the next list             {_common.spread(warm)}")


if __name__ == "__main__":
    main()
