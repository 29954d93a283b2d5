"""The sans-I/O MCP client (chock/mcp/jsonrpc_client.py) and stdio framing (chock/mcp/line_messages.py), unit
by unit: bytes in, events out, bytes to send. What a hostile server sends is an event, never an exception."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from chock.mcp import jsonrpc_client as rpc
from chock.mcp.jsonrpc_client import McpClient
from chock.mcp.line_messages import LineMessages, frame


def sent(client: McpClient) -> list[dict[str, Any]]:
    return [json.loads(message) for message in client.data_to_send()]


def feed(client: McpClient, message: dict[str, Any] | list[Any], now: float = 0.0) -> list[rpc.Event]:
    return client.receive(json.dumps(message).encode(), now)


def answer(request_id: int, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def ready() -> McpClient:
    """A client whose initialize was answered (and its queue emptied)."""
    client = McpClient()
    request_id = client.initialize(0, 20)
    feed(client, answer(request_id, {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}))
    client.data_to_send()
    return client


def test_initialize_asks_for_2025_11_25_and_says_initialized_once_answered() -> None:
    client = McpClient(client_version="1.2")
    request_id = client.initialize(0, 20)
    [request] = sent(client)
    assert request == {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "chock", "version": "1.2"},
        },
    }
    result = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": {"name": "docs", "version": "3"},
        "instructions": "Search first.",
    }
    events = feed(client, answer(request_id, result))
    info = {"name": "docs", "version": "3"}
    assert events == [rpc.Initialized(request_id, "2025-11-25", info, result["capabilities"])]
    assert client.negotiated_version == "2025-11-25" and client.instructions == "Search first."
    assert sent(client) == [{"jsonrpc": "2.0", "method": "notifications/initialized"}]


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"])
def test_an_older_revision_the_client_knows_is_accepted(version: str) -> None:
    client = McpClient()
    request_id = client.initialize(0, 20)
    [event] = feed(client, answer(request_id, {"protocolVersion": version, "capabilities": {}, "serverInfo": {}}))
    assert isinstance(event, rpc.Initialized) and event.version == version


def test_a_revision_the_client_does_not_speak_fails_naming_both() -> None:
    client = McpClient()
    request_id = client.initialize(0, 20)
    client.data_to_send()
    [event] = feed(client, answer(request_id, {"protocolVersion": "2024-11-05", "capabilities": {}}))
    assert isinstance(event, rpc.Failed) and event.code == -32602
    assert "2024-11-05" in event.message and "2025-11-25" in event.message
    assert client.negotiated_version is None and sent(client) == []  # not initialized


def test_tools_list_pages_by_cursor() -> None:
    client = ready()
    first = client.list_tools(None, 0, 20)
    assert sent(client)[0]["params"] == {}
    tool = {"name": "search", "inputSchema": {"type": "object"}}
    assert feed(client, answer(first, {"tools": [tool], "nextCursor": "page2"})) == [
        rpc.ToolsListed(first, [tool], "page2")
    ]
    second = client.list_tools("page2", 0, 20)
    assert sent(client)[0]["params"] == {"cursor": "page2"}
    assert feed(client, answer(second, {"tools": []})) == [rpc.ToolsListed(second, [], None)]


@pytest.mark.parametrize(
    ("result", "words"),
    [
        ({"tools": {"name": "x"}}, "tools is not a list"),
        ({"tools": [{"description": "no name"}]}, "tools[0] has no name"),
        ({"tools": [{"name": "x", "inputSchema": "object"}]}, "inputSchema is not an object"),
        ({"tools": [], "nextCursor": 2}, "nextCursor is not a string"),
    ],
)
def test_a_tools_list_of_the_wrong_shape_fails_saying_what(result: dict[str, Any], words: str) -> None:
    client = ready()
    request_id = client.list_tools(None, 0, 20)
    [event] = feed(client, answer(request_id, result))
    assert isinstance(event, rpc.Failed) and words in event.message


def test_tools_call_returns_structured_and_unstructured_content_and_is_error() -> None:
    client = ready()
    request_id = client.call_tool("add", {"a": 1, "b": 2}, 0, 120)
    [request] = sent(client)
    assert request["method"] == "tools/call" and request["params"] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    content = [{"type": "text", "text": "3"}]
    result = {"content": content, "structuredContent": {"sum": 3}}
    assert feed(client, answer(request_id, result)) == [rpc.ToolResult(request_id, content, {"sum": 3}, False)]
    failing = client.call_tool("fail", {}, 0, 120)
    assert feed(client, answer(failing, {"content": content, "isError": True})) == [
        rpc.ToolResult(failing, content, None, True)
    ]
    odd = client.call_tool("odd", {}, 0, 120)
    [event] = feed(client, answer(odd, {"content": "text", "isError": True}))
    assert isinstance(event, rpc.Failed) and "content is not a list" in event.message


def test_a_json_rpc_error_is_failed_with_the_servers_code_and_message() -> None:
    client = ready()
    request_id = client.call_tool("nope", {}, 0, 120)
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "Unknown tool: nope"}}
    assert feed(client, error) == [rpc.Failed(request_id, -32602, "Unknown tool: nope")]


def test_progress_reaches_the_call_by_its_token_and_stops_with_its_answer() -> None:
    client = ready()
    request_id = client.call_tool("slow", {}, 0, 120, progress_token="t1")
    assert sent(client)[0]["params"]["_meta"] == {"progressToken": "t1"}
    note = {"jsonrpc": "2.0", "method": "notifications/progress"}
    params = {"progressToken": "t1", "progress": 1, "total": 4, "message": "one"}
    assert feed(client, {**note, "params": params}) == [rpc.Progress(request_id, 1.0, 4.0, "one")]
    assert feed(client, {**note, "params": {"progressToken": "other", "progress": 1}}) == []
    for odd in ("half", 10**400, None, True):  # 10**400 is past any float: ignored, never an OverflowError
        assert feed(client, {**note, "params": {"progressToken": "t1", "progress": odd}}) == []
    assert (
        client.receive(
            b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":1e400}}', 0
        )
        == []
    )
    feed(client, answer(request_id, {"content": []}))
    assert feed(client, {**note, "params": params}) == []  # the call is over
    with pytest.raises(ValueError, match="already in use"):
        client.call_tool("a", {}, 0, 1, progress_token=5)
        client.call_tool("b", {}, 0, 1, progress_token=5)


def test_cancel_says_notifications_cancelled_and_ignores_the_late_answer() -> None:
    client = ready()
    request_id = client.call_tool("slow", {}, 0, 120, progress_token=7)
    client.data_to_send()
    client.cancel(request_id, "the session was stopped")
    assert sent(client) == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the session was stopped"},
        }
    ]
    assert feed(client, answer(request_id, {"content": []})) == []
    assert not client.in_flight(request_id) and client.next_deadline() is None


def test_ping_both_ways() -> None:
    client = ready()
    assert feed(client, {"jsonrpc": "2.0", "id": "s1", "method": "ping"}) == []
    assert sent(client) == [{"jsonrpc": "2.0", "id": "s1", "result": {}}]
    request_id = client.ping(0, 5)
    assert sent(client) == [{"jsonrpc": "2.0", "id": request_id, "method": "ping"}]
    assert feed(client, answer(request_id, {})) == [rpc.Pong(request_id)]


def test_a_request_whose_id_or_method_holds_a_lone_surrogate_is_answered_and_the_client_goes_on() -> None:
    """`"\\ud800"` is valid JSON that no UTF-8 can carry: echoed in the answer, it is written as JSON escapes it."""
    client = ready()
    assert client.receive(b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', 0.0) == []
    assert client.receive(b'{"jsonrpc":"2.0","id":7,"method":"x\\udc00"}', 0.0) == []
    pong, refusal = sent(client)
    assert pong == {"jsonrpc": "2.0", "id": "\ud800", "result": {}}
    assert refusal["id"] == 7 and refusal["error"]["code"] == -32601
    request_id = client.ping(0, 5)
    assert sent(client) == [{"jsonrpc": "2.0", "id": request_id, "method": "ping"}]


def test_list_changed_is_an_event() -> None:
    client = ready()
    assert feed(client, {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) == [rpc.ToolsChanged()]


@pytest.mark.parametrize("method", ["sampling/createMessage", "roots/list", "resources/whatever"])
def test_sampling_roots_and_unknown_methods_are_method_not_found(method: str) -> None:
    client = ready()
    assert feed(client, {"jsonrpc": "2.0", "id": 9, "method": method, "params": {}}) == []
    [reply] = sent(client)
    assert reply["id"] == 9 and reply["error"]["code"] == -32601


def test_elicitation_is_asked_then_answered() -> None:
    client = ready()
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}}
    ask = {"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create"}
    events = feed(client, {**ask, "params": {"mode": "form", "message": "Which?", "requestedSchema": schema}})
    assert events == [rpc.ElicitationAsked("e1", "Which?", schema)]
    client.answer_elicitation("e1", "accept", {"colour": "red"})
    accepted = {"action": "accept", "content": {"colour": "red"}}
    assert sent(client) == [{"jsonrpc": "2.0", "id": "e1", "result": accepted}]
    client.answer_elicitation("e1", "decline")  # answered already: nothing more
    assert sent(client) == []
    with pytest.raises(ValueError, match="accept, decline, cancel"):
        client.answer_elicitation("e1", "maybe")


def test_an_elicitation_the_server_withdrew_is_not_answered() -> None:
    client = ready()
    params = {"message": "Which?", "requestedSchema": {"type": "object"}}
    feed(client, {"jsonrpc": "2.0", "id": 4, "method": "elicitation/create", "params": params})
    cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}
    assert feed(client, cancelled) == [rpc.ElicitationWithdrawn(4)]
    client.answer_elicitation(4, "decline")
    assert sent(client) == []


def test_url_elicitation_is_refused_and_elicitations_are_bounded() -> None:
    client = ready()
    url = {"mode": "url", "message": "Sign in", "url": "https://x.example", "elicitationId": "1"}
    assert feed(client, {"jsonrpc": "2.0", "id": "u", "method": "elicitation/create", "params": url}) == []
    assert sent(client)[0]["error"]["code"] == -32602
    long = {"message": "?" * 20_000, "requestedSchema": {"type": "object"}}
    assert feed(client, {"jsonrpc": "2.0", "id": "l", "method": "elicitation/create", "params": long}) == []
    assert "at most 16,384 characters" in sent(client)[0]["error"]["message"]
    form = {"message": "?", "requestedSchema": {"type": "object"}}
    for n in range(rpc.MAX_OPEN_ELICITATIONS + 1):
        events = feed(client, {"jsonrpc": "2.0", "id": n, "method": "elicitation/create", "params": form})
        assert len(events) == (n < rpc.MAX_OPEN_ELICITATIONS)
    assert sent(client) == [{"jsonrpc": "2.0", "id": rpc.MAX_OPEN_ELICITATIONS, "result": {"action": "decline"}}]


def test_deadlines_expire_as_timed_out_and_cancel_on_the_wire() -> None:
    client = McpClient()
    init = client.initialize(0, 20)
    assert client.next_deadline() == 20
    assert client.expire(19.9) == []
    client.data_to_send()
    assert client.expire(20) == [rpc.TimedOut(init)]
    assert sent(client) == []  # initialize is never cancelled on the wire
    client = ready()
    call = client.call_tool("slow", {}, 1, 121)
    client.ping(1, 6)
    client.data_to_send()
    assert client.next_deadline() == 6
    [timed_out] = client.expire(6)
    assert client.next_deadline() == 121 and client.in_flight(call)
    assert client.expire(121) == [rpc.TimedOut(call)]
    assert [m["params"]["reason"] for m in sent(client)] == ["timed out", "timed out"]
    assert isinstance(timed_out, rpc.TimedOut) and timed_out.request_id != call


def test_a_batch_is_each_of_its_messages() -> None:
    client = ready()
    request_id = client.ping(0, 5)
    batch = [answer(request_id, {}), {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, 3]
    assert feed(client, batch) == [rpc.Pong(request_id), rpc.ToolsChanged(), rpc.Garbage("not a JSON-RPC 2.0 message")]


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (b"{this is not json", "not JSON"),
        (b'{"jsonrpc": "2.0", "id": 1, "result": NaN}', "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 200_000 + b"]" * 200_000, "not JSON"),
        (b"[]", "an empty batch"),
        (b"[" + b"1," * 1_000_000 + b"1]", "a batch of 1,000,001 messages (past 256)"),
        (b'"hello"', "not a JSON-RPC 2.0 message"),
        (b'{"jsonrpc": "1.0", "id": 1, "result": {}}', "not a JSON-RPC 2.0 message"),
        (b'{"jsonrpc": "2.0", "method": 5}', "a method that is not a string"),
        (b'{"jsonrpc": "2.0", "id": 1}', "neither a request"),
        (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', "neither a string nor an integer"),
    ],
)
def test_what_is_not_json_rpc_is_garbage(message: bytes, words: str) -> None:
    client = ready()
    [event] = client.receive(message, 0)
    assert isinstance(event, rpc.Garbage) and words in event.reason


def test_a_message_past_4_mib_is_garbage_without_being_parsed() -> None:
    client = ready()
    request_id = client.call_tool("big", {}, 0, 120)
    big = json.dumps(answer(request_id, {"content": [{"type": "text", "text": "y" * (5 * 1024 * 1024)}]}))
    [event] = client.receive(big.encode(), 0)
    assert isinstance(event, rpc.Garbage) and "4 MiB" in event.reason
    assert client.in_flight(request_id)  # its answer was never read


def test_answers_to_ids_never_asked_are_ignored() -> None:
    client = ready()
    for request_id in (999, "1", True, None, 1.0):
        assert feed(client, {"jsonrpc": "2.0", "id": request_id, "result": {}}) == []
    assert sent(client) == []


def test_ten_thousand_notifications_in_a_second_pass_a_hundred() -> None:
    client = ready()
    changed = json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).encode()
    events = [event for n in range(10_000) for event in client.receive(changed, 5 + n / 20_000)]
    assert len(events) == rpc.NOTIFICATIONS_PER_SECOND and client.dropped == 10_000 - rpc.NOTIFICATIONS_PER_SECOND
    assert client.receive(changed, 6.0) == [rpc.ToolsChanged()]  # the next second has its own budget


def test_a_flood_of_server_requests_is_answered_at_most_a_hundred_a_second() -> None:
    client = ready()
    for n in range(10_000):
        client.receive(json.dumps({"jsonrpc": "2.0", "id": n, "method": "sampling/createMessage"}).encode(), 0.5)
    replies = sent(client)
    assert len(replies) == rpc.NOTIFICATIONS_PER_SECOND
    assert {reply["error"]["code"] for reply in replies} == {-32601}


def test_answers_to_a_server_that_does_not_read_them_stop_queueing() -> None:
    client = ready()
    for n in range(3 * rpc.MAX_QUEUED_ANSWERS):  # ten a second: within the budget, never sent
        client.receive(json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}).encode(), n / 10)
    assert len(client.data_to_send()) == rpc.MAX_QUEUED_ANSWERS
    assert client.dropped == 2 * rpc.MAX_QUEUED_ANSWERS


def test_no_mangled_message_raises() -> None:
    """Every byte string a server may write, here mutations of real messages, is events: never an exception."""
    client = ready()
    request_id = client.call_tool("x", {}, 0, 120, progress_token=1)
    samples = [
        json.dumps(answer(request_id, {"content": [{"type": "text", "text": "ok"}], "structuredContent": {}})),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}}),
        json.dumps({"jsonrpc": "2.0", "id": "e", "method": "elicitation/create", "params": {"message": "?"}}),
        json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": 1.5, "message": ["x"]}}),
    ]
    shuffle = random.Random(26)
    values: list[object] = [None, True, 1, -1, 1.5, 10**400, "x", [], {}, [1], {"a": None}]
    for _ in range(3000):
        message = json.loads(shuffle.choice(samples))
        path = message
        while isinstance(path, dict) and path and shuffle.random() < 0.7:
            key = shuffle.choice(list(path))
            if not isinstance(path[key], dict) or shuffle.random() < 0.3:
                path[key] = shuffle.choice(values)
                break
            path = path[key]
        client.receive(json.dumps(message).encode(), 0)
        raw = bytearray(shuffle.choice(samples).encode())
        raw[shuffle.randrange(len(raw))] = shuffle.randrange(256)
        client.receive(bytes(raw), 0)


def test_lines_are_messages_whatever_the_chunks() -> None:
    lines = LineMessages()
    assert lines.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert lines.feed(b":2}\r\n\n   \n") == [b'{"b":2}']  # CRLF taken, blank lines skipped
    assert lines.feed(b"x") == [] and lines.unfinished() == 1
    assert frame(b'{"c":3}') == b'{"c":3}\n'
    with pytest.raises(ValueError, match="newline"):
        frame(b'{"c":\n3}')


def test_a_ten_megabyte_line_is_never_held_whole() -> None:
    lines = LineMessages(limit=1024 * 1024)
    chunk = b"y" * 65536
    held = 0
    for _ in range(160):  # 10 MiB without a newline
        assert lines.feed(chunk) == []
        held = max(held, lines.unfinished())
    assert held == 1024 * 1024 + 1
    [cut, after] = lines.feed(b"yy\n{}\n")
    assert len(cut) == 1024 * 1024 + 1 and after == b"{}"
    assert isinstance(McpClient().receive(b"y" * (rpc.MAX_MESSAGE_BYTES + 1), 0)[0], rpc.Garbage)
