"""The blocking clients against a scripted server that speaks the wire (docs/protocol.md)."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control import session_protocol as sp
from chock.control.address import Address, BadAddress, parse_address, resolve_address
from chock.control.client import ControlClient, NoAnswer, SessionClient, SessionEnded, events_of
from chock.control.framing import MAX_MESSAGE_LINE, LineBuffer, ProtocolError, Unreachable
from chock.control.rows import ROW_DEFAULTS
from chock.control.session_protocol import APPROVAL, HANDOVER, ConfirmRequest, HandoverRequest
from chock.errors import ChockError
from chock.log.events import encode
from chock.log.row import RowState

SID = "20261201-073450-a1b2c3"
HELLO_OK = b"ok chock-control 1\n"
SESSION_OK = b"ok chock-session 1\n"


class Scripted:
    """A server that accepts connections in turn; on each, after every line it receives it sends the next
    canned reply. When a connection's replies run out it closes (`hold=False`) or reads on until the
    client closes (`hold=True`), recording every line, so a test can prove what was never sent."""

    def __init__(self, address, scripts: list[list[bytes]], *, hold: bool = False) -> None:
        self.scripts = scripts
        self.hold = hold
        self.received: list[list[str]] = []
        self.client_closed = threading.Event()
        if isinstance(address, Path):
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(str(address))
        else:
            self.listener = socket.create_server(address)
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def _serve(self) -> None:
        for replies in self.scripts:
            conn, _ = self.listener.accept()
            lines: list[str] = []
            self.received.append(lines)
            with conn:
                buffer = LineBuffer(MAX_MESSAGE_LINE)
                replies = list(replies)
                while replies or self.hold:
                    line = buffer.next_line()
                    if line is None:
                        data = conn.recv(65536)
                        if not data:
                            self.client_closed.set()
                            break
                        buffer.feed(data)
                        continue
                    lines.append(line)
                    if replies:
                        try:
                            conn.sendall(replies.pop(0))
                        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: its right
                            self.client_closed.set()
                            break

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=5)


@pytest.fixture
def sockdir():
    # Short, so the socket paths fit sun_path whatever pytest's tmp_path looks like.
    directory = Path(tempfile.mkdtemp(prefix="chock-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def serve(sockdir):
    servers = []

    def start(*scripts: list[bytes], hold: bool = False, name: str = "daemon.sock") -> Scripted:
        server = Scripted(sockdir / name, list(scripts), hold=hold)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def address_of(server: Scripted) -> str:
    return f"unix:{server.listener.getsockname()}"


def error_line(code: str, text: str) -> bytes:
    return ProtocolError(code, text).encode()


def event(n: int, kind: str = "assistant.delta", **fields) -> bytes:
    return dp.EventLine.raw(json.dumps({"id": n, "type": kind, **fields}, separators=(", ", ": ")).encode())


# Addresses ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("unix:/run/chock/daemon.sock", Address(path="/run/chock/daemon.sock")),
        ("/run/chock/daemon.sock", Address(path="/run/chock/daemon.sock")),
        ("localhost:7890", Address(host="localhost", port=7890)),
        ("127.0.0.1:7890", Address(host="127.0.0.1", port=7890)),
        ("[::1]:7890", Address(host="::1", port=7890)),
    ],
)
def test_addresses_parse(text, address):
    assert parse_address(text) == address
    assert parse_address(str(address)) == address


@pytest.mark.parametrize(
    "text",
    [
        "",
        "daemon.sock",
        "unix:daemon.sock",
        "::1:7890",
        "host",
        "host:",
        "host:0",
        "host:70000",
        "http://h:1",
    ],
)
def test_other_addresses_are_refused_clearly(text):
    with pytest.raises(BadAddress) as caught:
        parse_address(text)
    assert "unix:/" in str(caught.value) or "brackets" in str(caught.value)


def test_bare_ipv6_is_told_to_use_brackets():
    with pytest.raises(BadAddress, match=r"\[::1\]:7890"):
        parse_address("::1:7890")


def test_resolve_address_follows_the_spec_order():
    assert resolve_address("h:1", environ={"CHOCK_DAEMON": "x:2"}) == Address(host="h", port=1)
    assert resolve_address(port=7890, environ={}) == Address(host="127.0.0.1", port=7890)
    assert resolve_address(environ={"CHOCK_DAEMON": "x:2"}) == Address(host="x", port=2)
    assert resolve_address(environ={}, state_socket=Path("/s/daemon.sock")) == Address(path="/s/daemon.sock")


def test_daemon_and_port_together_are_refused():
    with pytest.raises(BadAddress, match="--daemon and --port"):
        resolve_address("h:1", port=2)


# The greeting ---------------------------------------------------------------------------------------------


def test_connect_greets_and_keeps_the_daemons_number(serve):
    server = serve([HELLO_OK])
    assert ControlClient(address_of(server), timeout=5).ping() == 1
    server.thread.join(5)
    assert server.received == [["hello chock-control 1"]]


def test_a_newer_daemon_is_refused_naming_both_numbers_and_nothing_else_is_sent(serve):
    server = serve([b"ok chock-control 2\n"], hold=True)
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).ping()
    assert caught.value.code == "protocol"
    assert caught.value.text == "this client speaks chock-control 1, the daemon chock-control 2: update the client"
    assert server.client_closed.wait(5)
    assert server.received == [["hello chock-control 1"]]


def test_the_daemons_own_refusal_of_the_greeting_is_kept(serve):
    refusal = error_line(
        "protocol", "this daemon speaks chock-control 0, the client chock-control 1: update the daemon"
    )
    server = serve([refusal])
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).ping()
    assert (caught.value.code, caught.value.text.endswith("update the daemon")) == ("protocol", True)


def test_a_daemon_that_predates_the_greeting_is_named_as_such(serve):
    server = serve([b"error unknown-verb hello is not a verb\n"])
    with pytest.raises(ProtocolError, match="predates chock-control 1"):
        ControlClient(address_of(server), timeout=5).ping()


def test_a_list_goes_with_the_greeting_in_one_round_trip(sockdir):
    """`collect` sends its request right behind its greeting: a daemon that answers nothing until it holds both
    lines answers it (a client that waited for the greeting's answer first would wait for ever)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sockdir / "d.sock"))
    listener.listen(1)
    row = dp.ListRow("2026-12-01T07:34:50.123Z", {"id": SID, "status": "ended"}).encode()

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            held = b""
            while held.count(b"\n") < 2 and (chunk := conn.recv(4096)):
                held += chunk
            if held == b"hello chock-control 1\nlist /p\n":
                conn.sendall(HELLO_OK + row)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        got = ControlClient(f"unix:{sockdir / 'd.sock'}", timeout=2).collect(dp.ListRequest("/p"), most=10)
        assert [(line.started_at, line.row["id"]) for line in got] == [("2026-12-01T07:34:50.123Z", SID)]
    finally:
        listener.close()
        thread.join(5)
    # A refusal of the greeting is still the refusal, the request never read.
    for n, (reply, words) in enumerate((
        (error_line("protocol", "this daemon speaks chock-control 0, the client chock-control 1: update the daemon"),
         "update the daemon"),
        (b"error unknown-verb hello is not a verb\n", "predates chock-control 1"),
    )):  # fmt: skip
        with pytest.raises(ProtocolError, match=words):
            with_server = Scripted(sockdir / f"refusing{n}.sock", [[reply]])
            try:
                ControlClient(address_of(with_server), timeout=5).collect(dp.ListRequest("/p"), most=10)
            finally:
                with_server.close()


def test_a_daemon_that_says_nothing_is_unreachable_within_the_bound(serve):
    server = serve([b""], hold=True)
    began = time.monotonic()
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=0.2).ping()
    assert caught.value.code == "unreachable" and "within 0.2 s" in caught.value.text
    assert time.monotonic() - began < 2


# Unreachable ----------------------------------------------------------------------------------------------


def test_a_missing_socket_is_unreachable_at_once(sockdir):
    began = time.monotonic()
    with pytest.raises(ProtocolError) as caught:
        ControlClient(f"unix:{sockdir}/nothing.sock", timeout=5).ping()
    assert time.monotonic() - began < 1
    assert caught.value.code == "unreachable"
    assert f"unix:{sockdir}/nothing.sock" in caught.value.text
    assert "chock daemon" in caught.value.text and "systemctl --user start chock.socket" in caught.value.text
    assert isinstance(caught.value, ChockError)


def test_a_socket_nobody_listens_on_is_unreachable(sockdir):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sockdir / "stale.sock"))  # bound, never listening: what a crashed daemon leaves
    try:
        with pytest.raises(ProtocolError) as caught:
            ControlClient(f"{sockdir}/stale.sock", timeout=5).ping()
        assert caught.value.code == "unreachable" and "nothing is listening" in caught.value.text
    finally:
        stale.close()


def test_a_tcp_port_nobody_listens_on_is_unreachable():
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(ProtocolError) as caught:
        ControlClient(f"127.0.0.1:{port}", timeout=5).ping()
    assert caught.value.code == "unreachable" and f"127.0.0.1:{port}" in caught.value.text


# The verbs ------------------------------------------------------------------------------------------------


def test_an_error_reply_becomes_a_control_error_with_the_daemons_code(serve):
    server = serve([HELLO_OK, error_line("not-found", f"no session {SID}")])
    with pytest.raises(ProtocolError) as caught:
        events_of(ControlClient(address_of(server), timeout=5).stream(dp.ReadRequest(SID, 0)))
    assert (caught.value.code, caught.value.text) == ("not-found", f"no session {SID}")


def test_read_iterates_events_until_the_daemon_closes(serve):
    server = serve([HELLO_OK, event(6) + event(7, "turn.end")])
    events = list(events_of(ControlClient(address_of(server), timeout=5).stream(dp.ReadRequest(SID, 5))))
    assert [e["id"] for e in events] == [6, 7] and events[1]["type"] == "turn.end"
    assert server.received == [["hello chock-control 1", f"read {SID} 5"]]


def test_read_of_nothing_new_is_empty(serve):
    server = serve([HELLO_OK, b""])
    assert list(events_of(ControlClient(address_of(server), timeout=5).stream(dp.ReadRequest(SID, 99)))) == []


def test_list_gives_rows_oldest_first(serve):
    rows = [
        ("2026-12-01T07:34:50.123Z", {"id": SID, "status": "ended"}),
        ("2026-12-02T08:00:00.000Z", {"id": "b"}),
    ]
    server = serve([HELLO_OK, b"".join(dp.ListRow(at, row).encode() for at, row in rows)])
    lines = ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/home/me/proj"), most=dp.MAX_SESSIONS)
    assert [(line.started_at, line.row) for line in lines] == [(at, {**ROW_DEFAULTS, **row}) for at, row in rows]
    assert server.received[0][1] == "list /home/me/proj"


def test_list_read_in_one_pass_gives_each_row_as_reading_its_line_alone_does(serve):
    """The client decodes a list's rows together; whatever the rows hold, it gives what decoding each line alone
    gives, and a line that is not one row is refused as it always was — never read as part of its neighbours."""
    lines = [dp.ListRow(f"2026-12-01T07:34:{n:02d}.000Z", {"id": f"s{n}", "n": n, "t": "é\t\"x\""}).encode()
             for n in range(50)]  # fmt: skip
    lines += [dp.ListRow("time\twith a tab", {"id": "escaped"}).encode(), b'2026-12-03T00:00:00.000Z\t {"id": "sp"} \n']
    server = serve([HELLO_OK, b"".join(lines)])
    got = ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
    alone = [dp.ListRow.decode(line.decode()[:-1]) for line in lines]
    assert [(line.started_at, line.row) for line in got] == [(row.started_at, row.row) for row in alone if row]
    assert len(got) == 52 and got[50].started_at == "time\twith a tab" and got[51].row == {**ROW_DEFAULTS, "id": "sp"}
    # Two lines whose JSON, joined, would make two objects: each alone is no row.
    split = [b'2026-12-04T00:00:00.000Z\t{"a": 1}, {"b": [0\n', b"2026-12-04T00:00:01.000Z\t{}]}\n"]
    server = serve([HELLO_OK, lines[0] + b"".join(split)], name="split.sock")
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
    assert "cannot read" in caught.value.text or "expected" in caught.value.text, caught.value.text


@pytest.mark.parametrize("how", ["with the greeting", "after it"])
def test_a_listing_past_its_bound_is_refused_and_not_held(serve, how):
    """Another machine's daemon need not be honest: rows of 1 MiB each, past a listing's 32 MiB, are refused
    (`protocol`: a reply it cannot read) whether the reply is read whole or line by line, and the client holds no
    more than the bound."""
    from chock.control.connection import NEED_DATA, WHOLE_MOST, ClientConnection

    row = dp.ListRow("2026-12-01T07:34:50.000Z", {"id": SID, "message": "x" * (1024 * 1024 - 200)}).encode()
    count = WHOLE_MOST // len(row) + 2
    if how == "with the greeting":
        server = serve([HELLO_OK, row * count])
        with pytest.raises(ProtocolError) as caught:
            ControlClient(address_of(server), timeout=30).collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
        assert caught.value.code == "protocol" and "more than 32 MiB in answer to `list`" in caught.value.text
        return
    connection = ClientConnection(dp.CONTROL)
    connection.greeting()
    connection.receive_data(HELLO_OK)
    connection.next_event()
    connection.send(dp.ListRequest("/p"))
    taken = 0
    with pytest.raises(ProtocolError) as caught:
        for _ in range(count):
            connection.receive_data(row)
            while connection.next_event() is not NEED_DATA:
                taken += 1
    assert caught.value.code == "protocol" and taken * len(row) <= WHOLE_MOST


def test_a_time_with_quotes_is_read_as_reading_its_line_alone_does(serve):
    """A time that, put in a JSON string as it is, would end the string and make rows of its own: the client
    gives exactly the rows each line gives alone, never more."""
    times = ['a",{}],["b', 'x\\"', "plain"]
    lines = [dp.ListRow(at, {"id": f"s{n}", "status": "ended"}).encode() for n, at in enumerate(times)]
    server = serve([HELLO_OK, b"".join(lines)])
    got = ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
    assert [(line.started_at, line.row["id"]) for line in got] == [(at, f"s{n}") for n, at in enumerate(times)]
    # Three lines none of which is a row alone, that would parse as three rows if their times went in as they are.
    forged = b'a",{"k":"\t"z":[[1\n' + b"T2\t{}]]}\n" + b'c",{}],["d\t{}\n'
    server = serve([HELLO_OK, forged], name="forged.sock")
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
    assert caught.value.code == "protocol", caught.value


def test_a_row_carries_every_field_and_the_client_reads_the_row_the_daemon_made(serve):
    """Every field is on the wire, at its default too (an older client reads each field it knows), in compact
    JSON; the client, parsing the reply in one pass, reads the row the daemon made, field for field, type for type
    (0 is not false, 0.0 not null) and in the same order."""
    folded = RowState()
    folded.feed(b"".join(encode(event) for event in (
        {"id": 1, "at": "2026-12-01T07:34:50.123Z", "type": "session.start", "session": SID, "project": "/p",
         "message": "go", "owner": "daemon"},
        {"id": 2, "at": "2026-12-01T07:34:51.000Z", "type": "usage", "input_tokens": 5, "output_tokens": 0,
         "cost": 0.0},
        {"id": 3, "at": "2026-12-01T07:34:52.000Z", "type": "session.end", "reason": "completed", "exit_code": 0},
    )))  # fmt: skip
    plain, priced = RowState(), folded
    plain.id, plain.started_at = "20261201-073453-000000", "2026-12-01T07:34:53.000Z"
    rows = [state.row(owner_alive=False) for state in (plain, priced)]
    lines = [dp.ListRow(row["started_at"], row).encode() for row in rows]
    for line in lines:
        assert all(f'"{name}":'.encode() in line for name in ROW_DEFAULTS), line
    assert b'"pending_approvals":0' in lines[1] and b'"budget":null' in lines[1] and b'"output_tokens":0' in lines[1]
    assert b", " not in lines[0] and b": " not in lines[0]  # compact
    server = serve([HELLO_OK, b"".join(lines)])
    got = ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
    typed = [[(name, type(value), value) for name, value in row.items()] for row in rows]
    assert [[(name, type(value), value) for name, value in line.row.items()] for line in got] == typed
    assert [dp.ListRow.decode(line.decode()[:-1]).row for line in lines] == rows  # a line read alone: the same


def test_list_of_an_unknown_project_is_empty(serve):
    server = serve([HELLO_OK, b""])
    assert ControlClient(address_of(server), timeout=5).collect(dp.ListRequest("/nowhere"), most=dp.MAX_SESSIONS) == []


def test_a_request_takes_an_absolute_project_only():
    # The daemon compares real paths; a request refuses, before anything is sent, what the daemon would.
    with pytest.raises(ProtocolError) as caught:
        dp.ListRequest("proj")
    assert caught.value.code == "bad-request" and "absolute" in caught.value.text
    assert dp.ListRequest(Path("/home/me/proj")).project == "/home/me/proj"


def test_watch_gives_the_row_then_events_until_close(serve):
    row = {"id": SID, "status": "running", "last_event_id": 3}
    server = serve([HELLO_OK, dp.WatchHeader(row).encode() + event(4) + event(5, "session.end", reason="completed")])
    stream = ControlClient(address_of(server), timeout=5).stream(dp.WatchRequest("/home/me/proj", SID, 3))
    assert stream.header == dp.WatchHeader(row)
    assert [e["id"] for e in events_of(stream)] == [4, 5]
    assert server.received[0][1] == f"watch /home/me/proj\t{SID}\t3"


def test_leaving_a_watch_closes_its_connection(serve):
    server = serve([HELLO_OK, dp.WatchHeader({"id": SID}).encode() + event(1)], hold=True)
    events = iter(ControlClient(address_of(server), timeout=5).stream(dp.WatchRequest("/p", SID), idle_timeout=None))
    assert next(events) == dp.EventLine.decode(event(1).decode().rstrip("\n"))
    events.close()
    assert server.client_closed.wait(5)


def test_watch_refused_is_raised_at_the_call(serve):
    server = serve([HELLO_OK, error_line("forbidden", "uid 1001 is not this daemon's")])
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).stream(dp.WatchRequest("/p", SID))
    assert caught.value.code == "forbidden"


def test_start_returns_the_id_and_log_path(serve):
    server = serve([HELLO_OK, dp.Started(SID, f"/state/sessions/{SID}/log.jsonl").encode()])
    started = ControlClient(address_of(server), timeout=5).call(dp.StartRequest("/home/me/proj", "fix it\nplease"))
    assert started == dp.Started(SID, f"/state/sessions/{SID}/log.jsonl")
    assert server.received[0][1] == "start /home/me/proj\tfix it\\nplease"


def test_start_refused_carries_the_childs_words(serve):
    server = serve([HELLO_OK, error_line("refused", "no credential for instance work")])
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).call(dp.StartRequest("/p", "go"))
    assert (caught.value.code, caught.value.text) == ("refused", "no credential for instance work")


def test_adopt(serve):
    server = serve([HELLO_OK, dp.Started(SID, "/log").encode()])
    assert ControlClient(address_of(server), timeout=5).call(dp.AdoptRequest("/p", SID)) == dp.Started(SID, "/log")
    assert server.received[0][1] == f"adopt /p\t{SID}"


def test_answer_ok_and_unreachable(serve):
    server = serve([HELLO_OK, dp.Answered().encode()], [HELLO_OK, error_line("unreachable", "no approval.sock")])
    client = ControlClient(address_of(server), timeout=5)
    assert client.call(dp.AnswerRequest("/p", SID, "r1", True)) == dp.Answered()
    with pytest.raises(ProtocolError) as caught:
        client.call(dp.AnswerRequest("/p", SID, "r2", False))
    assert caught.value.code == "unreachable"
    assert [lines[1] for lines in server.received] == [
        f"answer /p\t{SID}\tr1\tyes",
        f"answer /p\t{SID}\tr2\tno",
    ]


def test_a_bad_id_is_refused_before_anything_is_sent(serve):
    server = serve()  # accepts nobody: a connection would be an error in its thread
    with pytest.raises(ProtocolError) as caught:
        events_of(ControlClient(address_of(server), timeout=5).stream(dp.ReadRequest("../../etc/passwd", 0)))
    assert caught.value.code == "bad-request"
    assert server.received == []  # refused before it connected: the daemon never heard of it


def test_each_verb_opens_its_own_connection(serve):
    server = serve([HELLO_OK, b""], [HELLO_OK, b""])
    client = ControlClient(address_of(server), timeout=5)
    client.collect(dp.ListRequest("/p"), most=dp.MAX_SESSIONS)
    client.collect(dp.ListRequest("/q"), most=dp.MAX_SESSIONS)
    assert server.received == [["hello chock-control 1", "list /p"], ["hello chock-control 1", "list /q"]]


def test_a_daemon_that_closes_before_replying_is_unreachable(serve):
    server = serve([HELLO_OK])
    with pytest.raises(ProtocolError) as caught:
        ControlClient(address_of(server), timeout=5).call(dp.StartRequest("/p", "go"))
    assert caught.value.code == "unreachable" and "closed the connection" in caught.value.text


def test_an_unreadable_reply_is_protocol(serve):
    server = serve([HELLO_OK, b"this is not json\n"])
    with pytest.raises(ProtocolError) as caught:
        list(events_of(ControlClient(address_of(server), timeout=5).stream(dp.ReadRequest(SID, 0))))
    assert caught.value.code == "protocol"


def test_the_client_works_over_tcp():
    server = Scripted(("127.0.0.1", 0), [[HELLO_OK, event(1)]])
    try:
        client = ControlClient(f"127.0.0.1:{server.port}", timeout=5)
        assert [e["id"] for e in events_of(client.stream(dp.ReadRequest(SID, 0)))] == [1]
    finally:
        server.close()


# Session sockets --------------------------------------------------------------------------------------------


def test_pending_lists_requests_until_end(serve):
    items = sp.PendingItem("r1", "shell", "make test").encode() + sp.PendingItem("r2", "shell", "rm -r\nx").encode()
    server = serve([SESSION_OK, items + b"end\n"], name="approval.sock")
    with SessionClient(server.listener.getsockname(), APPROVAL, timeout=5) as client:
        assert client.pending() == [
            sp.PendingItem("r1", "shell", "make test"),
            sp.PendingItem("r2", "shell", "rm -r\nx"),
        ]
    assert server.received[0][:2] == ["hello chock-session 1", "pending"]


def test_session_answer_and_not_pending(serve):
    server = serve([SESSION_OK, b"ok answered\n", b"error not-pending r1 was answered already\n"], name="approval.sock")
    with SessionClient(server.listener.getsockname(), APPROVAL, timeout=5) as client:
        client.answer("r1", True)
        with pytest.raises(ProtocolError) as caught:
            client.answer("r1", False)
    assert caught.value.code == "not-pending"
    assert server.received[0][1:] == ["answer r1\tyes", "answer r1\tno"]


def test_a_session_that_ends_while_we_wait_says_so(serve):
    server = serve([SESSION_OK, b"ended completed\n"], name="approval.sock")
    with (
        SessionClient(server.listener.getsockname(), APPROVAL, timeout=5) as client,
        pytest.raises(SessionEnded) as caught,
    ):
        client.pending()
    assert caught.value.reason == "completed"


def test_session_greeting_mismatch_names_both_numbers(serve):
    server = serve([b"ok chock-session 3\n"], name="handover.sock")
    with pytest.raises(ProtocolError) as caught:
        SessionClient(server.listener.getsockname(), HANDOVER, timeout=5)
    assert "chock-session 1" in caught.value.text and "chock-session 3" in caught.value.text


def test_a_busy_session_is_waited_for_within_the_bound_and_confirm_waits_for_ready(serve):
    server = serve([SESSION_OK, b"busy 1 0\n"], name="handover.sock", hold=True)
    with SessionClient(server.listener.getsockname(), HANDOVER, timeout=5) as client:
        client.ask(HandoverRequest())
        assert client.next_reply(5) == sp.Busy(1, 0)
        with pytest.raises(NoAnswer):
            client.next_reply(0.1)  # the work is still running; --wait bounds each read
        with pytest.raises(RuntimeError):
            client.ask(ConfirmRequest())  # confirm comes after ready: this client never sends it early
    assert server.client_closed.wait(5)
    assert server.received[0] == ["hello chock-session 1", "handover"]


def test_busy_then_ready_then_released(serve):
    server = serve([SESSION_OK, b"busy 0 1\nbusy 0 0\nready\n", b"released\n"], name="handover.sock")
    with SessionClient(server.listener.getsockname(), HANDOVER, timeout=5) as client:
        client.ask(HandoverRequest())
        assert [client.next_reply(5) for _ in range(3)] == [sp.Busy(0, 1), sp.Busy(0, 0), sp.Ready()]
        client.call(ConfirmRequest(), timeout=5)


def test_a_session_that_closes_mid_reply_is_unreachable(serve):
    server = serve([SESSION_OK, b""], name="handover.sock")
    with SessionClient(server.listener.getsockname(), HANDOVER, timeout=5) as client:
        client.ask(HandoverRequest())
        with pytest.raises(Unreachable, match="closed the connection before answering handover"):
            client.next_reply(5)


def test_confirm_without_released_is_an_error(serve):
    server = serve([SESSION_OK, b"ready\n"], name="handover.sock")
    with SessionClient(server.listener.getsockname(), HANDOVER, timeout=5) as client:
        client.ask(HandoverRequest())
        assert client.next_reply(5) == sp.Ready()
        with pytest.raises(ProtocolError) as caught:
            client.call(ConfirmRequest(), timeout=5)  # the session closed: the send or the read finds out
    assert caught.value.code == "unreachable" and "closed the" in caught.value.text


def test_a_missing_session_socket_is_unreachable(sockdir):
    with pytest.raises(ProtocolError) as caught:
        SessionClient(
            sockdir / "approval.sock", HANDOVER if "handover" in str(sockdir / "approval.sock") else APPROVAL, timeout=5
        )
    assert caught.value.code == "unreachable" and str(sockdir / "approval.sock") in caught.value.text
