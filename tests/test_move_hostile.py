"""Moving a session in, against a hostile source (docs/remote.md#moving-a-session): parts crafted to break the
target's checks are refused by `chock run --move-in`, and nothing outside the session's own directory and branch
changes. The parts are put where the target's daemon keeps them, as tests/test_move_children.py does."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from chock.log.events import MAX_EVENT_BYTES
from tests.fakes.projects import git, git_value
from tests.test_move_children import (
    ONE_FILE,
    _ended_session,
    _move,
    _move_in,
    _move_out,
    _nothing_written,
    _receive_log,
    _relay,
    _restaged,
    _sent,
    _sent_log,
    hosts,  # noqa: F401 - the fixture: two hosts, two clones
)


def test_a_bundle_with_a_corrupt_object_is_refused_and_leaves_no_branch(hosts):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id, said, _ = _sent(a, project_a)
    # A commit on chock/<id> whose author line git's fsck refuses (its email is not closed).
    tip = git_value(project_a, "rev-parse", f"chock/{session_id}")
    tree = git_value(project_a, "rev-parse", f"{tip}^{{tree}}")
    raw = f"tree {tree}\nparent {tip}\nauthor A <a@b 1 +0000\ncommitter A <a@b> 1 +0000\n\nbad\n"
    bad = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        cwd=project_a, input=raw.encode(), capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    git(project_a, "update-ref", f"refs/heads/chock/{session_id}", bad)
    bundle = a.layout.state / "moves" / session_id / "out" / "bundle"
    git(project_a, "bundle", "create", "-q", str(bundle), f"chock/{session_id}", f"^{said['base']}")
    _restaged(said, bundle)
    _relay(a, b, session_id, said)
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3 and "fails git's object checks" in refused.stderr, refused.stderr
    _nothing_written(b, project_b, session_id)
    missing = subprocess.run(["git", "-C", str(project_b), "cat-file", "-e", bad], capture_output=True)
    assert missing.returncode != 0  # none of its objects got in


def _lines(events: list[dict]) -> list[bytes]:
    return [json.dumps(event).encode() + b"\n" for event in events]


def _assistant_at(events: list[dict]) -> int:
    return next(at for at, event in enumerate(events) if event["type"] == "assistant.message")


def _replace(events: list[dict], at: int, line: bytes) -> list[bytes]:
    lines = _lines(events)
    lines[at] = line
    return lines


def _padded(events: list[dict], size: int) -> list[bytes]:
    """The log with its second event padded so that its line is `size` bytes before its newline."""
    lines = _lines(events)
    short = json.dumps({**events[1], "pad": ""}).encode()
    lines[1] = json.dumps({**events[1], "pad": "x" * (size - len(short))}).encode() + b"\n"
    assert len(lines[1]) == size + 1
    return lines


@pytest.mark.parametrize(
    "tamper, why",
    [
        (lambda events: _replace(events, 1, b"[1, 2]\n"), "line 2 of the log sent for session"),
        (lambda events: _replace(events, 1, b'{"id": 2,\x00 "type": "user.message"}\n'), "is not JSON"),
        (lambda events: _replace(events, 1, b'{"id": 2, "type": "user.message", "text": "\xff"}\n'), "is not JSON"),
        (lambda events: _padded(events, MAX_EVENT_BYTES + 1), "longer than"),
        (lambda events: _replace(events, 0, json.dumps({k: v for k, v in events[0].items() if k != "session"})
                                 .encode() + b"\n"), "names the session None"),
        (lambda events: [*_lines(events)[:-1], _lines(events)[-1][:-1]], "not a whole line"),
        (lambda events: _replace(events, _assistant_at(events),
                                 json.dumps({**events[_assistant_at(events)], "tool_calls": 5}).encode() + b"\n"),
         "tool_calls"),
        (lambda events: _replace(events, _assistant_at(events), json.dumps(
            {**events[_assistant_at(events)], "tool_calls": [{"call_id": "c9", "name": "x", "args": [1]}]}
        ).encode() + b"\n"), "tool_calls"),
    ],
)  # fmt: skip
def test_a_hostile_incoming_log_is_refused_by_line_and_nothing_is_written(hosts, tamper, why):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id, said, events = _sent(a, project_a)
    into = _relay(a, b, session_id, said)
    _receive_log(into, b"".join(tamper(events)))
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3 and why in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    _nothing_written(b, project_b, session_id)


def test_a_line_of_exactly_the_event_bound_is_taken(hosts):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id, said, events = _sent(a, project_a)
    into = _relay(a, b, session_id, said)
    _receive_log(into, b"".join(_padded(events, MAX_EVENT_BYTES)))
    b.replay_instance(ONE_FILE)
    taken = _move_in(b, session_id, project_b, "hosta")
    assert taken.returncode == 0, taken.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "--continue", "{id}"),
        ("approve", "{id}"),
        ("detach", "{id}"),
    ],
)
def test_every_verb_on_the_source_of_a_moved_session_names_where_it_went(hosts, argv):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    b.replay_instance(ONE_FILE)
    _move(a, b, session_id, project_b, ("hosta", "hostb"))
    done = a.chock(*(word.format(id=session_id) for word in argv), cwd=project_a)
    assert done.returncode != 0 and "hostb" in done.stderr, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("say", "{id}", "more", "--daemon", "{address}"),
        ("move", "{id}", "--to", "elsewhere", "--project", "/tmp", "--daemon", "{address}"),
        ("attach", "{id}", "--daemon", "{address}"),
        ("stop", "{id}", "--daemon", "{address}"),
    ],
)
def test_every_daemon_verb_on_the_source_of_a_moved_session_names_where_it_went(home, project, daemon, argv):
    session_id = _ended_session(home, project)
    _move_out(home, session_id, "hostb")
    assert home.chock("run", "--moved", session_id, "--to", "hostb").returncode == 0
    done = home.chock(*(word.format(id=session_id, address=daemon.address) for word in argv), cwd=project)
    assert done.returncode != 0 and "hostb" in done.stderr, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert home.events(session_id)[-1]["reason"] == "moved"  # nothing was carried on


def test_what_a_move_in_cut_before_its_adopt_left_is_replaced_by_the_next_move(hosts):  # noqa: F811
    """kill -9 of the target's child between writing the log and its adopt leaves the log as sent (ending with the
    source's handover to this host), the branch and a worktree no event names: the next move takes their place."""
    a, b, project_a, project_b = hosts
    session_id, said, _ = _sent(a, project_a)
    b.replay_instance(ONE_FILE)
    sent = _sent_log(_relay(a, b, session_id, said))
    assert _move_in(b, session_id, project_b, "hosta").returncode == 0
    b.layout.log_path(session_id).write_bytes(sent)  # as the child left it, killed before its adopt
    leftover = b.layout.workspace_dir(session_id)
    git(project_b, "worktree", "add", "-q", "--detach", str(leftover), said["base"])
    _relay(a, b, session_id, said)
    again = _move_in(b, session_id, project_b, "hosta")
    assert again.returncode == 0, again.stderr
    events = [json.loads(line) for line in b.layout.log_path(session_id).read_bytes().splitlines()]
    assert [e["type"] for e in events[-2:]] == ["session.adopt", "session.end"]
    assert events[-2]["id"] == len(sent.splitlines()) + 1  # the sent log, then this move's own span
    assert not leftover.exists()


def test_sessions_remove_removes_a_moved_sessions_history_on_its_source(hosts):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    b.replay_instance(ONE_FILE)
    _move(a, b, session_id, project_b, ("hosta", "hostb"))
    removed = a.chock("sessions", "remove", session_id, cwd=project_a)
    assert removed.returncode == 0, removed.stderr
    assert not a.layout.session_dir(session_id).exists()
    assert b.layout.log_path(session_id).exists()


def _cut_naming(a, b, project_a, project_b, victim: Path, machine: str) -> tuple[str, dict, bytes]:
    """A move-in cut before its adopt, of a source's log naming `victim` (a directory of the target's) as its kept
    worktree — its workspace.open with no machine id (`none`) or this very machine's (`this`: the test's two
    hosts share one) — and the target's own project as the session's: that log, wholly the source's, is all the
    target holds of the session. The session, what was said of its parts, and that log."""
    victim.mkdir()
    (victim / "thesis.txt").write_text("years of work\n")
    session_id, said, events = _sent(a, project_a)
    events = [event for event in events if event["type"] != "workspace.close"]  # so it looks kept
    for event in events:
        if event["type"] == "session.start":
            event["project"] = str(project_b)
        if event["type"] == "workspace.open":
            event.update(directory=str(victim), admin="")
            if machine == "none":
                del event["machine_id"]
    sent = b"".join(_lines([{**event, "id": number} for number, event in enumerate(events, 1)]))
    _receive_log(_relay(a, b, session_id, said), sent)
    b.replay_instance(ONE_FILE)
    assert _move_in(b, session_id, project_b, "hosta").returncode == 0
    b.layout.log_path(session_id).write_bytes(sent)  # as the child left it, killed before its adopt
    return session_id, said, sent


@pytest.mark.parametrize("machine", ["none", "this"])
def test_the_next_move_deletes_no_directory_a_cut_move_ins_log_names(hosts, tmp_path, machine):  # noqa: F811
    a, b, project_a, project_b = hosts
    victim = tmp_path / "victim-documents"
    session_id, said, sent = _cut_naming(a, b, project_a, project_b, victim, machine)
    leftover = b.layout.workspace_dir(session_id)  # what the cut move-in made: the next move removes it
    git(project_b, "worktree", "add", "-q", "--detach", str(leftover), said["base"])
    _receive_log(_relay(a, b, session_id, said), sent)  # the move again
    again = _move_in(b, session_id, project_b, "hosta")
    assert again.returncode == 0, again.stderr
    assert (victim / "thesis.txt").read_text() == "years of work\n"
    assert not leftover.exists()


@pytest.mark.parametrize("machine", ["none", "this"])
def test_workspace_remove_deletes_no_directory_a_cut_move_ins_log_names(hosts, tmp_path, machine):  # noqa: F811
    a, b, project_a, project_b = hosts
    victim = tmp_path / "victim-documents"
    session_id, _, _ = _cut_naming(a, b, project_a, project_b, victim, machine)
    removed = b.chock("workspace", "remove", session_id, cwd=project_b)
    assert removed.returncode == 3, removed.stdout
    said_why = "keeps no workspace" if machine == "none" else f"{victim} is not where Chock makes the worktree"
    assert said_why in removed.stderr, removed.stderr
    assert (victim / "thesis.txt").read_text() == "years of work\n"
    assert git(project_b, "branch", "--list", f"chock/{session_id}")  # the branch the move brought, untouched
    assert "kept from session" not in git(project_b, "log", "-1", "--format=%s", f"chock/{session_id}")


def _object(project: Path, kind: str, data: bytes) -> str:
    written = subprocess.run(
        ["git", "hash-object", "-t", kind, "-w", "--stdin"], cwd=project, input=data, capture_output=True, check=True
    )
    return written.stdout.decode().strip()


def _tree(project: Path, entries: list[tuple[str, str, str]]) -> str:
    listed = "".join(f"{mode} {'tree' if mode == '40000' else 'blob'} {oid}\t{name}\n" for mode, oid, name in entries)
    return (
        subprocess.run(["git", "mktree"], cwd=project, input=listed.encode(), capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )


def _bomb(project: Path, parent: str, levels: int, fan: int, blob_bytes: int) -> str:
    """A commit on `parent` whose tree holds fan**levels copies of one blob: a few kilobytes of objects."""
    tree = _tree(project, [("100644", _object(project, "blob", b"\0" * blob_bytes), f"f{i}") for i in range(fan)])
    for _ in range(levels - 1):
        tree = _tree(project, [("40000", tree, f"d{i}") for i in range(fan)])
    raw = f"tree {tree}\nparent {parent}\nauthor A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000\n\nbomb\n"
    return _object(project, "commit", raw.encode())


@pytest.mark.parametrize(
    "levels, fan, blob_bytes, why",
    [
        (3, 16, 4 * 1024 * 1024, "bytes"),  # 4,096 files of 4 MiB: 16 GiB
        (5, 16, 0, "entries"),  # a million empty files
    ],
)
def test_a_bundle_whose_work_would_check_out_far_more_than_it_holds_is_refused(hosts, levels, fan, blob_bytes, why):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id, said, events = _sent(a, project_a)
    bomb = _bomb(project_a, said["base"], levels, fan, blob_bytes)
    git(project_a, "update-ref", f"refs/heads/chock/{session_id}", bomb)
    bundle = a.layout.state / "moves" / session_id / "out" / "bundle"
    git(project_a, "bundle", "create", "-q", str(bundle), f"chock/{session_id}", f"^{said['base']}")
    assert bundle.stat().st_size < 1024 * 1024
    _restaged(said, bundle)
    _relay(a, b, session_id, said)
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3, refused.stderr
    assert "would check out more than" in refused.stderr and f" {why}" in refused.stderr, refused.stderr
    assert "nothing was written" in refused.stderr
    _nothing_written(b, project_b, session_id)
    # Its objects stay in the repository once taken: the next move names that commit as its base, with no bundle.
    assert subprocess.run(["git", "-C", str(project_b), "cat-file", "-e", bomb]).returncode == 0
    for event in events:
        if event["type"] == "workspace.open":
            event.update(base=bomb, commit=bomb)
    bundle.write_bytes(b"")
    _restaged(said, bundle)
    shutil.rmtree(b.layout.state / "moves" / session_id)
    _receive_log(_relay(a, b, session_id, said), b"".join(_lines(events)))
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3 and "would check out more than" in refused.stderr, refused.stderr
    _nothing_written(b, project_b, session_id)
