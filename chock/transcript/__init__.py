"""`chock export`: a session's log as a transcript a person reads — Markdown, HTML — or as the log's own lines
(docs/architecture.md#export).

`entries` turns one event into an `EventView` (what a reader sees of it: a heading, facts, blocks of text);
`markdown` and `html` write entries, escaping every text that came from the log; `stream` reads the log through
the daemon in pages and writes each event as it is read, so an export's memory does not grow with the log.
"""
