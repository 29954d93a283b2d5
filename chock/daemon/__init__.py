"""`chock daemon`: owns sessions as `chock run` children and serves their logs over the control protocol.

SPEC §6–§7. The daemon never runs the agent loop, never writes a session log and never reads a credential;
the seed's sentence is the design: "It runs a child per session and never runs the agent loop itself ...
which leaves this one free to use threads for its own sockets."

- `server`     `run()`: options, `daemon.lock`, listeners, the accept loop, signals, readiness, idle exit.
- `listeners`  binding and adopting the sockets: the unix socket's hygiene, TCP, socket activation.
- `lock`       `daemon.lock`: one daemon per state dir, naming the pid of the one that holds it.
- `connection` one connection: the peer check, the greeting, one bounded verb line, the reply's close.
- `verbs`      one small function per verb, in a table (STYLE: tmux's command table).
- `children`   spawning `chock run` children, waiting for them to hold their log, reaping them.
- `watch`      one follower per watched session, fanned out to every watcher of it.
- `status`     `daemon-status.json` and `daemon-activity.jsonl` (no message text, no user paths).
- `service`    the systemd / launchd glue the daemon uses, absent-tolerant.
- `context`    the state every connection thread shares.
"""
