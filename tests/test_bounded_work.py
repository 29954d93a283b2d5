"""What the agent produces cannot freeze a session: huge tool calls are cut once, nothing is approved from a cut
summary, finishing a workspace of 60,000 nested repositories is bounded and a stop still stops it
(docs/log.md#lines, docs/protocol.md#session-sockets)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

from chock.control import session_protocol as sp
from chock.control.client import SessionClient
from chock.control.framing import ProtocolError, Unreachable
from chock.log.events import LIST_ENTRIES, MAX_EVENT_BYTES
from tests.fakes.sessions import new_session, terminal_session, wait_for_event, write
from tests.fakes.wait import wait_until

PLAN_OF_50000 = {
    "call_id": "p1",
    "name": "plan",
    "args": {"steps": [{"step": f"step {n} of the plan", "status": "pending"} for n in range(50_000)]},
}
COMMAND_OF_2_MB = {"call_id": "s1", "name": "shell", "args": {"command": "echo " + "x" * (2 * 1024 * 1024)}}
NESTED = "seq 60000 | sed 's|.*|n&/.git|' | xargs mkdir -p"


class Prober:
    """Asks the session's approval socket what is pending, again and again, from another thread, and keeps the
    longest wait for an answer: a loop frozen on the agent's output would make one of them take minutes."""

    def __init__(self, home, session_id: str) -> None:
        self.path = home.layout.session_socket(session_id, "approval")
        self.answered = 0
        self.longest = 0.0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._probe, daemon=True)
        self.thread.start()

    def _probe(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            try:
                with SessionClient(self.path, sp.APPROVAL, timeout=120) as client:
                    client.collect(sp.PendingRequest())
                self.answered += 1
            except (Unreachable, ProtocolError, OSError):
                pass  # not bound yet, or gone: the session has ended
            self.longest = max(self.longest, time.monotonic() - started)
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(150)


def _completes_answering_throughout(home, project, *args: str, timeout: float) -> str:
    """`chock run ARGS` on the replay set up: it completes, and its socket answered throughout; its id."""
    process = terminal_session(home, project, *args)
    session_id = new_session(home)
    prober = Prober(home, session_id)
    try:
        _, stderr = process.communicate(timeout=timeout)
    finally:
        prober.stop()
    assert process.returncode == 0, stderr
    assert prober.answered > 0 and prober.longest < 60  # the loop answered throughout (a generous bound)
    return session_id


def test_a_2_mb_plan_a_5_mb_argument_and_a_2_mb_command_each_end_and_none_is_approved_from_a_cut_summary(home, project):
    home.replay_instance([
        {"text": "Planning.", "tool_calls": [PLAN_OF_50000]},
        {"text": "Writing.", "tool_calls": [write("big.txt", "w" * (5 * 1024 * 1024))]},
        {"text": "Running.", "tool_calls": [COMMAND_OF_2_MB]},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    # No --yes and nobody at a terminal: a command that asked would wait for ever, and the run would time out.
    session_id = _completes_answering_throughout(home, project, timeout=300)

    lines = home.layout.log_path(session_id).read_bytes().splitlines()
    assert all(len(line) < MAX_EVENT_BYTES for line in lines)
    events = [json.loads(line) for line in lines]
    assert not [e for e in events if e["type"] == "approval.request"]
    plan_call = next(e for e in events if e["type"] == "tool.call" and e["name"] == "plan")
    assert plan_call["truncated"] is True and plan_call["args"]["steps"][0] == PLAN_OF_50000["args"]["steps"][0]
    results = {e["call_id"]: e for e in events if e["type"] == "tool.result"}
    assert results["p1"]["is_error"] and "at most" in results["p1"]["output"]
    assert results["s1"]["is_error"] and "64 KiB" in results["s1"]["output"]
    written = next(e for e in events if e["type"] == "tool.call" and e["name"] == "write_file")
    assert written["truncated"] is True and written["args"]["path"] == "big.txt"
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"


def test_60000_nested_repositories_are_listed_boundedly_and_the_session_completes(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "m1", "name": "shell", "args": {"command": NESTED}}]},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    session_id = _completes_answering_throughout(home, project, "--yes", timeout=600)
    close = next(e for e in home.events(session_id) if e["type"] == "workspace.close")
    assert len(close["skipped"]) == LIST_ENTRIES and close["left_out"] == 60_000 - LIST_ENTRIES
    assert all(entry.endswith("(a nested repository)") for entry in close["skipped"])
    assert not (home.layout.workspace_dir(session_id)).exists()


def test_a_stop_while_the_session_finishes_a_huge_workspace_is_answered_and_the_end_is_logged(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "m1", "name": "shell", "args": {"command": NESTED}}]},
        {"text": "Done.", "tool_calls": []},
        {"text": "Done again.", "tool_calls": []},  # for the `--continue` after a stop
    ])  # fmt: skip
    process = terminal_session(home, project, "--yes")
    session_id = new_session(home)
    wait_for_event(home, session_id, "assistant.message", lambda e: e["text"] == "Done.", timeout=300)
    path = home.layout.session_socket(session_id, "handover")
    asked = time.monotonic()
    try:
        with SessionClient(path, sp.HANDOVER, timeout=120) as client:
            client.ask(sp.SessionStopRequest())
            reply = client.next_reply(120)
        assert isinstance(reply, sp.Ended)
    except Unreachable:
        reply = None  # it had finished already: nothing was left to stop
    answered = time.monotonic() - asked
    assert process.wait(120) in (0, 130)
    end = home.events(session_id)[-1]
    assert end["type"] == "session.end"
    if reply is not None:
        assert end["reason"] == reply.reason
    assert answered < 60  # a generous bound: before, the loop was frozen for hours
    if end["reason"] == "interrupted":  # stopped while committing: the workspace is kept, `--continue` finishes it
        assert home.layout.workspace_dir(session_id).is_dir()
        assert not [e for e in home.events(session_id) if e["type"] == "workspace.close"]
        continued = home.chock("run", "--continue", session_id, "--yes", "finish it", cwd=project, timeout=600)
        assert continued.returncode == 0, continued.stderr
    assert wait_until(lambda: subprocess.run(["git", "-C", str(project), "worktree", "list"], capture_output=True,
                                             text=True).stdout.count("\n") == 1, 30, "the worktree to go")  # fmt: skip


def test_a_model_answer_past_16_mib_is_read_no_further_and_the_session_ends_saying_so(home, project):
    from chock.providers.transport import ANSWER_LIMIT
    from tests.fakes.providers import FakeProvider
    from tests.test_agent import remote

    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(
            tool_calls=[{"id": "c1", "name": "write_file", "args": {"path": "x", "content": "a" * ANSWER_LIMIT}}]
        )
        remote(home, fake)
        done = home.chock("run", "write it", cwd=project, timeout=300)
    assert done.returncode == 1, done.stderr
    end = home.events(home.only_session())[-1]
    assert end["type"] == "session.end" and end["reason"] == "error" and "passed 16 MiB" in end["error"]
    assert "passed 16 MiB" in done.stdout  # the terminal view says how the session ended
