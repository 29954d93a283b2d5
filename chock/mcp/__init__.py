"""MCP: Chock as a Model Context Protocol client (docs/mcp.md).

- `event_stream`: a text/event-stream parser with no I/O, bounded.
- `http_pump`: the Streamable HTTP transport of one server: POSTs, event streams, the session id, resumption.
"""
