"""The provider wires against loopback fakes that speak them (tests/fakes/providers.py), and their readers
fed plain strings."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import pytest

from chock.providers import ProviderError, Reply, Retrying, TextDelta, ToolCall, anthropic, openai, retry
from chock.providers.anthropic import MessageStream
from chock.providers.failures import redact, status_failure
from chock.providers.kinds import KindError
from chock.providers.openai import ChatStream
from chock.providers.registry import check_credential, make_provider
from tests.fakes.providers import FakeProvider

KEY = "sk-test-0123456789abcdef"
WRONG_KEY = "sk-wrong-fedcba9876543210"
WIRES = ["anthropic", "openai"]
HELLO = [{"role": "user", "text": "say hello"}]
TOOLS = [
    {
        "name": "shell",
        "description": "Run a command in the sandbox.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]
# A two-turn tool conversation whose log holds a note (a background job's end) between two tool results.
WITH_NOTE = [
    {"role": "user", "text": "list and read"},
    {
        "role": "assistant",
        "text": "Sure.",
        "tool_calls": [
            {"call_id": "c1", "name": "shell", "args": {"command": "ls"}},
            {"call_id": "c2", "name": "read_file", "args": {"path": "a.txt"}},
        ],
    },
    {"role": "tool", "call_id": "c1", "name": "shell", "output": "a.txt\n", "is_error": False},
    {"role": "user", "text": "[background b1 finished, exit code 0]"},
    {"role": "tool", "call_id": "c2", "name": "read_file", "output": "", "is_error": True},
    {"role": "user", "text": "also check b.txt"},
]


@pytest.fixture(params=WIRES)
def fake(request: pytest.FixtureRequest):
    with FakeProvider(kind=request.param, key=KEY) as server:
        yield server


def provider_for(fake: FakeProvider, credential: str | None = KEY, model: str | None = None, retries: int = 0) -> Any:
    """A provider for the fake; it sends no call twice unless a test asks for `retries`."""
    kind = "anthropic" if fake.kind == "anthropic" else "openai-compat"
    return make_provider(kind, fake.address, model, credential, instance="work", retries=retries)


def stream_all(
    provider: Any, conversation: list[dict[str, Any]] = HELLO, tools: list[dict[str, Any]] = TOOLS
) -> tuple[list[TextDelta | Reply], ProviderError | None]:
    """Everything the provider yielded, and the ProviderError that ended it (if one did)."""
    items: list[TextDelta | Reply] = []

    async def go() -> None:
        try:
            async for item in provider.stream(conversation, tools, "You are terse."):
                items.append(item)
        finally:
            await provider.aclose()

    try:
        asyncio.run(go())
    except ProviderError as error:
        return items, error
    return items, None


def failure(provider: Any, **kwargs: Any) -> ProviderError:
    _, error = stream_all(provider, **kwargs)
    assert error is not None, "expected a ProviderError"
    for key in (KEY, WRONG_KEY):
        assert key not in str(error)
        assert key not in repr(error)
    return error


def closed_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# --- streaming ----------------------------------------------------------------------------------------------


def test_text_streams_as_several_deltas_then_one_reply(fake: FakeProvider) -> None:
    text = "Hello there, this is streamed in small pieces."
    fake.script(text=text, input_tokens=12, output_tokens=7)
    items, error = stream_all(provider_for(fake))
    assert error is None
    deltas, reply = items[:-1], items[-1]
    assert len(deltas) >= 5 and all(isinstance(d, TextDelta) for d in deltas)
    assert "".join(d.text for d in deltas) == text
    finished = "end_turn" if fake.kind == "anthropic" else "stop"  # why the model stopped, in the wire's word
    assert reply == Reply(text=text, tool_calls=[], input_tokens=12, output_tokens=7, stop_reason=finished)


def test_tool_calls_are_parsed_with_their_args(fake: FakeProvider) -> None:
    args = {"command": "ls -la 'a dir'", "background": False, "nested": {"n": [1, 2]}}
    fake.script(
        text="Let me look.",
        tool_calls=[
            {"id": "c1", "name": "shell", "args": args},
            {"id": "c2", "name": "list_files", "args": {}},
        ],
        input_tokens=40,
        output_tokens=21,
    )
    items, error = stream_all(provider_for(fake))
    assert error is None
    reply = items[-1]
    assert isinstance(reply, Reply)
    assert reply.text == "Let me look."
    assert reply.tool_calls == [ToolCall("c1", "shell", args), ToolCall("c2", "list_files", {})]
    assert (reply.input_tokens, reply.output_tokens) == (40, 21)


def test_two_turn_tool_conversation_with_a_note_between_results(fake: FakeProvider) -> None:
    fake.script(text="Done.")
    items, error = stream_all(provider_for(fake), conversation=WITH_NOTE)
    assert error is None, error
    finished = "end_turn" if fake.kind == "anthropic" else "stop"
    assert items[-1] == Reply(text="Done.", input_tokens=10, output_tokens=5, stop_reason=finished)
    assert fake.rejections == []
    body = fake.calls[0]
    if fake.kind == "anthropic":
        cached = {"type": "ephemeral"}  # the breakpoints: the previous call's last message, and this one's
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "list and read", "cache_control": cached}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Sure."},
                    {"type": "tool_use", "id": "c1", "name": "shell", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "c2", "name": "read_file", "input": {"path": "a.txt"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "a.txt\n"},
                    {"type": "tool_result", "tool_use_id": "c2", "is_error": True},
                    {"type": "text", "text": "[background b1 finished, exit code 0]"},
                    {"type": "text", "text": "also check b.txt", "cache_control": cached},
                ],
            },
        ]
    else:
        assert body["messages"] == [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "list and read"},
            {
                "role": "assistant",
                "content": "Sure.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"command": "ls"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt\n"},
            {"role": "tool", "tool_call_id": "c2", "content": "error (no output)"},
            {"role": "user", "content": "[background b1 finished, exit code 0]\n\nalso check b.txt"},
        ]


def test_anthropic_request_carries_the_wire_headers_and_body() -> None:
    with FakeProvider(kind="anthropic", key=KEY) as fake:
        fake.script(text="ok")
        _, error = stream_all(provider_for(fake))
        assert error is None
        (request,) = fake.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers
    body = request.body
    assert body["model"] == "claude-sonnet-4-5"
    assert body["stream"] is True
    assert body["max_tokens"] > 0
    cached = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "You are terse.", "cache_control": cached}]
    assert body["tools"] == [
        {
            "name": "shell",
            "description": TOOLS[0]["description"],
            "input_schema": TOOLS[0]["parameters"],
            "cache_control": cached,
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "say hello", "cache_control": cached}]}
    ]


def test_openai_request_carries_the_wire_headers_and_body() -> None:
    with FakeProvider(kind="openai", key=KEY) as fake:
        fake.script(text="ok")
        _, error = stream_all(provider_for(fake, model="qwen2.5-coder"))
        assert error is None
        (request,) = fake.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert "x-api-key" not in request.headers
    body = request.body
    assert body["model"] == "qwen2.5-coder"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": TOOLS[0]["description"],
                "parameters": TOOLS[0]["parameters"],
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "say hello"},
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_no_credential_sends_no_auth_header(wire: str) -> None:
    with FakeProvider(kind=wire, key=None) as fake:
        fake.script(text="hi")
        items, error = stream_all(provider_for(fake, credential=None))
        assert error is None
        assert items[-1].text == "hi"
        headers = fake.requests[0].headers
    assert "authorization" not in headers
    assert "x-api-key" not in headers


def test_openai_compat_sends_default_when_no_model_is_named() -> None:
    with FakeProvider(kind="openai", key=None) as fake:
        fake.script(text="hi")
        stream_all(provider_for(fake, credential=None))
        assert fake.calls[0]["model"] == "default"


def test_one_provider_serves_turns_on_separate_event_loops(fake: FakeProvider) -> None:
    provider = provider_for(fake)
    fake.script(text="one")
    fake.script(text="two")
    for expected in ("one", "two"):
        items, error = stream_all(provider)
        assert error is None
        assert items[-1].text == expected


# --- failures -----------------------------------------------------------------------------------------------


def test_401_says_the_credential_was_rejected_and_how_to_log_in(fake: FakeProvider) -> None:
    error = failure(provider_for(fake, credential=WRONG_KEY))
    text = str(error)
    assert "instance 'work'" in text and fake.address in text
    assert "the credential was rejected" in text and "HTTP 401" in text
    assert "chock login --provider" in text and "--name work" in text
    assert "invalid x-api-key" in text if fake.kind == "anthropic" else "Incorrect API key provided" in text


def test_401_with_no_credential_says_none_was_sent(fake: FakeProvider) -> None:
    text = str(failure(provider_for(fake, credential=None)))
    assert "none was sent" in text and "HTTP 401" in text and "chock login --provider" in text


def test_429_says_rate_limited_with_the_providers_words(fake: FakeProvider) -> None:
    fake.fail(
        status=429,
        message="Number of request tokens has exceeded your rate limit",
        headers={"retry-after": "20"},
    )
    text = str(failure(provider_for(fake)))
    assert "rate limited" in text and "HTTP 429" in text
    assert "Number of request tokens has exceeded your rate limit" in text
    assert "wait 20 s" in text and fake.address in text


@pytest.mark.parametrize("status", [500, 503, 529])
def test_5xx_says_the_provider_failed(fake: FakeProvider, status: int) -> None:
    fake.fail(status=status, message="Internal trouble")
    text = str(failure(provider_for(fake)))
    assert "the provider failed" in text and f"HTTP {status}" in text and "Internal trouble" in text
    assert "instance 'work'" in text and fake.address in text


def test_a_wrong_address_says_check_the_address(fake: FakeProvider) -> None:
    address = fake.address.removesuffix("/v1")
    kind = "anthropic" if fake.kind == "anthropic" else "openai-compat"
    text = str(failure(make_provider(kind, address, None, KEY, instance="work", retries=0)))
    assert "HTTP 404" in text and "versioned base URL" in text


def test_a_dropped_connection_is_an_incomplete_response(fake: FakeProvider) -> None:
    fake.cut_after(6, text="a fairly long reply that will not arrive whole")
    items, error = stream_all(provider_for(fake))
    assert error is not None
    assert f"the response from {fake.address} ended before it was complete" in str(error)
    assert KEY not in str(error)
    assert items and all(isinstance(item, TextDelta) for item in items)  # text streamed, no Reply


def test_a_stream_without_its_end_is_an_incomplete_response(fake: FakeProvider) -> None:
    fake.cut_after(6, text="a fairly long reply that will not arrive whole", clean_cut=True)
    error = failure(provider_for(fake))
    assert f"the response from {fake.address} ended before it was complete" in str(error)
    assert ("no message_stop" if fake.kind == "anthropic" else "no [DONE]") in str(error)


def test_an_error_event_inside_the_stream(fake: FakeProvider) -> None:
    fake.script(text="partial answer", stream_error="Overloaded")
    text = str(failure(provider_for(fake)))
    assert "failed during the response" in text and "Overloaded" in text


def test_an_error_inside_the_stream_that_echoes_the_key_is_quoted_without_it(fake: FakeProvider) -> None:
    fake.script(text="partial answer", stream_error=f"Incorrect API key provided: {KEY}")
    text = str(failure(provider_for(fake)))
    assert "Incorrect API key provided: [redacted]" in text and KEY not in text
    # A line that is not the API's own quotes what it sent, the key cut from it too.
    for reader in (ChatStream(fake.address, "work", KEY), MessageStream(fake.address, "work", KEY)):
        with pytest.raises(ProviderError) as caught:
            reader.feed_line(f"data: auth {KEY} refused")
        assert "'auth [redacted] refused'" in str(caught.value) and KEY not in str(caught.value)


@pytest.mark.parametrize("kind", ["anthropic", "aiand", "openai-compat"])
def test_connection_refused_is_retried_then_names_the_address(kind: str) -> None:
    address = closed_address()
    items, error = stream_all(make_provider(kind, address, None, KEY, instance="local", retries=1))
    assert error is not None
    text = str(error)
    assert "cannot connect" in text and address in text and "instance 'local'" in text
    assert "gave up after 2 attempts" in text
    (retrying,) = items
    assert isinstance(retrying, Retrying) and retrying.status is None and retrying.attempt == 1
    assert retry.INITIAL_WAIT * (1 - retry.JITTER) <= retrying.wait_seconds <= retry.INITIAL_WAIT


# --- retries before the first byte ----------------------------------------------------------------------------


def test_a_429_with_retry_after_is_waited_out_then_the_call_succeeds(fake: FakeProvider) -> None:
    fake.fail(status=429, message="slow down", headers={"retry-after": "1"})
    fake.script(text="made it")
    started = time.monotonic()
    items, error = stream_all(provider_for(fake, retries=2))
    assert error is None
    assert time.monotonic() - started >= 1.0
    assert len(fake.calls) == 2 and fake.calls[0] == fake.calls[1]  # the same request, sent again
    retrying = items[0]
    assert isinstance(retrying, Retrying) and (retrying.attempt, retrying.status) == (1, 429)
    assert retrying.wait_seconds == 1.0 and "rate limited" in retrying.error
    assert items[-1].text == "made it"


@pytest.mark.parametrize("status", [408, 409, 500, 529])
def test_retryable_statuses_are_sent_again_up_to_the_instances_retries(fake: FakeProvider, status: int) -> None:
    for _ in range(3):
        fake.fail(status=status, message="try later", headers={"retry-after-ms": "10"})
    items, error = stream_all(provider_for(fake, retries=2))
    assert error is not None
    assert f"HTTP {status}" in str(error) and "gave up after 3 attempts" in str(error)
    assert len(fake.calls) == 3
    assert [(item.attempt, item.status, item.wait_seconds) for item in items] == [(1, status, 0.01), (2, status, 0.01)]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_a_refusal_is_never_sent_again(fake: FakeProvider, status: int) -> None:
    fake.fail(status=status, message="no")
    fake.script(text="never asked for")
    items, error = stream_all(provider_for(fake, retries=5))
    assert error is not None and f"HTTP {status}" in str(error) and "attempts" not in str(error)
    assert items == [] and len(fake.calls) == 1


def test_the_servers_x_should_retry_overrides_the_status(fake: FakeProvider) -> None:
    fake.fail(status=400, message="a passing trouble", headers={"x-should-retry": "true", "retry-after-ms": "1"})
    fake.fail(status=503, message="do not come back", headers={"x-should-retry": "false"})
    _, error = stream_all(provider_for(fake, retries=5))
    assert error is not None and "HTTP 503" in str(error)
    assert len(fake.calls) == 2


def test_a_wait_past_the_cap_is_not_waited_out(fake: FakeProvider) -> None:
    fake.fail(status=429, message="come back tomorrow", headers={"retry-after": "86400"})
    items, error = stream_all(provider_for(fake, retries=2))
    assert error is not None and "wait 86400 s" in str(error)
    assert items == [] and len(fake.calls) == 1


def test_a_failure_after_the_first_byte_is_not_retried_and_keeps_its_usage() -> None:
    with FakeProvider(kind="anthropic", key=KEY) as fake:
        fake.script(text="Hello, world", stream_error="Overloaded", cut_after=5, input_tokens=321)
        fake.script(text="never asked for")
        items, error = stream_all(provider_for(fake, retries=2))
        assert len(fake.calls) == 1
    assert error is not None and "Overloaded" in str(error)
    assert "".join(item.text for item in items) == "Hello, w"  # what came, as it came
    assert error.usage == {
        "input_tokens": 321, "output_tokens": 1, "cache_read_tokens": 0, "cache_write_tokens": 0
    }  # fmt: skip


def test_backoff_doubles_with_jitter_and_honours_the_servers_wait() -> None:
    assert retry.wait_seconds(1, jitter=lambda: 0.0) == 0.5
    assert retry.wait_seconds(3, jitter=lambda: 0.0) == 2.0
    assert retry.wait_seconds(10, jitter=lambda: 0.0) == retry.MAX_WAIT
    assert retry.wait_seconds(2, jitter=lambda: 1.0) == 0.75
    assert retry.wait_seconds(1, {"retry-after": "4"}) == 4.0
    assert retry.wait_seconds(1, {"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry.wait_seconds(1, {"retry-after": "61"}) is None
    assert retry.retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=lambda: 1445412470.0) == 10.0
    assert retry.retry_after({"retry-after": "soon"}) is None
    assert [retry.retryable(s) for s in (None, 408, 409, 429, 500, 529, 400, 401, 404)] == [True] * 6 + [False] * 3


@pytest.mark.parametrize("bad", [KEY + "\n", "sk-with space", "sk-ünïcode"])
def test_a_credential_no_header_can_carry_is_refused_without_quoting_it(fake: FakeProvider, bad: str) -> None:
    error = failure(provider_for(fake, credential=bad))
    assert "no HTTP header can carry" in str(error) and bad.strip() not in str(error)
    assert fake.requests == []
    with pytest.raises(ProviderError) as info:
        check_credential("anthropic" if fake.kind == "anthropic" else "openai-compat", fake.address, bad)
    assert bad.strip() not in str(info.value)


def test_redact_removes_the_key_in_its_quoted_forms() -> None:
    key = "sk-secret\nvalue"
    for text in (key, repr(key), repr(key.encode()), f"Illegal header value {key.encode()!r}"):
        assert "sk-secret" not in redact(text, key)


def test_a_fake_with_nothing_scripted_says_so(fake: FakeProvider) -> None:
    text = str(failure(provider_for(fake)))
    assert "no scripted turn left" in text


def test_repr_never_shows_the_credential(fake: FakeProvider) -> None:
    provider = provider_for(fake)
    assert KEY not in repr(provider) and "credential=set" in repr(provider)


# --- the fake enforces the wire -----------------------------------------------------------------------------


def test_fake_anthropic_refuses_text_before_tool_results() -> None:
    with FakeProvider(kind="anthropic", key=None) as fake:
        bad = {
            "model": "m",
            "max_tokens": 10,
            "stream": True,
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c1", "name": "shell", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "note"},
                        {"type": "tool_result", "tool_use_id": "c1", "content": "x"},
                    ],
                },
            ],
        }
        response = httpx.post(fake.address + "/messages", json=bad, headers={"anthropic-version": "2023-06-01"})
        assert response.status_code == 400
        assert "must come first" in response.json()["error"]["message"]
        assert fake.rejections


def test_fake_openai_refuses_unanswered_tool_calls() -> None:
    with FakeProvider(kind="openai", key=None) as fake:
        call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        bad = {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "user", "content": "note"},
            ],
        }
        response = httpx.post(fake.address + "/chat/completions", json=bad)
        assert response.status_code == 400
        assert "c1" in response.json()["error"]["message"]


# --- the credential check (login) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "kind"), [("anthropic", "anthropic"), ("openai", "aiand"), ("openai", "openai-compat")]
)
def test_check_credential_accepts_the_right_key(wire: str, kind: str) -> None:
    with FakeProvider(kind=wire, key=KEY) as fake:
        check_credential(kind, fake.address, KEY)
        (request,) = fake.requests
    assert (request.method, request.path) == ("GET", "/v1/models")
    if wire == "anthropic":
        assert request.headers["x-api-key"] == KEY and request.headers["anthropic-version"] == "2023-06-01"
    else:
        assert request.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(("wire", "kind"), [("anthropic", "anthropic"), ("openai", "openai-compat")])
def test_check_credential_refuses_a_wrong_key(wire: str, kind: str) -> None:
    with FakeProvider(kind=wire, key=KEY) as fake, pytest.raises(ProviderError) as info:
        check_credential(kind, fake.address, WRONG_KEY)
    text = str(info.value)
    assert "HTTP 401" in text and "the credential was rejected" in text and fake.address in text
    assert WRONG_KEY not in text and KEY not in text


def test_check_credential_names_an_unreachable_address() -> None:
    address = closed_address()
    with pytest.raises(ProviderError) as info:
        check_credential("openai-compat", address, KEY)
    assert address in str(info.value) and "cannot connect" in str(info.value)


def test_check_credential_takes_kind_with_its_address() -> None:
    with FakeProvider(kind="openai", key=KEY) as fake:
        check_credential(f"openai-compat={fake.address}", fake.address, KEY)


# --- the kinds ----------------------------------------------------------------------------------------------


def test_make_provider_fills_each_kinds_defaults() -> None:
    messages = make_provider("anthropic", None, None, KEY, instance="work")
    assert messages.wire is anthropic.WIRE
    assert (messages.address, messages.model) == ("https://api.anthropic.com/v1", "claude-sonnet-4-5")
    aiand = make_provider("aiand", None, "big-model", KEY, instance="aiand")
    assert aiand.wire is openai.WIRE
    assert (aiand.address, aiand.model, aiand.kind) == ("https://api.aiand.com/v1", "big-model", "aiand")
    local = make_provider("openai-compat=http://127.0.0.1:5000/v1/", None, None, None, instance="local")
    assert (local.address, local.model, local.kind) == (
        "http://127.0.0.1:5000/v1",
        "default",
        "openai-compat",
    )


@pytest.mark.parametrize("kind", ["openai-compat", "gemini"])
def test_make_provider_refuses_what_it_cannot_build(kind: str) -> None:
    with pytest.raises(KindError):
        make_provider(kind, None, None, None, instance="x")


def test_make_provider_replay_reads_the_file(tmp_path) -> None:
    path = tmp_path / "demo.jsonl"
    path.write_text(json.dumps({"type": "assistant.message", "text": "hi", "tool_calls": []}) + "\n")
    items, error = stream_all(make_provider(f"replay={path}", None, None, None, instance="demo"))
    assert error is None and items[-1].text == "hi"


# --- the readers, fed plain lines ---------------------------------------------------------------------------


def test_message_stream_sums_cached_input_and_reads_empty_tool_input() -> None:
    reader = MessageStream("https://api.anthropic.com/v1", "work")
    usage = {
        "input_tokens": 3,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
        "output_tokens": 1,
    }
    lines = [
        "event: message_start",
        "data: " + json.dumps({"type": "message_start", "message": {"usage": usage}}),
        "",
        ": a comment",
        'data: {"type": "content_block_start", "index": 0, '
        '"content_block": {"type": "tool_use", "id": "t1", "name": "list_files", "input": {}}}',
        'data: {"type": "content_block_stop", "index": 0}',
        'data: {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}',
        'data: {"type": "brand_new_event"}',
        'data: {"type": "message_stop"}',
    ]
    assert [reader.feed_line(line) for line in lines] == [None] * len(lines)
    assert reader.done
    assert reader.reply() == Reply(
        "", [ToolCall("t1", "list_files", {})], input_tokens=110, output_tokens=9, cache_read_tokens=100,
        cache_write_tokens=7, stop_reason="tool_use",
    )  # fmt: skip


def test_message_stream_counts_no_negative_fractional_or_huge_usage() -> None:
    # A count below zero would lower the session's spend under its .budget; one past a float's range failed the call.
    reader = MessageStream("https://api.anthropic.com/v1", "work")
    usage = {"input_tokens": 3, "cache_read_input_tokens": -(10**9), "cache_creation_input_tokens": 10**400}
    lines = [
        "data: " + json.dumps({"type": "message_start", "message": {"usage": {**usage, "output_tokens": 1}}}),
        "data: " + json.dumps({"type": "message_delta", "delta": {}, "usage": {"output_tokens": -5}}),
        "data: " + json.dumps({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 2.5}}),
        'data: {"type": "message_stop"}',
    ]
    for line in lines:
        reader.feed_line(line)
    assert reader.usage() == {"input_tokens": 3, "output_tokens": 1, "cache_read_tokens": 0, "cache_write_tokens": 0}


def test_message_stream_tool_call_cut_by_max_tokens_is_an_error() -> None:
    reader = MessageStream("https://api.anthropic.com/v1", "work")
    for event in [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "w"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"p'},
        },
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 8192}},
        {"type": "message_stop"},
    ]:
        reader.feed(event)
    with pytest.raises(ProviderError, match="limit of 8192 tokens"):
        reader.reply()


def test_chat_stream_reads_llama_cpp_error_lines_and_missing_ids() -> None:
    reader = ChatStream("http://127.0.0.1:5000/v1", "local")
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"name": "shell", "arguments": "{}"}}]},
            }
        ]
    }
    reader.feed_line("data: " + json.dumps(chunk))
    reader.feed_line("data: [DONE]")
    (call,) = reader.reply().tool_calls
    assert call.call_id.startswith("call_") and call.name == "shell" and call.args == {}
    with pytest.raises(ProviderError, match="context size exceeded"):
        ChatStream("http://127.0.0.1:5000/v1", "local").feed_line(
            'error: {"code": 400, "message": "context size exceeded", "type": "invalid_request_error"}'
        )


@pytest.mark.parametrize(
    ("status", "words", "expected"),
    [
        (400, "prompt is too long: 208310 tokens > 200000 maximum", True),
        (400, "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000", True),
        (400, "the request exceeds the available context size, try increasing it", True),
        (400, "messages: roles must alternate", False),
        (429, "prompt is too long", False),
    ],
)
def test_a_refusal_for_the_prompts_size_is_recognised_in_each_providers_words(status, words, expected) -> None:
    from chock.providers.failures import status_failure

    body = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": words}})
    error = status_failure(status, body, kind="anthropic", address="http://x/v1", credential=None, instance="w")
    assert error.too_long is expected
    assert ("larger than the model's context window" in str(error)) is expected


# --- what is not the API's ------------------------------------------------------------------------------------

TEXT_BLOCK = '{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}'
# Events of a shape neither wire ever sends, each with what the error names of it.
NOT_THE_APIS = {
    "anthropic": [
        ('{"type": "message_start", "message": "m"}', "a message_start event's `message` is a string, not an object"),
        ('{"type": "content_block_delta", "index": 0, "delta": "x"}', "`delta` is a string, not an object"),
        ('{"type": "content_block_start", "index": [0], "content_block": {"type": "text", "text": ""}}',
         "a content_block_start event's `index` is an array, not a whole number"),
        ('{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}}',
         "a text_delta's `text` is a whole number, not a string"),
        ('{"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": "shell"}}',
         "a tool_use block has no `id`"),
        ('{"type": "message_delta", "delta": {}, "usage": [1]}', "a message_delta event's `usage` is an array"),
    ],
    "openai": [
        ('{"choices": ["x"]}', "a chunk's `choices` holds a string"),
        ('{"choices": [{"index": 0, "delta": {"content": 5}}]}', "`content` is a whole number, not a string"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": [0], "id": "a"}]}}]}',
         "a tool call's `index` is an array"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "function": '
         '{"name": "shell", "arguments": {"command": "ls"}}}]}}]}',
         "a tool call's function's `arguments` is an object, not a string"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]}', "a delta's `tool_calls` holds a string"),
    ],
}  # fmt: skip
STREAMS = {"anthropic": "a Messages event stream", "openai": "a chat-completions stream"}


def reader_for(wire: str) -> MessageStream | ChatStream:
    return (
        MessageStream("https://api.anthropic.com/v1", "work")
        if wire == "anthropic"
        else ChatStream("http://127.0.0.1:5000/v1", "work")
    )


@pytest.mark.parametrize(("wire", "line", "named"), [(w, *case) for w, cases in NOT_THE_APIS.items() for case in cases])
def test_an_event_of_a_shape_the_wire_never_sends_is_not_the_apis_answer(wire: str, line: str, named: str) -> None:
    reader = reader_for(wire)
    if wire == "anthropic":
        reader.feed_line("data: " + TEXT_BLOCK)
    with pytest.raises(ProviderError) as caught:
        reader.feed_line("data: " + line)
    text = str(caught.value)
    assert text.startswith(f"instance 'work' at {reader.address}: the response is not {STREAMS[wire]}: ")
    assert named in text and "check that the address is the API's versioned base URL" in text


@pytest.mark.parametrize("wire", WIRES)
def test_json_nested_past_any_readers_depth_is_not_the_apis_answer(wire: str) -> None:
    reader = reader_for(wire)
    with pytest.raises(ProviderError) as caught:
        reader.feed_line("data: " + "[" * 100_000)
    assert f"the response is not {STREAMS[wire]} (it sent '[[[[" in str(caught.value)
    # A tool call's arguments nested as deep: the call is broken, not the session's reader.
    deep = '{"a": ' + "[" * 100_000
    reader = reader_for(wire)
    if wire == "anthropic":
        block = {"type": "tool_use", "id": "t", "name": "write_file", "input": {}}
        reader.feed({"type": "content_block_start", "index": 0, "content_block": block})
        reader.feed(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": deep}}
        )
    else:
        piece = {"index": 0, "id": "t", "function": {"name": "write_file", "arguments": deep}}
        reader.feed({"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    with pytest.raises(
        ProviderError, match="the arguments of the tool call write_file are nested too deeply to be read"
    ):
        reader.reply()


def test_a_stream_that_turns_into_something_else_ends_the_call_after_the_text_it_brought(fake: FakeProvider) -> None:
    odd = {"type": "content_block_delta", "index": 0, "delta": "x"} if fake.kind == "anthropic" else {"choices": [5]}
    fake.script(text="half of the answer", extra_events=[odd])
    items, error = stream_all(provider_for(fake))
    assert error is not None and f"the response is not {STREAMS[fake.kind]}: " in str(error)
    assert all(isinstance(item, TextDelta) and isinstance(item.text, str) for item in items)
    assert "".join(item.text for item in items) == "half of the answer"


@pytest.mark.parametrize("status", [400, 429])
def test_an_error_body_nested_past_any_readers_depth_is_said_by_its_status(fake: FakeProvider, status: int) -> None:
    fake.fail(status=status, body=b'{"error": ' + b"[" * 60_000)
    text = str(failure(provider_for(fake)))
    assert f"HTTP {status}" in text and "[[[" not in text
    assert ("rate limited" if status == 429 else "the provider rejected the request") in text


# --- quotas and rate limits -------------------------------------------------------------------------------------

# An account out of quota or credit, as each wire says it: OpenAI's 429 `insufficient_quota` (in `code` and `type`),
# the Messages API's 402 `billing_error`.
USED_UP = {
    "openai": (429, {"error_type": "insufficient_quota", "code": "insufficient_quota"},
               "You exceeded your current quota, please check your plan and billing details."),
    "anthropic": (402, {"error_type": "billing_error"}, "Your credit balance is too low to access the API."),
}  # fmt: skip


def test_a_used_up_quota_says_so_and_never_to_wait(fake: FakeProvider) -> None:
    status, shape, words = USED_UP[fake.kind]
    fake.fail(status=status, message=words, **shape)
    error = failure(provider_for(fake))
    text = str(error)
    assert text.startswith(f"instance 'work' at {fake.address}: the account's quota or credit is used up")
    assert f"HTTP {status}: {words}" in text and "check its plan and billing with the provider" in text
    assert "wait" not in text and "rate limited" not in text and not error.retryable


def test_a_used_up_quota_is_asked_once() -> None:
    with FakeProvider(kind="openai", key=KEY) as fake:
        status, shape, words = USED_UP["openai"]
        fake.fail(status=status, message=words, **shape)
        fake.script(text="never asked for")
        items, error = stream_all(provider_for(fake, retries=2))
        assert len(fake.calls) == 1
    assert items == [] and error is not None and "attempts" not in str(error)


def recorded(fake: FakeProvider, slept: list[float], retries: int = 2) -> Any:
    """A provider for the fake whose waits are recorded, not waited."""

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    kind = "anthropic" if fake.kind == "anthropic" else "openai-compat"
    return make_provider(kind, fake.address, None, KEY, instance="work", retries=retries, sleep=sleep)


def test_with_no_retry_after_the_rate_limits_own_reset_is_waited() -> None:
    slept: list[float] = []
    with FakeProvider(kind="openai", key=KEY) as fake:
        limited = {"x-ratelimit-reset-tokens": "20s", "x-ratelimit-remaining-tokens": "0",
                   "x-ratelimit-reset-requests": "1m30s", "x-ratelimit-remaining-requests": "59"}  # fmt: skip
        fake.fail(status=429, message="Rate limit reached for tokens per min (TPM).", headers=limited)
        fake.script(text="made it")
        items, error = stream_all(recorded(fake, slept))
        assert error is None and len(fake.calls) == 2
    # The tokens' limit refused the call (none left); the requests' has some left, so its reset is not waited.
    assert slept == [20.0]
    retrying = items[0]
    assert isinstance(retrying, Retrying) and retrying.wait_seconds == 20.0
    assert "rate limited" in retrying.error


def test_rate_limit_resets_are_read_in_each_providers_form() -> None:
    now = lambda: 1_800_000_000.0  # noqa: E731
    assert retry.retry_after({"x-ratelimit-reset-requests": "6m0s"}, now) == 360.0
    assert retry.retry_after({"x-ratelimit-reset-tokens": "20ms", "x-ratelimit-reset-requests": "1.5s"}, now) == 1.5
    assert retry.retry_after({"x-ratelimit-reset-tokens": "1h2m3s"}, now) == 3723.0
    assert retry.retry_after({"x-ratelimit-reset-tokens": "soon"}, now) is None
    reset = "2027-01-15T08:00:30Z"  # 30 s after `now`, as Anthropic writes a reset (RFC 3339)
    assert retry.retry_after({"anthropic-ratelimit-output-tokens-reset": reset}, now) == 30.0
    left = {"anthropic-ratelimit-tokens-reset": reset, "anthropic-ratelimit-tokens-remaining": "1200"}
    assert retry.retry_after(left, now) is None  # that limit did not refuse the call
    assert retry.retry_after({"retry-after": "4", "x-ratelimit-reset-tokens": "20s"}, now) == 4.0  # the server's own
    assert retry.wait_seconds(1, {"x-ratelimit-reset-tokens": "6m0s"}) is None  # past the cap: not waited


def test_a_429_says_how_long_its_limit_takes_to_reset() -> None:
    body = {"error": {"message": "Rate limit reached for requests per day (RPD).", "type": "requests",
                      "code": "rate_limit_exceeded"}}  # fmt: skip
    headers = {"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-remaining-requests": "0"}
    error = status_failure(
        429, json.dumps(body), kind="openai-compat", address="http://x/v1", credential=None, instance="w",
        wait=retry.retry_after(headers),  # as the transport reads the answer's headers
    )  # fmt: skip
    assert "rate limited (HTTP 429: Rate limit reached for requests per day (RPD).); wait 360 s and try again" in str(
        error
    )
    for endless in ("inf", "1e400", "nan"):  # no number a person can wait out
        said = status_failure(429, json.dumps(body), kind="openai-compat", address="http://x/v1", credential=None,
                              wait=retry.retry_after({"retry-after": endless}))  # fmt: skip
        assert "; wait a little and try again" in str(said)


def test_a_rate_limit_past_the_cap_ends_the_call_saying_how_long_its_reset_is() -> None:
    slept: list[float] = []
    with FakeProvider(kind="openai", key=KEY) as fake:
        fake.fail(status=429, message="Rate limit reached.", headers={"x-ratelimit-reset-requests": "6m0s"})
        items, error = stream_all(recorded(fake, slept))
        assert len(fake.calls) == 1
    assert items == [] and slept == [] and error is not None and "wait 360 s and try again" in str(error)


# --- an error inside a stream, said as its status is --------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "said", "not_said"),
    [
        ("invalid_request_error", "the provider rejected the request (during the response: Bad field)", "try again"),
        ("rate_limit_error", "rate limited (during the response: Bad field); wait a little and try again", "failed"),
    ],
)
def test_an_error_event_after_the_answer_began_says_what_its_type_stands_for(
    fake: FakeProvider, error_type: str, said: str, not_said: str
) -> None:
    if fake.kind == "openai" and error_type == "rate_limit_error":
        error_type = "rate_limit_exceeded"  # OpenAI's word for it
    fake.script(text="partial answer", stream_error="Bad field", stream_error_type=error_type, cut_after=4)
    text = str(failure(provider_for(fake)))
    assert text.startswith(f"instance 'work' at {fake.address}: ")
    assert said in text and not_said not in text
