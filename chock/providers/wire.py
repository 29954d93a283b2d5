"""What a wire format is: the one value each wire module exports (`anthropic.WIRE`, `openai.WIRE`), and the
server-sent-event helpers both wires read their streams with. No I/O here: `transport` carries a wire.

A wire's request builder is the only place its request body is shaped, and its reader the only place its
events are read (text, tool calls and usage), so a change to what is asked or what is counted lands in one
function of one wire module.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from chock.providers import USAGE_FIELDS, ProviderError, Reply, ToolCall
from chock.providers.failures import (
    broken_tool_call,
    describe,
    json_kind,
    malformed_event,
    not_an_api_stream,
    stream_failure,
)
from chock.providers.kinds import DEFAULT_ADDRESSES
from chock.value import Value

# The most tokens one count may say: 2**53, the largest whole number every JSON reader (the page's too) keeps
# exact, and a cost that stays a finite float at any price.
MOST_TOKENS = 2**53


def token_count(found: object) -> int | None:
    """A token count the provider reported, or None when it is none: a whole number from 0 to MOST_TOKENS. A
    string, a fraction, a bool, a negative or a larger number is not counted, so no report can lower what the
    session has spent (its `.budget`), make its cost infinite, or fail the call."""
    return found if type(found) is int and 0 <= found <= MOST_TOKENS else None


class StreamReader:
    """What both wires' readers keep, with no I/O: the answer's text so far, its usage, why the model stopped,
    and whether the stream ended. A wire's reader says how one line is read (`feed_line`, returning the text it
    adds, counting the usage it carries) and which tool calls the answer made (`tool_calls`); `reply` is then the
    same for both.

    A reader takes from an event only values of the types its wire documents (`field`, `required`): an event
    that holds anything else in a field the reader reads is not the API's, and ends the call with an error
    saying so, as a line that is not JSON does (`event`)."""

    STREAM = "an event stream"  # what the wire's stream is called in its errors
    KIND = ""  # the kind its wire is read for, unless its address is another kind's own (`kind`)

    def __init__(self, address: str, instance: str | None, credential: str | None = None) -> None:
        self.address = address
        self.instance = instance
        self.who = describe(instance, address)  # who failed, in every message
        self._credential = credential  # cut from every word of the provider's a failure quotes
        self.text: list[str] = []
        self.input_tokens = 0  # the whole prompt, its cached parts included
        self.output_tokens = 0
        self.cache_read_tokens = 0
        self.cache_write_tokens = 0
        self.stop_reason: str | None = None  # the provider's own word (`Reply.stop_reason`)
        self.done = False

    def feed_line(self, line: str) -> str | None:
        raise NotImplementedError

    def tool_calls(self) -> list[ToolCall]:
        raise NotImplementedError

    def add_text(self, text: str) -> str | None:
        """Keep `text` and return it, or None when there is none."""
        if not text:
            return None
        self.text.append(text)
        return text

    @property
    def kind(self) -> str:
        """The instance's kind, as a login hint names it: the one whose own address this is, else the wire's."""
        own = (kind for kind, address in DEFAULT_ADDRESSES.items() if address == self.address.rstrip("/"))
        return next(own, self.KIND)

    def failed(self, payload: str) -> ProviderError:
        """The provider reported an error inside the stream: `payload` is its event's JSON (or its words)."""
        return stream_failure(self.address, self.instance, payload, self._credential, self.kind)

    def event(self, payload: str) -> Any:
        """A `data:` line's JSON. Anything else came from something other than the API, so it says so: a line
        that is not JSON, or JSON nested deeper than a reader follows (no event of the API's is)."""
        try:
            return json.loads(payload)
        except (ValueError, RecursionError):
            raise not_an_api_stream(self.who, self.STREAM, payload, self._credential) from None

    def field(self, holder: dict[str, Any], name: str, kind: type, default: Any, where: str) -> Any:
        """`holder[name]` when it is of `kind` (a bool is no number), `default` when it is null or missing. A value
        of another type is not the API's: `where` names what holds it, for the error that says so."""
        found = holder.get(name)
        if found is None:
            return default
        if isinstance(found, kind) and (kind is bool or not isinstance(found, bool)):
            return found
        raise malformed_event(self.who, self.STREAM, f"{where}'s `{name}` is {json_kind(found)}, not {json_kind(kind)}")

    def required(self, holder: dict[str, Any], name: str, kind: type, where: str) -> Any:
        """`holder[name]`, which the wire says is always there, of `kind`; anything else is not the API's."""
        found = self.field(holder, name, kind, None, where)
        if found is None:
            raise malformed_event(self.who, self.STREAM, f"{where} has no `{name}`")
        return found

    @property
    def began(self) -> bool:
        """Whether the answer has begun: text or a tool call has come. Before it, nothing was shown, so an
        error the stream reports may be sent again as its status would be."""
        raise NotImplementedError

    def usage(self) -> dict[str, int]:
        """What the stream has reported of the call's usage so far, as a `usage` event's fields."""
        return {name: getattr(self, name) for name in USAGE_FIELDS}

    def reply(self) -> Reply:
        return Reply(
            text="".join(self.text), tool_calls=self.tool_calls(), stop_reason=self.stop_reason, **self.usage()
        )


class Wire(Value):
    """One wire format: where its POST goes, its headers, its request body and its stream's reader."""

    __slots__ = ("auth_headers", "last_line", "path", "reader", "request_body")

    def __init__(
        self,
        path: str,
        last_line: str,
        auth_headers: Callable[[str | None], dict[str, str]],
        request_body: Callable[[str, list[dict[str, Any]], list[dict[str, Any]], str], dict[str, Any]],
        reader: Callable[[str, str | None, str | None], StreamReader],
    ) -> None:
        self.path = path  # where the POST goes, below the instance's address
        self.last_line = last_line  # what ends a complete stream, named when a stream is cut before it
        # The headers that carry the credential (and whatever else every request of this wire needs).
        self.auth_headers = auth_headers
        # (model, conversation, tools, system) -> the JSON body of one streamed call.
        self.request_body = request_body
        # (address, instance, credential) -> a fresh reader for one call's stream.
        self.reader = reader


def sse_field(line: str) -> tuple[str, str]:
    """One server-sent-event line as (field, value): the field is what stands before the first colon (HTML
    §9.2.6); the value's surrounding white space is dropped, which JSON and `[DONE]` never miss."""
    field, _, value = line.partition(":")
    return field, value.strip()


def tool_args(raw: str, name: str, who: str, *, limit: str | None) -> dict[str, Any]:
    """A tool call's arguments from the JSON its streamed pieces make. `limit` names the output limit the
    answer reached, if it did: a call cut there is broken JSON."""
    try:
        args = json.loads(raw)
    except ValueError:
        raise broken_tool_call(who, name, limit=limit) from None
    except RecursionError:  # JSON, nested deeper than a reader follows
        raise broken_tool_call(who, name, limit=None, what="nested too deeply to be read") from None
    if not isinstance(args, dict):
        raise broken_tool_call(who, name, limit=None, what="not a JSON object")
    return args
