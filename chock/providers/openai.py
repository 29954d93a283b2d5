"""The OpenAI chat-completions wire, streamed (kinds `aiand` and `openai-compat=<url>`, e.g. llama.cpp).

`POST <address>/chat/completions` with `stream: true` answers with server-sent events, one `data:` line per
chunk: `choices[0].delta.content` carries text, `choices[0].delta.tool_calls` carries tool calls keyed by
`index` (the id and name first, then pieces of the JSON arguments), a last chunk with empty `choices` carries
`usage` (asked for with `stream_options.include_usage`), and `data: [DONE]` ends it. `ChatStream` reads those
lines with no I/O. `WIRE` is this module to the rest of Chock: the transport carries it, the registry picks
it for kinds `aiand` and `openai-compat`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from chock.providers import ToolCall
from chock.providers.failures import json_kind, malformed_event
from chock.providers.kinds import OPENAI_COMPAT
from chock.providers.wire import StreamReader, Wire, sse_field, token_count, tool_args

DONE = "[DONE]"


def auth_headers(credential: str | None) -> dict[str, str]:
    """`Authorization: Bearer` only when there is a credential (a local llama.cpp server wants none)."""
    return {"authorization": f"Bearer {credential}"} if credential else {}


# --- the neutral conversation, as chat completions wants it -------------------------------------------------


def convert_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def convert_conversation(conversation: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    """Neutral messages → chat messages, the system prompt first.

    Every assistant `tool_calls` must be answered by `tool` messages before anything else, and many local
    chat templates insist that user and assistant alternate; so in a run of non-assistant messages (the log
    may hold a note between two tool results) the tool messages come first, in order, then the run's user
    texts as one user message. This wire has no error flag on a tool result, so a failed tool's output says
    so in words.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    results: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        messages.extend(results)
        if texts:
            messages.append({"role": "user", "content": "\n\n".join(texts)})
        results.clear()
        texts.clear()

    for message in conversation:
        role = message["role"]
        if role == "assistant":
            calls = [
                {
                    "id": call["call_id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
                }
                for call in message.get("tool_calls") or []
            ]
            text = message.get("text") or ""
            if not text and not calls:
                continue
            flush()
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last["content"] = "\n\n".join(part for part in (last["content"], text) if part)
                if calls:
                    last.setdefault("tool_calls", []).extend(calls)
            else:
                assistant: dict[str, Any] = {"role": "assistant", "content": text}
                if calls:
                    assistant["tool_calls"] = calls
                messages.append(assistant)
        elif role == "tool":
            output = message.get("output") or ""
            if message.get("is_error"):
                output = f"error: {output}" if output else "error (no output)"
            results.append({"role": "tool", "tool_call_id": message["call_id"], "content": output})
        elif role == "user":
            if message.get("text"):
                texts.append(message["text"])
        else:
            raise ValueError(f"unknown role {role!r} in the conversation")
    flush()
    return messages


def request_body(
    model: str, conversation: list[dict[str, Any]], tools: list[dict[str, Any]], system: str
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": convert_conversation(conversation, system),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = convert_tools(tools)
    return body


# --- the chunk stream, read without I/O ---------------------------------------------------------------------


class ChatStream(StreamReader):
    """Reads the lines of one streamed chat completion; `feed_line` returns the text each one adds. Its
    `stop_reason` is the first choice's `finish_reason`."""

    STREAM = "a chat-completions stream"
    KIND = OPENAI_COMPAT  # or `aiand` at its own address

    def __init__(self, address: str, instance: str | None, credential: str | None = None) -> None:
        super().__init__(address, instance, credential)
        self._calls: dict[int, dict[str, Any]] = {}

    def feed_line(self, line: str) -> str | None:
        field, payload = sse_field(line.strip())  # forgiving: white space before the field is ignored too
        if field == "error":
            # llama.cpp's server reports a failure inside a stream as an `error:` line of its own.
            raise self.failed(payload)
        if field != "data" or not payload:
            return None
        if payload == DONE:
            self.done = True
            return None
        chunk = self.event(payload)
        return self.feed(chunk) if isinstance(chunk, dict) else None

    def feed(self, chunk: dict[str, Any]) -> str | None:
        if chunk.get("error"):
            raise self.failed(json.dumps(chunk))
        usage = self.field(chunk, "usage", dict, {}, "a chunk")
        self.input_tokens = token_count(usage.get("prompt_tokens")) or self.input_tokens
        self.output_tokens = token_count(usage.get("completion_tokens")) or self.output_tokens
        # Servers that cache prompts say how much of `prompt_tokens` came from the cache; none says what it
        # wrote to it.
        details = self.field(usage, "prompt_tokens_details", dict, {}, "a chunk's usage")
        if (cached := token_count(details.get("cached_tokens"))) is not None:
            self.cache_read_tokens = cached
        added: list[str] = []
        for choice in self.field(chunk, "choices", list, [], "a chunk"):
            if not isinstance(choice, dict):
                raise malformed_event(self.who, self.STREAM, f"a chunk's `choices` holds {json_kind(choice)}")
            if self.field(choice, "index", int, 0, "a choice") != 0:
                continue  # one completion is asked for; a server that sends more is read for the first
            self.stop_reason = self.field(choice, "finish_reason", str, None, "a choice") or self.stop_reason
            delta = self.field(choice, "delta", dict, {}, "a choice")
            added.append(self.field(delta, "content", str, "", "a choice's delta"))
            for piece in self.field(delta, "tool_calls", list, [], "a choice's delta"):
                self._add_call_piece(piece)
        return self.add_text("".join(added))

    @property
    def began(self) -> bool:
        return bool(self.text or self._calls)

    def tool_calls(self) -> list[ToolCall]:
        # Some local servers leave the id out; the log and the next request need one all the same.
        return [
            ToolCall(call_id=call["id"] or f"call_{os.urandom(12).hex()}", name=call["name"], args=self._args(call))
            for _, call in sorted(self._calls.items())
        ]

    def _add_call_piece(self, piece: object) -> None:
        if not isinstance(piece, dict):
            raise malformed_event(self.who, self.STREAM, f"a delta's `tool_calls` holds {json_kind(piece)}")
        index = self.field(piece, "index", int, 0, "a tool call")
        call = self._calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if call_id := self.field(piece, "id", str, "", "a tool call"):
            call["id"] = call_id
        function = self.field(piece, "function", dict, {}, "a tool call")
        if (name := self.field(function, "name", str, "", "a tool call's function")) and not call["name"]:
            call["name"] = name
        if arguments := self.field(function, "arguments", str, "", "a tool call's function"):
            call["arguments"].append(arguments)

    def _args(self, call: dict[str, Any]) -> dict[str, Any]:
        raw = "".join(call["arguments"])
        if not raw.strip():
            return {}
        limit = "its token limit" if self.stop_reason == "length" else None
        return tool_args(raw, call["name"], self.who, limit=limit)


WIRE = Wire(
    path="/chat/completions",
    last_line=DONE,
    auth_headers=auth_headers,
    request_body=request_body,
    reader=ChatStream,
)
