"""MCP servers: a session's own tools from the Model Context Protocol (docs/mcp.md).

- jsonrpc_client: the client as a sans-I/O state machine (bytes in, events out, bytes to send)
- line_messages: stdio's framing, one message a line, bounded
- stdio_pump: whole messages over a started process's stdin and stdout; its stderr's tail kept
- server_link: `ServerLink`, one connected server: the client driven over a pump by one reader task
- event_stream: text/event-stream (server-sent events) parsed with no I/O, bounded
- http_pump: Streamable HTTP: POSTs answered with JSON or event streams, the session id, resumption, DELETE
"""
