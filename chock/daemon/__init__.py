"""`chock daemon`: owns sessions as `chock run` children and serves their logs over the control protocol.

The daemon never runs the agent loop, never writes a session log and never reads a credential: it runs a
child per session, which leaves it free to serve its connections from one selector loop and a few threads
(docs/architecture.md#the-daemon).

- `options`    `chock daemon`'s options as a table, read with or without click (docs/architecture.md#start-up).
- `server`     `run()`: `daemon.lock`, listeners, the selector loop, signals, readiness, idle exit.
- `accepted`   one accepted connection: the peer check, the greeting and request under their bounds, its close.
- `verbs`      one small function per verb, in a table; imported at the first request.
- `reply`      how a verb writes its reply, whole or as a producer makes it.
- `children`   starting, carrying on and reaping `chock run` children.
- `resume`     after a reboot, carrying on the sessions it interrupted (docs/architecture.md#after-a-reboot).
- `watch`      one follower per watched session: the thread pump around the log's fan-out.
- `status`     `daemon-status.json`, `daemon-activity.jsonl` and the journal's records (no text, no paths).
- `listeners`  binding and taking over the listening sockets (the rules are `chock.platform.listening`'s).
- `lock`       `daemon.lock`: one daemon per state dir, naming the pid of the one that holds it.
- `context`    the state every connection shares; the catalog and the watch hub are made at first use.
"""
