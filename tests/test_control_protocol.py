"""The control codec driven with plain strings and bytes (SPEC §6, §5 "Session sockets")."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chock.control import protocol as p
from chock.control.protocol import ErrorCode, ProtocolError

SID = "20261201-073450-a1b2c3"


def code_of(call, *args, **kwargs) -> str:
    with pytest.raises(ProtocolError) as caught:
        call(*args, **kwargs)
    return caught.value.code


def text_of(call, *args, **kwargs) -> str:
    with pytest.raises(ProtocolError) as caught:
        call(*args, **kwargs)
    return caught.value.text


# Numbers and names --------------------------------------------------------------------------------------


def test_protocol_numbers_and_names():
    assert (p.PROTOCOL, p.SESSION_PROTOCOL) == (1, 1)
    assert p.encode_greeting() == b"hello chock-control 1\n"
    assert p.encode_greeting_reply(p.SESSION_NAME) == b"ok chock-session 1\n"


def test_error_codes_are_the_specs():
    codes = {
        "protocol", "greeting", "unknown-verb", "bad-request", "not-found", "forbidden",
        "refused", "not-pending", "too-large", "unreachable", "internal",
    }  # fmt: skip
    assert codes == p.ERROR_CODES


# Escaping -----------------------------------------------------------------------------------------------


def test_escape_writes_tab_lf_and_backslash_as_escapes():
    assert p.escape("a\tb\nc\\d") == "a\\tb\\nc\\\\d"
    assert p.unescape("a\\tb\\nc\\\\d") == "a\tb\nc\\d"


def test_escape_leaves_other_text_alone():
    assert p.escape("naïve “quotes” \r ✓") == "naïve “quotes” \r ✓"


def test_unknown_escape_is_bad_request():
    assert code_of(p.unescape, "a\\x") == ErrorCode.BAD_REQUEST


def test_trailing_lone_backslash_is_bad_request():
    assert "lone backslash" in text_of(p.unescape, "abc\\")


def test_multi_line_message_travels_in_one_line():
    line = p.StartRequest("/p", "first line\n\tindented\nC:\\path").encode()
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    assert p.parse_request(line[:-1].decode()).message == "first line\n\tindented\nC:\\path"


# Requests: each verb parsed and re-encoded ----------------------------------------------------------------

REQUESTS = [
    ("start /home/me/proj\tfix the flaky test", p.StartRequest("/home/me/proj", "fix the flaky test")),
    (f"adopt /home/me/proj\t{SID}", p.AdoptRequest("/home/me/proj", SID)),
    (f"read {SID} 17", p.ReadRequest(SID, 17)),
    ("list /home/me/proj", p.ListRequest("/home/me/proj")),
    (f"watch /home/me/proj\t{SID}\t0", p.WatchRequest("/home/me/proj", SID, 0)),
    (f"answer /home/me/proj\t{SID}\tr1\tyes", p.AnswerRequest("/home/me/proj", SID, "r1", True)),
    (f"answer /home/me/proj\t{SID}\tr1\tno", p.AnswerRequest("/home/me/proj", SID, "r1", False)),
]


@pytest.mark.parametrize(("line", "expected"), REQUESTS, ids=[r[0].split(" ")[0] for r in REQUESTS])
def test_each_verb_parses_and_re_encodes(line, expected):
    assert p.parse_request(line) == expected
    assert expected.encode() == line.encode() + b"\n"


def test_read_separates_its_fields_by_a_space():
    assert p.ReadRequest(SID, 5).encode() == f"read {SID} 5\n".encode()


def test_read_with_a_tab_is_refused_with_a_hint():
    assert "space" in text_of(p.parse_request, f"read {SID}\t5")


def test_fields_are_unescaped():
    assert p.parse_request("list /home/me/my\\tproject").project == "/home/me/my\tproject"


def test_project_paths_with_spaces_are_fine():
    assert p.parse_request("list /home/me/my project").project == "/home/me/my project"


def test_a_verbs_table_lists_every_verb():
    assert list(p.CONTROL_REQUESTS) == ["start", "adopt", "read", "list", "watch", "answer"]


# Requests: every refusal reachable from bad input ---------------------------------------------------------

BAD = [
    ("frobnicate /p", ErrorCode.UNKNOWN_VERB),
    ("", ErrorCode.UNKNOWN_VERB),
    ("LIST /p", ErrorCode.UNKNOWN_VERB),
    ("hello chock-control 1", ErrorCode.UNKNOWN_VERB),
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
]


@pytest.mark.parametrize(("line", "code"), BAD)
def test_bad_requests_are_refused_with_their_code(line, code):
    assert code_of(p.parse_request, line) == code


def test_a_traversal_id_is_named_in_the_refusal():
    assert "../../etc/passwd" in text_of(p.parse_request, "adopt /p\t../../etc/passwd")


def test_an_unknown_verb_names_the_verbs_there_are():
    assert "start, adopt, read, list, watch, answer" in text_of(p.parse_request, "status /p")


def test_a_request_refuses_to_be_built_wrong():
    assert code_of(p.ListRequest, "relative") == ErrorCode.BAD_REQUEST
    assert code_of(p.ReadRequest, SID, -1) == ErrorCode.BAD_REQUEST
    assert code_of(p.ReadRequest, SID, True) == ErrorCode.BAD_REQUEST


def test_an_oversized_start_is_refused_before_it_is_sent():
    assert code_of(p.StartRequest("/p", "x" * p.MAX_START_LINE).encode) == ErrorCode.TOO_LARGE


def test_a_request_holding_a_lone_surrogate_is_refused_before_it_is_sent():
    assert code_of(p.StartRequest("/p", "bad \udc80").encode) == ErrorCode.BAD_REQUEST


# The greeting ---------------------------------------------------------------------------------------------


def test_greeting_with_our_number_is_accepted():
    assert p.parse_greeting("hello chock-control 1") == 1


def test_greeting_from_a_newer_client_names_both_numbers_and_the_daemon():
    text = text_of(p.parse_greeting, "hello chock-control 2")
    assert text == "this daemon speaks chock-control 1, the client chock-control 2: update the daemon"


def test_greeting_from_an_older_client_says_update_the_client():
    text = text_of(p.parse_greeting, "hello chock-control 1", number=2)
    assert text == "this daemon speaks chock-control 2, the client chock-control 1: update the client"


def test_greeting_mismatch_is_code_protocol():
    assert code_of(p.parse_greeting, "hello chock-control 2") == ErrorCode.PROTOCOL


def test_a_verb_first_is_error_greeting_naming_our_number():
    with pytest.raises(ProtocolError) as caught:
        p.parse_greeting("list /home/me/proj")
    assert caught.value.code == ErrorCode.GREETING
    assert "predates the greeting" in caught.value.text and "chock-control 1" in caught.value.text


def test_a_malformed_greeting_is_error_greeting():
    for line in ("hello", "hello chock-control", "hello chock-control one", "", "GET / HTTP/1.1"):
        assert code_of(p.parse_greeting, line) == ErrorCode.GREETING


def test_a_session_greeting_at_the_daemon_names_the_wrong_socket():
    assert "wrong socket" in text_of(p.parse_greeting, "hello chock-session 1")


def test_session_greeting_is_the_same_shape():
    assert p.parse_greeting("hello chock-session 1", p.SESSION_NAME) == 1
    assert "this session speaks chock-session 1" in text_of(p.parse_greeting, "pending", p.SESSION_NAME)


def test_client_accepts_a_reply_with_our_number():
    assert p.check_greeting_reply("ok chock-control 1") == 1


def test_client_compares_numbers_and_names_both():
    assert text_of(p.check_greeting_reply, "ok chock-control 2") == (
        "this client speaks chock-control 1, the daemon chock-control 2: update the client"
    )


def test_client_keeps_the_daemons_refusal():
    error_line = p.encode_error("protocol", "this daemon speaks chock-control 2, …").decode().rstrip("\n")
    assert code_of(p.check_greeting_reply, error_line) == ErrorCode.PROTOCOL
    assert code_of(p.check_greeting_reply, "error forbidden uid 1001 is not ours") == ErrorCode.FORBIDDEN


def test_client_reads_unknown_verb_for_hello_as_a_daemon_that_predates_the_greeting():
    text = text_of(p.check_greeting_reply, "error unknown-verb hello")
    assert "predates chock-control 1" in text and "update the daemon" in text


def test_client_refuses_a_reply_with_no_number():
    for line in ("ok", "ok chock-control", "ok answered", "hello", ""):
        assert code_of(p.check_greeting_reply, line) == ErrorCode.PROTOCOL


# Replies --------------------------------------------------------------------------------------------------


def test_error_reply_stays_one_line_and_round_trips():
    line = p.encode_error("refused", "bwrap: no\n\tpermission \\o/")
    assert line.count(b"\n") == 1
    error = p.parse_error(line.decode().rstrip("\n"))
    assert (error.code, error.text) == ("refused", "bwrap: no\n\tpermission \\o/")


def test_error_reply_text_is_cut():
    assert len(p.encode_error("refused", "x" * 100_000)) < p.MAX_ERROR_TEXT + 64


def test_an_error_line_decodes_to_the_peers_code_even_an_unknown_one():
    assert p.parse_error("error out-of-cheese please reboot").code == "out-of-cheese"


def test_protocol_error_encodes_as_its_reply():
    assert ProtocolError(ErrorCode.NOT_FOUND, "no session x").encode() == b"error not-found no session x\n"


def test_started_round_trips():
    line = p.encode_started(SID, "/state/sessions/x/log.jsonl")
    assert line == f"ok {SID}\t/state/sessions/x/log.jsonl\n".encode()
    assert p.parse_started(line.decode().rstrip("\n")) == (SID, "/state/sessions/x/log.jsonl")


def test_started_with_a_bad_id_is_not_believed():
    assert code_of(p.parse_started, "ok ../x\t/log") == ErrorCode.PROTOCOL


def test_started_raises_the_error_it_got_instead():
    assert code_of(p.parse_started, "error refused no credential for instance work") == ErrorCode.REFUSED


def test_list_row_round_trips_with_json_as_is():
    row = {"id": SID, "message": 'line one\nline\ttwo \\ "quoted"', "status": "running"}
    line = p.encode_list_row("2026-12-01T07:34:50.123Z", row).decode()
    assert line.count("\t") == 1 and line.split("\t")[1] == json.dumps(row, ensure_ascii=False) + "\n"
    assert p.parse_list_row(line.rstrip("\n")) == ("2026-12-01T07:34:50.123Z", row)


def test_watch_header_round_trips():
    line = p.encode_watch_header({"id": SID, "status": "waiting"}).decode().rstrip("\n")
    assert p.parse_watch_header(line) == {"id": SID, "status": "waiting"}


def test_event_lines_pass_through_unchanged():
    raw = b'{"id": 3, "type": "assistant.delta", "text": "a\\tb"}\n'
    assert p.encode_event_line(raw) is raw
    assert p.parse_event_line(raw.decode().rstrip("\n"))["text"] == "a\tb"


def test_an_event_line_that_is_not_an_object_is_unreadable():
    assert code_of(p.parse_event_line, "[1, 2]") == ErrorCode.PROTOCOL
    assert code_of(p.parse_event_line, "error not-found no session") == ErrorCode.NOT_FOUND


def test_ok_answered():
    assert p.encode_answered() == b"ok answered\n"
    assert p.parse_answered("ok answered") is None
    assert code_of(p.parse_answered, "error unreachable no answer") == ErrorCode.UNREACHABLE


def test_ok_with_fields_round_trips():
    assert p.parse_ok(p.encode_ok("a\tb", "c").decode().rstrip("\n")) == ("a\tb", "c")
    assert p.encode_ok() == b"ok\n" and p.parse_ok("ok") == ()


# Session sockets --------------------------------------------------------------------------------------------

SESSION_REQUESTS = [
    ("pending", p.PendingRequest()),
    ("answer r1\tyes", p.SessionAnswerRequest("r1", True)),
    ("handover", p.HandoverRequest()),
    ("confirm", p.ConfirmRequest()),
]


@pytest.mark.parametrize(("line", "expected"), SESSION_REQUESTS, ids=[r[0].split(" ")[0] for r in SESSION_REQUESTS])
def test_each_session_request_round_trips(line, expected):
    assert p.parse_session_request(line) == expected
    assert expected.encode() == line.encode() + b"\n"


def test_a_session_socket_serves_only_its_verbs():
    assert code_of(p.parse_session_request, "handover", p.APPROVAL_VERBS) == ErrorCode.UNKNOWN_VERB
    assert code_of(p.parse_session_request, "pending", p.HANDOVER_VERBS) == ErrorCode.UNKNOWN_VERB


def test_bad_session_requests():
    assert code_of(p.parse_session_request, "pending now") == ErrorCode.BAD_REQUEST
    assert code_of(p.parse_session_request, "answer r1\tperhaps") == ErrorCode.BAD_REQUEST
    assert code_of(p.parse_session_request, "answer r1") == ErrorCode.BAD_REQUEST


SESSION_REPLIES = [
    (
        p.PendingItem("r1", "shell", "rm -r build\n(and\tmore)"),
        "request r1\tshell\trm -r build\\n(and\\tmore)",
    ),
    (p.PendingEnd(), "end"),
    (p.Answered(), "ok answered"),
    (p.Busy(2, 1), "busy 2 1"),
    (p.Ready(), "ready"),
    (p.Released(), "released"),
    (p.Ended("completed"), "ended completed"),
]


@pytest.mark.parametrize(("reply", "line"), SESSION_REPLIES, ids=[r[1].split(" ")[0] for r in SESSION_REPLIES])
def test_each_session_reply_round_trips(reply, line):
    assert reply.encode() == line.encode() + b"\n"
    assert p.parse_session_reply(line) == reply


def test_not_pending_is_raised_with_its_code():
    assert code_of(p.parse_session_reply, "error not-pending r9 is not waiting") == ErrorCode.NOT_PENDING


def test_an_unreadable_session_reply_is_protocol():
    for line in ("busy two 1", "busy 1", "request r1\tshell", "whatever"):
        assert code_of(p.parse_session_reply, line) == ErrorCode.PROTOCOL


def test_a_summary_holding_nul_still_makes_a_readable_line():
    line = p.PendingItem("r1", "shell", "printf '\0'").encode()
    assert b"\0" not in line
    buffer = p.LineBuffer()
    buffer.feed(line)
    assert p.parse_session_reply(buffer.next_line()).summary == "printf '\ufffd'"


# The framer -------------------------------------------------------------------------------------------------


def test_lines_come_out_whole():
    buffer = p.LineBuffer()
    buffer.feed(b"hello chock-control 1\nlist /p\npart")
    taken = [buffer.next_line(), buffer.next_line(), buffer.next_line()]
    assert taken == ["hello chock-control 1", "list /p", None]
    assert buffer.partial


def test_a_line_split_across_many_feeds_is_assembled():
    buffer = p.LineBuffer(p.request_line_limit)
    for byte in f"watch /home/me/proj\t{SID}\t12\n".encode():
        assert buffer.next_line() is None
        buffer.feed(bytes([byte]))
    assert p.parse_request(buffer.next_line()) == p.WatchRequest("/home/me/proj", SID, 12)


def test_a_multibyte_character_split_across_feeds_is_assembled():
    buffer = p.LineBuffer()
    data = "start /p\tcafé ✓\n".encode()
    buffer.feed(data[:13])
    buffer.feed(data[13:])
    assert buffer.next_line() == "start /p\tcafé ✓"


def test_a_2_mib_line_is_too_large_without_being_held():
    buffer = p.LineBuffer(p.request_line_limit)
    chunk = b"x" * 65536
    buffer.feed(b"start /p\t")
    for _ in range(32):  # 2 MiB, fed the way a socket delivers it
        buffer.feed(chunk)
        assert buffer.buffered <= p.MAX_START_LINE
    assert code_of(buffer.next_line) == ErrorCode.TOO_LARGE


def test_a_2_mib_line_in_one_feed_is_not_copied():
    buffer = p.LineBuffer(p.request_line_limit)
    buffer.feed(b"list /" + b"x" * (2 * 1024 * 1024) + b"\n")
    assert buffer.buffered == 0 and code_of(buffer.next_line) == ErrorCode.TOO_LARGE


def test_too_large_is_reported_before_the_newline_arrives():
    buffer = p.LineBuffer(p.request_line_limit)
    buffer.feed(b"list /" + b"x" * p.MAX_LINE)
    assert code_of(buffer.next_line) == ErrorCode.TOO_LARGE


def test_a_200_kib_start_line_is_accepted():
    buffer = p.LineBuffer(p.request_line_limit)
    buffer.feed(p.StartRequest("/p", "m" * 200 * 1024).encode())
    assert len(p.parse_request(buffer.next_line()).message) == 200 * 1024


def test_a_9_kib_list_line_is_refused():
    buffer = p.LineBuffer(p.request_line_limit)
    buffer.feed(b"list /" + b"d" * 9 * 1024 + b"\n")
    assert "8 KiB" in text_of(buffer.next_line)


def test_the_bounds_are_exact():
    buffer = p.LineBuffer(p.request_line_limit)
    buffer.feed(b"list /" + b"d" * (p.MAX_LINE - 6) + b"\n" + b"list /" + b"d" * (p.MAX_LINE - 5) + b"\n")
    assert len(buffer.next_line()) == p.MAX_LINE
    assert code_of(buffer.next_line) == ErrorCode.TOO_LARGE


def test_too_large_is_sticky_and_later_bytes_are_dropped():
    buffer = p.LineBuffer(p.MAX_LINE)
    buffer.feed(b"ok\n" + b"y" * (p.MAX_LINE + 1))
    buffer.feed(b"\nlist /p\n")
    assert buffer.next_line() == "ok"
    assert code_of(buffer.next_line) == code_of(buffer.next_line) == ErrorCode.TOO_LARGE


def test_non_utf8_is_refused():
    buffer = p.LineBuffer()
    buffer.feed(b"list /caf\xe9\n")
    assert code_of(buffer.next_line) == ErrorCode.BAD_REQUEST


def test_nul_is_refused():
    buffer = p.LineBuffer()
    buffer.feed(b"list /p\0q\n")
    assert "NUL" in text_of(buffer.next_line)


def test_a_bad_line_costs_only_itself():
    buffer = p.LineBuffer()
    buffer.feed(b"\xff\npending\n")
    assert code_of(buffer.next_line) == ErrorCode.BAD_REQUEST
    assert buffer.next_line() == "pending"


def test_a_carriage_return_stays_part_of_the_line():
    buffer = p.LineBuffer()
    buffer.feed(b"pending\r\n")
    assert buffer.next_line() == "pending\r"


def test_the_reply_reader_asks_for_data_then_ends_dropping_a_reply_cut_short():
    replies = p.ReplyReader("daemon at unix:/d.sock")
    assert replies.next_line() is p.NEED_DATA
    replies.feed(b"ok chock-control 1\nok ro")
    assert replies.next_line() == "ok chock-control 1"
    assert replies.next_line() is p.NEED_DATA
    replies.feed(b"")  # end of file
    assert replies.next_line() is None and replies.next_line() is None


def test_a_reply_line_the_reader_cannot_take_is_a_protocol_error_naming_the_peer():
    replies = p.ReplyReader("daemon at unix:/d.sock", reader="serve", limit=8)
    replies.feed(b"x" * 9)
    assert code_of(replies.next_line) == ErrorCode.PROTOCOL
    assert text_of(replies.next_line).startswith("the daemon at unix:/d.sock sent a line serve cannot read: ")


# The server's side of a connection --------------------------------------------------------------------------


def test_server_connection_greets_then_parses_one_request():
    connection = p.ServerConnection()
    connection.receive_data(b"hello chock-control 1\nlist /home/me/proj\n")
    assert connection.next_event() == p.Greeted("chock-control", 1)
    assert connection.greeting_reply() == b"ok chock-control 1\n"
    assert connection.next_event() == p.ListRequest("/home/me/proj")
    assert connection.next_event() is None


def test_server_connection_refuses_a_verb_first():
    connection = p.ServerConnection()
    connection.receive_data(b"list /home/me/proj\n")
    with pytest.raises(ProtocolError) as caught:
        connection.next_event()
    assert caught.value.encode().startswith(b"error greeting ")


def test_server_connection_for_a_session_socket():
    connection = p.ServerConnection(p.SESSION_NAME, verbs=p.APPROVAL_VERBS)
    connection.receive_data(b"hello chock-session 1\npending\nanswer r1\tno\n")
    assert connection.next_event() == p.Greeted("chock-session", 1)
    assert connection.next_event() == p.PendingRequest()
    assert connection.next_event() == p.SessionAnswerRequest("r1", False)


def test_a_start_line_before_the_greeting_is_framed_by_the_start_bound():
    connection = p.ServerConnection()
    connection.receive_data(b"start /p\t" + b"m" * 100_000 + b"\n")
    assert code_of(connection.next_event) == ErrorCode.GREETING


# Properties -------------------------------------------------------------------------------------------------

CONTROL_WORDS = [*p.CONTROL_REQUESTS, "hello", "chock-control", SID, "/p", "0", "17", "yes", "no", "r1"]
line_parts = st.one_of(
    st.sampled_from(CONTROL_WORDS),
    st.sampled_from([" ", "\t", "\\", "\\t", "\\n", "\\x", "\n", "\0"]),
    st.text(),
)
lines = st.lists(line_parts, max_size=12).map("".join)


@settings(max_examples=300)
@given(st.text())
def test_escape_and_unescape_round_trip(text):
    escaped = p.escape(text)
    assert "\t" not in escaped and "\n" not in escaped
    assert p.unescape(escaped) == text


@settings(max_examples=300)
@given(lines)
def test_parsers_return_a_value_or_raise_protocol_error(line):
    for parse in (
        p.parse_request,
        p.parse_session_request,
        p.parse_greeting,
        p.check_greeting_reply,
        p.parse_session_reply,
        p.parse_started,
        p.parse_list_row,
        p.parse_watch_header,
        p.parse_event_line,
        p.parse_answered,
        p.parse_ok,
    ):
        try:
            parse(line)
        except ProtocolError as error:
            # What this end refuses carries a SPEC code; a decoded `error …` keeps the peer's own.
            assert error.code in p.ERROR_CODES or line.startswith("error ")


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=64) | st.sampled_from([b"\n", b"start ", b"list /", b"\xff", b"\0"]), max_size=40))
def test_framer_and_parser_only_ever_give_a_request_or_protocol_error(chunks):
    connection = p.ServerConnection()
    for chunk in chunks:
        connection.receive_data(chunk)
        for _ in range(len(chunk) + 2):
            try:
                if connection.next_event() is None:
                    break
            except ProtocolError as error:
                assert error.code in p.ERROR_CODES
                break


@settings(max_examples=200)
@given(
    st.text(min_size=1).filter(lambda m: "\0" not in m),
    st.from_regex(r"/[^\0]*", fullmatch=True),
)
def test_start_round_trips_for_any_text(message, project):
    request = p.StartRequest(project, message)
    try:
        line = request.encode()
    except ProtocolError as error:  # a lone surrogate cannot be UTF-8
        assert error.code == ErrorCode.BAD_REQUEST
        return
    buffer = p.LineBuffer(p.request_line_limit)
    buffer.feed(line)
    assert p.parse_request(buffer.next_line()) == request


@settings(max_examples=200)
@given(st.integers(1, 64), st.lists(st.binary(max_size=100) | st.just(b"\n"), max_size=30))
def test_the_framer_never_holds_more_than_its_bound(limit, chunks):
    buffer = p.LineBuffer(limit)
    for chunk in chunks:
        buffer.feed(chunk)
        # Lines are taken after every feed, so at most this chunk's lines and one unfinished line are held.
        assert buffer.buffered <= limit * (chunk.count(b"\n") + 1)
        try:
            while (line := buffer.next_line()) is not None:
                assert len(line.encode()) <= limit
        except ProtocolError as error:
            assert error.code in (ErrorCode.TOO_LARGE, ErrorCode.BAD_REQUEST)
