"""What a provider that misbehaves on the wire costs a call: loopback servers that write raw HTTP as such a
server or proxy would, against the real transport, and the line splitter it reads streams with."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import pytest

from chock.config import Price
from chock.providers import ProviderError, Reply, Retrying, TextDelta, anthropic, transport
from chock.providers.anthropic import MessageStream
from chock.providers.registry import check_credential, make_provider
from chock.providers.sse_lines import PastLimit, SSELines
from chock.providers.transport import HTTPProvider
from chock.providers.wire import Wire
from chock.session.calls import call
from tests.test_providers import HELLO, KEY, failure, stream_all

MIB = 1024 * 1024
PAUSE = 0.05  # between the bytes of a server that trickles; its whole trickle far outlasts the scaled-down bound


class RawServer:
    """A loopback HTTP server that reads each request (head and body) and lets `answer(conn, n)` write
    whatever it likes on the socket, `n` counting requests from 1. `sent_all` says, per request, whether the
    answer was written whole: False when the client hung up first."""

    def __init__(self, answer: Callable[[socket.socket, int], None]) -> None:
        self.answer = answer
        self.sent_all: list[bool] = []
        self.stopped = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._threads = [threading.Thread(target=self._serve, daemon=True)]
        self._lock = threading.Lock()

    def __enter__(self) -> RawServer:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        for thread in list(self._threads):
            thread.join(30)
        self._sock.close()

    def _serve(self) -> None:
        self._sock.settimeout(0.05)  # a closed socket wakes no accept: the loop looks at `stopped` instead
        while not self.stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            thread = threading.Thread(target=self._one, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head, _, body = data.partition(b"\r\n\r\n")
            fields = dict(line.lower().partition(b":")[::2] for line in head.split(b"\r\n")[1:])
            while len(body) < int(fields.get(b"content-length", b"0")):
                body += conn.recv(65536)
            with self._lock:
                self.sent_all.append(False)
                n = len(self.sent_all)
            try:
                self.answer(conn, n)
            except OSError:
                return
            self.sent_all[n - 1] = True

    def trickle(self, conn: socket.socket, data: bytes, *, every: float = PAUSE) -> None:
        """`data` a byte at a time, until the client hangs up or the test ends."""
        for byte in data:
            if self.stopped.wait(every):
                raise ConnectionAbortedError
            conn.sendall(bytes([byte]))


def head(status: str = "200 OK", content_type: str = "text/event-stream") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n".encode()


def event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def message_start(input_tokens: int = 10) -> bytes:
    usage = {"input_tokens": input_tokens, "output_tokens": 1}
    return event({"type": "message_start", "message": {"id": "m", "role": "assistant", "content": [], "usage": usage}})


def text_block(text: str) -> bytes:
    return event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}) + event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    )


def message_end() -> bytes:
    return (
        event({"type": "content_block_stop", "index": 0})
        + event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}})
        + event({"type": "message_stop"})
    )


def answer(text: str = "hi", input_tokens: int = 10) -> bytes:
    return message_start(input_tokens) + text_block(text) + message_end()


def send_mib(conn: socket.socket, piece: bytes, mib: int) -> None:
    block = piece * (MIB // len(piece))
    for _ in range(mib):
        conn.sendall(block)


async def no_wait(seconds: float) -> None:
    return None


def provider(server: RawServer, kind: str = "anthropic", retries: int = 0) -> Any:
    return make_provider(kind, server.address, "m", KEY, instance="work", retries=retries, sleep=no_wait)


@pytest.fixture
def small_answers(monkeypatch: pytest.MonkeyPatch) -> int:
    """An answer's bound scaled down to 1 MiB, so a server passes it quickly."""
    monkeypatch.setattr(transport, "ANSWER_LIMIT", MIB)
    return MIB


# --- the lines of a stream ----------------------------------------------------------------------------------


def fed(chunks: list[bytes], limit: int = MIB) -> list[str]:
    lines = SSELines(limit)
    return [line for chunk in chunks for line in lines.feed(chunk)] + lines.close()


def test_a_line_ends_at_lf_crlf_or_cr_wherever_the_chunks_are_cut() -> None:
    whole = b"data: a\ndata: b\r\ndata: c\rdata: d\r\n\r\n: e"
    expected = ["data: a", "data: b", "data: c", "data: d", "", ": e"]
    for cut in range(len(whole) + 1):
        for second in range(cut, len(whole) + 1):
            assert fed([whole[:cut], whole[cut:second], whole[second:]]) == expected, (cut, second)
    assert fed([b"a\r", b"\n", b"\nb"]) == ["a", "", "b"]  # a CR's LF comes in the next chunk, then a blank line


def test_a_line_is_utf8_and_ends_nowhere_else() -> None:
    text = "caf\u00e9 \u2028 \u0085 \x0c \u2029 \U0001f600"  # line ends to str.splitlines, none to a stream
    encoded = f"data: {text}\n".encode()
    for cut in range(len(encoded) + 1):  # inside the é and the emoji too
        assert fed([encoded[:cut], encoded[cut:]]) == [f"data: {text}"]
    assert fed([b"data: \xff\xfe ok\n"]) == ["data: \ufffd\ufffd ok"]


def test_every_byte_counts_against_the_limit_and_the_line_still_open_too() -> None:
    lines = SSELines(10)
    assert lines.feed(b"\n\n\n\n") == ["", "", "", ""]  # blank lines count
    assert lines.feed(b"data: ") == []
    with pytest.raises(PastLimit):
        lines.feed(b"x")  # the 11th byte, in a line never ended
    assert lines.received == 10


# --- the answer's bound -------------------------------------------------------------------------------------


# What a server may pad an answer with: each passes 1 MiB before the answer ends properly.
PADDING = {
    "a comment line that never ends, before the answer": lambda conn: (
        conn.sendall(head() + b": "),
        send_mib(conn, b"a", 2),
        conn.sendall(b"\n\n" + answer()),
    ),
    "pings before the answer's first block": lambda conn: (
        conn.sendall(head() + message_start()),
        send_mib(conn, event({"type": "ping"}), 2),
        conn.sendall(text_block("hi") + message_end()),
    ),
    "blank lines after its text": lambda conn: (
        conn.sendall(head() + message_start() + text_block("hi")),
        send_mib(conn, b"\n", 2),
        conn.sendall(message_end()),
    ),
}


@pytest.mark.parametrize("padding", sorted(PADDING))
def test_every_byte_of_the_stream_counts_against_the_answers_bound(small_answers: int, padding: str) -> None:
    with RawServer(lambda conn, n: PADDING[padding](conn)) as server:
        text = str(failure(provider(server)))
    assert "passed 1 MiB, the most one answer may take" in text and "`chock run --continue` asks again" in text


def test_a_data_line_that_never_ends_is_read_no_further_than_the_bound(small_answers: int) -> None:
    def endless(conn: socket.socket, n: int) -> None:
        conn.sendall(head() + message_start() + text_block("so far") + b"data: ")
        send_mib(conn, b"A", 32)

    with RawServer(endless) as server:
        items, error = stream_all(provider(server))
    assert error is not None and "passed 1 MiB" in str(error)
    assert items == [TextDelta("so far")]
    assert server.sent_all == [False]  # the client hung up: the rest was never read


def test_text_holding_a_unicode_line_separator_arrives_whole() -> None:
    text = "one\u2028two\u0085three"  # sent unescaped, as JSON allows and llama.cpp and vLLM write it

    def chunks(conn: socket.socket, n: int) -> None:
        chunk = {"choices": [{"index": 0, "delta": {"content": text}}]}
        conn.sendall(head() + f"data: {json.dumps(chunk, ensure_ascii=False)}\n\ndata: [DONE]\n\n".encode())

    with RawServer(chunks) as server:
        items, error = stream_all(provider(server, "openai-compat"))
    assert error is None, error
    assert items[-1] == Reply(text)


# --- the call's whole time ----------------------------------------------------------------------------------


@pytest.fixture
def short_calls(monkeypatch: pytest.MonkeyPatch) -> float:
    """A call's whole bound scaled down to half a second."""
    monkeypatch.setattr(transport, "CALL_SECONDS", 0.5)
    return 0.5


def test_a_stream_kept_alive_by_pings_that_never_ends_is_given_up(short_calls: float) -> None:
    def pings(conn: socket.socket, n: int) -> None:
        conn.sendall(head() + message_start())
        for _ in range(200):
            if server.stopped.wait(PAUSE):
                return
            conn.sendall(b": keep-alive\n\n" + event({"type": "ping"}))

    with RawServer(pings) as server:
        error = failure(provider(server, retries=2))
        assert len(server.sent_all) == 1  # a call that ran out its time is not sent again
    assert "the call went on past 0.5 s, the most one call may take" in str(error)
    assert "`chock run --continue` asks again" in str(error)
    assert error.usage is not None and error.usage["input_tokens"] == 10


def test_headers_trickled_a_byte_at_a_time_are_given_up(short_calls: float) -> None:
    with RawServer(lambda conn, n: server.trickle(conn, b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 400)) as server:
        error = failure(provider(server))
    assert "the call went on past 0.5 s" in str(error)


def test_a_slow_error_page_is_quoted_as_far_as_it_came(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "ERROR_BODY_SECONDS", 0.5)

    def slow(conn: socket.socket, n: int) -> None:
        conn.sendall(head("503 Service Unavailable", "text/plain") + b"overloaded ")
        server.trickle(conn, b"." * 200 + b" END")

    with RawServer(slow) as server:
        text = str(failure(provider(server)))
    assert "the provider failed (HTTP 503: overloaded" in text and "END" not in text


def test_an_error_page_cut_short_still_names_its_status() -> None:
    def cut(conn: socket.socket, n: int) -> None:
        conn.sendall(head("503 Service Unavailable", "text/plain").replace(b"connection", b"content-length: 99\r\nx"))
        conn.sendall(b"overloaded")

    with RawServer(cut) as server:
        text = str(failure(provider(server)))
    assert "the provider failed (HTTP 503: overloaded); try again later" in text


# --- retries before the answer's first byte -----------------------------------------------------------------


def reset(conn: socket.socket) -> None:
    """Close with a TCP reset, as a crashed server or a proxy does."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize("cut", ["closed", "reset"])
def test_a_stream_cut_before_any_content_is_sent_again(cut: str) -> None:
    def cut_first(conn: socket.socket, n: int) -> None:
        if n == 1:
            conn.sendall(head() + message_start())
            if cut == "reset":
                reset(conn)
        else:
            conn.sendall(head() + answer("made it"))

    with RawServer(cut_first) as server:
        items, error = stream_all(provider(server, retries=1))
    assert error is None, error
    retrying, *_, reply = items
    assert isinstance(retrying, Retrying) and (retrying.attempt, retrying.status) == (1, None)
    assert reply == Reply("made it", input_tokens=10, output_tokens=5, stop_reason="end_turn")


def test_the_tokens_an_attempt_sent_again_reported_are_logged_and_priced() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    def overloaded_first(conn: socket.socket, n: int) -> None:
        conn.sendall(head() + (message_start(1234) + event(overloaded) if n == 1 else answer("made it", 1000)))

    events: list[tuple[str, dict[str, Any]]] = []

    def emit(kind: str, **fields: Any) -> Any:
        events.append((kind, fields))

    async def go(p: Any) -> Reply:
        try:
            return await call(p, HELLO, [], "sys", emit, price=Price(input=1.0, output=2.0))
        finally:
            await p.aclose()

    with RawServer(overloaded_first) as server:
        reply = asyncio.run(go(provider(server, retries=1)))
    assert reply.text == "made it"
    logged = [(kind, fields) for kind, fields in events if kind != "assistant.delta"]
    assert [kind for kind, _ in logged] == ["usage", "provider.retry"]  # the last attempt's: the session logs it
    usage = logged[0][1]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cost"]) == (1234, 1, 0.001236)
    assert logged[1][1]["status"] == 529


# --- the credential check -----------------------------------------------------------------------------------


def check(server: RawServer) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        check_credential("openai-compat", server.address, KEY)
    assert KEY not in str(caught.value)
    return caught.value


def test_login_refuses_a_listing_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "LISTING_LIMIT", 64 * 1024)
    listing = json.dumps({"object": "list", "data": [{"id": f"model-{n}", "object": "model"} for n in range(30000)]})

    with RawServer(lambda conn, n: conn.sendall(head(content_type="application/json") + listing.encode())) as server:
        text = str(check(server))
    assert "the answer to GET /models passed 64 KiB" in text and "versioned base URL" in text


def test_login_reads_no_more_of_an_error_page_than_it_quotes() -> None:
    def huge(conn: socket.socket, n: int) -> None:
        conn.sendall(head("401 Unauthorized", "text/plain") + b"no such key ")
        send_mib(conn, b"A", 32)

    with RawServer(huge) as server:
        text = str(check(server))
    assert server.sent_all == [False]  # the client hung up: the rest was never read
    assert "the credential was rejected (HTTP 401: no such key AAAA" in text


@pytest.mark.parametrize("status", ["200 OK", "401 Unauthorized"])
def test_login_reads_json_nested_past_the_parsers_depth_as_no_listing(status: str) -> None:
    deep = b"[" * 60000
    with RawServer(lambda conn, n: conn.sendall(head(status, "application/json") + deep)) as server:
        text = str(check(server))
    expected = "is not the API's list of models" if status == "200 OK" else "the credential was rejected (HTTP 401)"
    assert expected in text


def test_a_refusal_nested_past_the_parsers_depth_still_names_its_status() -> None:
    deep = b"[" * 60000
    with RawServer(lambda conn, n: conn.sendall(head("400 Bad Request", "application/json") + deep)) as server:
        text = str(failure(provider(server)))
    assert "the provider rejected the request (HTTP 400)" in text


def test_login_is_bounded_as_a_whole_however_steadily_its_answer_trickles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "CHECK_SECONDS", 0.5)

    def trickled(conn: socket.socket, n: int) -> None:
        conn.sendall(head(content_type="application/json"))
        server.trickle(conn, b'{"object": "list", "data": [' + b" " * 200 + b"]}")

    with RawServer(trickled) as server:
        text = str(check(server))
    assert "the answer to GET /models went on past 0.5 s" in text


# --- a reader that cannot read an event ---------------------------------------------------------------------


class Fragile(MessageStream):
    """The Messages reader, failing as a reader does on a field of a type it does not expect: on a `weird`
    event, and at the reply when `at_reply`."""

    at_reply = False

    def feed(self, event: dict[str, Any]) -> str | None:
        if event.get("type") == "weird":
            raise TypeError("'int' object is not subscriptable")
        return super().feed(event)

    def tool_calls(self) -> list[Any]:
        if self.at_reply:
            raise KeyError("id")
        return super().tool_calls()


class FragileAtReply(Fragile):
    at_reply = True


WEIRD = event({"type": "weird", "secret": KEY})
FAULTS = {
    "before the answer": (message_start(77) + WEIRD + text_block("hi") + message_end(), Fragile, "an event"),
    "within the answer": (message_start(77) + text_block("hi") + WEIRD + message_end(), Fragile, "an event"),
    "at its end": (answer("hi", 77), FragileAtReply, "its events do not make an answer"),
}


@pytest.mark.parametrize("where", sorted(FAULTS))
def test_an_event_its_reader_cannot_read_ends_the_call_as_the_providers_error(where: str) -> None:
    body, reader, said = FAULTS[where]
    wire = Wire(
        anthropic.WIRE.path, anthropic.WIRE.last_line, anthropic.WIRE.auth_headers, anthropic.WIRE.request_body, reader
    )
    with RawServer(lambda conn, n: conn.sendall(head() + body)) as server:
        fragile = HTTPProvider(wire, "anthropic", server.address, "m", KEY, instance="work", retries=2)
        error = failure(fragile)
        assert len(server.sent_all) == 1
    assert "the response is not the API's" in str(error) and said in str(error) and "check the address" in str(error)
    assert error.usage is not None and error.usage["input_tokens"] == 77
