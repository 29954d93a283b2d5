"""What the target's `chock run --move-in` does with the parts its daemon received (docs/remote.md#moving-a-session):
the log part becomes the session's log by a rename (never a copy), private; a session coming back is checked
after the prefix the target holds, which must match byte for byte; and the fold of that prefix, which reads only
the lines the fold needs, is the fold of every line."""

from __future__ import annotations

import json
import os
import stat

from chock.log.fold import SessionState
from tests.fakes.projects import git_value
from tests.test_move_children import (
    ONE_FILE,
    _ended_session,
    _move,
    _move_in,
    _move_out,
    _receive_log,
    _relay,
    _row,
    _sent_log,
    hosts,  # noqa: F401 - the fixture: two hosts, two clones
)


def test_the_received_log_becomes_the_sessions_log_by_a_rename_and_private(hosts):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    said = _move_out(a, session_id, "hostb")
    into = _relay(a, b, session_id, said)
    sent = (into / "log").read_bytes()
    os.chmod(into / "log", 0o644)  # as a daemon's umask may leave it
    received = os.stat(into / "log")
    b.replay_instance(ONE_FILE)
    taken = _move_in(b, session_id, project_b, "hosta")
    assert taken.returncode == 0, taken.stderr
    held = os.stat(b.layout.log_path(session_id))
    assert (held.st_dev, held.st_ino) == (received.st_dev, received.st_ino)  # the bytes were not copied
    assert stat.S_IMODE(held.st_mode) == 0o600
    assert b.layout.log_path(session_id).read_bytes().startswith(sent)
    assert not (b.layout.state / "moves" / session_id).exists()
    assert _row(b, project_b)["status"] == "ended"


def _coming_back(hosts) -> tuple:  # noqa: F811
    """A session moved A -> B, then moved out of B towards A, its parts received on A: (A, B, project A, id,
    the log A received)."""
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    b.replay_instance(ONE_FILE)
    _move(a, b, session_id, project_b, ("hosta", "hostb"))
    said = _move_out(b, session_id, "hosta")
    into = _relay(b, a, session_id, said)
    _receive_log(into, _sent_log(into))  # the log sent, whole in its first part: what these tests change
    return a, b, project_a, session_id, into / "log"


def test_a_session_coming_back_whose_log_differs_from_the_one_here_is_refused(hosts):  # noqa: F811
    a, _, project_a, session_id, log = _coming_back(hosts)
    before = a.layout.log_path(session_id).read_bytes()
    first, rest = log.read_bytes().split(b"\n", 1)
    assert b"write a file" in first
    log.write_bytes(first.replace(b"write a file", b"write a fill") + b"\n" + rest)  # one byte, still whole JSON
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3 and "the two copies diverged" in refused.stderr, refused.stderr
    assert a.layout.log_path(session_id).read_bytes() == before
    assert _row(a, project_a)["status"] == "moved"


def test_a_session_coming_back_whose_log_differs_from_the_one_here_in_its_last_byte_is_refused(hosts):  # noqa: F811
    a, _, project_a, session_id, log = _coming_back(hosts)
    before = a.layout.log_path(session_id).read_bytes()
    # The prefix is all A held but its move-out span (adopt, moved): the last line before it ends the span A left.
    prefix = b"".join(before.splitlines(keepends=True)[:-2])
    sent = log.read_bytes()
    assert sent.startswith(prefix)
    last = prefix.rindex(b"}")  # its last byte but the newline, changed: still whole JSON
    log.write_bytes(sent[:last] + b" }" + sent[last + 1 :])
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3 and "the two copies diverged" in refused.stderr, refused.stderr
    assert a.layout.log_path(session_id).read_bytes() == before


def test_a_session_coming_back_that_differs_and_fails_a_check_is_refused_for_the_check(hosts):  # noqa: F811
    a, _, project_a, session_id, log = _coming_back(hosts)
    before = a.layout.log_path(session_id).read_bytes()
    first, rest = log.read_bytes().split(b"\n", 1)
    log.write_bytes(first[:-1] + b"\n" + rest)  # its first line no longer JSON, so no prefix of A's either
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3 and "line 1 of the log sent" in refused.stderr, refused.stderr
    assert "is not JSON" in refused.stderr and "diverged" not in refused.stderr
    assert a.layout.log_path(session_id).read_bytes() == before


def test_a_session_coming_back_is_checked_line_by_line_after_the_prefix_here(hosts):  # noqa: F811
    a, _, project_a, session_id, log = _coming_back(hosts)
    before = a.layout.log_path(session_id).read_bytes()
    events = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert len(events) > before.count(b"\n")  # B's lines come after all A holds
    events[-1]["id"] += 1
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3, refused.stderr
    assert f"line {len(events)} of the log sent" in refused.stderr and "a log's ids go 1, 2, 3" in refused.stderr
    assert a.layout.log_path(session_id).read_bytes() == before


def test_a_session_coming_back_takes_the_whole_log_and_carries_its_fold(hosts):  # noqa: F811
    a, _, project_a, session_id, log = _coming_back(hosts)
    sent = log.read_bytes()
    taken = _move_in(a, session_id, project_a, "hostb")
    assert taken.returncode == 0, taken.stderr
    assert a.layout.log_path(session_id).read_bytes().startswith(sent)
    row = _row(a, project_a)
    assert (row["status"], row["project"], row["end_reason"]) == ("ended", str(project_a), "completed")


def test_the_fold_of_the_lines_it_reads_is_the_fold_of_every_line(hosts):  # noqa: F811
    log = _coming_back(hosts)[-1]
    data = log.read_bytes()
    last = json.loads(data.splitlines()[-1])["id"]
    extra = [
        # A type spelled with an escape, as JSON may: read, and folded.
        '{"id": %d, "at": "2026-01-01T00:00:00Z", "type": "\\u0070lan", "steps": [{"step": "s", "status": "done"}]}',
        # A type's name in a text, not its type: read, and changes nothing.
        '{"id": %d, "at": "2026-01-01T00:00:00Z", "type": "assistant.delta", "text": "plan"}',
        '{"id": %d, "at": "2026-01-01T00:00:00Z", "type": "usage", "input_tokens": 7, "output_tokens": 3}',
        '{"id": %d, "at": "2026-01-01T00:00:00Z", "type": "assistant.delta", "text": "skipped"}',
    ]
    data += "".join(line % (last + n) + "\n" for n, line in enumerate(extra, 1)).encode()
    whole, read = SessionState(), SessionState()
    whole.feed(data)
    assert [e["id"] for e in read.feed_folded(data)][-2:] == [last + 2, last + 3]
    slots = [name for cls in type(whole).__mro__ for name in getattr(cls, "__slots__", ())]
    assert {name: getattr(read, name) for name in slots} == {name: getattr(whole, name) for name in slots}
    assert read.plan == [{"step": "s", "status": "done"}] and read.last_event_id == last + 4


def test_a_session_coming_back_with_no_work_done_away_takes_nothing_of_its_bundle(hosts):  # noqa: F811
    a, _, project_a, session_id, log = _coming_back(hosts)
    tip = git_value(project_a, "rev-parse", f"chock/{session_id}")
    bundle = log.parent / "bundle"
    header, pack = bundle.read_bytes().split(b"\n\n", 1)
    assert f"{tip} refs/heads/chock/{session_id}".encode() in header  # the branch here is the one sent
    bundle.write_bytes(header + b"\n\n" + bytes(len(pack)))  # its pack unreadable: git would refuse it
    packs = sorted(os.listdir(project_a / ".git/objects/pack"))
    taken = _move_in(a, session_id, project_a, "hostb")
    assert taken.returncode == 0, taken.stderr
    assert sorted(os.listdir(project_a / ".git/objects/pack")) == packs
    assert git_value(project_a, "rev-parse", f"chock/{session_id}") == tip
    assert not [name for name in os.listdir(project_a / ".git/objects") if name.startswith("incoming-")]


def _coming_back_from(hosts, changed: bool = False) -> tuple:  # noqa: F811
    """A session moved A -> B, then moved out of B towards A told what A keeps of its log (as `move-check` tells
    it), its parts received on A: (A, B, project A, id, the log part A received, the length A keeps). `changed`:
    B's log was changed in a line A keeps before B moved it out."""
    from chock.session.kept_log import kept_of

    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    b.replay_instance(ONE_FILE)
    _move(a, b, session_id, project_b, ("hosta", "hostb"))
    kept = kept_of(a.layout.log_path(session_id))
    assert kept is not None
    if changed:
        held = b.layout.log_path(session_id)
        held.write_bytes(held.read_bytes().replace(b"write a file", b"write a fill", 1))
    out = b.chock("run", "--move-out", session_id, "--to", "hosta", f"--kept={kept.text()}")
    assert out.returncode == 0, out.stderr
    into = _relay(b, a, session_id, json.loads(out.stdout.splitlines()[-1]))
    _receive_log(into, _sent_log(into))  # the log sent, whole in its first part: what these tests change
    return a, b, project_a, session_id, into / "log", kept.length


def test_a_session_coming_back_sends_only_what_its_log_gained_away_and_is_whole_here(hosts):  # noqa: F811
    a, b, project_a, session_id, part, kept = _coming_back_from(hosts)
    here_before = a.layout.log_path(session_id).read_bytes()
    on_b = b.layout.log_path(session_id).read_bytes()
    sent = part.read_bytes()
    assert on_b[:kept] == here_before[:kept]  # what A kept is where B's log begins
    assert on_b.startswith(here_before[:kept] + sent)  # only the rest travelled: B's lines through its handover
    assert json.loads(sent.split(b"\n", 1)[0])["id"] == here_before[:kept].count(b"\n") + 1
    taken = _move_in(a, session_id, project_a, "hostb")
    assert taken.returncode == 0, taken.stderr
    now = a.layout.log_path(session_id).read_bytes()
    assert now.startswith(here_before[:kept] + sent)  # the whole log, then A's adopt and end
    events = [json.loads(line) for line in now.splitlines()]
    assert [event["id"] for event in events] == list(range(1, len(events) + 1))
    assert (a.layout.log_path(session_id).parent / "log.jsonl.moved-1").read_bytes() == here_before
    row = _row(a, project_a)
    assert (row["status"], row["project"], row["end_reason"]) == ("ended", str(project_a), "completed")


def test_a_log_changed_away_in_what_the_target_keeps_is_sent_whole_and_refused_there(hosts):  # noqa: F811
    a, _, project_a, session_id, part, _ = _coming_back_from(hosts, changed=True)
    before = a.layout.log_path(session_id).read_bytes()
    assert json.loads(part.read_bytes().split(b"\n", 1)[0])["id"] == 1  # no prefix of A's: the whole log went
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3 and "the two copies diverged" in refused.stderr, refused.stderr
    assert a.layout.log_path(session_id).read_bytes() == before


def test_what_follows_a_log_a_host_no_longer_keeps_is_refused_and_writes_nothing(hosts):  # noqa: F811
    a, _, project_a, session_id, _, _ = _coming_back_from(hosts)
    removed = a.chock("sessions", "remove", session_id, cwd=project_a)
    assert removed.returncode == 0, removed.stderr
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3 and "it keeps none" in refused.stderr, refused.stderr
    assert not a.layout.session_dir(session_id).exists()


def test_what_follows_the_kept_log_is_checked_line_by_line_once_joined(hosts):  # noqa: F811
    a, _, project_a, session_id, part, kept = _coming_back_from(hosts)
    before = a.layout.log_path(session_id).read_bytes()
    first, rest = part.read_bytes().split(b"\n", 1)
    event = json.loads(first)
    event["id"] += 1  # one line skipped: it no longer continues what A keeps
    part.write_bytes(json.dumps(event).encode() + b"\n" + rest)
    refused = _move_in(a, session_id, project_a, "hostb")
    assert refused.returncode == 3, refused.stderr
    expected = before[:kept].count(b"\n") + 1
    assert f"line {expected} of the log sent" in refused.stderr and "a log's ids go 1, 2, 3" in refused.stderr
    assert a.layout.log_path(session_id).read_bytes() == before


def test_a_log_part_nested_too_deep_to_parse_is_refused_for_its_first_line(hosts):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id = _ended_session(a, project_a)
    into = _relay(a, b, session_id, _move_out(a, session_id, "hostb"))
    (into / "log").write_bytes(b"[" * 200_000 + b"\n")  # within an event's bound; deeper than a parser recurses
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3, refused.stderr
    assert f"line 1 of the log sent for session {session_id} is not JSON" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not b.layout.session_dir(session_id).exists()
