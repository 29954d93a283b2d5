"""A session waiting on a person parks: it becomes a lean waiter (same pid) and is rebuilt from its log once it is
needed, carrying on exactly where it stopped (docs/architecture.md#parking).

Real daemons and terminal-less `chock run` sessions, real sandboxes; the model is a `replay` instance. A session
is parked when its process runs chock/session/parked.py (its command line says so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control import session_protocol as sp
from chock.control.client import SessionClient
from chock.control.framing import MAX_MESSAGE_LINE, ProtocolError
from chock.control.greeting import encode_greeting
from tests.fakes.sessions import alive, event_of, new_session, parked, replay_config, wait_for_end, wait_for_event
from tests.fakes.wait import wait_until

# A reply of two shell calls, each asking, then an end.
TWO_CALLS = [
    {"text": "", "tool_calls": [
        {"call_id": "c1", "name": "shell", "args": {"command": "echo first > one.txt; echo first"}},
        {"call_id": "c2", "name": "shell", "args": {"command": "echo second"}},
    ]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip
ONE_CALL = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo ran"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def kinds(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def park(home, session_id: str, request: int = 1) -> tuple[int, str]:
    """Wait until the session's `request`th approval request is logged and it parked; its pid and request id."""
    # The session's directory is made a moment before its log, and its first line written after.
    wait_until(lambda: home.layout.log_path(session_id).exists(), 30, f"session {session_id}'s log")
    owner = wait_for_event(home, session_id, "session.start")["pid"]
    asked = wait_for_event(home, session_id, "approval.request", lambda e: e["call_id"] == f"c{request}")
    wait_until(lambda: parked(owner), 30, f"session {session_id} to park")
    return owner, asked["request_id"]


def approval(home, session_id: str) -> SessionClient:
    return SessionClient(home.layout.session_socket(session_id, "approval"), sp.APPROVAL)


def handover(home, session_id: str) -> SessionClient:
    return SessionClient(home.layout.session_socket(session_id, "handover"), sp.HANDOVER)


def greeted(home, session_id: str) -> socket.socket:
    """A raw connection to the session's approval.sock that has sent its greeting (its reply left unread)."""
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(str(home.layout.session_socket(session_id, "approval")))
    raw.sendall(encode_greeting(sp.APPROVAL))
    return raw


def daemon_session(home, daemon, project, entries, message: str = "do it") -> str:
    replay_config(home, entries, shell="ask")
    return daemon.client.call(dp.StartRequest(project, message)).session_id


def without_times(events: list[dict]) -> list[dict]:
    """The events as a session that never parked would log them, but for what differs by run."""
    varying = ("at", "pid", "pid_start", "session", "directory", "admin", "commit", "base", "branch", "started")
    return [{k: v for k, v in e.items() if k not in varying} for e in events]


def test_a_parked_session_answered_yes_carries_on_and_logs_what_one_never_parked_logs(home, project, tmp_path):
    replay_config(home, TWO_CALLS, shell="ask")
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    kept = home.spawn("run", "two commands", cwd=project, env={"CHOCK_PARKING": "never"}, **quiet)
    try:
        never = new_session(home)
        for call in ("c1", "c2"):
            asked = wait_for_event(home, never, "approval.request", lambda e, c=call: e["call_id"] == c)
            with approval(home, never) as client:
                client.answer(asked["request_id"], True)
        assert kept.wait(60) == 0, kept.stderr.read()
    finally:
        kept.kill()

    shown = {**quiet, "stdout": subprocess.PIPE}  # what it prints is what a terminal-less run prints
    process = home.spawn("run", "two commands", cwd=project, **shown)
    try:
        others = lambda: [s for s in os.listdir(home.layout.sessions_dir) if s != never]  # noqa: E731
        session_id = wait_until(others, 30, "a second session")[0]
        for number in (1, 2):  # it parks at each question, and is rebuilt by each answer
            owner, request_id = park(home, session_id, number)
            assert owner == process.pid
            with approval(home, session_id) as client:
                assert [item.request_id for item in client.pending()] == [request_id]  # the waiter answers this
                client.answer(request_id, True)  # `ok answered` comes from the rebuilt session, once it is logged
        assert process.wait(60) == 0, process.stderr.read()  # the same process all along: its exit is ours
        printed = process.stdout.read()
    finally:
        process.kill()
    assert printed.count(f"chock approve {session_id}") == 2  # the second question was asked by the rebuilt one
    events = home.events(session_id)
    assert without_times(events) == without_times(home.events(never))
    assert [e["output"].strip() for e in events if e["type"] == "tool.result"] == ["first", "second"]
    assert events[-1]["reason"] == "completed"


def test_a_parked_session_answered_no_tells_the_model_and_completes(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, request_id = park(home, session_id)
    with approval(home, session_id) as client:
        client.call(sp.SessionAnswerWithRequest(request_id, False, note="not today"))
    end = wait_for_end(home, session_id, "completed")
    assert end["exit_code"] == 0
    result = event_of(home, session_id, "tool.result")
    assert result["is_error"] and "not today" in result["output"]
    answer = event_of(home, session_id, "approval.answer")
    assert (answer["answer"], answer["via"], answer["note"]) == ("no", "socket", "not today")
    wait_until(lambda: not alive({owner}), 10, "the session's process to be gone")


def test_a_parked_session_stopped_ends_interrupted_as_a_stop_does(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, _ = park(home, session_id)
    stopped = home.chock("stop", session_id, "--daemon", daemon.address, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert f"session {session_id} stopped" in stopped.stdout
    end = wait_for_end(home, session_id)
    assert (end["reason"], end["via"], end["exit_code"]) == ("interrupted", "socket", 130)
    wait_until(lambda: not alive({owner}), 10, "the session's process to be gone")
    assert kinds(home.events(session_id))[-3:] == ["tool.call", "approval.request", "session.end"]


def test_a_parked_session_stopped_by_sigterm_ends_interrupted_by_signal(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, _ = park(home, session_id)
    os.kill(owner, signal.SIGTERM)
    end = wait_for_end(home, session_id)
    assert (end["reason"], end["via"], end["exit_code"]) == ("interrupted", "signal", 130)


def test_what_is_said_to_a_parked_session_is_queued_by_it_and_taken_in_once_it_carries_on(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, request_id = park(home, session_id)
    said = home.chock("say", session_id, "also a test", "--daemon", daemon.address, cwd=project)
    assert said.returncode == 0, said.stderr
    with approval(home, session_id) as client, pytest.raises(ProtocolError, match="not waiting"):
        client.answer("r999", True)  # refused by the waiter itself too
    assert parked(owner)  # queued by the waiter itself
    with approval(home, session_id) as client:
        client.answer(request_id, True)
    wait_for_end(home, session_id, "completed")
    events = home.events(session_id)
    message = next(i for i, e in enumerate(events) if e["type"] == "user.message" and e.get("via") == "socket")
    assert events[message]["text"] == "also a test"
    assert kinds(events)[message - 2 : message] == ["tool.result", "turn.end"]  # taken in at the next boundary


def test_a_handover_asked_of_a_parked_session_waits_for_the_answer_then_hands_over(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    _, request_id = park(home, session_id)
    with handover(home, session_id) as asking:
        asking.ask(sp.HandoverRequest())  # carried into the rebuilt session: answered only at a turn boundary
        with approval(home, session_id) as client:
            client.answer(request_id, True)
        assert isinstance(asking.next_reply(30), sp.Ready)
        asking.ask(sp.ConfirmRequest())
        assert isinstance(asking.next_reply(30), sp.Released)
    events = home.events(session_id)
    end = next(e for e in events if e["type"] == "session.end")
    assert (end["reason"], end["exit_code"]) == ("handover", 8)
    assert kinds(events)[: kinds(events).index("session.end")][-3:] == ["approval.answer", "tool.result", "turn.end"]


def test_a_parked_session_outlives_a_daemon_restart_and_is_answered_through_the_new_one(home, project, daemons):
    first = daemons.start()
    session_id = daemon_session(home, first, project, ONE_CALL)
    owner, _ = park(home, session_id)
    first.kill()
    second = daemons.start(socket_path=first.socket)
    approved = home.chock("approve", session_id, "--daemon", second.address, input="y\n", cwd=project)
    assert approved.returncode == 0, approved.stderr
    assert wait_for_end(home, session_id, "completed")["exit_code"] == 0
    wait_until(lambda: not alive({owner}), 10, "the session's process to be gone")


def test_a_parked_session_killed_is_free_to_continue_as_after_a_crash(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, _ = park(home, session_id)
    os.kill(owner, signal.SIGKILL)
    wait_until(lambda: not alive({owner}), 10, "the waiter to be gone")
    resumed = home.chock("run", "--yes", "--continue", session_id, cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    events = home.events(session_id)
    adopt = event_of(home, session_id, "session.adopt")
    assert adopt["after"] == "crash"
    cut = next(e for e in events if e["type"] == "tool.result")
    assert cut["is_error"] and "cut off" in cut["output"]
    assert events[-1]["reason"] == "completed"


# What a parked session must never hold: the interpreter a whole session is (its loop, its CLI, its HTTP client).
HEAVY = ("asyncio", "click", "httpx", "ssl", "typing", "dataclasses", "chock.session.runner", "chock.providers")


def test_the_waiter_imports_only_the_standard_librarys_basics_and_the_protocol_modules():
    root = str(Path(__file__).resolve().parent.parent)
    probe = (
        f"import sys; sys.path.insert(0, {root!r}); from chock.session import parked; "
        "parked.Waiter({'listen': {}, 'pending': []}); print(' '.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    modules = loaded.stdout.split()
    assert "chock.control.session_protocol" in modules
    assert [m for m in modules if m.startswith(HEAVY)] == []


def test_a_client_that_never_reads_its_replies_does_not_keep_a_parked_session_from_its_answer(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    _, request_id = park(home, session_id)
    greedy = greeted(home, session_id)
    try:
        # Thousands of `pending` asked and none of their replies read: more than a socket's buffer holds.
        greedy.sendall(b"pending\n" * 4000)
        with approval(home, session_id) as client:
            client.answer(request_id, True)
        assert wait_for_end(home, session_id, "completed")["exit_code"] == 0
    finally:
        greedy.close()


def test_a_line_past_its_bound_ends_only_its_own_connection_to_a_parked_session(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, request_id = park(home, session_id)
    with greeted(home, session_id) as huge:
        with contextlib.suppress(OSError):  # it may be cut off mid-line: it is refused either way
            huge.sendall(b"say " + b"x" * (MAX_MESSAGE_LINE + 1) + b"\n")
        huge.shutdown(socket.SHUT_WR)
        told = b"".join(iter(lambda: huge.recv(65536), b""))
    assert told.count(b"\n") == 2 and b"error" in told.splitlines()[-1]  # the greeting's reply, then the refusal
    with approval(home, session_id) as client:
        assert [item.request_id for item in client.pending()] == [request_id]  # still the waiter's to answer
        assert parked(owner)
        client.answer(request_id, True)
    assert wait_for_end(home, session_id, "completed")["exit_code"] == 0


def test_a_parked_session_that_cannot_be_rebuilt_says_why_and_is_free_to_continue(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, request_id = park(home, session_id)
    home.write_config("not a config\n")  # what the rebuilt session needs again cannot be had
    with approval(home, session_id) as client, pytest.raises(ProtocolError, match=r"session ended \(error\)"):
        client.answer(request_id, True)  # whoever answered reads that the session ended, not a cut connection
    end = wait_for_end(home, session_id, "error")
    assert "the parked session could not be rebuilt" in end["error"] and "config" in end["error"]
    wait_until(lambda: not alive({owner}), 10, "the session's process to be gone")
    replay_config(home, ONE_CALL, shell="allow")
    resumed = home.chock("run", "--yes", "--continue", session_id, cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    assert home.events(session_id)[-1]["reason"] == "completed"


def test_a_stop_signal_that_comes_while_a_session_parks_stops_it(home, project):
    replay_config(home, ONE_CALL, shell="ask")
    # strace sends SIGTERM as the session writes its waiter's record (memfd_create): in the middle of parking.
    tracer = ["strace", "-qq", "-o", "/dev/null", "-e", "trace=memfd_create",
              "-e", "inject=memfd_create:signal=TERM:when=1"]  # fmt: skip
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    process = home.spawn("run", "one command", cwd=project, prefix=tracer, **quiet)
    try:
        session_id = new_session(home)  # its log, not only its directory: the end is read from it
        end = wait_for_end(home, session_id)
        assert (end["reason"], end["via"], end["exit_code"]) == ("interrupted", "signal", 130)
        assert process.wait(30) == 130
    finally:
        process.kill()


def test_a_stop_signal_that_comes_while_a_parked_session_reads_its_answer_stops_it(home, project, daemon):
    session_id = daemon_session(home, daemon, project, ONE_CALL)
    owner, request_id = park(home, session_id)
    # strace, attached to the waiter, sends SIGTERM as it reads its next request: the answer, which unparks it.
    tracer = subprocess.Popen(["strace", "-qq", "-o", "/dev/null", "-p", str(owner), "-e", "trace=recvfrom",
                               "-e", "inject=recvfrom:signal=TERM:when=1"])  # fmt: skip
    try:
        wait_until(lambda: tracer_of(owner) == tracer.pid, 30, "strace to attach")
        with greeted(home, session_id) as answering:
            answering.sendall(sp.SessionAnswerRequest(request_id, True).encode())
            answering.shutdown(socket.SHUT_WR)
            b"".join(iter(lambda: answering.recv(65536), b""))
        end = wait_for_end(home, session_id)
        assert (end["reason"], end["via"], end["exit_code"]) == ("interrupted", "signal", 130)
    finally:
        tracer.kill()
        tracer.wait()


def tracer_of(pid: int) -> int:
    """The pid of the process tracing `pid` (0: none)."""
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("TracerPid:")).split()[1])
