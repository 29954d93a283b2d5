"""A stdio MCP server that misbehaves on purpose, or probes its sandbox: run by /usr/bin/python3 inside one.

Standard library only (it runs under the system's python3, in the sandbox, with nothing of the repository on
its path). `argv[1]` is how it starts: `well` (answers), `silent` (never answers `initialize`), `tools<N>`
(N tools), `schema1mb`, `schema5mb`, `flood` (100,000 notifications before each answer), `list-changed` (its
tool list grows by one at each call), `meet:<mine>:<other>:<dir>` (answers `initialize` only once a server started
with `meet:<other>:<mine>:<dir>` is up too: both write `dir`, the workspace, so run them with `.workspace = "write"`),
`once` (answers; started again with the same HOME, never answers `initialize`), `relist-storm` (sends 50
`notifications/tools/list_changed` before each call's answer, and appends a line to $HOME/listed at each
`tools/list`).
Further arguments are ignored (tests pass a marker there, to find its
processes). Its tools, by name:

    echo     {"text"}: the text back
    probe    {"read": [paths], "write": path, "connect": port}: what succeeded, what failed and how
    big      a 10 MB text result
    garbage  a line of invalid JSON instead of a result
    hang     never answers (a `notifications/cancelled` it is sent is written to $HOME/cancelled)
    refuse   a JSON-RPC error
    steps    three progress notifications (when asked for them), then "done"
    die      exits at once
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "well"
TOOLS = ["echo", "probe", "big", "garbage", "hang", "die", "refuse", "steps"]
extra = 0


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tool(name: str, schema: dict | None = None) -> dict:
    return {"name": name, "description": f"the {name} tool", "inputSchema": schema or {"type": "object"}}


def tools() -> list[dict]:
    if MODE.startswith("tools"):  # tools1000: that many
        return [tool(f"t{index:05}") for index in range(int(MODE.removeprefix("tools")))]
    if MODE in ("schema1mb", "schema5mb"):
        size = (1 if MODE == "schema1mb" else 5) * 1024 * 1024
        huge = {"type": "object", "properties": {"x": {"type": "string", "description": "x" * size}}}
        return [tool("echo"), tool("huge", huge)]
    return [tool(name) for name in TOOLS] + [tool(f"extra{index}") for index in range(extra)]


def probe(args: dict) -> dict:
    said: dict = {}
    for path in args.get("read", []):
        try:
            with open(path, "rb") as file:
                said[f"read {path}"] = f"read {len(file.read())} bytes"
        except OSError as error:
            said[f"read {path}"] = f"failed: {error.strerror}"
    if "write" in args:
        try:
            with open(args["write"], "w") as file:
                file.write("written by a server\n")
            said["write"] = "written"
        except OSError as error:
            said["write"] = f"failed: {error.strerror}"
    if "connect" in args:
        try:
            with socket.create_connection(("127.0.0.1", args["connect"]), timeout=5) as connection:
                said["connect"] = "connected: " + connection.recv(100).decode()
        except OSError as error:
            said["connect"] = f"failed: {error.strerror or error}"
    said["environ"] = sorted(os.environ)
    said["home"] = os.environ.get("HOME", "")
    said["workspace"] = os.environ.get("CHOCK_WORKSPACE", "")
    said["cwd"] = os.getcwd()
    return said


def call(request_id: object, name: str, args: dict, token: object) -> None:
    global extra
    if MODE == "list-changed":
        extra += 1
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    if MODE == "relist-storm":
        for _ in range(50):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    if name == "hang":
        return
    if name == "refuse":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "refuse takes no arguments"}})
        return
    if name == "die":
        os._exit(3)
    if name == "garbage":
        sys.stdout.write("{this is not json\n")
        sys.stdout.flush()
        return
    if name == "steps" and token is not None:
        for step in (1, 2, 3):
            params = {"progressToken": token, "progress": step, "total": 3, "message": f"step {step}"}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
    if name == "big":
        text = "x" * (10 * 1024 * 1024)
    elif name == "steps":
        text = "done"
    elif name == "probe":
        text = json.dumps(probe(args))
    else:
        text = str(args.get("text", ""))
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})


def meet(mine: str, other: str, directory: str) -> None:
    """Say this server is up (a file in `directory`), and wait for the other to say so (at most 60 s)."""
    with open(os.path.join(directory, f"up-{mine}"), "w"):
        pass
    for _ in range(6000):
        if os.path.exists(os.path.join(directory, f"up-{other}")):
            return
        time.sleep(0.01)


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            if method == "notifications/cancelled":
                with open(os.path.join(os.environ["HOME"], "cancelled"), "a") as file:
                    file.write(json.dumps(message.get("params")) + "\n")
            continue  # a notification
        if MODE == "flood":
            progress = {"progressToken": "none", "progress": 1}
            for _ in range(100_000):
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress})
        if method == "initialize":
            if MODE == "silent":
                continue
            if MODE == "once":
                again = os.path.exists(os.path.join(os.environ["HOME"], "started"))
                with open(os.path.join(os.environ["HOME"], "started"), "a") as file:
                    file.write("started\n")
                if again:
                    continue
            if MODE.startswith("meet:"):
                meet(*MODE.split(":", 3)[1:])
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            if MODE == "relist-storm":
                with open(os.path.join(os.environ["HOME"], "listed"), "a") as file:
                    file.write("listed\n")
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools()}})
        elif method == "tools/call":
            params = message.get("params", {})
            token = (params.get("_meta") or {}).get("progressToken")
            call(request_id, params.get("name", ""), params.get("arguments") or {}, token)
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
