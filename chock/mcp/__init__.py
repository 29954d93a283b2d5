"""MCP servers: the tools a person or a project brings to a session (docs/mcp.md).

declarations   config.zon's `.mcp` and a project's `.chock/mcp.zon` as `ServerSpec`s, every mistake refused
               naming its key path
trust          which project declaration this host's person trusted: the exact bytes, per project
session_servers  the servers a session starts: config's, and the project's once trusted (asked at a terminal)
"""
