"""MCP: a session's own tools from Model Context Protocol servers (docs/mcp.md).

confinement.py   the bubblewrap command line one stdio server runs under
tool_names.py    the names the model is given for servers' tools (`mcp__<server>__<tool>`)
supervisor.py    a session's servers: started in parallel, bounded, restarted once, stopped
"""
