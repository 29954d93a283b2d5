"""Moving a session: the `chock` children that do the work on each side (docs/remote.md#moving-a-session),
driven directly with two hosts on this machine — two Chock homes (state, data, config) and two clones of one
repository. What the daemons do between them (relay the parts, check their digests) is done here by hand."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chock.control import parts
from tests.conftest import Home, isolated_home
from tests.fakes.move_parts import pieces_said
from tests.fakes.projects import git, git_value, make_project
from tests.fakes.sessions import replayed_terminal_session, wait_for_event

ONE_FILE = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "Wrote it.", "tool_calls": []},
]  # fmt: skip

# The second model call waits, so the move's handover is answered at the boundary after it.
SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "", "delay": 10,  # the window the move asks in: wide enough for a loaded machine
     "tool_calls": [{"call_id": "c2", "name": "write_file", "args": {"path": "b.txt", "content": "B"}}]},
    {"text": "Both written.", "tool_calls": []},
]  # fmt: skip


@pytest.fixture
def hosts(tmp_path, monkeypatch) -> tuple[Home, Home, Path, Path]:
    """Host A and host B: each its own Chock home and its own clone of one project."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = isolated_home(tmp_path / "a", monkeypatch)
    b = isolated_home(tmp_path / "b", monkeypatch)
    project_a = make_project(tmp_path / "a" / "project")
    subprocess.run(["git", "clone", "-q", str(project_a), str(tmp_path / "b" / "project")], check=True)
    return a, b, project_a, (tmp_path / "b" / "project").resolve()


def _ended_session(home: Home, project: Path, entries: list[dict] = ONE_FILE) -> str:
    home.replay_instance(entries)
    done = home.chock("run", "--yes", "write a file", cwd=project)
    assert done.returncode == 0, done.stderr
    return home.only_session()


def _move_out(home: Home, session_id: str, to: str) -> dict:
    out = home.chock("run", "--move-out", session_id, "--to", to)
    assert out.returncode == 0, out.stderr
    *staged, said = map(json.loads, out.stdout.splitlines())
    # The log and each piece of the bundle said as soon as it was staged, as the parts say it at the end.
    listed = {part["part"]: part for part in said["parts"]}
    pieces = [name for name in listed if parts.piece_index(name) is not None]
    announced = [line["staged"]["part"] for line in staged]
    assert sorted(announced) == sorted(["log", *pieces]) and [name for name in announced if name != "log"] == pieces
    assert all(line["staged"] == listed[line["staged"]["part"]] for line in staged)
    return said


def _restaged(said: dict, bundle: Path) -> None:
    """`said` naming the pieces of `bundle` (written in place of the one staged) as the child would have."""
    said["parts"][3:] = pieces_said(bundle.read_bytes())


def _relay(source: Home, target: Home, session_id: str, said: dict) -> Path:
    """What the daemons do between step 1 and step 2: each part, checked against its digest, into the target's
    `moves/<id>/in/` (the bundle's pieces joined)."""
    out = source.layout.state / "moves" / session_id / "out"
    into = target.layout.state / "moves" / session_id / "in"
    into.mkdir(parents=True)
    for part in said["parts"]:
        index = parts.piece_index(part["part"])
        data = (out / parts.kind(part["part"])).read_bytes()
        if index is not None:
            data = data[index * parts.PIECE : index * parts.PIECE + part["length"]]
        assert (len(data), hashlib.sha256(data).hexdigest()) == (part["length"], part["sha256"])
        with open(into / parts.kind(part["part"]), "ab") as joined:
            joined.write(data)
    return into


def _sent_log(into: Path) -> bytes:
    """The log sent, as the target joins its parts: the log as the source took it, then its end."""
    return (into / "log").read_bytes() + (into / "log-end").read_bytes()


def _receive_log(into: Path, data: bytes) -> None:
    """`data` received as the whole log sent (a source that tampered with it): all in its first part, no end."""
    (into / "log").write_bytes(data)
    (into / "log-end").write_bytes(b"")


def _move_in(home: Home, session_id: str, project: Path, source: str, *extra: str) -> subprocess.CompletedProcess:
    return home.chock("run", "--move-in", session_id, "--project", str(project), "--from", source, *extra)


def _move(source: Home, target: Home, session_id: str, project: Path, names: tuple[str, str]) -> dict:
    """The three steps, as the client orders them: out, in (its answer), then moved on the source."""
    said = _move_out(source, session_id, names[1])
    _relay(source, target, session_id, said)
    taken = _move_in(target, session_id, project, names[0], *(["--running"] if said["was_running"] else []))
    assert taken.returncode == 0, taken.stderr
    assert json.loads(taken.stdout.splitlines()[0])["adopted"] > 0
    moved = source.chock("run", "--moved", session_id, "--to", names[1])
    assert moved.returncode == 0, moved.stderr
    return said


def _row(home: Home, project: Path) -> dict:
    listed = home.chock("sessions", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout.splitlines()[-1])


def test_an_ended_session_moves_with_its_log_and_branch_and_stays_ended_there(hosts):
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    sent = _move_out(a, session_id, "hostb")
    assert [p["part"] for p in sent["parts"]] == ["log", "log-end", "scratchpad", "bundle.0"]
    assert sent["was_running"] is False and sent["session"] == session_id
    assert sent["base"] == git_value(project_a, "rev-parse", "main")
    out = a.layout.state / "moves" / session_id / "out"
    sent_log = (out / "log").read_bytes() + (out / "log-end").read_bytes()
    assert sent_log == a.layout.log_path(session_id).read_bytes()
    ending = [json.loads(line) for line in (out / "log-end").read_bytes().splitlines()]
    assert [e["type"] for e in ending] == ["session.adopt", "session.end"]
    assert ending[1]["reason"] == "handover" and ending[1]["to"] == "hostb"

    _relay(a, b, session_id, sent)
    b.replay_instance(ONE_FILE)
    taken = _move_in(b, session_id, project_b, "hosta")
    assert taken.returncode == 0, taken.stderr
    adopted = json.loads(taken.stdout.splitlines()[0])["adopted"]
    held = b.layout.log_path(session_id).read_bytes()
    assert held.startswith(sent_log)
    after = [json.loads(line) for line in held[len(sent_log) :].splitlines()]
    assert [e["type"] for e in after] == ["session.adopt", "session.end"]
    assert after[0]["id"] == adopted and after[0]["from"] == "hosta" and after[0]["project"] == str(project_b)
    assert after[1]["reason"] == "completed"  # ended there, so ended here as it was
    assert git(project_b, "show", f"chock/{session_id}:a.txt") == "A"
    row = _row(b, project_b)
    assert (row["id"], row["status"], row["project"]) == (session_id, "ended", str(project_b))

    moved = a.chock("run", "--moved", session_id, "--to", "hostb")
    assert moved.returncode == 0, moved.stderr
    row = _row(a, project_a)
    assert (row["status"], row["end_reason"], row["end_to"]) == ("moved", "moved", "hostb")
    assert "moved to hostb" in a.chock("sessions", cwd=project_a).stdout
    again = a.chock("run", "--continue", session_id, "more", cwd=project_a)
    assert again.returncode == 3 and "moved to hostb" in again.stderr
    again = a.chock("run", "--move-out", session_id, "--to", "hostc")
    assert again.returncode == 3 and "moved to hostb" in again.stderr
    assert a.chock("sessions", "remove", session_id, cwd=project_a).returncode == 0
    assert not a.layout.session_dir(session_id).exists()


def test_the_sources_steps_start_without_click_and_refuse_as_chock_run_does(hosts):
    a, _, project_a, _ = hosts
    session_id = _ended_session(a, project_a)
    # A move waits on each of these children's start: they are read without click (docs/architecture.md#start-up).
    for step in (["--move-out", session_id, "--to", "hostb"], ["--moved", session_id, "--to", "hostb"]):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-P", "-m", "chock", "run", *step], capture_output=True, text=True,
            env=a.env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "import time:" in line}
        assert "chock.session.moving" in imported and "click" not in imported, step
    # What the fast path does not take plainly is click's, which explains it.
    odd = a.chock("run", "--moved", session_id, "--to", "hostb", "--bogus")
    assert odd.returncode == 2 and "No such option '--bogus'" in odd.stderr
    unknown = a.chock("run", "--moved", "20261206-114500-a1b2c3", "--to", "hostb")
    assert unknown.returncode == 3 and "there is no session 20261206-114500-a1b2c3" in unknown.stderr


def test_a_running_session_hands_over_at_its_turn_boundary_and_finishes_on_the_target(hosts):
    a, b, project_a, project_b = hosts
    process, session_id = replayed_terminal_session(a, project_a, SLOW)
    wait_for_event(a, session_id, "tool.result", lambda e: e["call_id"] == "c1")  # waits in the slow model call
    sent = _move_out(a, session_id, "hostb")
    assert process.wait(30) == 8  # handed over at the boundary
    assert sent["was_running"] is True
    sent_log = a.layout.log_path(session_id).read_bytes()
    b.replay_instance(SLOW)
    _relay(a, b, session_id, sent)
    taken = _move_in(b, session_id, project_b, "hosta", "--running")
    assert taken.returncode == 0, taken.stderr  # it carried on there, to its end
    held = b.layout.log_path(session_id).read_bytes()
    assert held.startswith(sent_log)
    after = [json.loads(line) for line in held[len(sent_log) :].splitlines()]
    assert [e["type"] for e in after[:2]] == ["session.adopt", "workspace.open"]
    assert after[1]["directory"] == str(b.layout.workspace_dir(session_id))
    assert after[-1]["type"] == "session.end" and after[-1]["reason"] == "completed"
    # a.txt and b.txt were uncommitted in A's worktree when it handed over: both travelled
    assert git(project_b, "show", f"chock/{session_id}:a.txt") == "A"
    assert git(project_b, "show", f"chock/{session_id}:b.txt") == "B"
    assert [e["text"] for e in after if e["type"] == "assistant.message"] == ["Both written."]

    assert a.chock("run", "--moved", session_id, "--to", "hostb").returncode == 0
    assert not a.layout.workspace_dir(session_id).exists()
    again = a.chock("run", "--continue", session_id, "more", cwd=project_a)
    assert again.returncode == 3 and "moved to hostb" in again.stderr


def test_a_session_taken_before_the_answer_is_known_is_refused_unless_forced(hosts):
    a, _b, project_a, _ = hosts
    session_id = _ended_session(a, project_a)
    _move_out(a, session_id, "hostb")
    again = a.chock("run", "--continue", session_id, "more", cwd=project_a)
    assert again.returncode == 3
    assert "moved out to hostb" in again.stderr and "--force" in again.stderr
    assert a.chock("run", "--move-out", session_id, "--to", "hostc").returncode == 3  # hostb may hold it


def test_a_session_that_comes_back_keeps_its_old_log_and_tells_the_whole_story(hosts):
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    b.replay_instance(ONE_FILE)
    _move(a, b, session_id, project_b, ("hosta", "hostb"))
    old = a.layout.log_path(session_id).read_bytes()
    _move(b, a, session_id, project_a, ("hostb", "hosta"))
    assert a.layout.session_dir(session_id).joinpath("log.jsonl.moved-1").read_bytes() == old
    events = a.events(session_id)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    moves = [(e.get("from"), e.get("to")) for e in events if e.get("via") == "move" or e.get("to")]
    assert ("hosta", None) in moves and ("hostb", None) in moves
    assert _row(a, project_a)["status"] == "ended"
    assert _row(b, project_b)["status"] == "moved"
    assert git(project_a, "show", f"chock/{session_id}:a.txt") == "A"


def _sent(a: Home, project_a: Path) -> tuple[str, dict, list[dict]]:
    session_id = _ended_session(a, project_a)
    said = _move_out(a, session_id, "hostb")
    log = _sent_log(a.layout.state / "moves" / session_id / "out")
    return session_id, said, [json.loads(line) for line in log.splitlines()]


def _nothing_written(b: Home, project_b: Path, session_id: str) -> None:
    assert not b.layout.session_dir(session_id).exists()
    assert git(project_b, "branch", "--list", f"chock/{session_id}") == ""
    assert not b.layout.workspace_dir(session_id).exists()


@pytest.mark.parametrize(
    "tamper, why",
    [
        (lambda events, sid: events.insert(2, events.pop(3)), "a log's ids go 1, 2, 3"),
        (lambda events, sid: events[0].update(session="20260101-000000-0a0b0c"), "names the session"),
        (lambda events, sid: events[1].update(text="x" * (2 * 1024 * 1024)), "longer than"),
        (lambda events, sid: events.pop(), "does not end with its source's handover"),
    ],
)
def test_a_malformed_incoming_log_is_refused_and_nothing_is_written(hosts, tamper, why):
    a, b, project_a, project_b = hosts
    session_id, said, events = _sent(a, project_a)
    tamper(events, session_id)
    into = _relay(a, b, session_id, said)
    _receive_log(into, "".join(json.dumps(e) + "\n" for e in events).encode())
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3 and why in refused.stderr
    _nothing_written(b, project_b, session_id)


def test_paths_in_an_incoming_log_change_nothing_outside_the_session(hosts):
    a, b, project_a, project_b = hosts
    session_id, said, events = _sent(a, project_a)
    victim = b.root / ".ssh"
    victim.mkdir()
    (victim / "id_ed25519").write_text("secret")
    other = b.layout.session_dir("20260101-000000-0a0b0c")
    other.mkdir(parents=True)
    (other / "log.jsonl").write_text("{}\n")
    events[0]["project"] = str(victim)
    opened = next(e for e in events if e["type"] == "workspace.open")
    close = events.index(next(e for e in events if e["type"] == "workspace.close"))
    del events[close]  # so the workspace looks kept, in b's own .ssh
    for e in events:
        if e["type"] == "workspace.open":
            e.update(directory=str(victim), admin=str(other))
    events = [{**e, "id": number} for number, e in enumerate(events, 1)]
    assert opened["machine_id"]  # this machine's id: the test's two hosts share one
    into = _relay(a, b, session_id, said)
    _receive_log(into, "".join(json.dumps(e) + "\n" for e in events).encode())
    b.replay_instance(ONE_FILE)
    taken = _move_in(b, session_id, project_b, "hosta")
    assert taken.returncode == 0, taken.stderr
    row = _row(b, project_b)
    assert row["project"] == str(project_b) and row["workspace_kept"] is False
    removed = b.chock("sessions", "remove", "--with-workspace", session_id, cwd=project_b)
    assert removed.returncode == 0, removed.stderr
    assert (victim / "id_ed25519").read_text() == "secret"
    assert (other / "log.jsonl").read_text() == "{}\n"


def test_a_bundle_with_other_refs_touches_none_of_them(hosts):
    a, b, project_a, project_b = hosts
    session_id, said, _ = _sent(a, project_a)
    # A bundle that also carries a main rewritten and a tag: only chock/<id> is taken from it.
    (project_a / "README.md").write_text("# rewritten\n")
    git(project_a, "commit", "-q", "-am", "rewrite")
    git(project_a, "tag", "v9")
    bundle = a.layout.state / "moves" / session_id / "out" / "bundle"
    git(project_a, "bundle", "create", "-q", str(bundle), f"chock/{session_id}", "main", "v9")
    _restaged(said, bundle)
    main_before = git_value(project_b, "rev-parse", "main")
    _relay(a, b, session_id, said)
    b.replay_instance(ONE_FILE)
    taken = _move_in(b, session_id, project_b, "hosta")
    assert taken.returncode == 0, taken.stderr
    assert git_value(project_b, "rev-parse", "main") == main_before
    assert git(project_b, "tag", "--list") == ""
    refs = git(project_b, "for-each-ref", "--format=%(refname)").split()
    assert sorted(r for r in refs if not r.startswith("refs/remotes/")) == [
        f"refs/heads/chock/{session_id}",
        "refs/heads/main",
    ]
    assert git(project_b, "show", f"chock/{session_id}:a.txt") == "A"


def test_a_project_without_the_base_commit_refuses_before_anything_is_written(hosts, tmp_path):
    a, b, project_a, _ = hosts
    session_id, said, _ = _sent(a, project_a)
    elsewhere = make_project(tmp_path / "b" / "unrelated", {"other.txt": "x\n"})
    _relay(a, b, session_id, said)
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, elsewhere, "hosta")
    assert refused.returncode == 3 and said["base"] in refused.stderr
    _nothing_written(b, elsewhere, session_id)
    assert not b.layout.scratchpad_path(session_id).exists()


def test_a_target_lacking_the_instance_refuses_naming_it(hosts):
    a, b, project_a, project_b = hosts
    session_id, said, _ = _sent(a, project_a)
    _relay(a, b, session_id, said)
    shutil.rmtree(b.layout.config.parent, ignore_errors=True)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3 and "demo" in refused.stderr, refused.stderr
    _nothing_written(b, project_b, session_id)


def test_a_moved_session_refuses_say_through_the_daemon_naming_where_it_went(home, project, daemon):
    session_id = _ended_session(home, project)
    _move_out(home, session_id, "hostb")
    assert home.chock("run", "--moved", session_id, "--to", "hostb").returncode == 0
    said = home.chock("say", session_id, "more", "--daemon", daemon.address, cwd=project)
    assert said.returncode != 0 and "moved to hostb" in said.stderr, said.stderr
    assert home.events(session_id)[-1]["reason"] == "moved"  # nothing was carried on


def test_a_failure_before_the_commit_point_removes_what_the_target_wrote(hosts):
    a, b, project_a, project_b = hosts
    process, session_id = replayed_terminal_session(a, project_a, SLOW)
    wait_for_event(a, session_id, "tool.result", lambda e: e["call_id"] == "c1")
    sent = _move_out(a, session_id, "hostb")
    assert process.wait(30) == 8
    _relay(a, b, session_id, sent)
    b.replay_instance(SLOW)
    b.layout.workspace_dir(session_id).mkdir(parents=True)  # in the way of its worktree: the last write fails
    refused = _move_in(b, session_id, project_b, "hosta", "--running")
    assert refused.returncode == 3 and "in the way" in refused.stderr, refused.stderr
    assert not b.layout.session_dir(session_id).exists()
    assert git(project_b, "branch", "--list", f"chock/{session_id}") == ""  # the branch it made is gone
    assert not b.layout.scratchpad_path(session_id).exists()
    # the source is handed over to nobody yet: asked, b cannot say it does not hold it, so --force takes it back
    taken = a.chock("run", "--continue", session_id, "--force", cwd=project_a)
    assert taken.returncode == 0, taken.stderr
    assert "two copies now diverge" in taken.stderr
    assert git(project_a, "show", f"chock/{session_id}:b.txt") == "B"


def test_the_fold_takes_nothing_of_the_source_but_its_base_once_a_move_brings_a_session_here():
    from chock.log.fold import fold
    from chock.platform.host import machine_id

    here = machine_id()
    base = "a" * 40
    events = [
        {"id": 1, "type": "session.start", "session": "s", "project": "/home/me/.ssh"},
        {"id": 2, "type": "workspace.open", "directory": "/home/me/.ssh", "admin": "/x", "commit": base,
         "base": base, "machine_id": here},
        {"id": 3, "type": "approval.answer", "request_id": "r1", "answer": "yes", "scope": "session", "rule": "rm *"},
        {"id": 4, "type": "session.end", "reason": "handover", "to": "b"},
    ]  # fmt: skip
    assert fold(events).session_rules and fold(events).workspace == "/home/me/.ssh"
    adopt = {"id": 5, "type": "session.adopt", "via": "move", "from": "a", "project": "/srv/project"}
    state = fold([*events, adopt])
    assert (state.project, state.workspace, state.workspace_admin) == ("/srv/project", "", "")
    assert state.workspace_base == base
    assert state.session_rules == [] and not state.workspace_kept
    elsewhere = {"id": 6, "type": "workspace.open", "directory": "/elsewhere", "commit": base, "machine_id": "other"}
    unmarked = {"id": 7, "type": "workspace.open", "directory": "/unmarked", "commit": base}
    assert fold([*events, adopt, elsewhere, unmarked]).workspace == ""  # neither is this machine's
    mine = {"id": 8, "type": "workspace.open", "directory": "/mine", "commit": base, "machine_id": here}
    assert fold([*events, adopt, elsewhere, mine]).workspace == "/mine"
    assert fold([*events[:2], {**elsewhere, "id": 3}]).workspace == "/home/me/.ssh"  # never another machine's


def test_a_workspace_naming_no_machine_is_forgotten_once_a_move_is_in_the_log():
    """A workspace.open with no machine id (a log older than them) is this machine's only while no move is in the
    log: a log a move-in cut before its adopt is wholly the source's, and its paths name nothing here."""
    from chock.log.fold import fold

    base = "a" * 40
    events = [
        {"id": 1, "type": "session.start", "session": "s", "project": "/srv/project"},
        {"id": 2, "type": "workspace.open", "directory": "/home/me/thesis", "commit": base, "base": base},
    ]
    assert fold([*events, {"id": 3, "type": "session.end", "reason": "error"}]).workspace_kept
    assert fold([*events, {"id": 3, "type": "session.end", "reason": "handover"}]).workspace_kept  # chock detach
    for move in (
        {"id": 3, "type": "session.end", "reason": "handover", "to": "b"},
        {"id": 3, "type": "session.adopt", "via": "move"},
        {"id": 3, "type": "session.end", "reason": "moved", "to": "b"},
    ):
        state = fold([*events, move])
        assert (state.workspace, state.workspace_admin, state.workspace_kept) == ("", "", False), move
        assert state.workspace_base == base
        again = {"id": 4, "type": "workspace.open", "directory": "/home/me/thesis", "commit": base}
        assert fold([*events, move, again]).workspace == ""


def test_taking_back_a_session_moved_out_asks_the_target_first(home, project, daemons, tmp_path):
    entries = [*ONE_FILE, {"text": "More done.", "tool_calls": []}]
    session_id = _ended_session(home, project, entries)
    _move_out(home, session_id, "hostb")
    there = tmp_path / "hostb-state"
    hostb = daemons.start(env={"CHOCK_STATE_DIR": str(there)})
    home.write_config(
        '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } }, '
        f'.connections = .{{ .hostb = "{hostb.address}" }} }}\n'
    )
    (there / "sessions" / session_id).mkdir(parents=True)
    sent = home.layout.log_path(session_id).read_bytes()
    # hostb adopted it (the log as sent alone, held by nobody, would be a move-in's leftover: no session it holds)
    last = len(sent.splitlines())
    adopted = [
        {"id": last + 1, "at": "2026-12-06T12:00:00.000Z", "type": "session.adopt", "session": session_id,
         "via": "move", "from": "hosta", "project": str(project)},
        {"id": last + 2, "at": "2026-12-06T12:00:01.000Z", "type": "session.end", "reason": "completed"},
    ]  # fmt: skip
    (there / "sessions" / session_id / "log.jsonl").write_bytes(
        sent + b"".join(json.dumps(event).encode() + b"\n" for event in adopted)
    )
    held = home.chock("run", "--continue", session_id, "more", cwd=project)
    assert held.returncode == 3 and "hostb holds it" in held.stderr, held.stderr
    shutil.rmtree(there / "sessions" / session_id)  # hostb does not hold it (its step 2 was undone)
    taken = home.chock("run", "--continue", session_id, "more", cwd=project)
    assert taken.returncode == 0, taken.stderr
    assert home.events(session_id)[-1]["reason"] == "completed"
