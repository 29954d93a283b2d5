"""Moving a session between hosts, the wire (docs/protocol.md#moving-a-session): the verbs against two real daemons
on this machine (two state dirs), the bytes after `receive`'s request read under the connection's own bounds and
deadlines, and what `chock move` says of an older daemon.

The codec's part is driven with plain bytes and an explicit clock; the rest with real daemons, real sockets and
real git. The children that do a move's work (`chock run --move-out`, `--move-in`, `--moved`) are
tests/test_move_children.py's.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import itertools
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control import move_protocol as mp
from chock.control import parts
from chock.control.client import ControlClient
from chock.control.connection import END_OF_BODY, NEED_DATA, ClientConnection, Data, ServerConnection
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.greeting import Greeted
from chock.log.reader import owner_alive
from tests.conftest import Home
from tests.fakes.daemon import Daemon, short_dir
from tests.fakes.move_parts import bundle_pieces, pieces_said
from tests.fakes.old_daemon import old_daemon
from tests.fakes.projects import git_value, make_project
from tests.fakes.sessions import replay_config
from tests.fakes.wait import wait_until

SESSION = "20261206-114500-a1b2c3"
LOG = b'{"id": 1, "type": "session.start"}\n'
LOG_END = b'{"id": 2, "type": "session.end", "reason": "handover"}\n'
DONE = [{"text": "Done.", "tool_calls": []}] * 6


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wire(part: str, data: bytes) -> bytes:
    return b"".join(parts.encode_chunks(part, io.BytesIO(data).read, len(data))) if data else b""


@pytest.fixture
def hosts(home, tmp_path, daemons):
    """Two daemons of one user, as two hosts: each its own state and data directories, the home's config."""
    started = []
    for name in ("a", "b"):
        env = {"CHOCK_STATE_DIR": str(tmp_path / name / "state"), "CHOCK_DATA_DIR": str(tmp_path / name / "data")}
        started.append(daemons.start(env=env))
    return started


def state(tmp_path: Path, host: str) -> Path:
    return tmp_path / host / "state"


def staged(tmp_path: Path, host: str, files: dict[str, bytes]) -> list[str]:
    """The parts `chock run --move-out` stages, as it stages them (the bundle whole, each piece's digest said):
    the names they travel under."""
    import json

    from chock.daemon.move_relay import DIGESTS

    out = state(tmp_path, host) / "moves" / SESSION / "out"
    out.mkdir(parents=True)
    names, said = [], {}
    for name, data in files.items():
        (out / name).write_bytes(data)
        if name != parts.BUNDLE:
            names.append(name)
            continue
        for piece in pieces_said(data):
            said[piece["part"]] = [piece["length"], piece["sha256"]]
            names.append(piece["part"])
    (out / DIGESTS).write_text(json.dumps(said))
    return names


def relay(source: ControlClient, target: ControlClient, part: str) -> mp.PartHeader:
    header, body = source.open_body(mp.SendRequest(SESSION, part))
    target.call_with_body(mp.ReceiveRequest(SESSION, part, header.body_length, header.sha256), body)
    return header


def raw(daemon, data: bytes, then: bytes = b"", *, close: bool = True) -> bytes:
    """What the daemon answers to `data` (greeting first), `then` sent after its answer began or not at all."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(daemon.socket))
        sock.sendall(b"hello chock-control 1\n" + data)
        if then:
            sock.sendall(then)
        if close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


# The codec ------------------------------------------------------------------------------------------------


def _ended_on(a: Daemon, home: Home, tmp_path: Path) -> tuple[str, Path, Path]:
    """A session the daemon `a` ran to its end in a project `here`, and `there`, a clone of it (the target's)."""
    import subprocess

    replay_config(home, ONE_FILE)
    here = make_project(tmp_path / "here")
    there = tmp_path / "there"
    subprocess.run(["git", "clone", "-q", str(here), str(there)], check=True)
    session_id = a.client.call(dp.StartRequest(str(here), "write a file")).session_id
    wait_until(lambda: a.client.call(dp.FindRequest(session_id)).row["status"] == "ended", 60, "the session to end")
    log = state(tmp_path, "a") / "sessions" / session_id / "log.jsonl"
    wait_until(lambda: not owner_alive(log), 30, "the ended session's child to let go of its log")
    return session_id, here, there


def test_parts_travel_in_one_encoding_whose_length_is_known_before_it_is_made():
    for size in (0, 1, 2, 3, parts.RAW_PER_LINE - 1, parts.RAW_PER_LINE, parts.RAW_PER_LINE + 1, 200_001):
        data = os.urandom(size)
        for part in parts.PARTS:
            sent = wire(part, data)
            assert len(sent) == parts.wire_length(part, size), (part, size)
            decoder = parts.PartDecoder(part, sha(data))
            got = b"".join(decoder.feed(sent[at : at + 7777]) for at in range(0, len(sent), 7777))
            decoder.finish()
            assert got == data
            if parts.encoded(part) and size:
                lines = sent.split(b"\n")[:-1]
                assert all(len(line) == parts.ENCODED_LINE for line in lines[:-1]) and len(lines[-1]) <= 65536
                assert base64.b64decode(b"".join(lines)) == data


def test_a_base64_line_of_another_shape_is_refused_though_it_decodes():
    data = os.urandom(parts.RAW_PER_LINE + 10)
    loose = base64.encodebytes(data)  # lines of 76 characters: the same bytes, another encoding
    with pytest.raises(ProtocolError) as caught:
        parts.PartDecoder("bundle", sha(data)).feed(loose)
    assert caught.value.code == ErrorCode.BAD_REQUEST and "lines of 65,536 characters" in caught.value.text


def server_at(now: float = 0.0) -> ServerConnection:
    codec = ServerConnection(dp.CONTROL, now=now)
    codec.receive_data(b"hello chock-control 1\n", now)
    assert isinstance(codec.next_event(), Greeted)
    return codec


def test_the_bytes_after_receive_are_read_as_they_are_and_not_one_past_its_length():
    body = LOG
    codec = server_at()
    request = mp.ReceiveRequest(SESSION, "log", len(body), sha(body)).encode()
    # The request, its bytes and what a client should not have sent, in one read.
    codec.receive_data(request + body + b"start /p\tmore\n", 1.0)
    assert isinstance(codec.next_event(), mp.ReceiveRequest)
    assert codec.next_event().data == body  # type: ignore[union-attr]
    assert codec.next_event() is END_OF_BODY
    assert codec.next_event() is NEED_DATA
    assert codec.next_deadline() is None  # the verb's to answer now


def test_each_line_after_receive_arrives_within_the_line_deadline_of_the_one_before():
    body = LOG * 3
    codec = server_at()
    codec.receive_data(mp.ReceiveRequest(SESSION, "log", len(body), sha(body)).encode(), 1.0)
    assert isinstance(codec.next_event(), mp.ReceiveRequest)
    codec.receive_data(body[:40], 9.0)  # a line begun
    assert codec.deadline_passed(10.9) is None  # 10 s from the request, not from the last byte
    codec.receive_data(body[40:100], 10.5)  # a line ended: the next has 10 s from now
    assert codec.next_deadline() == 20.5
    told = codec.deadline_passed(20.5)
    assert told is not None and b"must arrive whole within 10 s of the line before it" in told


def test_a_line_past_the_parts_line_bound_is_too_large_as_soon_as_it_passes_it():
    length = parts.ENCODED_LINE * 3
    codec = server_at()
    codec.receive_data(mp.ReceiveRequest(SESSION, parts.piece(0), length, "0" * 64).encode(), 1.0)
    assert isinstance(codec.next_event(), mp.ReceiveRequest)
    codec.receive_data(b"A" * (parts.ENCODED_LINE + 1), 1.0)
    with pytest.raises(ProtocolError) as caught:
        codec.next_event()
    assert caught.value.code == ErrorCode.TOO_LARGE and ServerConnection.fatal(caught.value)


def test_a_log_line_past_the_event_bound_is_found_inside_a_read_of_many_lines():
    limit = parts.line_bound("log")
    short = b"x" * 999 + b"\n"
    for long, refused in ((b"y" * limit + b"\n", False), (b"y" * (limit + 1) + b"\n", True)):
        # Short lines, then one at (or one past) the bound, then more short lines: all in one read of the body.
        body = short * 700 + long + short * 700
        codec = server_at()
        codec.receive_data(mp.ReceiveRequest(SESSION, "log", len(body), sha(body)).encode() + body, 1.0)
        assert isinstance(codec.next_event(), mp.ReceiveRequest)
        if not refused:
            assert codec.next_event().data == body  # type: ignore[union-attr]
            continue
        with pytest.raises(ProtocolError) as caught:
            codec.next_event()
        assert caught.value.code == ErrorCode.TOO_LARGE, caught.value


def test_a_client_reads_sends_bytes_whole_and_a_part_cut_short_is_unreachable():
    body = wire("scratchpad", b"notes\n" * 20_000)
    for cut in (False, True):
        client = ClientConnection(dp.CONTROL)
        client.greeting()
        client.receive_data(b"ok chock-control 1\n")
        assert isinstance(client.next_event(), Greeted)
        client.send(mp.SendRequest(SESSION, "scratchpad"))
        client.receive_data(f"ok {len(body)}\t{'0' * 64}\n".encode() + body[:1000])
        assert client.next_event() == mp.PartHeader(len(body), "0" * 64)
        got = client.next_event()
        assert isinstance(got, Data) and got.data == body[:1000]
        if cut:
            client.receive_data(b"")
            with pytest.raises(ProtocolError) as caught:
                client.next_event()
            assert caught.value.code == ErrorCode.UNREACHABLE
            continue
        client.receive_data(body[1000:] + b"no more of it\n")
        assert client.next_event().data == body[1000:]  # type: ignore[union-attr]
        assert client.next_event() is END_OF_BODY


# Two daemons ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [300_000, 2 * parts.PIECE, 2 * parts.PIECE + 1000], ids=["one", "whole", "three"])
def test_each_part_travels_from_the_sources_send_to_the_targets_receive_byte_for_byte(tmp_path, hosts, size):
    """The bundle in pieces (one; two whole and an empty last; three), joined on the target in order: it is there,
    under its name, only once its last piece came."""
    a, b = hosts
    files = {"log": LOG, "log-end": LOG_END, "scratchpad": b"# notes\n", "bundle": os.urandom(size)}
    names = staged(tmp_path, "a", files)
    assert len(names) == 3 + len(bundle_pieces(files["bundle"]))
    received = state(tmp_path, "b") / "moves" / SESSION / "in"
    for part in names:
        assert not (received / parts.BUNDLE).exists()
        header = relay(a.client, b.client, part)
        index = parts.piece_index(part)
        sent = files[part] if index is None else bundle_pieces(files["bundle"])[index]
        assert (header.sha256, header.body_length) == (sha(sent), parts.wire_length(part, len(sent)))
    assert {name: (received / name).read_bytes() for name in os.listdir(received)} == files


def test_a_piece_of_the_bundle_out_of_order_is_refused_and_a_cut_piece_leaves_those_before_it(tmp_path, hosts):
    """Pieces join only in order — one before the first, one skipped, one sent twice are refused and change
    nothing —; a piece whose bytes differ leaves the pieces before it; the bundle is whole, under its name, once its
    last piece came."""
    a, b = hosts
    bundle = os.urandom(2 * parts.PIECE + 10)
    staged(tmp_path, "a", {"bundle": bundle})
    joining = state(tmp_path, "b") / "moves" / SESSION / "in" / ".bundle"

    def refused(index: int, holds: int) -> None:
        with pytest.raises(ProtocolError) as caught:
            relay(a.client, b.client, parts.piece(index))
        assert caught.value.code == ErrorCode.BAD_REQUEST
        assert f"bundle.{index} of session {SESSION} is out of order: the bundle here holds {holds} whole" in (
            caught.value.text
        )

    refused(1, 0)
    assert not (state(tmp_path, "b") / "moves" / SESSION).exists()
    relay(a.client, b.client, parts.piece(0))
    refused(2, 1)
    body = wire(parts.piece(1), bundle_pieces(bundle)[1])
    request = mp.ReceiveRequest(SESSION, parts.piece(1), len(body), sha(b"another piece"))
    assert raw(b, request.encode() + body).split(b"\n")[1].startswith(b"error bad-request the bundle.1's bytes")
    assert joining.read_bytes() == bundle_pieces(bundle)[0]  # the pieces before it, and nothing of it
    relay(a.client, b.client, parts.piece(1))
    refused(1, 2)
    assert joining.read_bytes() == b"".join(bundle_pieces(bundle)[:2])
    relay(a.client, b.client, parts.piece(2))
    assert (joining.parent / parts.BUNDLE).read_bytes() == bundle and not joining.exists()
    with pytest.raises(ProtocolError) as caught:
        relay(a.client, b.client, parts.piece(2))
    assert "is out of order: the bundle here holds all of it" in caught.value.text
    assert (joining.parent / parts.BUNDLE).read_bytes() == bundle


def test_a_part_whose_bytes_differ_from_their_digest_leaves_nothing(tmp_path, hosts):
    _, b = hosts
    request = mp.ReceiveRequest(SESSION, "log", len(LOG), sha(b"another log\n")).encode()
    answer = raw(b, request + LOG)
    assert answer.startswith(b"ok chock-control 1\nerror bad-request the log's bytes have sha256 " + sha(LOG).encode())
    assert not (state(tmp_path, "b") / "moves").exists() or not os.listdir(state(tmp_path, "b") / "moves")


@pytest.mark.parametrize("part", ["scratchpad", parts.piece(0)])
def test_a_connection_cut_in_the_middle_of_a_part_leaves_nothing(tmp_path, hosts, part):
    _, b = hosts
    body = wire(part, os.urandom(500_000))
    incoming = state(tmp_path, "b") / "moves" / SESSION / "in"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(b.socket))
        request = mp.ReceiveRequest(SESSION, part, len(body), sha(b"x")).encode()
        sock.sendall(b"hello chock-control 1\n" + request + body[: len(body) // 2])
        # The daemon is writing the part: it is there, under a name that is not the part's.
        wait_until(lambda: incoming.is_dir() and os.listdir(incoming), 30, "the part to be written")
        assert parts.kind(part) not in os.listdir(incoming)
    wait_until(lambda: not (state(tmp_path, "b") / "moves" / SESSION).exists(), 30, "what was received to go")


def test_a_length_past_the_parts_bound_is_refused_before_any_byte_of_it_is_read(tmp_path, hosts):
    _, b = hosts
    too_long = parts.wire_bound("scratchpad") + 1
    # Not one byte of the part is sent: the refusal comes from the request line alone.
    answer = raw(b, f"receive {SESSION}\tscratchpad\t{too_long}\t{'0' * 64}\n".encode(), close=False)
    assert answer.startswith(b"ok chock-control 1\nerror too-large a scratchpad may be at most 16 MiB")
    assert not (state(tmp_path, "b") / "moves").exists()
    with pytest.raises(ProtocolError) as caught:
        mp.ReceiveRequest(SESSION, "scratchpad", too_long, "0" * 64)  # the client refuses to send it at all
    assert caught.value.code == ErrorCode.TOO_LARGE


@pytest.mark.parametrize(
    "name",
    ["bundle", "bundle.01", f"bundle.{parts.MOST_PIECES}", "bundle." + "9" * 5000, "bundle.\u0663", "log.0"],
    ids=["whole", "leading-zero", "past-the-last", "digits-past-pythons-int", "arabic-digit", "a-piece-of-the-log"],
)
def test_a_part_no_move_has_is_refused_by_name_and_the_daemon_goes_on(hosts, name):
    a, _ = hosts
    for verb in (f"send {SESSION}\t{name}", f"receive {SESSION}\t{name}\t10\t{'0' * 64}"):
        answer = raw(a, f"{verb}\n".encode())
        assert answer.split(b"\n")[1].startswith(b"error bad-request ") and b"is not a part of a session" in answer
    with pytest.raises(ProtocolError) as caught:  # the daemon still answers
        a.client.call(dp.FindRequest(SESSION))
    assert caught.value.code == ErrorCode.NOT_FOUND


def test_a_manifest_or_a_line_naming_pieces_no_bundle_has_is_not_read():
    import json

    def manifest(pieces: list[int]) -> str:
        listed = [{"part": p, "length": 1, "sha256": "0" * 64} for p in ("log", "log-end", "scratchpad")]
        listed += [{"part": parts.piece(n), "length": size, "sha256": "0" * 64} for n, size in enumerate(pieces)]
        value = {"parts": listed, "base": "1" * 40, "instance": "demo", "session": SESSION, "was_running": False,
                 "host": "a"}  # fmt: skip
        return "ok " + json.dumps(value)

    whole = parts.PIECE
    assert isinstance(mp.Staging.decode(manifest([whole, 10])), mp.Manifest)
    assert isinstance(mp.Staging.decode(manifest([whole] * (parts.MOST_PIECES - 1) + [0])), mp.Manifest)  # 1 GiB
    for pieces in ([], [whole], [10, 10], [whole] * parts.MOST_PIECES + [0], [whole] * (parts.MOST_PIECES - 1) + [1]):
        assert mp.Staging.decode(manifest(pieces)) is None, len(pieces)
    assert mp.Staging.decode(f"ok bundle.{'9' * 5000}\t1\t{'0' * 64}") is None
    assert mp.Staging.decode(f"ok bundle.0\t{whole + 1}\t{'0' * 64}") is None


def test_the_client_refuses_a_manifest_that_says_other_parts_than_the_source_said_it_staged(monkeypatch):
    """What `move-out` said staged, part by part, is what its manifest must list: a piece said and then left out,
    or listed with another digest, stops the move; parts only the manifest names are sent."""
    from chock.commands import move

    sent: list[str] = []
    monkeypatch.setattr(move, "_relay", lambda *args: sent.append(args[5]))

    class Lane:
        def cut(self) -> None:
            pass

    def manifest(pieces: list[tuple[str, int, str]]) -> mp.Manifest:
        whole = [(part, 1, "1" * 64) for part in parts.WHOLE]
        return mp.Manifest([*whole, *pieces], "1" * 40, "demo", SESSION, False, "a")

    said = mp.StagedPart(parts.piece(0), 10, "2" * 64)
    for listed, refused in (
        ([(parts.piece(0), 10, "2" * 64)], False),
        ([(parts.piece(0), 10, "3" * 64)], True),
        ([], True),
    ):
        sent.clear()
        lanes = move._Lanes([(Lane(), Lane()), (Lane(), Lane())], "a", "b", SESSION)  # type: ignore[list-item]
        lanes.staged(said)
        try:
            if refused:
                with pytest.raises(move.MoveFailed, match="says other parts than the ones it said it staged"):
                    lanes.listed(manifest(listed))
                continue
            lanes.listed(manifest(listed))
            lanes.finish()
            assert sorted(sent) == sorted([parts.piece(0), *parts.WHOLE])
        finally:
            lanes.stop()


def test_send_of_a_part_not_staged_is_not_found(hosts):
    a, _ = hosts
    with pytest.raises(ProtocolError) as caught:
        a.client.open_body(mp.SendRequest(SESSION, parts.piece(0)))
    assert caught.value.code == ErrorCode.NOT_FOUND and "move-out" in caught.value.text


def test_move_drop_removes_what_was_received(tmp_path, hosts):
    a, b = hosts
    staged(tmp_path, "a", {"log": LOG})
    relay(a.client, b.client, "log")
    assert (state(tmp_path, "b") / "moves" / SESSION / "in" / "log").exists()
    assert b.client.call(mp.MoveDropRequest(SESSION)) == mp.Dropped()
    assert not (state(tmp_path, "b") / "moves" / SESSION).exists()


def test_move_in_refuses_parts_that_did_not_arrive_and_a_child_that_refuses_leaves_nothing(tmp_path, home, hosts):
    a, b = hosts
    project = make_project(tmp_path / "there")
    with pytest.raises(ProtocolError) as caught:
        b.client.call(mp.MoveInRequest(SESSION, str(project), "laptop", False))
    assert caught.value.code == ErrorCode.REFUSED and "log, log-end, scratchpad, bundle" in caught.value.text
    # Parts that arrive whole but are no session's: the child refuses them, and nothing is left of the move.
    for part in staged(tmp_path, "a", {"log": LOG, "log-end": LOG_END, "scratchpad": b"", "bundle": b"not a bundle\n"}):
        relay(a.client, b.client, part)
    with pytest.raises(ProtocolError) as caught:
        b.client.call(mp.MoveInRequest(SESSION, str(project), "laptop", False))
    assert caught.value.code == ErrorCode.REFUSED
    assert not (state(tmp_path, "b") / "moves" / SESSION).exists()
    assert not (state(tmp_path, "b") / "sessions" / SESSION).exists()


def test_move_check_names_the_target_and_refuses_a_project_without_the_commit_or_an_instance_it_lacks(
    tmp_path, home, hosts
):
    _, b = hosts
    replay_config(home, DONE)  # the instance `demo`
    project = make_project(tmp_path / "there")
    head = git_value(project, "rev-parse", "HEAD")
    assert b.client.call(mp.MoveCheckRequest(SESSION, head, "demo", str(project))).host == socket.gethostname()

    elsewhere = "1" * 40
    refusals = {
        (elsewhere, "demo", str(project)): f"{project} does not hold commit {elsewhere}, the session's base",
        (head, "work", str(project)): "this host has no instance named work (it has demo)",
        (head, "demo", str(tmp_path)): f"{tmp_path} is not a git repository here",
    }
    for (base, instance, where), said in refusals.items():
        with pytest.raises(ProtocolError) as caught:
            b.client.call(mp.MoveCheckRequest(SESSION, base, instance, where))
        assert caught.value.code == ErrorCode.REFUSED and said in caught.value.text


def test_move_check_refuses_a_session_the_target_holds(tmp_path, home, hosts):
    a, _ = hosts
    replay_config(home, DONE)
    project = make_project(tmp_path / "here")
    held = a.client.call(dp.StartRequest(str(project), "a task")).session_id
    head = git_value(project, "rev-parse", "HEAD")
    with pytest.raises(ProtocolError) as caught:
        a.client.call(mp.MoveCheckRequest(held, head, "demo", str(project)))
    assert f"this host already holds session {held}" in caught.value.text


def test_move_check_takes_a_session_whose_move_here_was_cut_before_its_adopt(tmp_path, home, hosts):
    """A log that ends with the source's handover to this host, held by nobody, is what a move-in killed before
    its adopt left: the next move may take its place."""
    import json

    from chock.daemon.move_relay import own_host

    a, _ = hosts
    session_id, here, _ = _ended_on(a, home, tmp_path)
    log = state(tmp_path, "a") / "sessions" / session_id / "log.jsonl"
    last = json.loads(log.read_bytes().splitlines()[-1])["id"]
    span = [{"id": last + 1, "at": "2026-12-06T12:00:00.000Z", "type": "session.adopt", "session": session_id,
             "via": "terminal"},
            {"id": last + 2, "at": "2026-12-06T12:00:01.000Z", "type": "session.end", "reason": "handover",
             "to": own_host()}]  # fmt: skip
    with open(log, "ab") as out:
        out.write(b"".join(json.dumps(event).encode() + b"\n" for event in span))
    head = git_value(here, "rev-parse", "HEAD")
    assert a.client.call(mp.MoveCheckRequest(session_id, head, "demo", str(here))).host == own_host()


def test_an_older_target_is_named_as_too_old_to_move_sessions_and_the_source_is_not_touched(tmp_path, home, hosts):
    a, _ = hosts
    replay_config(home, DONE)
    project = make_project(tmp_path / "here")
    env = {"CHOCK_STATE_DIR": str(state(tmp_path, "a"))}
    session_id = a.client.call(dp.StartRequest(str(project), "a task")).session_id
    wait_until(lambda: a.client.call(dp.FindRequest(session_id)).row["status"] == "ended", 60, "the session to end")
    before = (state(tmp_path, "a") / "sessions" / session_id / "log.jsonl").read_bytes()
    with old_daemon() as old:
        moved = home.chock(
            "move", f"{session_id}", "--daemon", a.address, "--to", old.address, "--project", "/srv/p", env=env
        )
        assert old.asked == ["unknown-verb"]
    assert moved.returncode == 1, moved.stderr
    assert f"the daemon on {old.address} is too old to move sessions: upgrade Chock there" in moved.stderr
    assert (state(tmp_path, "a") / "sessions" / session_id / "log.jsonl").read_bytes() == before


class _EndlessSource:
    """A source's daemon whose log of the session never ends and never begins as a log does: `find` answers the
    session's row (ended), `read` sends `event` lines, each with the next id, until the reader goes away."""

    def __init__(self, text_bytes: int) -> None:
        self.path = short_dir() / "endless.sock"
        self.text = "x" * text_bytes
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            lines.readline()
            conn.sendall(b"ok chock-control 1\n")
            verb = lines.readline().decode()
            with contextlib.suppress(OSError):
                if verb.startswith("find"):
                    row = {"id": SESSION, "project": "/srv/p", "status": "ended", "started_at": "2026-12-06T11:45:00Z"}
                    conn.sendall(dp.ListRow("2026-12-06T11:45:00Z", row).encode())
                elif verb.startswith("read"):
                    for number in itertools.count(1):
                        conn.sendall(json.dumps({"id": number, "type": "user.message", "text": self.text}).encode()
                                     + b"\n")  # fmt: skip

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("text_bytes", [10, 512 * 1024])
def test_move_reads_no_more_of_the_sources_log_than_its_first_events_and_says_so(tmp_path, home, hosts, text_bytes):
    """A source whose log of the session streams on and on (small events, or large ones) with no session.start:
    `chock move` stops reading it once it has read more than a log's first events may be, and says why."""
    _, b = hosts
    source = _EndlessSource(text_bytes)
    try:
        moved = home.chock("move", SESSION, "--daemon", f"unix:{source.path}", "--to", b.address, "--project", "/srv/p")
    finally:
        source.close()
    assert moved.returncode == 1, moved.stderr
    assert "with no session.start and workspace.open among them" in moved.stderr, moved.stderr
    assert "Nothing was changed" in moved.stderr and "Traceback" not in moved.stderr
    assert not list(state(tmp_path, "b").glob("moves/*"))  # the target was asked nothing


# A whole move ---------------------------------------------------------------------------------------------

ONE_FILE = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "Wrote it.", "tool_calls": []},
]  # fmt: skip


def test_chock_move_carries_an_ended_session_from_one_daemon_to_the_other(tmp_path, home, hosts):
    """check, move-out, each part sent and received, move-in, moved: the target's log is the source's as it left
    plus the adopt; the branch and its edit are there; the source shows it moved and holds nothing staged."""

    a, b = hosts
    session_id, _, there = _ended_on(a, home, tmp_path)

    moved = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert moved.returncode == 0, moved.stderr
    assert f"session {session_id} moved to {b.address}" in moved.stdout
    for step in (
        "asking",
        "taking session",
        "sending its log (",
        "sending its bundle piece by piece",
        "every part staged, its bundle",
        "adopts it",
        "ending it",
    ):
        assert step in moved.stderr

    sent = (state(tmp_path, "a") / "sessions" / session_id / "log.jsonl").read_bytes().split(b"\n")[:-1]
    landed = (state(tmp_path, "b") / "sessions" / session_id / "log.jsonl").read_bytes().split(b"\n")[:-1]
    handover = max(i for i, line in enumerate(sent) if b'"reason": "handover"' in line)
    assert landed[: handover + 1] == sent[: handover + 1]
    assert b'"via": "move"' in landed[handover + 1]
    assert git_value(there, "show", f"chock/{session_id}:a.txt") == "A"
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "moved"
    assert b.client.call(dp.FindRequest(session_id)).row["status"] == "ended"
    assert not (state(tmp_path, "a") / "moves" / session_id).exists()
    assert not (state(tmp_path, "b") / "moves" / session_id).exists()

    again = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert again.returncode == 1 and f"moved to {socket.gethostname()} already" in again.stderr, again.stderr


def test_move_out_says_each_part_staged_whole_as_it_is_and_send_takes_it_at_once(tmp_path, home, hosts):
    """`move-out` says the log as the source took it, and each piece of the bundle as git writes it, each whole and
    final as it is said: `send` gives exactly those bytes, before the manifest; the manifest says the same of each,
    the pieces are the branch's bundle, and the log with its end is the source's log through its handover."""
    import subprocess

    a, _ = hosts
    session_id, here, _ = _ended_on(a, home, tmp_path)
    big = here / "big.bin"  # a branch whose bundle is three pieces
    big.write_bytes(os.urandom(2 * parts.PIECE + 4096))
    blob = git_value(here, "hash-object", "-w", str(big))
    tip = git_value(here, "rev-parse", f"chock/{session_id}")
    index = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    subprocess.run(["git", "-C", str(here), "read-tree", tip], env=index, check=True)
    subprocess.run(["git", "-C", str(here), "update-index", "--add", "--cacheinfo", f"100644,{blob},big.bin"],
                   env=index, check=True)  # fmt: skip
    tree = subprocess.run(["git", "-C", str(here), "write-tree"], env=index, capture_output=True, text=True).stdout
    commit = git_value(here, "commit-tree", tree.strip(), "-p", tip, "-m", "big")
    git_value(here, "update-ref", f"refs/heads/chock/{session_id}", commit)
    big.unlink()

    out = state(tmp_path, "a") / "moves" / session_id / "out"
    said, sent = {}, {}
    taking = a.client.stream(mp.MoveOutRequest(session_id, "elsewhere", 30))
    try:
        manifest = None
        for line in [taking.header, *taking]:
            if isinstance(line, mp.Manifest):
                manifest = line
                continue
            assert isinstance(line, mp.StagedPart)
            header, body = a.client.open_body(mp.SendRequest(session_id, line.part))
            data = parts.PartDecoder(line.part, line.sha256).feed(b"".join(body))
            assert (header.body_length, header.sha256) == (parts.wire_length(line.part, line.length), line.sha256)
            said[line.part], sent[line.part] = (line.length, line.sha256), data
    finally:
        taking.close()
    assert manifest is not None
    listed = {part: (length, digest) for part, length, digest in manifest.parts}
    pieces_said = [part for part in said if part != "log"]
    assert pieces_said == [parts.piece(n) for n in range(3)] and said == {part: listed[part] for part in said}
    assert (out / "bundle").read_bytes() == b"".join(sent[part] for part in pieces_said)
    check = subprocess.run(["git", "-C", str(here), "bundle", "list-heads", str(out / "bundle")], capture_output=True)
    assert f"{commit} refs/heads/chock/{session_id}".encode() in check.stdout
    end = (out / "log-end").read_bytes()
    assert listed["log-end"] == (len(end), sha(end))
    log = (state(tmp_path, "a") / "sessions" / session_id / "log.jsonl").read_bytes()
    assert sent["log"] + end == log
    assert [b'"session.adopt"' in line for line in end.splitlines()] == [True, False]
    assert b'"reason": "handover", "to": "elsewhere"' in end.splitlines()[1]


@pytest.mark.parametrize(
    ("verb", "part", "after"),
    [
        ("send", "log", None),
        ("receive", "log", 40),
        ("send", parts.piece(0), None),
        ("receive", parts.piece(0), 300),
        ("move-in", None, None),
    ],
    ids=["before-the-log", "in-the-log", "before-the-bundle", "in-the-bundle", "between-the-bundle-and-the-adopt"],
)
def test_a_move_cut_at_any_step_before_the_adopt_leaves_one_owner_and_a_second_move_completes(
    tmp_path, home, hosts, verb, part, after
):
    """The connection to the target cut (by a relay, at a byte it is told) before the log, in the log, in the
    bundle, or before the target heard move-in: the target holds no session; the source holds it, handed over to
    nobody; and a second `chock move` carries it over whole."""

    from tests.fakes.relay import CuttingRelay

    a, b = hosts
    session_id, _, there = _ended_on(a, home, tmp_path)
    cut_at = b if verb != "send" else a
    with CuttingRelay(cut_at.socket, verb=verb, part=part, after=after) as relay:
        source, target = (a.address, relay.address) if cut_at is b else (relay.address, b.address)
        cut = home.chock("move", session_id, "--daemon", source, "--to", target, "--project", str(there))
        assert relay.cut == 1
    assert cut.returncode == 1, cut.stderr
    assert f"chock run --continue {session_id}" in cut.stderr
    with pytest.raises(ProtocolError) as caught:
        b.client.call(dp.FindRequest(session_id))
    assert caught.value.code == ErrorCode.NOT_FOUND
    if verb != "move-in":  # a move-in the target never heard: what it received waits for the next move
        assert not (state(tmp_path, "b") / "moves" / session_id).exists()
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "handed-over"

    again = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert again.returncode == 0, again.stderr
    assert b.client.call(dp.FindRequest(session_id)).row["status"] == "ended"
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "moved"
    assert git_value(there, "show", f"chock/{session_id}:a.txt") == "A"


SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "", "delay": 10,  # the window `chock move` asks in: wide enough for a loaded machine's start-up
     "tool_calls": [{"call_id": "c2", "name": "write_file", "args": {"path": "b.txt", "content": "B"}}]},
    {"text": "Both written.", "tool_calls": []},
]  # fmt: skip


def test_chock_move_hands_a_running_daemon_session_over_at_its_turn_boundary_and_it_finishes_on_the_target(
    tmp_path, home, hosts
):
    """A daemon-owned session mid-way through its conversation, an uncommitted edit in its worktree, moved while it
    waits in a model call: it hands over at the boundary, and finishes on the target with every edit."""
    import subprocess

    a, b = hosts
    replay_config(home, SLOW)
    here = make_project(tmp_path / "here")
    there = tmp_path / "there"
    subprocess.run(["git", "clone", "-q", str(here), str(there)], check=True)
    session_id = a.client.call(dp.StartRequest(str(here), "write two files")).session_id
    log = state(tmp_path, "a") / "sessions" / session_id / "log.jsonl"
    wait_until(lambda: b'"call_id": "c1"' in log.read_bytes() and b'"tool.result"' in log.read_bytes(), 60, "a.txt")

    moved = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert moved.returncode == 0, moved.stderr
    assert "it goes on there" in moved.stdout
    wait_until(lambda: b.client.call(dp.FindRequest(session_id)).row["status"] == "ended", 60, "it to end there")
    assert b.client.call(dp.FindRequest(session_id)).row["end_reason"] == "completed"
    assert git_value(there, "show", f"chock/{session_id}:a.txt") == "A"
    assert git_value(there, "show", f"chock/{session_id}:b.txt") == "B"
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "moved"


@pytest.mark.parametrize("stalled", [parts.piece(0), "log"])
def test_ctrl_c_in_the_middle_of_a_part_leaves_the_target_holding_nothing(tmp_path, home, hosts, stalled):
    """One part stalls on its way (a relay holds it) while the others arrive whole beside it — the log and the
    bundle travel at once; Ctrl-C: what the target received goes, and the source's session is handed over to nobody,
    as the command says."""
    import signal
    import subprocess

    from tests.fakes.relay import CuttingRelay

    a, b = hosts
    session_id, _, there = _ended_on(a, home, tmp_path)
    received = state(tmp_path, "b") / "moves" / session_id / "in"
    others = {part for kinds in parts.LANES if parts.kind(stalled) not in kinds for part in kinds}  # the other lane's
    with CuttingRelay(b.socket, verb="receive", part=stalled, after=40, hold=True) as relay:
        move = home.spawn(
            "move", session_id, "--daemon", a.address, "--to", relay.address, "--project", str(there),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_until(relay.holding.is_set, 60, f"the {stalled} to stall")
            wait_until(
                lambda: received.is_dir() and others <= set(os.listdir(received)),
                30,
                f"the {', '.join(others)} to arrive beside it",
            )
            assert parts.kind(stalled) not in os.listdir(received)
            move.send_signal(signal.SIGINT)
            _, stderr = move.communicate(timeout=60)
        finally:
            move.kill()
    assert move.returncode == 130, stderr
    assert f"stopped: {relay.address} holds nothing of it" in stderr
    assert f"`chock run --continue {session_id}` there takes it back" in stderr
    assert not (state(tmp_path, "b") / "moves" / session_id).exists()
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "handed-over"


def test_a_session_moved_there_and_back_ends_where_it_began_with_one_log_telling_it_all(tmp_path, home, hosts):
    """A -> B -> A: A keeps the log it had as log.jsonl.moved-1 and takes the one that came back, which begins with
    A's and goes on with B's; both hosts' rows agree on where it is."""
    import json

    a, b = hosts
    session_id, here, there = _ended_on(a, home, tmp_path)
    went = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert went.returncode == 0, went.stderr
    came = home.chock("move", session_id, "--daemon", b.address, "--to", a.address, "--project", str(here))
    assert came.returncode == 0, came.stderr

    directory = state(tmp_path, "a") / "sessions" / session_id
    kept = (directory / "log.jsonl.moved-1").read_bytes()
    events = [json.loads(line) for line in (directory / "log.jsonl").read_bytes().splitlines()]
    assert [event["id"] for event in events] == list(range(1, len(events) + 1))
    moves = [(e["type"], e.get("reason") or e.get("via")) for e in events if e.get("via") == "move" or e.get("to")]
    out, into = [("session.adopt", "move"), ("session.end", "handover")], [("session.adopt", "move")]
    assert moves == out + into + out + into  # A's move-out, B's move-in, B's move-out, A's move-in
    assert (events[-1]["type"], events[-1]["reason"]) == ("session.end", "completed")  # ended there, ended here
    # What A held, without its last span (the move's `moved`), is where the log that came back begins.
    held = kept.splitlines()
    assert json.loads(held[-1])["reason"] == "moved"
    assert (directory / "log.jsonl").read_bytes().splitlines()[: len(held) - 2] == held[:-2]
    # Only what B's log gained past what A kept travelled back: B's log without its own last span (`moved`).
    on_b = (state(tmp_path, "b") / "sessions" / session_id / "log.jsonl").read_bytes().splitlines(keepends=True)
    # The first move sent all of it: the log as A took it, then its end (A's move-out span), each a part of its own.
    left = kept.splitlines(keepends=True)[:-2]
    assert f"sending its log ({len(b''.join(left[:-2])):,} bytes)" in went.stderr, went.stderr
    assert f"sending its log-end ({len(b''.join(left[-2:])):,} bytes)" in went.stderr, went.stderr
    assert f"sending its log ({len(b''.join(on_b[:-4])) - len(b''.join(left)):,} bytes)" in came.stderr, came.stderr
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "ended"
    assert b.client.call(dp.FindRequest(session_id)).row["status"] == "moved"


def test_a_session_named_on_both_hosts_of_a_move_is_found_where_it_went(tmp_path, home, hosts):
    """Its source keeps a moved session as history: a command given both hosts acts on the one that holds it."""
    a, b = hosts
    session_id, _, there = _ended_on(a, home, tmp_path)
    went = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert went.returncode == 0, went.stderr
    said = home.chock("say", session_id, "more", "--daemon", a.address, "--daemon", b.address)
    assert said.returncode == 0, said.stderr
    assert f"said to session {session_id}" in said.stdout
    assert b.client.call(dp.FindRequest(session_id)).row["status"] != "moved"
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "moved"  # nothing was said there


# Dies at the word that tells the daemon the adopt is logged: a move-in child killed at its commit point.
DIES_BEFORE_SAYING_ADOPTED = """
import os

_write = os.write


def _dies_before_saying_adopted(fd, data):
    if bytes(data).startswith(b'{"adopted"'):
        os._exit(9)
    return _write(fd, data)


os.write = _dies_before_saying_adopted
"""


def test_a_target_whose_child_dies_after_its_adopt_but_before_saying_so_is_told_as_the_owner(tmp_path, home, daemons):
    """The adopt is the commit point: a target child that logged it and died before it said `{"adopted": N}`
    owns the session, so the move is told as done, and the source ends its copy as moved."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DIES_BEFORE_SAYING_ADOPTED)
    dies = {"PYTHONPATH": str(site) + os.pathsep + home.env.get("PYTHONPATH", "")}
    a, b = (
        daemons.start(
            env={"CHOCK_STATE_DIR": str(state(tmp_path, name)), **more, "CHOCK_DATA_DIR": str(tmp_path / name / "data")}
        )
        for name, more in (("a", {}), ("b", dies))
    )
    session_id, _, there = _ended_on(a, home, tmp_path)

    moved = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert moved.returncode == 0, moved.stderr
    assert f"session {session_id} moved to {b.address}" in moved.stdout
    landed = (state(tmp_path, "b") / "sessions" / session_id / "log.jsonl").read_bytes().splitlines()
    assert any(b'"type": "session.adopt"' in line and b'"via": "move"' in line for line in landed)
    assert a.client.call(dp.FindRequest(session_id)).row["status"] == "moved"


def _commit_on(project: Path, branch: str, name: str, data: bytes) -> None:
    """A commit of `name` holding `data` on `branch` of `project`, its worktree untouched (as a turn's work lands)."""
    import subprocess

    index = {**os.environ, "GIT_INDEX_FILE": str(project / ".git" / "test.index")}
    run = lambda *args, **kw: subprocess.run(["git", "-C", str(project), *args], capture_output=True, check=True, **kw)  # noqa: E731
    blob = run("hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
    run("read-tree", branch, env=index)
    run("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", env=index)
    tree = run("write-tree", env=index).stdout.decode().strip()
    made = run("-c", "user.name=t", "-c", "user.email=t@example.com", "commit-tree", tree, "-p", branch, "-m", name)
    run("update-ref", f"refs/heads/{branch}", made.stdout.decode().strip())


def _bundle_sent(said: str) -> int:
    """The bundle's bytes on the wire, as `chock move` said it sent them."""
    import re

    found = re.search(r"its bundle ([\d,]+) bytes", said)
    assert found is not None, said
    return int(found.group(1).replace(",", ""))


def test_a_session_coming_back_sends_only_the_objects_its_target_lacks(tmp_path, home, hosts):
    """A -> B carries the branch's 400 KB; B's work (a small commit) comes back to A without them, since A holds
    them; moved to B again with no work done, no object travels. Each host ends with the whole branch."""
    a, b = hosts
    session_id, here, there = _ended_on(a, home, tmp_path)
    branch = f"chock/{session_id}"
    big = os.urandom(400_000)
    _commit_on(here, branch, "big.bin", big)
    went = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert went.returncode == 0, went.stderr
    assert _bundle_sent(went.stderr) > len(big)

    _commit_on(there, branch, "small.txt", b"done on b\n")
    came = home.chock("move", session_id, "--daemon", b.address, "--to", a.address, "--project", str(here))
    assert came.returncode == 0, came.stderr
    assert _bundle_sent(came.stderr) < 10_000
    assert git_value(here, "show", f"{branch}:small.txt") == "done on b"
    assert git_value(here, "cat-file", "-s", f"{branch}:big.bin") == str(len(big))

    again = home.chock("move", session_id, "--daemon", a.address, "--to", b.address, "--project", str(there))
    assert again.returncode == 0, again.stderr
    assert _bundle_sent(again.stderr) < 1_000
    assert git_value(there, "rev-parse", branch) == git_value(here, "rev-parse", branch)
    assert b.client.call(dp.FindRequest(session_id)).row["status"] == "ended"


TIP, KEPT = "c" * 40, f"1234:{'d' * 64}"


@pytest.mark.parametrize("tip, kept", [("", ""), (TIP, ""), ("", KEPT), (TIP, KEPT)])
def test_move_checks_answer_is_read_as_it_was_written(tip: str, kept: str) -> None:
    line = mp.HostNamed("hostb", tip, kept).encode().decode()
    read = mp.HostNamed.decode(line.rstrip("\n"))
    assert read is not None and (read.host, read.tip, read.kept) == ("hostb", tip, kept)


@pytest.mark.parametrize(
    "kept",
    ["0:" + "d" * 64, "012:" + "d" * 64, "12:" + "D" * 64, "12:" + "d" * 63, "12", "-12:" + "d" * 64,
     "1" * 13 + ":" + "d" * 64, "\u00b2:" + "d" * 64, "\u0663:" + "d" * 64],
)  # fmt: skip
def test_what_a_host_keeps_is_a_length_and_a_digest_or_the_request_is_refused(kept: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        mp.MoveOutRequest.from_fields(["20261201-073450-a1b2c3", "hostb", "60", "", "", kept])
    assert caught.value.code == ErrorCode.BAD_REQUEST and "<length>:<sha256>" in caught.value.text
    assert mp.HostNamed.decode(f"ok hostb\t\t{kept}") is None
    assert mp.HostNamed.decode(f"ok hostb\t{TIP}\t") is None  # an empty last field is no reply this version writes
