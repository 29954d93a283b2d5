"""The session log: the single truth of a session.

`events` is the line format, `writer` the owner's side (lock + append), `reader` everyone else's (replay
after an id, follow, probe). `row` folds what a listing shows of a session and `fold` extends it to the
whole conversation an owner needs. `catalog` is every session of the state dir as rows, folded
incrementally, with `rowcache` keeping rows across processes, `index` finding a project's sessions and
`freshness` saying which rows inotify has seen change. `fanout` is one log's lines shared among many
subscribers, `shrink` fits an event too large for its line, `removal` removes an ended session.
"""
