"""The session log: the single truth of a session (SPEC §4).

`events` is the line format, `writer` the owner's side (lock + append), `reader` everyone else's
(replay after an id, follow, probe), `fold` rebuilds state from events.
"""
