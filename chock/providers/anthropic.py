"""The Anthropic Messages API, streamed (kind `anthropic`; https://docs.anthropic.com/en/api/messages-streaming).

`POST <address>/messages` with `stream: true` answers with server-sent events: `message_start` (input
usage), then for each content block a `content_block_start`, its deltas (`text_delta`, or `input_json_delta`
pieces of a `tool_use` block's arguments) and a `content_block_stop`; then `message_delta` (stop reason,
output usage) and `message_stop`. `ping` may come at any time; `error` ends the stream early. `MessageStream`
reads those lines with no I/O (as h11 does), so its edge cases are tested with plain strings. `WIRE` is
this module to the rest of Chock: the transport carries it, the registry picks it for kind `anthropic`.
"""

from __future__ import annotations

import json
from typing import Any

from chock.providers import ToolCall
from chock.providers.kinds import ANTHROPIC
from chock.providers.wire import StreamReader, Wire, sse_field, token_count, tool_args

API_VERSION = "2023-06-01"
# The output budget of one call: 8192 is accepted by every current Claude model (it is Claude 3.5 Haiku's
# ceiling). An answer that reaches it says so (`stop_reason: max_tokens`), which ends the session with an error
# saying the answer was cut (docs/log.md#stop-reasons); a tool call cut by it is an error of its own (`_args`).
MAX_TOKENS = 8192
# Usage fields that together make the prompt's size (the cache ones are nonzero only with prompt caching).
INPUT_USAGE_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
# Prompt caching (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): a block marked
# `cache_control` ends a cached prefix (tools, then system, then messages, in that order), and a request may
# mark at most four blocks. Chock marks the last tool, the system prompt, the latest message (what the next
# call will read back) and the message the previous call marked (the cache entry this call reads): the
# conversation only ever grows at its end between two compactions, so each call's prefix is the last one's.
CACHE_CONTROL = {"type": "ephemeral"}


def auth_headers(credential: str | None) -> dict[str, str]:
    """The headers every request carries; `x-api-key` only when there is a credential."""
    headers = {"anthropic-version": API_VERSION}
    if credential:
        headers["x-api-key"] = credential
    return headers


# --- the neutral conversation, as the Messages API wants it ------------------------------------------------


def convert_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
        }
        for tool in tools
    ]


def convert_conversation(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages → Messages API messages.

    The API wants user and assistant strictly alternating, every `tool_use` answered by a `tool_result` in the
    next user message, and in that message the results first, any text after them. The log may hold a note
    the person typed between two tool results, so a run of non-assistant messages becomes ONE user message:
    its tool results in order, then its texts. Empty text blocks are refused by the API and are left out; an
    assistant turn with nothing in it says nothing and is dropped (its neighbours then merge).
    """
    messages: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if results or texts:
            messages.append({"role": "user", "content": results + texts})
            results.clear()
            texts.clear()

    for message in conversation:
        role = message["role"]
        if role == "assistant":
            content: list[dict[str, Any]] = []
            if message.get("text"):
                content.append({"type": "text", "text": message["text"]})
            for call in message.get("tool_calls") or []:
                content.append({"type": "tool_use", "id": call["call_id"], "name": call["name"], "input": call["args"]})
            if not content:
                continue
            flush()
            if messages and messages[-1]["role"] == "assistant":
                messages[-1]["content"].extend(content)
            else:
                messages.append({"role": "assistant", "content": content})
        elif role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["call_id"]}
            if message.get("output"):
                result["content"] = message["output"]
            if message.get("is_error"):
                result["is_error"] = True
            results.append(result)
        elif role == "user":
            if message.get("text"):
                texts.append({"type": "text", "text": message["text"]})
        else:
            raise ValueError(f"unknown role {role!r} in the conversation")
    flush()
    return messages


def request_body(
    model: str, conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str
) -> dict[str, Any]:
    messages = convert_conversation(conversation)
    body: dict[str, Any] = {"model": model, "max_tokens": MAX_TOKENS, "messages": messages, "stream": True}
    if system:
        body["system"] = [{"type": "text", "text": system, "cache_control": CACHE_CONTROL}]
    if tools:
        body["tools"] = convert_tools(tools)
        body["tools"][-1]["cache_control"] = CACHE_CONTROL
    for message in cached_messages(messages):
        message["content"][-1]["cache_control"] = CACHE_CONTROL
    return body


def cached_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages whose last block ends a cached prefix: the latest, and the user message before the latest
    assistant message (the one the previous call ended with)."""
    marked = messages[-1:]
    last_assistant = max((i for i, message in enumerate(messages) if message["role"] == "assistant"), default=0)
    if last_assistant > 0:
        marked.insert(0, messages[last_assistant - 1])
    return marked


# --- the event stream, read without I/O ---------------------------------------------------------------------


class MessageStream(StreamReader):
    """Reads the lines of one streamed message; `feed_line` returns the text each one adds."""

    STREAM = "a Messages event stream"
    KIND = ANTHROPIC

    def __init__(self, address: str, instance: str | None, credential: str | None = None) -> None:
        super().__init__(address, instance, credential)
        self._blocks: dict[int, dict[str, Any]] = {}
        self._input: dict[str, int] = {}

    def feed_line(self, line: str) -> str | None:
        # Every Messages event is one `event:` line and one `data:` line holding the whole JSON object, whose
        # own `type` repeats the event name; so the data line alone is read, and blank lines and `event:`
        # lines are framing.
        field, payload = sse_field(line)
        if field != "data" or not payload:
            return None
        event = self.event(payload)
        return self.feed(event) if isinstance(event, dict) else None

    def feed(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        where = f"a {kind} event" if isinstance(kind, str) and len(kind) < 40 else "an event"  # in an error
        if kind == "message_start":
            message = self.field(event, "message", dict, {}, where)
            self._count_usage(self.field(message, "usage", dict, {}, "a message_start event's message"))
        elif kind == "content_block_start":
            block = self.field(event, "content_block", dict, {}, where)
            index = self.field(event, "index", int, len(self._blocks), where)
            if block.get("type") == "tool_use":
                self.required(block, "id", str, "a tool_use block")
                self.required(block, "name", str, "a tool_use block")
            self._blocks[index] = {**block, "json": []}
            if block.get("type") == "text":
                return self.add_text(self.field(block, "text", str, "", "a text block"))
        elif kind == "content_block_delta":
            delta = self.field(event, "delta", dict, {}, where)
            index = self.field(event, "index", int, -1, where)
            if delta.get("type") == "text_delta":
                return self.add_text(self.field(delta, "text", str, "", "a text_delta"))
            if delta.get("type") == "input_json_delta":
                piece = self.field(delta, "partial_json", str, "", "an input_json_delta")
                block = self._blocks.get(index)
                if block is not None:
                    block["json"].append(piece)
        elif kind == "message_delta":
            delta = self.field(event, "delta", dict, {}, where)
            self.stop_reason = (
                self.field(delta, "stop_reason", str, None, "a message_delta's delta") or self.stop_reason
            )
            self._count_usage(self.field(event, "usage", dict, {}, where))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise self.failed(json.dumps(event))
        # ping, content_block_stop and event types newer than this module carry nothing we keep (the API's
        # versioning policy says new event types may appear; they are to be ignored).
        return None

    @property
    def began(self) -> bool:
        return bool(self._blocks)

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(call_id=block["id"], name=block["name"], args=self._args(block))
            for _, block in sorted(self._blocks.items())
            if block.get("type") == "tool_use"
        ]

    def _count_usage(self, usage: dict[str, Any]) -> None:
        # message_start holds the input side; message_delta the cumulative output (and, lately, input again).
        for field in INPUT_USAGE_FIELDS:
            if (count := token_count(usage.get(field))) is not None:
                self._input[field] = count
        self.input_tokens = sum(self._input.values())
        self.cache_read_tokens = self._input.get("cache_read_input_tokens", 0)
        self.cache_write_tokens = self._input.get("cache_creation_input_tokens", 0)
        if (count := token_count(usage.get("output_tokens"))) is not None:
            self.output_tokens = count

    def _args(self, block: dict[str, Any]) -> dict[str, Any]:
        raw = "".join(block["json"])
        if not raw.strip():
            start = block.get("input")
            return start if isinstance(start, dict) else {}
        limit = f"its limit of {MAX_TOKENS} tokens" if self.stop_reason == "max_tokens" else None
        return tool_args(raw, block["name"], self.who, limit=limit)


WIRE = Wire(
    path="/messages",
    last_line="message_stop",
    auth_headers=auth_headers,
    request_body=request_body,
    reader=MessageStream,
)
