"""A session's handover machine, its approvals registry and its sockets, without spawning a session.

The machine is driven transition by transition with a clock the test moves; the sockets are served on a real
asyncio loop over real unix sockets, with the machine and the registry handed in as the session hands them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
import time
from pathlib import Path

import pytest

from chock.control.client import NoAnswer, SessionClient
from chock.control.framing import ProtocolError
from chock.control.session_protocol import (
    APPROVAL,
    HANDOVER,
    Answered,
    Busy,
    ConfirmRequest,
    Ended,
    HandoverRequest,
    Queued,
    Ready,
    Released,
    SessionAnswerRequest,
    SessionSayRequest,
    SessionStopRequest,
)
from chock.session.approvals import Approvals
from chock.session.handover import (
    ASKED,
    BUSY,
    CONFIRM_SECONDS,
    CONFIRMED,
    IDLE,
    READY,
    RELEASED,
    Handover,
    HandoverRefused,
)
from chock.session.sockets import SessionSockets
from chock.session.steering import Steering


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def machine(clock) -> Handover:
    return Handover(clock=clock)


ASKER, OTHER = object(), object()


# The handover machine, transition by transition ----------------------------------------------------------------


def test_idle_until_asked_and_a_boundary_says_nothing_then(machine):
    assert (machine.state, machine.open) == (IDLE, False)
    assert machine.at_boundary(0, 0) is None
    assert machine.settle()


def test_asked_then_ready_at_a_boundary_with_nothing_held(machine):
    machine.ask(ASKER)
    assert (machine.state, machine.open, machine.asker) == (ASKED, True, ASKER)
    assert machine.at_boundary(0, 0) == Ready()
    assert machine.state == READY and not machine.settle()  # the session waits for confirm


def test_busy_while_work_is_held_said_again_only_when_the_counts_change(machine):
    machine.ask(ASKER)
    assert machine.at_boundary(1, 0) == Busy(1, 0)
    assert machine.state == BUSY
    assert machine.at_boundary(1, 0) is None  # the same counts: nothing new to say
    assert machine.at_boundary(1, 1) == Busy(1, 1)
    assert machine.at_boundary(0, 1) == Busy(0, 1)
    assert machine.at_boundary(0, 0) == Ready()


def test_confirmed_then_released(machine):
    machine.ask(ASKER)
    machine.at_boundary(0, 0)
    machine.confirm(ASKER)
    assert machine.state == CONFIRMED and machine.settle()
    machine.released()
    assert machine.state == RELEASED and not machine.open


def test_a_second_ask_while_one_is_open_is_refused(machine):
    machine.ask(ASKER)
    for state_after in (lambda: None, lambda: machine.at_boundary(1, 0), lambda: machine.at_boundary(0, 0)):
        state_after()
        with pytest.raises(HandoverRefused, match="already open"):
            machine.ask(OTHER)
    assert machine.asker is ASKER


def test_a_confirm_before_ready_is_refused_and_changes_nothing(machine):
    with pytest.raises(HandoverRefused, match="after the session said ready"):
        machine.confirm(ASKER)  # nobody asked
    machine.ask(ASKER)
    with pytest.raises(HandoverRefused, match="after the session said ready"):
        machine.confirm(ASKER)
    machine.at_boundary(2, 0)
    with pytest.raises(HandoverRefused, match="after the session said ready"):
        machine.confirm(ASKER)
    assert machine.state == BUSY


def test_only_the_asker_may_confirm(machine):
    machine.ask(ASKER)
    machine.at_boundary(0, 0)
    with pytest.raises(HandoverRefused):
        machine.confirm(OTHER)
    assert machine.state == READY


def test_the_wait_for_confirm_runs_out_and_the_ask_is_dropped(machine, clock):
    machine.ask(ASKER)
    machine.at_boundary(0, 0)
    clock.now += CONFIRM_SECONDS - 0.001
    assert machine.seconds_left() == pytest.approx(0.001) and not machine.settle()
    clock.now += 0.002
    assert machine.expired()
    with pytest.raises(HandoverRefused, match="ask again"):
        machine.confirm(ASKER)
    assert machine.settle()  # the session carries on unchanged
    assert (machine.state, machine.asker) == (IDLE, None)
    machine.ask(OTHER)  # and may be asked again


def test_an_asker_that_goes_away_drops_its_ask_in_every_open_state(machine):
    for held in (None, (1, 0), (0, 0)):
        machine.ask(ASKER)
        if held is not None:
            machine.at_boundary(*held)
        machine.drop(OTHER)  # someone else going away changes nothing
        assert machine.open
        machine.drop(ASKER)
        assert machine.state == IDLE and machine.settle()


def test_a_confirmed_handover_is_not_dropped_and_only_it_is_released(machine):
    with pytest.raises(HandoverRefused):
        machine.released()
    machine.ask(ASKER)
    machine.at_boundary(0, 0)
    machine.confirm(ASKER)
    machine.drop(ASKER)
    assert machine.state == CONFIRMED


# The approvals registry: the first answer wins -------------------------------------------------------------------


def test_the_first_answer_wins_and_later_ones_are_refused():
    answered = []
    approvals = Approvals(on_answer=answered.append)
    approvals.open("r1", "shell", "make test")
    assert [(p.request_id, p.tool, p.summary) for p in approvals.pending()] == [("r1", "shell", "make test")]
    assert approvals.answer("r1", "yes", "socket")
    assert not approvals.answer("r1", "no", "terminal")
    assert answered == ["r1"] and approvals.answered("r1") and approvals.pending() == []
    taken = approvals.take("r1")
    assert (taken.answer, taken.via, taken.scope, taken.rule, taken.note) == ("yes", "socket", "once", "", "")
    assert not approvals.answer("r1", "no", "socket")  # taken: not waiting any more


def test_an_unknown_or_withdrawn_request_is_not_answered():
    approvals = Approvals()
    assert not approvals.answer("r9", "yes", "socket")
    approvals.open("r1", "shell", "ls")
    approvals.withdraw("r1")
    assert not approvals.answer("r1", "yes", "socket") and approvals.pending() == []
    approvals.open("r2", "shell", "x")
    with pytest.raises(ValueError):
        approvals.open("r2", "shell", "x")  # an id is opened once


# The sockets, served on a real loop with the machine and the registry handed in ----------------------------------


def run_with_sockets(scenario, *, confirm_seconds: float = CONFIRM_SECONDS, stops: list | None = None):
    """Serve both sockets of a pretend session; run `scenario(sockets, machine, approvals, paths)` in a thread
    (the blocking clients), while the loop serves; return what the scenario returned."""

    stops = [] if stops is None else stops

    async def main():
        directory = Path(tempfile.mkdtemp(prefix="chock-s-", dir="/tmp"))
        paths = {"approval": directory / "a.sock", "handover": directory / "h.sock"}
        machine = Handover(confirm_seconds=confirm_seconds)
        changed = asyncio.Event()
        approvals = Approvals()
        steering = Steering(on_say=changed.set, on_stop=lambda: stops.append("stop"))
        sockets = SessionSockets(paths, approvals, machine, steering, changed.set)
        sockets.steering = steering  # for the scenario to look at
        await sockets.start()
        try:
            return await asyncio.to_thread(scenario, sockets, machine, approvals, paths, asyncio.get_running_loop())
        finally:
            await sockets.close(ended="completed")
            assert not paths["approval"].exists() and not paths["handover"].exists()

    return asyncio.run(asyncio.wait_for(main(), 30))


def on_loop(loop, coroutine_or_call):
    """Run something on the session's loop from the scenario's thread and wait for it."""

    async def call():
        result = coroutine_or_call()
        return await result if asyncio.iscoroutine(result) else result

    return asyncio.run_coroutine_threadsafe(call(), loop).result(10)


def test_pending_and_answer_over_the_approval_socket():
    def scenario(sockets, machine, approvals, paths, loop):
        on_loop(loop, lambda: approvals.open("r1", "shell", "make\ttest"))
        with SessionClient(paths["approval"], APPROVAL, timeout=5) as client:
            [item] = client.pending()
            assert (item.request_id, item.summary) == ("r1", "make\ttest")
            client.ask(SessionAnswerRequest("r1", True))
            with pytest.raises(NoAnswer):
                client.next_reply(0.2)  # taken, not yet logged: `ok answered` reports a logged fact
            answer = on_loop(loop, lambda: approvals.take("r1"))
            taken = (answer.answer, answer.via)
            on_loop(loop, lambda: sockets.answer_logged("r1"))  # the session logged it and synced the log
            assert client.next_reply(5) == Answered()
            with pytest.raises(ProtocolError) as again:
                client.answer("r1", False)
            assert again.value.code == "not-pending"
        return taken

    assert run_with_sockets(scenario) == ("yes", "socket")


def test_an_answer_the_session_never_logged_hears_how_it_ended():
    def scenario(sockets, machine, approvals, paths, loop):
        on_loop(loop, lambda: approvals.open("r1", "shell", "make"))
        client = SessionClient(paths["approval"], APPROVAL, timeout=5).__enter__()
        client.ask(SessionAnswerRequest("r1", True))
        for _ in range(100):  # the answer is taken; the session stops before it logs it
            if approvals.answered("r1"):
                break
            time.sleep(0.01)
        return client

    client = run_with_sockets(scenario)
    try:
        assert client.next_reply(5) == Ended("completed")  # never `ok answered`: nothing was logged
    finally:
        client.close()


def test_an_ask_is_answered_only_at_a_boundary_and_a_second_ask_is_refused():
    def scenario(sockets, machine, approvals, paths, loop):
        with (
            SessionClient(paths["handover"], HANDOVER, timeout=5) as first,
            SessionClient(paths["handover"], HANDOVER, timeout=5) as second,
        ):
            first.ask(HandoverRequest())
            with pytest.raises(NoAnswer):
                first.next_reply(0.2)  # no boundary yet: nothing is said
            with pytest.raises(ProtocolError, match="already open"):
                second.call(HandoverRequest())
            on_loop(loop, lambda: sockets.tell_asker(machine.at_boundary(1, 0)))
            assert first.next_reply(5) == Busy(1, 0)
            on_loop(loop, lambda: sockets.tell_asker(machine.at_boundary(0, 0)))
            assert first.next_reply(5) == Ready()
            with pytest.raises(ProtocolError, match="after the session said ready"):
                second.call(ConfirmRequest())  # not the asker
            first.ask(ConfirmRequest())
            for _ in range(100):
                if machine.state == CONFIRMED:
                    break
                on_loop(loop, lambda: asyncio.sleep(0.01))
            on_loop(loop, machine.released)
            on_loop(loop, lambda: sockets.tell_asker(Released()))
            assert first.next_reply(5) == Released()
        return machine.state

    assert run_with_sockets(scenario) == RELEASED


def test_an_asker_that_goes_away_drops_the_ask():
    def scenario(sockets, machine, approvals, paths, loop):
        with SessionClient(paths["handover"], HANDOVER, timeout=5) as client:
            client.ask(HandoverRequest())
            for _ in range(100):
                if machine.open:
                    break
                on_loop(loop, lambda: asyncio.sleep(0.01))
        for _ in range(100):
            if not machine.open:
                return machine.state
            on_loop(loop, lambda: asyncio.sleep(0.01))
        return machine.state

    assert run_with_sockets(scenario) == IDLE


def test_a_client_that_waits_hears_how_the_session_ended():
    def scenario(sockets, machine, approvals, paths, loop):
        with SessionClient(paths["approval"], APPROVAL, timeout=5) as client:
            on_loop(loop, lambda: sockets.close(ended="interrupted"))
            return client.next_reply(5)

    assert run_with_sockets(scenario) == Ended("interrupted")


def test_a_client_that_reads_nothing_cannot_keep_the_session_from_closing():
    """A greeted client asks `pending` over and over and reads none of it: its socket fills, and closing must
    still end within its bound (the session then ends and lets go of its log)."""

    def scenario(sockets, machine, approvals, paths, loop):
        for number in range(8):
            on_loop(loop, lambda number=number: approvals.open(f"r{number}", "shell", "x" * 3000))
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(paths["approval"]))
            client.sendall(b"hello chock-session 1\n")
            client.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                for _ in range(2000):
                    client.send(b"pending\n")
            time.sleep(1)  # the session has written what the socket takes, and waits to write more
            started = time.monotonic()
            on_loop(loop, lambda: sockets.close(ended="completed"))
            return time.monotonic() - started

    assert run_with_sockets(scenario) < 5


def test_a_line_trickled_past_the_bound_is_cut(monkeypatch):
    import socket

    from chock.session import sockets as session_sockets

    monkeypatch.setattr(session_sockets, "LINE_SECONDS", 0.3)

    def scenario(sockets, machine, approvals, paths, loop):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(paths["approval"]))
        sock.sendall(b"hello chock-session 1\npend")
        sock.settimeout(5)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        sock.close()
        return received

    assert run_with_sockets(scenario) == b"ok chock-session 1\n"  # greeted, then closed at the line's bound


def test_say_queues_in_order_and_is_acknowledged_only_once_queued():
    def scenario(sockets, machine, approvals, paths, loop):
        with SessionClient(paths["handover"], HANDOVER, timeout=5) as client:
            assert client.call(SessionSayRequest("first")) == Queued()
            assert client.call(SessionSayRequest("second\nline")) == Queued()
        return on_loop(loop, sockets.steering.take)

    assert run_with_sockets(scenario) == ["first", "second\nline"]


def test_stop_asks_the_session_to_stop_and_the_answer_is_how_it_ended():
    stops: list = []

    def scenario(sockets, machine, approvals, paths, loop):
        with SessionClient(paths["handover"], HANDOVER, timeout=5) as client:
            client.ask(SessionStopRequest())
            for _ in range(100):
                if stops:
                    break
                on_loop(loop, lambda: asyncio.sleep(0.01))
            on_loop(loop, lambda: sockets.close(ended="interrupted"))  # what the session does next
            return sockets.steering.stop_via, client.next_reply(5)

    assert run_with_sockets(scenario, stops=stops) == ("socket", Ended("interrupted"))
    assert len(stops) == 1
