"""A small MCP server over stdio (revision 2025-11-25), with switches for a hostile one. Python's standard library
only, so that it also runs inside a sandbox with nothing but /usr.

    python3 tests/fakes/mcp_server.py [switches]

Its tools (always offered, in this order):
    echo {text}        -> the text, and structuredContent {"text": …}
    add {a, b}         -> structuredContent {"sum": a + b} and the sum as text
    fail {}            -> a result with isError true
    slow {seconds}     -> reports progress each 0.1 s (when given a progressToken), answers after `seconds`
                          unless cancelled (a cancelled call is never answered)
    ask {message, withdraw}
                       -> asks the client an elicitation (`message`, default "Which colour?"), answers with what
                          came back (JSON as text); with `withdraw`, waits for a file `$HOME/withdraw` instead,
                          then withdraws it (notifications/cancelled) and answers "withdrawn"
    extra {}           -> "extra ran", once `grow` added it
    grow {later}       -> adds a tool `extra`, sends notifications/tools/list_changed, then answers; with `later`,
                          answers at once, and does the rest once a file `$HOME/grow` exists (at most 120 s),
                          then writes `$HOME/grown`
    hang {}            -> never answers
    garbage {}         -> answers with a line that is not JSON
    big {megabytes}    -> answers with a result of that many MiB (default 10) on one line
    flood {count}      -> sends `count` notifications/progress and notifications/message, then answers
    requests {count}   -> sends `count` pings and sampling/createMessage requests, then answers
    die {}             -> writes to stderr and exits with status 3 without answering
    env {}             -> the server's environment as JSON text (what reached it)

Switches, for what happens before any call:
    --log FILE            append every line received to FILE (to see notifications/cancelled arrive)
    --version V           answer initialize with protocolVersion V (default: the client's, if known)
    --tools N             offer N more tools, tool-00000 …
    --page-size N         tools/list pages of N tools (default: all on one page)
    --schema-bytes N      give `echo` an inputSchema of about N bytes
    --tool-bytes N        give each of the --tools more a description of N bytes
    --hang-initialize     never answer initialize
    --deaf                answer tools/list, then never read stdin again (a client writing to it blocks)
    --garbage-initialize  answer initialize with a line that is not JSON
    --die-initialize      exit with status 4 on initialize, after writing to stderr
    --stderr TEXT         write TEXT to stderr at start
    --banner TEXT         write TEXT as a line to stdout at start (a server that logs to stdout)
    --hostile-description give `echo` a description with terminal control sequences in it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

KNOWN = ("2025-11-25", "2025-06-18", "2025-03-26")
_write_lock = threading.Lock()
_cancelled: set[Any] = set()
_answers: dict[Any, Any] = {}
_answered = threading.Condition()
_next_id = [0]


def write(message: dict[str, Any] | bytes) -> None:
    line = message if isinstance(message, bytes) else json.dumps({"jsonrpc": "2.0", **message}).encode()
    with _write_lock:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()


def result(request_id: Any, value: dict[str, Any]) -> None:
    write({"id": request_id, "result": value})


def text(request_id: Any, words: str, structured: dict[str, Any] | None = None, error: bool = False) -> None:
    value: dict[str, Any] = {"content": [{"type": "text", "text": words}]}
    if structured is not None:
        value["structuredContent"] = structured
    if error:
        value["isError"] = True
    result(request_id, value)


def ask_client(method: str, params: dict[str, Any], timeout: float = 60) -> Any:
    with _answered:
        _next_id[0] += 1
        request_id = f"s{_next_id[0]}"
    write({"id": request_id, "method": method, "params": params})
    with _answered:
        _answered.wait_for(lambda: request_id in _answers, timeout)
        return _answers.pop(request_id, None)


class Server:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        schema: dict[str, Any] = {"type": "object", "properties": {"text": {"type": "string"}}}
        if options.schema_bytes:
            schema["description"] = "x" * options.schema_bytes
        self.tools: list[dict[str, Any]] = [
            {"name": "echo", "description": options.echo_description, "inputSchema": schema},
            {
                "name": "add",
                "description": "Add two numbers",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
            },
            *(
                {"name": name, "description": f"The {name} tool", "inputSchema": {"type": "object"}}
                for name in ("fail", "slow", "ask", "grow", "hang", "garbage", "big", "flood", "requests", "die", "env")
            ),
            *(
                {"name": f"tool-{n:05d}", "description": "m" * options.tool_bytes, "inputSchema": {"type": "object"}}
                for n in range(options.tools)
            ),
        ]

    def initialize(self, request_id: Any, params: dict[str, Any]) -> None:
        if self.options.hang_initialize:
            return
        if self.options.garbage_initialize:
            write(b"{this is not json")
            return
        if self.options.die_initialize:
            sys.stderr.write("fake server: refusing to start\x1b[31m in red\n")
            sys.stderr.flush()
            os._exit(4)
        asked = params.get("protocolVersion")
        version = self.options.version or (asked if asked in KNOWN else KNOWN[0])
        info = {"name": "fake-mcp", "version": "1.0"}
        capabilities = {"tools": {"listChanged": True}}
        result(request_id, {"protocolVersion": version, "capabilities": capabilities, "serverInfo": info})

    def list_tools(self, request_id: Any, params: dict[str, Any]) -> None:
        start = int(params.get("cursor") or 0)
        size = self.options.page_size or len(self.tools)
        page = self.tools[start : start + size]
        value: dict[str, Any] = {"tools": page}
        if start + size < len(self.tools):
            value["nextCursor"] = str(start + size)
        result(request_id, value)

    def call(self, request_id: Any, params: dict[str, Any]) -> None:
        name, args = params.get("name"), params.get("arguments") or {}
        token = (params.get("_meta") or {}).get("progressToken")
        if name == "echo":
            text(request_id, str(args.get("text", "")), {"text": args.get("text", "")})
        elif name == "add":
            total = args.get("a", 0) + args.get("b", 0)
            text(request_id, str(total), {"sum": total})
        elif name == "fail":
            text(request_id, "this tool always fails", error=True)
        elif name == "slow":
            self.slow(request_id, float(args.get("seconds", 1)), token)
        elif name == "ask":
            asked = {
                "mode": "form", "message": args.get("message", "Which colour?"),
                "requestedSchema": {"type": "object", "properties": {"colour": {"type": "string"}}},
            }  # fmt: skip
            if args.get("withdraw"):
                self.withdrawn(request_id, asked)
            else:
                text(request_id, json.dumps(ask_client("elicitation/create", asked)))
        elif name == "grow" and args.get("later"):
            text(request_id, "will grow")
            self.grow_later()
        elif name == "grow":
            if not any(tool["name"] == "extra" for tool in self.tools):
                self.tools.append({"name": "extra", "description": "Added later", "inputSchema": {"type": "object"}})
            write({"method": "notifications/tools/list_changed"})
            text(request_id, "grown")
        elif name == "hang":
            return
        elif name == "garbage":
            write(b"\x1b[2J<html>not json at all")
        elif name == "big":
            size = int(float(args.get("megabytes", 10)) * 1024 * 1024)
            text(request_id, "y" * size)
        elif name == "flood":
            for n in range(int(args.get("count", 10_000))):
                write({"method": "notifications/progress", "params": {"progressToken": token or 0, "progress": n}})
                write({"method": "notifications/message", "params": {"level": "info", "data": n}})
            text(request_id, "flooded")
        elif name == "requests":
            for n in range(int(args.get("count", 1000))):
                write({"id": f"p{n}", "method": "ping"})
                write({"id": f"m{n}", "method": "sampling/createMessage", "params": {"messages": []}})
            text(request_id, "requested")
        elif name == "die":
            sys.stderr.write("fake server: dying mid-call\n")
            sys.stderr.flush()
            os._exit(3)
        elif name == "env":
            text(request_id, json.dumps(dict(os.environ)))
        elif name == "extra" and any(tool["name"] == "extra" for tool in self.tools):
            text(request_id, "extra ran")
        else:
            write({"id": request_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})

    def slow(self, request_id: Any, seconds: float, token: Any) -> None:
        steps = max(1, int(seconds / 0.1))
        for step in range(steps):
            if request_id in _cancelled:
                return
            if token is not None:
                progress = {"progressToken": token, "progress": step + 1, "total": steps, "message": f"step {step + 1}"}
                write({"method": "notifications/progress", "params": progress})
            time.sleep(seconds / steps)
        if request_id not in _cancelled:
            text(request_id, f"slept {seconds:g} s")

    def handle(self, message: dict[str, Any]) -> None:
        method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None:
            with _answered:
                _answers[request_id] = message.get("result", message.get("error"))
                _answered.notify_all()
        elif method == "initialize":
            self.initialize(request_id, params)
        elif method == "tools/list":
            self.list_tools(request_id, params)
            if self.options.deaf:
                time.sleep(3600)
        elif method == "tools/call":
            threading.Thread(target=self.call, args=(request_id, params), daemon=True).start()
        elif method == "ping":
            result(request_id, {})
        elif method == "notifications/cancelled":
            _cancelled.add(params.get("requestId"))
        elif request_id is not None and not method.startswith("notifications/"):
            write({"id": request_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})

    def grow_later(self) -> None:
        """Wait for `$HOME/grow` (at most 120 s), add `extra`, say the list changed, then write `$HOME/grown`."""
        home = os.environ.get("HOME", "/nonexistent")
        for _ in range(12000):
            if os.path.exists(os.path.join(home, "grow")):
                break
            time.sleep(0.01)
        self.tools.append({"name": "extra", "description": "Added later", "inputSchema": {"type": "object"}})
        write({"method": "notifications/tools/list_changed"})
        with open(os.path.join(home, "grown"), "w") as told:
            told.write("grown\n")

    def withdrawn(self, request_id: Any, asked: dict[str, Any]) -> None:
        """Ask, wait for `$HOME/withdraw` (at most 120 s), withdraw the question, answer the call."""
        with _answered:
            _next_id[0] += 1
            question = f"s{_next_id[0]}"
        write({"id": question, "method": "elicitation/create", "params": asked})
        flag = os.path.join(os.environ.get("HOME", "/nonexistent"), "withdraw")
        for _ in range(12000):
            if os.path.exists(flag):
                break
            time.sleep(0.01)
        write({"method": "notifications/cancelled", "params": {"requestId": question, "reason": "not needed"}})
        text(request_id, "withdrawn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log")
    parser.add_argument("--version")
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--schema-bytes", type=int, default=0)
    parser.add_argument("--tool-bytes", type=int, default=9)
    parser.add_argument("--hang-initialize", action="store_true")
    parser.add_argument("--deaf", action="store_true")
    parser.add_argument("--garbage-initialize", action="store_true")
    parser.add_argument("--die-initialize", action="store_true")
    parser.add_argument("--stderr")
    parser.add_argument("--banner")
    parser.add_argument("--hostile-description", action="store_const", dest="echo_description",
                        const="Say the text back\x1b]0;pwned\x07\x1b[2J", default="Say the text back")  # fmt: skip
    options = parser.parse_args()
    if options.stderr:
        sys.stderr.write(options.stderr + "\n")
        sys.stderr.flush()
    if options.banner:
        write(options.banner.encode())
    server = Server(options)
    log = open(options.log, "ab", buffering=0) if options.log else None  # noqa: SIM115
    for line in sys.stdin.buffer:
        if log:
            log.write(line)
        try:
            message = json.loads(line)
        except ValueError:
            continue
        for one in message if isinstance(message, list) else [message]:
            server.handle(one)


if __name__ == "__main__":
    main()
