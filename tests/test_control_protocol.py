"""The wires with no I/O: both ends of a connection driven with plain bytes (docs/protocol.md)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chock.control import daemon_protocol as dp
from chock.control import framing as f
from chock.control import session_protocol as sp
from chock.control.connection import CLOSED, NEED_DATA, ClientConnection, ServerConnection
from chock.control.framing import ErrorCode, LineBuffer, ProtocolError
from chock.control.greeting import Greeted, check_greeting_reply, parse_greeting
from chock.control.rows import ROW_DEFAULTS

SID = "20261201-073450-a1b2c3"


def code_of(call, *args, **kwargs) -> str:
    with pytest.raises(ProtocolError) as caught:
        call(*args, **kwargs)
    return caught.value.code


def text_of(call, *args, **kwargs) -> str:
    with pytest.raises(ProtocolError) as caught:
        call(*args, **kwargs)
    return caught.value.text


def greeted_pair(protocol=dp.CONTROL) -> tuple[ClientConnection, ServerConnection]:
    """A client and a server that have exchanged the greeting through bytes."""
    client, server = ClientConnection(protocol), ServerConnection(protocol)
    server.receive_data(client.greeting())
    assert server.next_event() == Greeted(protocol.name, protocol.number)
    client.receive_data(server.greeting_reply())
    assert client.next_event() == Greeted(protocol.name, protocol.number)
    return client, server


def server_takes(line: bytes, protocol=dp.CONTROL):
    """What a greeted server makes of one request line."""
    server = ServerConnection(protocol)
    server.receive_data(f"hello {protocol.name} {protocol.number}\n".encode() + line)
    server.next_event()
    return server.next_event()


# Numbers and names ------------------------------------------------------------------------------------------


def test_protocol_numbers_and_names():
    assert (dp.CONTROL.name, dp.CONTROL.number, sp.APPROVAL.name, sp.APPROVAL.number) == (
        "chock-control", 1, "chock-session", 1,
    )  # fmt: skip
    assert ClientConnection(dp.CONTROL).greeting() == b"hello chock-control 1\n"
    assert ServerConnection(sp.HANDOVER).greeting_reply() == b"ok chock-session 1\n"


def test_error_codes():
    codes = {
        "protocol", "greeting", "unknown-verb", "bad-request", "not-found", "forbidden",
        "refused", "not-pending", "too-large", "unreachable", "busy", "internal",
    }  # fmt: skip
    assert codes == f.ERROR_CODES


def test_the_daemon_takes_these_verbs():
    assert list(dp.CONTROL.requests) == [
        "start", "adopt", "read", "list", "watch", "answer", "stop", "say", "remove",
        "sessions", "find", "instances", "start-with", "remove-with-workspace", "answer-with", "rules",
        "rule-remove", "move-check", "move-out", "send", "receive", "move-in", "moved", "move-drop",
    ]  # fmt: skip
    assert list(sp.APPROVAL.requests) == ["pending", "answer", "answer-with"]
    assert list(sp.HANDOVER.requests) == ["handover", "confirm", "stop", "say"]


# Escaping ---------------------------------------------------------------------------------------------------


def test_escape_writes_tab_lf_and_backslash_as_escapes():
    assert f.escape("a\tb\nc\\d") == "a\\tb\\nc\\\\d"
    assert f.unescape("a\\tb\\nc\\\\d") == "a\tb\nc\\d"


def test_escape_leaves_other_text_alone():
    assert f.escape("naïve “quotes” \r ✓") == "naïve “quotes” \r ✓"


def test_unknown_escape_and_lone_backslash_are_bad_requests():
    assert code_of(f.unescape, "a\\x") == ErrorCode.BAD_REQUEST
    assert "lone backslash" in text_of(f.unescape, "abc\\")


def test_a_multi_line_message_travels_in_one_line():
    line = dp.StartRequest("/p", "first line\n\tindented\nC:\\path").encode()
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    assert server_takes(line).message == "first line\n\tindented\nC:\\path"


# Each request, from the client's bytes to the server's typed request -----------------------------------------

REQUESTS = [
    (b"start /home/me/proj\tfix the flaky test\n", dp.StartRequest("/home/me/proj", "fix the flaky test"), dp.CONTROL),
    (f"adopt /home/me/proj\t{SID}\n".encode(), dp.AdoptRequest("/home/me/proj", SID), dp.CONTROL),
    (f"read {SID} 17\n".encode(), dp.ReadRequest(SID, 17), dp.CONTROL),
    (b"list /home/me/proj\n", dp.ListRequest("/home/me/proj"), dp.CONTROL),
    (f"watch /home/me/proj\t{SID}\t0\n".encode(), dp.WatchRequest("/home/me/proj", SID, 0), dp.CONTROL),
    (f"answer /p\t{SID}\tr1\tyes\n".encode(), dp.AnswerRequest("/p", SID, "r1", True), dp.CONTROL),
    (f"answer /p\t{SID}\tr1\tno\n".encode(), dp.AnswerRequest("/p", SID, "r1", False), dp.CONTROL),
    (b"sessions\n", dp.SessionsRequest(), dp.CONTROL),
    (f"find {SID}\n".encode(), dp.FindRequest(SID), dp.CONTROL),
    (b"instances\n", dp.InstancesRequest(), dp.CONTROL),
    (b"start-with /p\twork.2\tdo\\tit\n", dp.StartWithRequest("/p", "work.2", "do\tit"), dp.CONTROL),
    (f"remove-with-workspace /p\t{SID}\n".encode(), dp.RemoveWithWorkspaceRequest("/p", SID), dp.CONTROL),
    (
        f"answer-with /p\t{SID}\tr1\tyes\tproject\tgit diff\t\n".encode(),
        dp.AnswerWithRequest("/p", SID, "r1", True, "project", "git diff", ""),
        dp.CONTROL,
    ),
    (
        f"answer-with /p\t{SID}\tr1\tno\tonce\t\tnot now:\\tuse the\\nfixture\n".encode(),
        dp.AnswerWithRequest("/p", SID, "r1", False, "once", "", "not now:\tuse the\nfixture"),
        dp.CONTROL,
    ),
    (b"rules /p\n", dp.RulesRequest("/p"), dp.CONTROL),
    (b"rule-remove /p\tp1a2b3c4d\n", dp.RuleRemoveRequest("/p", "p1a2b3c4d"), dp.CONTROL),
    (
        b"answer-with r1\tyes\tsession\tpytest\t\n",
        sp.SessionAnswerWithRequest("r1", True, "session", "pytest"),
        sp.APPROVAL,
    ),
    (b"pending\n", sp.PendingRequest(), sp.APPROVAL),
    (b"answer r1\tyes\n", sp.SessionAnswerRequest("r1", True), sp.APPROVAL),
    (b"handover\n", sp.HandoverRequest(), sp.HANDOVER),
    (b"confirm\n", sp.ConfirmRequest(), sp.HANDOVER),
]


@pytest.mark.parametrize(
    ("line", "request_", "protocol"), REQUESTS, ids=[r[0].split(b" ")[0].decode() for r in REQUESTS]
)
def test_each_request_travels_from_client_to_server(line, request_, protocol):
    client, server = greeted_pair(protocol)
    assert client.send(request_) == line
    server.receive_data(line)
    assert server.next_event() == request_


def test_read_separates_its_fields_by_a_space_and_a_tab_gets_a_hint():
    assert dp.ReadRequest(SID, 5).encode() == f"read {SID} 5\n".encode()
    assert "space" in text_of(server_takes, f"read {SID}\t5\n".encode())


def test_fields_are_unescaped_and_may_hold_spaces():
    assert server_takes(b"list /home/me/my\\tproject\n").project == "/home/me/my\tproject"
    assert server_takes(b"list /home/me/my project\n").project == "/home/me/my project"


BAD = [
    ("frobnicate /p", ErrorCode.UNKNOWN_VERB),
    ("", ErrorCode.UNKNOWN_VERB),
    ("LIST /p", ErrorCode.UNKNOWN_VERB),
    ("hello chock-control 1", ErrorCode.UNKNOWN_VERB),
    ("pending", ErrorCode.UNKNOWN_VERB),  # a session socket's verb at the daemon
    ("list", ErrorCode.BAD_REQUEST),
    ("list /p\textra", ErrorCode.BAD_REQUEST),
    ("list relative/path", ErrorCode.BAD_REQUEST),
    ("list ", ErrorCode.BAD_REQUEST),
    ("start /p", ErrorCode.BAD_REQUEST),
    ("start /p\t", ErrorCode.BAD_REQUEST),
    ("start /p\tbad \\q escape", ErrorCode.BAD_REQUEST),
    ("adopt /p\t../../etc/passwd", ErrorCode.BAD_REQUEST),
    ("adopt /p\t20261201-073450-A1B2C3", ErrorCode.BAD_REQUEST),
    ("read ../../etc/passwd 0", ErrorCode.BAD_REQUEST),
    (f"read {SID} seven", ErrorCode.BAD_REQUEST),
    (f"read {SID} -1", ErrorCode.BAD_REQUEST),
    (f"read {SID} 1.5", ErrorCode.BAD_REQUEST),
    (f"read {SID} ٣", ErrorCode.BAD_REQUEST),
    (f"read {SID} 99999999999999999999", ErrorCode.BAD_REQUEST),
    (f"read {SID}", ErrorCode.BAD_REQUEST),
    (f"read {SID} 1 2", ErrorCode.BAD_REQUEST),
    (f"watch /p\t{SID}", ErrorCode.BAD_REQUEST),
    (f"watch /p\t{SID}\tlast", ErrorCode.BAD_REQUEST),
    (f"answer /p\t{SID}\tr1\tmaybe", ErrorCode.BAD_REQUEST),
    (f"answer /p\t{SID}\tr1\tYES", ErrorCode.BAD_REQUEST),
    (f"answer /p\t{SID}\t\tyes", ErrorCode.BAD_REQUEST),
    (f"answer /p\t{SID}\thas space\tyes", ErrorCode.BAD_REQUEST),
    (f"answer p\t{SID}\tr1\tyes", ErrorCode.BAD_REQUEST),
    ("list /p\0", ErrorCode.BAD_REQUEST),
    (f"answer-with /p\t{SID}\tr1\tyes\talways\tpytest\t", ErrorCode.BAD_REQUEST),
    (f"answer-with /p\t{SID}\tr1\tyes\tproject\t \t", ErrorCode.BAD_REQUEST),
    (f"answer-with /p\t{SID}\tr1\tno\tproject\tpytest\t", ErrorCode.BAD_REQUEST),
    (f"answer-with /p\t{SID}\tr1\tyes\tonce\t\tnote with a yes", ErrorCode.BAD_REQUEST),
    (f"answer-with /p\t{SID}\tr1\tyes\tonce\t", ErrorCode.BAD_REQUEST),
    ("rule-remove /p\tP1", ErrorCode.BAD_REQUEST),
    ("rule-remove /p\t../x", ErrorCode.BAD_REQUEST),
]


@pytest.mark.parametrize(("line", "code"), BAD)
def test_the_server_refuses_bad_requests_with_their_code(line, code):
    assert code_of(server_takes, line.encode() + b"\n") == code


def test_refusals_name_what_was_wrong():
    assert "../../etc/passwd" in text_of(server_takes, b"adopt /p\t../../etc/passwd\n")
    verbs = "start, adopt, read, list, watch, answer, stop, say, remove, sessions, find, instances, start-with"
    assert verbs + ", remove-with-workspace, answer-with, rules, rule-remove" in (text_of(server_takes, b"status /p\n"))


def test_a_request_refuses_to_be_built_wrong_so_nothing_wrong_is_sent():
    assert code_of(dp.ListRequest, "relative") == ErrorCode.BAD_REQUEST
    assert code_of(dp.ReadRequest, SID, -1) == ErrorCode.BAD_REQUEST
    assert code_of(dp.ReadRequest, SID, True) == ErrorCode.BAD_REQUEST
    assert code_of(dp.StartRequest("/p", "x" * f.MAX_MESSAGE_LINE).encode) == ErrorCode.TOO_LARGE
    assert code_of(dp.StartRequest("/p", "bad \udc80").encode) == ErrorCode.BAD_REQUEST


def test_a_note_is_at_most_4_kib_and_one_that_size_travels_whole_however_it_escapes():
    note = "\\" * 4096  # every byte doubles when escaped
    line = dp.AnswerWithRequest("/p", SID, "r1", False, "once", "", note).encode()
    assert server_takes(line).note == note
    assert "at most 4 KiB" in text_of(dp.AnswerWithRequest, "/p", SID, "r1", False, "once", "", note + "x")
    assert "at most 4 KiB" in text_of(sp.SessionAnswerWithRequest, "r1", False, "once", "", "é" * 2049)


def test_a_rule_line_travels_with_its_origin():
    row = dp.RuleRow("c3", "deny", "git push", "~/.config/chock/config.zon line 12")
    assert row.encode() == b"rule c3\tdeny\tgit push\t~/.config/chock/config.zon line 12\n"
    assert dp.RuleRow.decode(row.encode().decode().rstrip("\n")) == row
    assert dp.RuleRow.decode("rule c3\tmaybe\tgit\tx") is None


@pytest.mark.parametrize("name", ["", "-x", "--model=m", "a b", "work/../x", ".hidden", "x" * 65, "naïve"])
def test_start_with_takes_only_an_instance_name_of_the_configs_shape(name):
    line = f"start-with /p\t{f.escape(name)}\tdo it\n".encode()
    assert "is not an instance name" in text_of(server_takes, line)
    assert code_of(dp.StartWithRequest, "/p", name, "do it") == ErrorCode.BAD_REQUEST


def test_start_with_carries_a_whole_message_like_start_and_the_other_new_verbs_do_not():
    message = "x" * (f.MAX_LINE * 2)
    assert server_takes(dp.StartWithRequest("/p", "work", message).encode()).message == message
    assert code_of(dp.StartWithRequest("/p", "work", "x" * f.MAX_MESSAGE_LINE).encode) == ErrorCode.TOO_LARGE
    assert code_of(server_takes, b"sessions now\n") == ErrorCode.BAD_REQUEST
    assert code_of(server_takes, b"find ../etc\n") == ErrorCode.BAD_REQUEST


def test_session_sockets_serve_only_their_own_verbs():
    assert code_of(server_takes, b"handover\n", sp.APPROVAL) == ErrorCode.UNKNOWN_VERB
    assert code_of(server_takes, b"pending\n", sp.HANDOVER) == ErrorCode.UNKNOWN_VERB
    assert code_of(server_takes, b"pending now\n", sp.APPROVAL) == ErrorCode.BAD_REQUEST
    assert code_of(server_takes, b"answer r1\tperhaps\n", sp.APPROVAL) == ErrorCode.BAD_REQUEST


# The greeting ---------------------------------------------------------------------------------------------


def test_the_server_accepts_our_number_and_names_both_on_a_mismatch():
    assert parse_greeting("hello chock-control 1", dp.CONTROL) == Greeted("chock-control", 1)
    assert text_of(parse_greeting, "hello chock-control 2", dp.CONTROL) == (
        "this daemon speaks chock-control 1, the client chock-control 2: update the daemon"
    )
    assert text_of(parse_greeting, "hello chock-control 1", dp.CONTROL, number=2) == (
        "this daemon speaks chock-control 2, the client chock-control 1: update the client"
    )
    assert code_of(parse_greeting, "hello chock-control 2", dp.CONTROL) == ErrorCode.PROTOCOL


def test_a_verb_first_is_error_greeting_naming_our_number():
    server = ServerConnection(dp.CONTROL)
    server.receive_data(b"list /home/me/proj\n")
    with pytest.raises(ProtocolError) as refused:
        server.next_event()
    error = refused.value
    assert error.code == ErrorCode.GREETING and error.encode().startswith(b"error greeting ")
    assert "predates the greeting" in error.text and "chock-control 1" in error.text


def test_a_malformed_greeting_is_error_greeting():
    for line in ("hello", "hello chock-control", "hello chock-control one", "", "GET / HTTP/1.1"):
        assert code_of(parse_greeting, line, dp.CONTROL) == ErrorCode.GREETING


def test_a_session_greeting_at_the_daemon_names_the_wrong_socket():
    assert "wrong socket" in text_of(parse_greeting, "hello chock-session 1", dp.CONTROL)
    assert "this session speaks chock-session 1" in text_of(parse_greeting, "pending", sp.APPROVAL)


def test_the_client_compares_numbers_and_keeps_the_servers_refusal():
    assert check_greeting_reply("ok chock-control 1", dp.CONTROL) == Greeted("chock-control", 1)
    assert text_of(check_greeting_reply, "ok chock-control 2", dp.CONTROL) == (
        "this client speaks chock-control 1, the daemon chock-control 2: update the client"
    )
    assert code_of(check_greeting_reply, "error forbidden uid 1001 is not ours", dp.CONTROL) == ErrorCode.FORBIDDEN
    text = text_of(check_greeting_reply, "error unknown-verb hello", dp.CONTROL)
    assert "predates chock-control 1" in text and "update the daemon" in text
    for line in ("ok", "ok chock-control", "ok answered", "hello", ""):
        assert code_of(check_greeting_reply, line, dp.CONTROL) == ErrorCode.PROTOCOL


def test_a_server_that_refuses_the_greeting_is_heard_through_the_client_connection():
    client = ClientConnection(dp.CONTROL)
    server = ServerConnection(dp.CONTROL)
    server.receive_data(b"hello chock-control 2\n")
    with pytest.raises(ProtocolError) as refused:
        server.next_event()
    client.greeting()
    client.receive_data(refused.value.encode())
    assert (
        text_of(client.next_event)
        == "this daemon speaks chock-control 1, the client chock-control 2: update the daemon"
    )


# Replies, from the server's bytes to the client's typed events ------------------------------------------------


def reply_to(request, *lines: bytes, protocol=dp.CONTROL, eof: bool = False) -> list:
    """Every event a greeted client makes of `lines` in answer to `request` (errors are returned, not raised)."""
    client, _ = greeted_pair(protocol)
    client.send(request)
    for line in lines:
        client.receive_data(line)
    if eof:
        client.receive_data(b"")
    events = []
    while True:
        try:
            event = client.next_event()
        except ProtocolError as error:
            events.append(error)
            break
        if event is NEED_DATA:
            break
        events.append(event)
        if event is CLOSED:
            break
    return events


def test_start_and_adopt_answer_started():
    line = dp.Started(SID, "/state/sessions/x/log.jsonl").encode()
    assert line == f"ok {SID}\t/state/sessions/x/log.jsonl\n".encode()
    assert reply_to(dp.StartRequest("/p", "go"), line) == [dp.Started(SID, "/state/sessions/x/log.jsonl")]
    assert reply_to(dp.AdoptRequest("/p", SID), line) == [dp.Started(SID, "/state/sessions/x/log.jsonl")]


def test_a_started_with_a_bad_id_is_not_believed():
    [error] = reply_to(dp.StartRequest("/p", "go"), b"ok ../x\t/log\n")
    assert error.code == ErrorCode.PROTOCOL


def test_an_error_reply_is_raised_with_the_servers_code_even_an_unknown_one():
    [error] = reply_to(dp.StartRequest("/p", "go"), b"error refused no credential for instance work\n")
    assert (error.code, error.text) == ("refused", "no credential for instance work")
    [error] = reply_to(dp.StartRequest("/p", "go"), b"error out-of-cheese please reboot\n")
    assert error.code == "out-of-cheese"


def test_an_error_reply_stays_one_line_round_trips_and_is_cut():
    line = ProtocolError("refused", "bwrap: no\n\tpermission \\o/").encode()
    assert line.count(b"\n") == 1
    [error] = reply_to(dp.StartRequest("/p", "go"), line)
    assert (error.code, error.text) == ("refused", "bwrap: no\n\tpermission \\o/")
    assert len(ProtocolError("refused", "x" * 100_000).encode()) < f.MAX_ERROR_TEXT + 64


def test_list_rows_until_close_with_json_as_is():
    row = {"id": SID, "message": 'line one\nline\ttwo \\ "quoted"', "status": "running"}
    line = dp.ListRow("2026-12-01T07:34:50.123Z", row).encode()
    assert line.decode().split("\t")[1] == json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
    read = {**ROW_DEFAULTS, **row}  # what the line left out, given back
    assert reply_to(dp.ListRequest("/p"), line, line, eof=True) == [
        dp.ListRow("2026-12-01T07:34:50.123Z", read), dp.ListRow("2026-12-01T07:34:50.123Z", read), CLOSED,
    ]  # fmt: skip
    assert reply_to(dp.ListRequest("/p"), eof=True) == [CLOSED]  # an unknown project has no rows


def test_read_passes_the_logs_lines_through_unchanged():
    raw = b'{"id": 3, "type": "assistant.delta", "text": "a\\tb"}\n'
    assert dp.EventLine.raw(raw) is raw and dp.EventLine.raw(raw[:-1]) == raw
    [event, end] = reply_to(dp.ReadRequest(SID, 2), raw, eof=True)
    assert (event.id, event.event["text"], event.line) == (3, "a\tb", raw[:-1].decode()) and end is CLOSED


def test_an_event_that_is_not_an_object_with_an_id_is_unreadable():
    for line in (b"[1, 2]\n", b'{"type": "x"}\n', b'{"id": 0}\n'):
        [error] = reply_to(dp.ReadRequest(SID, 0), line)
        assert error.code == ErrorCode.PROTOCOL


def test_watch_is_a_header_then_events_until_close():
    header = dp.WatchHeader({"id": SID, "status": "waiting"}).encode()
    events = reply_to(dp.WatchRequest("/p", SID, 0), header, b'{"id": 1}\n', eof=True)
    assert events[0] == dp.WatchHeader({"id": SID, "status": "waiting"})
    assert events[1].id == 1 and events[2] is CLOSED


def test_a_watch_closed_before_its_header_is_unreachable():
    [error] = reply_to(dp.WatchRequest("/p", SID, 0), eof=True)
    assert error.code == ErrorCode.UNREACHABLE and "before answering watch" in error.text


def test_answer_is_ok_answered_or_unreachable():
    assert reply_to(dp.AnswerRequest("/p", SID, "r1", True), b"ok answered\n") == [dp.Answered()]
    [error] = reply_to(dp.AnswerRequest("/p", SID, "r1", True), b"error unreachable no answer\n")
    assert error.code == ErrorCode.UNREACHABLE


def test_a_reply_line_the_request_does_not_allow_is_a_protocol_error():
    [error] = reply_to(dp.StartRequest("/p", "go"), b"ok answered\n")
    assert error.code == ErrorCode.PROTOCOL and "ok <session id>" in error.text


def test_a_reply_line_past_the_reply_bound_is_a_protocol_error_naming_the_peer():
    client, _ = greeted_pair()
    client.send(dp.ReadRequest(SID, 0))
    client.receive_data(b"x" * (f.MAX_REPLY_LINE + 1))
    assert text_of(client.next_event).startswith("the daemon sent a line this client cannot read: ")


def test_a_reply_cut_mid_line_at_end_of_file_is_unreachable_never_a_shorter_reply_that_looks_whole():
    client, _ = greeted_pair()
    client.send(dp.ListRequest("/p"))
    client.receive_data(b'2026\t{"id": 1}\n2026\t{"i')
    client.receive_data(b"")
    assert isinstance(client.next_event(), dp.ListRow)
    with pytest.raises(ProtocolError) as cut:
        client.next_event()
    assert cut.value.code == ErrorCode.UNREACHABLE and "in the middle of a line of its answer to list" in cut.value.text


def test_a_read_the_daemon_cannot_finish_ends_in_its_error_after_the_lines_it_sent():
    line = b'{"id": 1, "type": "session.start"}\n'
    cut = ProtocolError(ErrorCode.INTERNAL, "the log could not be read to its end").encode()
    [event, error] = reply_to(dp.ReadRequest(SID, 0), line, cut, eof=True)
    assert event.id == 1 and (error.code, error.text) == ("internal", "the log could not be read to its end")


# Session sockets: several requests on one connection -----------------------------------------------------------


def test_pending_lists_items_until_end_then_takes_the_next_request():
    client, server = greeted_pair(sp.APPROVAL)
    item = sp.PendingItem("r1", "shell", "rm -r build\n(and\tmore)")
    assert item.encode() == b"request r1\tshell\trm -r build\\n(and\\tmore)\n"
    server.receive_data(client.send(sp.PendingRequest()))
    assert server.next_event() == sp.PendingRequest()
    client.receive_data(item.encode() + sp.PendingEnd().encode())
    assert [client.next_event(), client.next_event()] == [item, sp.PendingEnd()]
    server.receive_data(client.send(sp.SessionAnswerRequest("r1", True)))
    assert server.next_event() == sp.SessionAnswerRequest("r1", True)
    client.receive_data(b"error not-pending r1 is not waiting\n")
    assert code_of(client.next_event) == ErrorCode.NOT_PENDING
    client.send(sp.PendingRequest())  # an error ends that reply only: the connection goes on


def test_the_handover_exchange():
    client, _ = greeted_pair(sp.HANDOVER)
    client.send(sp.HandoverRequest())
    client.receive_data(b"busy 2 1\nbusy 0 1\nready\n")
    assert [client.next_event() for _ in range(3)] == [sp.Busy(2, 1), sp.Busy(0, 1), sp.Ready()]
    client.send(sp.ConfirmRequest())
    client.receive_data(b"released\n")
    assert client.next_event() == sp.Released()


def test_ended_may_come_at_any_time_and_ends_the_exchange():
    client, _ = greeted_pair(sp.HANDOVER)
    client.send(sp.HandoverRequest())
    client.receive_data(b"busy 1 0\nended interrupted\n")
    assert [client.next_event(), client.next_event()] == [sp.Busy(1, 0), sp.Ended("interrupted")]
    with pytest.raises(RuntimeError):
        client.send(sp.HandoverRequest())


def test_unreadable_session_replies_are_protocol_errors():
    for line in (b"busy two 1\n", b"busy 1\n", b"whatever\n"):
        [error] = reply_to(sp.HandoverRequest(), line, protocol=sp.HANDOVER)
        assert error.code == ErrorCode.PROTOCOL
    [error] = reply_to(sp.PendingRequest(), b"request r1\tshell\n", protocol=sp.APPROVAL)
    assert error.code == ErrorCode.PROTOCOL


def test_a_summary_holding_nul_still_makes_a_readable_line():
    line = sp.PendingItem("r1", "shell", "printf '\0'").encode()
    assert b"\0" not in line
    [item] = reply_to(sp.PendingRequest(), line, protocol=sp.APPROVAL)
    assert item.summary == "printf '\ufffd'"


# The rules of the exchange ----------------------------------------------------------------------------------


def test_one_connection_carries_the_greeting_and_one_verb():
    client, server = greeted_pair()
    server.receive_data(client.send(dp.ListRequest("/p")) + b"list /q\n")
    assert server.next_event() == dp.ListRequest("/p")
    assert server.next_event() is NEED_DATA  # the second line is never read
    client.receive_data(b"")
    assert client.next_event() is CLOSED
    with pytest.raises(RuntimeError, match="one verb"):
        client.send(dp.ListRequest("/q"))


def test_nothing_is_sent_before_the_greeting_is_answered():
    client = ClientConnection(dp.CONTROL)
    with pytest.raises(RuntimeError):
        client.send(dp.ListRequest("/p"))
    client.greeting()
    with pytest.raises(RuntimeError):
        client.send(dp.ListRequest("/p"))


def test_a_server_that_closes_before_the_greeting_or_a_reply_is_unreachable():
    client = ClientConnection(dp.CONTROL)
    client.greeting()
    client.receive_data(b"")
    assert "before answering the greeting" in text_of(client.next_event)
    [error] = reply_to(dp.StartRequest("/p", "go"), eof=True)
    assert error.code == ErrorCode.UNREACHABLE


def test_a_line_before_any_request_is_unreadable():
    client, _ = greeted_pair()
    client.receive_data(b"ok answered\n")
    assert code_of(client.next_event) == ErrorCode.PROTOCOL


def test_the_server_refuses_a_verb_first_and_frames_it_by_the_greetings_bound():
    server = ServerConnection(dp.CONTROL)
    server.receive_data(b"start /p\t" + b"m" * 100 + b"\n")
    with pytest.raises(ProtocolError) as refused:
        server.next_event()
    assert refused.value.code == ErrorCode.GREETING and server.fatal(refused.value)
    server = ServerConnection(dp.CONTROL)
    server.receive_data(b"start /p\t" + b"m" * 100_000 + b"\n")
    with pytest.raises(ProtocolError) as refused:
        server.next_event()
    assert refused.value.code == ErrorCode.TOO_LARGE and server.fatal(refused.value)
    assert "at most 8 KiB here (the first line is the greeting)" in refused.value.text


def test_the_server_knows_when_a_line_is_under_way():
    server = ServerConnection(dp.CONTROL)
    assert not server.mid_line
    server.receive_data(b"hello chock-con")
    assert server.mid_line


# The framer -------------------------------------------------------------------------------------------------


def test_lines_come_out_whole_whatever_the_feeds():
    buffer = LineBuffer(dp.request_line_limit)
    for byte in f"watch /home/me/proj\t{SID}\t12\n".encode():
        assert buffer.next_line() is None
        buffer.feed(bytes([byte]))
    assert buffer.next_line() == f"watch /home/me/proj\t{SID}\t12"
    data = "start /p\tcafé ✓\n".encode()
    buffer.feed(data[:13])
    buffer.feed(data[13:])
    assert buffer.next_line() == "start /p\tcafé ✓"


def test_a_2_mib_line_is_too_large_without_being_held():
    buffer = LineBuffer(dp.request_line_limit)
    buffer.feed(b"start /p\t")
    for _ in range(32):
        buffer.feed(b"x" * 65536)
        assert buffer.buffered <= f.MAX_MESSAGE_LINE
    assert code_of(buffer.next_line) == ErrorCode.TOO_LARGE
    one_feed = LineBuffer(dp.request_line_limit)
    one_feed.feed(b"list /" + b"x" * (2 * 1024 * 1024) + b"\n")
    assert one_feed.buffered == 0 and code_of(one_feed.next_line) == ErrorCode.TOO_LARGE


def test_the_bounds_are_exact_and_say_which_lines_may_be_longer():
    server = ServerConnection(dp.CONTROL)
    server.receive_data(b"hello chock-control 1\n")
    server.next_event()
    server.receive_data(b"list /" + b"d" * 9 * 1024 + b"\n")
    assert "8 KiB" in text_of(server.next_event) and "256 KiB for start" in text_of(server.next_event)
    buffer = LineBuffer(dp.request_line_limit)
    buffer.feed(b"list /" + b"d" * (f.MAX_LINE - 6) + b"\n" + b"list /" + b"d" * (f.MAX_LINE - 5) + b"\n")
    assert len(buffer.next_line()) == f.MAX_LINE
    assert code_of(buffer.next_line) == ErrorCode.TOO_LARGE
    assert len(server_takes(dp.StartRequest("/p", "m" * 200 * 1024).encode()).message) == 200 * 1024


@pytest.mark.parametrize("first", [b"start ", b"say ", b"answer-with ", b"hello "])
def test_a_line_before_the_greeting_is_bounded_as_a_greeting_whatever_its_first_word(first):
    server = ServerConnection(dp.CONTROL)
    server.receive_data(first + b"a" * f.MAX_LINE)
    assert code_of(server.next_event) == ErrorCode.TOO_LARGE
    # A greeting and a long message in one write: the message's own bound holds after the greeting.
    assert len(server_takes(dp.StartRequest("/p", "m" * 200 * 1024).encode()).message) == 200 * 1024


def test_too_large_is_sticky_and_later_bytes_are_dropped():
    buffer = LineBuffer(f.MAX_LINE)
    buffer.feed(b"ok\n" + b"y" * (f.MAX_LINE + 1))
    buffer.feed(b"\nlist /p\n")
    assert buffer.next_line() == "ok"
    assert code_of(buffer.next_line) == code_of(buffer.next_line) == ErrorCode.TOO_LARGE


def test_a_bad_line_costs_only_itself():
    buffer = LineBuffer()
    buffer.feed(b"list /caf\xe9\n\xff\nlist /p\0q\npending\r\n")
    assert code_of(buffer.next_line) == ErrorCode.BAD_REQUEST
    assert code_of(buffer.next_line) == ErrorCode.BAD_REQUEST
    assert "NUL" in text_of(buffer.next_line)
    assert buffer.next_line() == "pending\r"  # a carriage return stays part of the line


# Properties -------------------------------------------------------------------------------------------------

WORDS = [*dp.CONTROL.requests, *sp.APPROVAL.requests, "hello", "chock-control", "ok", SID, "/p", "0", "17", "yes"]
line_parts = st.one_of(
    st.sampled_from(WORDS), st.sampled_from([" ", "\t", "\\", "\\t", "\\n", "\\x", "\n", "\0"]), st.text()
)
lines = st.lists(line_parts, max_size=12).map("".join)


@settings(max_examples=300)
@given(st.text())
def test_escape_and_unescape_round_trip(text):
    escaped = f.escape(text)
    assert "\t" not in escaped and "\n" not in escaped
    assert f.unescape(escaped) == text


@settings(max_examples=300)
@given(lines)
def test_both_ends_make_of_any_line_a_value_or_a_protocol_error(line):
    data = line.encode("utf-8", "surrogatepass") + b"\n"
    for protocol in (dp.CONTROL, sp.APPROVAL):
        try:
            server_takes(data, protocol)
        except ProtocolError as error:
            assert error.code in f.ERROR_CODES
    for request in (dp.StartRequest("/p", "go"), dp.ReadRequest(SID, 0), dp.WatchRequest("/p", SID, 0)):
        for event in reply_to(request, data, eof=True):
            if isinstance(event, ProtocolError):
                assert event.code in f.ERROR_CODES or line.startswith("error ")


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=64) | st.sampled_from([b"\n", b"start ", b"list /", b"\xff", b"\0"]), max_size=40))
def test_the_server_only_ever_gives_an_event_or_a_protocol_error(chunks):
    server = ServerConnection(dp.CONTROL)
    for chunk in chunks:
        server.receive_data(chunk)
        for _ in range(len(chunk) + 2):
            try:
                if server.next_event() is NEED_DATA:
                    break
            except ProtocolError as error:
                assert error.code in f.ERROR_CODES
                break


@settings(max_examples=200)
@given(st.text(min_size=1).filter(lambda m: "\0" not in m), st.from_regex(r"/[^\0]*", fullmatch=True))
def test_start_travels_whole_for_any_text(message, project):
    request = dp.StartRequest(project, message)
    try:
        line = request.encode()
    except ProtocolError as error:  # a lone surrogate cannot be UTF-8
        assert error.code == ErrorCode.BAD_REQUEST
        return
    assert server_takes(line) == request


@settings(max_examples=200)
@given(st.integers(1, 64), st.lists(st.binary(max_size=100) | st.just(b"\n"), max_size=30))
def test_the_framer_never_holds_more_than_its_bound(limit, chunks):
    buffer = LineBuffer(limit)
    for chunk in chunks:
        buffer.feed(chunk)
        assert buffer.buffered <= limit * (chunk.count(b"\n") + 1)
        try:
            while (line := buffer.next_line()) is not None:
                assert len(line.encode()) <= limit
        except ProtocolError as error:
            assert error.code in (ErrorCode.TOO_LARGE, ErrorCode.BAD_REQUEST)
