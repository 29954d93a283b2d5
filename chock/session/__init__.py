"""`chock run`: one session's runtime — the agent loop, its tools, the sandbox, the workspace, its sockets."""
