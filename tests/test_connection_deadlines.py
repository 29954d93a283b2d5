"""The server's deadlines and replies on `ServerConnection` alone, with a made-up clock (docs/protocol.md#bounds).

No socket and no sleep: the pumps (the daemon's selector loop, a session's asyncio sockets) only tell the
connection the time and ask it when to wake, so every bound is a rule checked here at exact instants.
"""

from __future__ import annotations

import pytest

from chock.control import daemon_protocol as dp
from chock.control import session_protocol as sp
from chock.control.connection import CLOSED, ServerConnection
from chock.control.framing import LINE_SECONDS, LINGER_BYTES, LINGER_SECONDS, ErrorCode, ProtocolError
from chock.control.greeting import Greeted

SID = "20261201-073450-a1b2c3"
VERB_SECONDS = 30.0  # the daemon's bound from greeting to verb (chock.daemon.accepted.IDLE_SECONDS)
IDLE = 15 * 60.0  # a session socket's idle bound (chock.session.sockets.IDLE_SECONDS)


def daemon_side(now: float = 0.0) -> ServerConnection:
    return ServerConnection(dp.CONTROL, now=now, idle_seconds=VERB_SECONDS)


def session_side(protocol=sp.HANDOVER, now: float = 0.0) -> ServerConnection:
    return ServerConnection(protocol, now=now, idle_seconds=IDLE)


def greeted(server: ServerConnection, now: float) -> ServerConnection:
    server.receive_data(f"hello {server.protocol.name} {server.protocol.number}\n".encode(), now)
    assert isinstance(server.next_event(), Greeted)
    return server


def told(last: bytes | None) -> str:
    assert last is not None and last.startswith(b"error bad-request "), last
    return last.decode()


# The greeting ---------------------------------------------------------------------------------------------


def test_the_greeting_is_due_within_the_line_bound_of_the_opening():
    server = daemon_side(now=100.0)
    assert server.next_deadline() == 100.0 + LINE_SECONDS
    assert server.deadline_passed(100.0 + LINE_SECONDS - 0.01) is None and not server.closed
    assert "the greeting must come within 10 s" in told(server.deadline_passed(100.0 + LINE_SECONDS))
    assert server.closed and server.next_deadline() is None


def test_a_greeting_that_trickles_is_still_due_from_the_opening():
    server = session_side()
    server.receive_data(b"hel", 9.0)
    assert server.next_deadline() == LINE_SECONDS  # not 9 + LINE_SECONDS: the greeting is sent at once


# A request line -------------------------------------------------------------------------------------------


def test_a_line_that_trickles_is_cut_at_the_bound_from_its_first_byte():
    server = greeted(daemon_side(), 0.0)
    for at, byte in ((5.0, b"l"), (9.0, b"i"), (14.0, b"s")):
        server.receive_data(byte, at)
    assert server.next_deadline() == 5.0 + LINE_SECONDS  # a byte now and then does not move it
    assert "must arrive whole within 10 s of its first byte" in told(server.deadline_passed(15.0))


def test_a_line_that_arrives_whole_stops_its_deadline_and_the_next_line_starts_its_own():
    server = greeted(session_side(sp.APPROVAL), 0.0)
    server.receive_data(b"pend", 1.0)
    server.receive_data(b"ing\npen", 8.0)  # the first line is whole; the next began at 8
    assert isinstance(server.next_event(), sp.PendingRequest)
    assert server.next_deadline() == 8.0 + LINE_SECONDS


# Idle -------------------------------------------------------------------------------------------------------


def test_the_daemon_wants_its_verb_within_its_bound_of_the_greeting_even_mid_line():
    silent = greeted(daemon_side(), 2.0)
    assert silent.next_deadline() == 2.0 + VERB_SECONDS
    assert "no verb came within 30 s" in told(silent.deadline_passed(2.0 + VERB_SECONDS))
    late = greeted(daemon_side(), 2.0)
    late.receive_data(b"list /tm", 25.0)  # a line begun late is still due with the verb
    assert late.next_deadline() == 2.0 + VERB_SECONDS


def test_once_the_daemon_has_its_verb_no_deadline_of_the_codec_runs():
    server = greeted(daemon_side(), 0.0)
    server.receive_data(b"list /p\n", 1.0)
    assert isinstance(server.next_event(), dp.ListRequest)
    assert server.next_deadline() is None and server.deadline_passed(10_000.0) is None


def test_a_session_connection_may_idle_between_requests_counted_from_its_last_exchange():
    server = greeted(session_side(), 0.0)
    assert server.next_deadline() == IDLE
    server.receive_data(b"say hi\n", 600.0)
    assert server.next_event() == sp.SessionSayRequest("hi")
    assert server.next_deadline() is None  # owed its answer
    server.send(sp.Queued(), 601.0)
    assert server.next_deadline() == 601.0 + IDLE
    assert "idle for 900 s" in told(server.deadline_passed(601.0 + IDLE))


def test_a_client_owed_an_answer_is_never_idle_but_its_lines_are_still_bounded():
    server = greeted(session_side(), 0.0)
    server.receive_data(b"handover\n", 1.0)
    assert server.next_event() == sp.HandoverRequest()
    server.send(sp.Busy(1, 0), 2.0)
    assert server.next_deadline() is None and server.deadline_passed(10 * IDLE) is None
    server.receive_data(b"sto", 3.0)  # a line begun while waiting is due like any other
    assert server.next_deadline() == 3.0 + LINE_SECONDS
    server.receive_data(b"p\n", 4.0)
    assert server.next_event() == sp.SessionStopRequest()
    server.send(sp.Ended("interrupted"), 5.0)  # said at any time, it answers everything
    assert not server.owed and server.next_deadline() == 5.0 + IDLE


# The linger after the last line -----------------------------------------------------------------------------


def test_after_its_last_line_a_connection_lingers_for_a_bounded_time():
    server = daemon_side()
    refusal = server.send(ProtocolError(ErrorCode.FORBIDDEN, "not your daemon"), 3.0)
    assert refusal.startswith(b"error forbidden ")
    server.linger(3.0)
    assert server.lingering and server.next_deadline() == 3.0 + LINGER_SECONDS
    server.receive_data(b"list /p\n", 3.5)  # dropped, never read as a request
    assert server.next_event() is CLOSED and not server.closed
    assert server.deadline_passed(3.0 + LINGER_SECONDS) == b"" and server.closed


def test_a_linger_ends_at_the_clients_end_of_file_or_at_its_byte_bound():
    at_eof = greeted(session_side(), 0.0)
    at_eof.linger(1.0)
    at_eof.receive_data(b"", 1.2)
    assert at_eof.closed
    flooded = greeted(session_side(), 0.0)
    flooded.linger(1.0)
    flooded.receive_data(b"x" * (LINGER_BYTES - 1), 1.1)
    assert not flooded.closed
    flooded.receive_data(b"x", 1.2)
    assert flooded.closed


# Replies the connection checks --------------------------------------------------------------------------------


def test_a_reply_the_request_does_not_allow_is_the_servers_mistake():
    server = greeted(session_side(sp.APPROVAL), 0.0)
    server.receive_data(b"pending\n")
    assert server.next_event() == sp.PendingRequest()
    with pytest.raises(RuntimeError, match="waiting for an answer: pending"):
        server.send(sp.Queued())
    assert server.send(sp.PendingItem("r1", "shell", "ls")) == b"request r1\tshell\tls\n"
    assert server.send(sp.PendingEnd()) == b"end\n"
    with pytest.raises(RuntimeError, match="no request"):
        server.send(sp.PendingEnd())  # the stream ended: nothing waits for another line


def test_nothing_but_an_error_goes_before_the_greeting_is_answered():
    server = session_side()
    with pytest.raises(RuntimeError, match="before the greeting"):
        server.send(sp.Ended("completed"))
    assert server.send(ProtocolError(ErrorCode.REFUSED, "too many")).startswith(b"error refused ")


def test_a_refused_line_and_a_refused_request_each_take_their_own_error():
    server = greeted(session_side(), 0.0)
    server.receive_data(b"handover\nnonsense\n")
    assert server.next_event() == sp.HandoverRequest()
    with pytest.raises(ProtocolError) as refused:
        server.next_event()
    server.send(refused.value)  # answers the bad line, not the handover ask
    assert server.owed
    assert server.send(sp.Ready()) == b"ready\n" and not server.owed


def test_a_request_taken_during_an_open_ask_is_answered_on_its_own():
    server = greeted(session_side(), 0.0)
    server.receive_data(b"handover\nsay more\n")
    assert [server.next_event(), server.next_event()] == [sp.HandoverRequest(), sp.SessionSayRequest("more")]
    server.send(sp.Queued())  # the say's answer, while the ask is still open
    with pytest.raises(RuntimeError):
        server.send(sp.Released())  # `released` answers a confirm, and none was asked
    server.send(sp.Ready())
    assert not server.owed


def test_a_daemon_verbs_reply_line_goes_through_the_connections_check():
    """The daemon's verbs answer through `ReplyWriter.answer`, which the connection checks (chock/daemon/reply.py)."""
    import socket

    from chock.daemon.reply import ReplyWriter

    server = greeted(daemon_side(), 0.0)
    server.receive_data(f"stop /p\t{SID}\n".encode(), 1.0)
    assert isinstance(server.next_event(), dp.StopRequest)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        writer = ReplyWriter(ours, server)
        with pytest.raises(RuntimeError, match="waiting for an answer: stop"):
            writer.answer(dp.Removed())  # a `remove`'s answer to a `stop`: never written
        writer.answer(dp.Stopped())
        assert theirs.recv(100) == b"ok stopped\n"
