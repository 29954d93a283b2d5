"""Steering sessions through the daemon: stop, say, attach, remove (docs/architecture.md#steering).

Real daemons, real `chock run` children and terminal sessions, real bwrap sandboxes; the model is a `replay`
instance, or a loopback server speaking the OpenAI wire where what the model receives matters.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import threading
import time

import pytest

from chock.control import daemon_protocol as dp
from chock.log.fold import fold
from chock.session.render import terminal_renderer
from tests.fakes.projects import git_value
from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import (
    BUSY,
    alive,
    descendants,
    event_of,
    new_session,
    no_process_left,
    replay_config,
    terminal_session,
    wait_for_end,
    wait_for_event,
    write,
)
from tests.fakes.terminal import Terminal
from tests.fakes.wait import wait_until


def chock(home, daemon, *args, cwd, **kwargs):
    return home.chock(*args, "--daemon", daemon.address, cwd=cwd, **kwargs)


def kinds(events):
    return [e["type"] for e in events]


# stop ----------------------------------------------------------------------------------------------------


def _busy_session_processes(home, session_id) -> set[int]:
    """Once the foreground shell, the background command and the subagent all run: every process below the
    session's own."""
    wait_for_event(home, session_id, "tool.call", lambda e: e["call_id"] == "f1")
    owner = event_of(home, session_id, "session.start")["pid"]
    return wait_until(
        lambda: (found := descendants(owner)) and len(found) >= 6 and found,  # bwraps, sleeps, the subagent
        30,
        "the session's sandboxes and subagent",
    )


def test_stop_ends_a_daemon_session_mid_tool_with_every_process_of_it_and_continue_carries_on(home, project, daemon):
    replay_config(home, BUSY)
    session_id = daemon.client.call(dp.StartRequest(project, "keep busy")).session_id
    processes = _busy_session_processes(home, session_id)
    owner = event_of(home, session_id, "session.start")["pid"]

    began = time.monotonic()
    result = chock(home, daemon, "stop", session_id, cwd=project)
    assert result.returncode == 0, result.stderr
    assert f"session {session_id} stopped" in result.stdout
    wait_until(lambda: not alive(processes | {owner}), 5, "every process of the session to be gone")
    assert time.monotonic() - began < 5

    events = home.events(session_id)
    tail = events[-3:]
    assert kinds(tail) == ["background.end", "subagent.end", "session.end"] or kinds(tail) == [
        "subagent.end", "background.end", "session.end",
    ]  # fmt: skip
    end = events[-1]
    assert (end["reason"], end["via"], end["exit_code"]) == ("interrupted", "socket", 130)
    row = json.loads(chock(home, daemon, "sessions", "--json", cwd=project).stdout)
    assert (row["status"], row["end_reason"]) == ("ended", "interrupted")

    workspace = event_of(home, session_id, "workspace.open")["directory"]
    resumed = home.chock("run", "--yes", "--continue", session_id, cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    reopened = [e["directory"] for e in home.events(session_id) if e["type"] == "workspace.open"]
    assert reopened == [workspace, workspace]  # the same workspace, taken back
    assert home.events(session_id)[-1]["reason"] == "completed"


def test_stop_ends_a_terminal_session_leaving_nothing_under_its_pid(home, project, daemon):
    replay_config(home, BUSY, shell="ask")
    process = terminal_session(home, project, "--yes")
    try:
        session_id = new_session(home)
        processes = _busy_session_processes(home, session_id)
        result = chock(home, daemon, "stop", cwd=project)  # the newest running session of this project
        assert result.returncode == 0, result.stderr
        assert process.wait(10) == 130
        wait_until(lambda: not alive(processes), 5, "every process of the session to be gone")
    finally:
        process.kill()
    assert home.events(session_id)[-1]["via"] == "socket"


# After how many of the reply's background commands have started each stop is asked: early, while the first
# sandboxes are still being set up, and on through the reply (each start is a few milliseconds).
STOP_AFTER = (1, 2, 3, 4, 6, 8, 11, 14, 18, 22, 27, 33)


def test_stops_landing_among_dozens_of_background_starts_end_each_session_leaving_no_process(home, project, daemon):
    def handles(session_id: str, kind: str) -> set[str]:
        return {e["handle"] for e in home.events(session_id) if e["type"] == kind}

    def stopped_after(after: int) -> None:
        session_id = daemon.client.call(dp.StartRequest(project, "start them all")).session_id
        wait_until(lambda: len(handles(session_id, "background.start")) >= after, 30, f"{after} commands to start")
        assert isinstance(daemon.client.call(dp.StopRequest(str(project), session_id)), dp.Stopped)
        end = wait_for_end(home, session_id, timeout=5)
        assert (end["reason"], end["via"], end["exit_code"]) == ("interrupted", "socket", 130)
        assert handles(session_id, "background.end") == handles(session_id, "background.start")

    with no_process_left() as marker:
        starts = [
            {"call_id": f"b{n}", "name": "shell", "args": {"command": f"sleep {marker}{n:02d}", "background": True}}
            for n in range(40)
        ]
        replay_config(home, [{"text": "", "tool_calls": starts}, {"text": "Started them.", "tool_calls": []}])
        for after in STOP_AFTER:
            stopped_after(after)


def test_a_session_whose_socket_does_not_answer_is_unreachable_never_ok(home, project, daemon):
    replay_config(home, BUSY)
    process = terminal_session(home, project, "--yes")
    session_id = new_session(home)
    wait_for_event(home, session_id, "tool.call", lambda e: e["call_id"] == "f1")
    process.kill()  # no end logged, nobody holds the log: abandoned
    process.wait(10)
    for verb in (("stop", session_id), ("say", session_id, "hello")):
        result = chock(home, daemon, *verb, cwd=project)
        assert result.returncode != 0 and "ok" not in result.stdout.split(), result.stdout
        assert "(unreachable)" in result.stderr or "abnormally" in result.stderr, result.stderr
        assert "/" not in result.stderr.split(":", 2)[-1], result.stderr  # no path in the reply of a new verb


# say ----------------------------------------------------------------------------------------------------


def test_a_follow_up_reaches_the_model_in_its_next_request_and_is_logged_once(home, project, daemon):
    with FakeProvider(kind="openai", key=None) as fake:
        fake.script(tool_calls=[{"id": "c1", "name": "shell", "args": {"command": "sleep 3"}}])
        fake.script(text="Both done.")
        instances = f'.instances = .{{ .local = .{{ .kind = "openai-compat={fake.address}" }} }}'
        home.write_config(f'.{{ {instances}, .approvals = .{{ .shell = "allow" }} }}\n')
        session_id = daemon.client.call(dp.StartRequest(project, "first thing")).session_id
        wait_for_event(home, session_id, "tool.call")
        said = chock(home, daemon, "say", session_id, "also mention the weather", cwd=project)
        assert said.returncode == 0 and "next turn" in said.stdout, said.stderr
        wait_for_end(home, session_id, "completed")
        second = fake.requests[-1].body["messages"]
    assert {"role": "user", "content": "also mention the weather"} in second
    told = [e for e in home.events(session_id) if e["type"] == "user.message" and e.get("via") == "socket"]
    assert [e["text"] for e in told] == ["also mention the weather"]


def test_saying_more_to_a_completed_session_continues_it_under_the_daemon_onto_its_branch(home, project, daemon):
    replay_config(home, [
        {"text": "First part done.", "tool_calls": []},
        {"text": "", "tool_calls": [write("more.txt", "more\n")]},
        {"text": "Second part done.", "tool_calls": []},
    ])  # fmt: skip
    session_id = daemon.client.call(dp.StartRequest(project, "first part")).session_id
    wait_for_end(home, session_id, "completed")
    said = chock(home, daemon, "say", session_id, "now the second part", cwd=project)
    assert said.returncode == 0 and "continues it" in said.stdout, said.stderr
    adopt = wait_for_event(home, session_id, "session.adopt")
    assert adopt["via"] == "daemon"
    wait_until(lambda: kinds(home.events(session_id)).count("session.end") == 2, 60, "the second end")
    assert home.events(session_id)[-1]["reason"] == "completed"
    assert git_value(project, "show", f"chock/{session_id}:more.txt") == "more"


def test_two_says_at_once_to_an_ended_session_are_both_taken_one_carries_it_on(home, project, daemon):
    """A double-submitted message box, or two people: one `say` carries the session on, the other is queued to
    the session it started; neither is refused and both messages reach the log."""
    replay_config(home, [
        {"text": "First part done.", "tool_calls": []},
        {"text": "", "tool_calls": [{"call_id": "s1", "name": "shell", "args": {"command": "sleep 2"}}]},
        {"text": "Both heard.", "tool_calls": []},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    session_id = daemon.client.call(dp.StartRequest(project, "first part")).session_id
    wait_for_end(home, session_id, "completed")
    results: dict[str, subprocess.CompletedProcess[str]] = {}

    def say(text: str) -> None:
        results[text] = chock(home, daemon, "say", session_id, text, cwd=project)

    threads = [threading.Thread(target=say, args=(text,)) for text in ("one more thing", "and another")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert all(result.returncode == 0 for result in results.values()), {t: r.stderr for t, r in results.items()}
    wait_until(lambda: kinds(home.events(session_id)).count("session.end") == 2, 60, "the second end")
    told = [e["text"] for e in home.events(session_id) if e["type"] == "user.message"]
    assert told[0] == "first part" and sorted(told[1:]) == ["and another", "one more thing"]


def test_a_yes_session_continued_by_say_asks_before_its_next_shell_command(home, project, daemon):
    replay_config(home, [
        {"text": "Done.", "tool_calls": []},
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo asked-first"}}]},
        {"text": "Done again.", "tool_calls": []},
    ], shell="ask")  # fmt: skip
    assert home.chock("run", "--yes", "first", cwd=project).returncode == 0
    session_id = new_session(home)
    assert fold(home.events(session_id)).approve_all
    assert chock(home, daemon, "say", session_id, "run a command", cwd=project).returncode == 0
    request = wait_for_event(home, session_id, "approval.request")
    assert not request.get("by_config")  # asked, not approved by --yes
    daemon.client.call(dp.AnswerRequest(project, session_id, request["request_id"], True))
    wait_until(lambda: kinds(home.events(session_id)).count("session.end") == 2, 60, "the second end")
    assert "asked-first" in [e for e in home.events(session_id) if e["type"] == "tool.result"][-1]["output"]


# attach ----------------------------------------------------------------------------------------------------

ATTACHED = [
    {"text": "Let me check.", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo ran"}}]},
    {"text": "Thinking.", "tool_calls": [write("a.txt", "A")]},
    {"text": "All done.", "tool_calls": [], "delay": 5},  # the daemon restarts while the model thinks
]  # fmt: skip


def _rendered(events) -> list[str]:
    out = io.StringIO()
    render = terminal_renderer(out)
    for event in events:
        render(event)
    return out.getvalue().splitlines()


def test_attach_shows_what_run_shows_answers_an_approval_and_rides_out_a_daemon_restart(home, project, daemons):
    replay_config(home, ATTACHED, shell="ask")
    daemon = daemons.start()
    session_id = daemon.client.call(dp.StartRequest(project, "attach to me")).session_id
    # (no spinner: its frames share lines with what the view shows, which is compared line by line below)
    terminal = Terminal.chock(
        home, "attach", session_id, "--daemon", daemon.address, "--progress", "never", cwd=project
    )
    try:
        terminal.wait_for("  Approve?")
        terminal.wait_for("\a")  # the view rings the bell a tick after the session starts to wait
        terminal.type("y\r")
        terminal.wait_for("a.txt")
        daemon.kill()  # the daemon goes away while the session thinks; the session lives on
        terminal.wait_for("the daemon went away")
        daemons.start(socket_path=daemon.socket)
        assert terminal.exit_code(60) == 0
    finally:
        terminal.close()
    events = home.events(session_id)
    assert events[-1]["reason"] == "completed"
    notes = ("Approve?", "(attached to session", "(the daemon went away", "(connected again)")
    plain = [re.sub(r"\x1b\[[0-9;]*m|\x07", "", line) for line in terminal.lines()]  # (styles, the bell)
    shown = [line for line in plain if line.strip() and not line.strip().startswith(notes)]
    assert shown == [line for line in _rendered(events) if line.strip()]  # no gap, no repeat, the same lines


def test_attach_leaves_the_session_running_on_ctrl_c_and_a_typed_line_is_said(home, project, daemon):
    replay_config(home, [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 4"}}]},
        {"text": "Heard you.", "tool_calls": []},
    ])  # fmt: skip
    session_id = daemon.client.call(dp.StartRequest(project, "wait a little")).session_id
    wait_for_event(home, session_id, "tool.call")
    terminal = Terminal.chock(home, "attach", "--daemon", daemon.address, cwd=project)
    try:
        terminal.wait_for("sleep 4")
        terminal.type("and one more thing\r")
        terminal.wait_for("(queued)")
        terminal.type("\x03")
        assert terminal.exit_code() == 0
        assert b"keeps running" in terminal.screen
    finally:
        terminal.close()
    assert json.loads(chock(home, daemon, "sessions", "--json", cwd=project).stdout)["status"] in ("running", "ended")
    wait_for_end(home, session_id, "completed")
    said = [e["text"] for e in home.events(session_id) if e["type"] == "user.message" and e.get("via") == "socket"]
    assert said == ["and one more thing"]


def test_attach_to_an_abandoned_session_says_how_to_take_it_back_and_exits_1(home, project, daemon):
    replay_config(home, BUSY)
    process = terminal_session(home, project, "--yes")
    session_id = new_session(home)
    wait_for_event(home, session_id, "tool.call", lambda e: e["call_id"] == "f1")
    process.kill()
    process.wait(10)
    terminal = Terminal.chock(home, "attach", session_id, "--daemon", daemon.address, cwd=project)
    try:
        assert terminal.exit_code() == 1
    finally:
        terminal.close()
    assert f"chock run --continue {session_id}" in terminal.screen.decode()


def test_every_reader_skips_an_event_type_it_does_not_know(home, project, daemon):
    replay_config(home, [{"text": "Done.", "tool_calls": []}])
    assert home.chock("run", "quick", cwd=project).returncode == 0
    session_id = new_session(home)
    events = home.events(session_id)
    stranger = {"id": len(events) + 1, "at": events[-1]["at"], "type": "from.the.future", "text": "nobody knows me"}
    with open(home.layout.log_path(session_id), "a") as log:
        log.write(json.dumps({**stranger}) + "\n")
    assert fold([*events, stranger]).status(False) == fold(events).status(False)  # the fold
    assert _rendered([stranger]) == []  # the renderer
    terminal = Terminal.chock(home, "attach", session_id, "--daemon", daemon.address, cwd=project)  # attach
    try:
        assert terminal.exit_code() == 0
    finally:
        terminal.close()
    assert b"nobody knows me" not in terminal.screen and b"Done." in terminal.screen


# remove ----------------------------------------------------------------------------------------------------


def test_remove_deletes_an_ended_session_but_never_its_branch_and_refuses_a_running_one(home, project, daemon):
    replay_config(home, [
        {"text": "", "tool_calls": [write("kept.txt", "k")]},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    assert home.chock("run", "--yes", "make a file", cwd=project).returncode == 0
    session_id = new_session(home)
    home.layout.scratchpad_path(session_id).parent.mkdir(parents=True, exist_ok=True)
    home.layout.scratchpad_path(session_id).write_text("notes")
    result = chock(home, daemon, "sessions", "remove", session_id, cwd=project)
    assert result.returncode == 0, result.stderr
    assert not home.layout.session_dir(session_id).exists()
    assert not home.layout.scratchpad_path(session_id).exists()
    assert git_value(project, "show", f"chock/{session_id}:kept.txt") == "k"  # the branch stays
    assert [name for name in os.listdir(home.layout.sessions_dir)] == []  # nothing left half-removed

    replay_config(home, BUSY)
    running = daemon.client.call(dp.StartRequest(project, "keep busy")).session_id
    wait_for_event(home, running, "tool.call")
    busy = chock(home, daemon, "sessions", "remove", running, cwd=project)
    assert busy.returncode != 0 and "running" in busy.stderr
    assert home.layout.log_path(running).exists()


def test_remove_racing_continue_lets_one_win_and_nothing_is_appended_to_a_removed_log(home, project):
    # The continued turn takes a while, so the continue still holds the session when the remove comes: a continue
    # that had already ended would leave the remove free to succeed too, and race nothing.
    replay_config(home, [{"text": "Done.", "tool_calls": []}, {"text": "Done.", "tool_calls": [], "delay": 3}])
    outcomes = set()
    for _ in range(4):
        assert home.chock("run", "quick", cwd=project).returncode == 0
        session_id = home.sessions_by_start()[-1]
        results: dict[str, subprocess.CompletedProcess[str]] = {}

        def run(name, *args, results=results):
            results[name] = home.chock(*args, cwd=project)

        racers = [
            threading.Thread(target=run, args=("remove", "sessions", "remove", session_id)),
            threading.Thread(target=run, args=("continue", "run", "--continue", session_id, "more")),
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(120)
        removed = results["remove"].returncode == 0
        continued = results["continue"].returncode == 0
        assert not (removed and continued), (results["remove"].stderr, results["continue"].stderr)
        if removed:
            assert not home.layout.session_dir(session_id).exists()
            assert results["continue"].returncode == 3, results["continue"].stderr
        else:
            assert home.events(session_id)[-1]["type"] == "session.end"
        outcomes.add("removed" if removed else "continued")
        assert not [name for name in os.listdir(home.layout.sessions_dir) if name.startswith(".removed")]
    assert outcomes  # at least one race ran to an outcome


# over TCP, and only for its own user -------------------------------------------------------------------------


def test_stop_and_say_work_against_a_daemon_on_tcp(home, project, daemons):
    replay_config(home, [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 30"}}]},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    daemon = daemons.start("--host", "127.0.0.1", "--port", "0")
    session_id = daemon.client.call(dp.StartRequest(project, "wait")).session_id
    wait_for_event(home, session_id, "tool.call")
    said = home.chock("say", session_id, "over tcp", "--daemon", daemon.tcp, cwd=project)
    assert said.returncode == 0, said.stderr
    stopped = home.chock("stop", session_id, "--daemon", daemon.tcp, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    events = home.events(session_id)
    assert events[-1]["reason"] == "interrupted"
    assert [e["text"] for e in events if e["type"] == "user.message" and e.get("via") == "socket"] == ["over tcp"]


@pytest.mark.parametrize("kind", ["approval", "handover"])
def test_a_foreign_uid_is_refused_on_every_session_socket(home, project, kind):
    replay_config(home, [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 30"}}]},
        {"text": "Done.", "tool_calls": []},
    ])  # fmt: skip
    process = terminal_session(home, project, "--yes")
    try:
        session_id = new_session(home)
        wait_for_event(home, session_id, "tool.call")
        path = home.layout.session_socket(session_id, kind)
        os.chmod(path, 0o666)  # past the file's mode: the session's own peer check must refuse
        directory = path.parent
        modes = []
        while directory != directory.parent:
            modes.append((directory, directory.stat().st_mode))
            os.chmod(directory, directory.stat().st_mode | 0o011)
            directory = directory.parent
        script = (
            "import socket,sys\n"
            "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'hello chock-session 1\\nstop\\n')\n"
            "s.settimeout(10); print(s.recv(200).decode().strip())\n"
        )
        try:
            result = subprocess.run(
                ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c",
                 script, str(path)], capture_output=True, text=True, timeout=30, cwd="/",
            )  # fmt: skip
        finally:
            for directory, mode in modes:
                os.chmod(directory, mode)
        assert result.stdout.startswith("error forbidden "), (result.stdout, result.stderr)
        assert fold(home.events(session_id)).status(True) == "running"  # not stopped
    finally:
        process.kill()
        process.wait(10)


def test_prune_removes_what_ended_before_the_date_and_with_workspace_a_kept_one_too(home, project):
    replay_config(home, [{"text": "Done.", "tool_calls": []}])
    assert home.chock("run", "finished", cwd=project).returncode == 0
    replay_config(home, [{"text": "", "tool_calls": [write("w.txt", "w")]}])  # then the replay runs out: kept
    assert home.chock("run", "failed", cwd=project).returncode == 1
    ids = os.listdir(home.layout.sessions_dir)
    finished = next(i for i in ids if home.events(i)[-1]["reason"] == "completed")
    failed = next(i for i in ids if i != finished)
    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))

    early = home.chock("sessions", "prune", "--ended-before", "2000-01-01", cwd=project)
    assert early.returncode == 0 and "no session of this project ended before 2000-01-01" in early.stdout
    pruned = home.chock("sessions", "prune", "--ended-before", tomorrow, cwd=project)
    assert pruned.returncode == 0, pruned.stderr
    assert f"removed session {finished}" in pruned.stdout
    assert f"kept session {failed}" in pruned.stdout and "keeps its workspace" in pruned.stdout
    assert sorted(os.listdir(home.layout.sessions_dir)) == [failed]

    again = home.chock("sessions", "prune", "--ended-before", tomorrow, "--with-workspace", cwd=project)
    assert again.returncode == 0 and f"removed session {failed}" in again.stdout, again.stdout + again.stderr
    assert os.listdir(home.layout.sessions_dir) == []
    assert git_value(project, "show", f"chock/{failed}:w.txt") == "w"  # its work went to its branch first
    bad = home.chock("sessions", "prune", "--ended-before", "last tuesday", cwd=project)
    assert bad.returncode == 2 and "is not a date" in bad.stderr  # a usage error


@pytest.mark.parametrize(
    "date",
    ["0001-01-01T00:00+14:00", "9999-12-31T23:59-14:00", "0001-01-01T00:00:00+23:59", "10000-01-01", "2026-13-01"],
)
def test_prune_refuses_a_date_outside_what_utc_can_hold_and_removes_nothing(home, project, date):
    replay_config(home, [{"text": "Done.", "tool_calls": []}])
    assert home.chock("run", "finished", cwd=project).returncode == 0
    bad = home.chock("sessions", "prune", "--ended-before", date, cwd=project)
    assert bad.returncode == 2, bad.stderr
    assert f"--ended-before {date!r} is not a date" in bad.stderr and "between 0001-01-01 and 9999-12-31" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert len(os.listdir(home.layout.sessions_dir)) == 1


def test_prune_before_a_year_of_three_digits_removes_nothing_of_this_millennium(home, project):
    """Year 999 is written 0999: a session that ended in 2026 did not end before it."""
    replay_config(home, [{"text": "Done.", "tool_calls": []}])
    assert home.chock("run", "finished", cwd=project).returncode == 0
    early = home.chock("sessions", "prune", "--ended-before", "0999-06-01", cwd=project)
    assert early.returncode == 0 and "no session of this project ended before 0999-06-01" in early.stdout, early.stdout
    assert len(os.listdir(home.layout.sessions_dir)) == 1
