"""MCP servers: a session's own tools from the Model Context Protocol (docs/mcp.md).

- jsonrpc_client: the client as a sans-I/O state machine (bytes in, events out, bytes to send)
- line_messages: stdio's framing, one message a line, bounded
- stdio_pump: whole messages over a started process's stdin and stdout; its stderr's tail kept
- server_link: `ServerLink`, one connected server: the client driven over a pump by one reader task
- event_stream: text/event-stream (server-sent events) parsed with no I/O, bounded
- http_pump: Streamable HTTP: POSTs answered with JSON or event streams, the session id, resumption, DELETE
- confinement: the bubblewrap command line one stdio server runs under
- tool_names: the names the model is given for servers' tools (`mcp__<server>__<tool>`)
- result_text: what the model reads of a tool's result, bounded; images and binaries described
- supervisor: `McpServers`, a session's servers: started in parallel, bounded, restarted once, stopped
- declarations: config.zon's `.mcp` and a project's `.chock/mcp.zon` as `ServerSpec`s, every mistake refused
  naming its key path
- trust: the project declaration this host's person trusted, its exact bytes, per project
- session_specs: the servers a session starts: config.zon's, and the project's once trusted (asked at a terminal)
- probing: each server tried over an empty directory, for `chock mcp list` and `chock doctor`
"""
