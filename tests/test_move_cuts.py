"""Moving a session, cut where a network or a crash would cut it (docs/remote.md#moving-a-session, "Why each
failure leaves one owner"): the target's answer to `move-in` lost on its way (a relay drops the reply line), and a
move's child killed with SIGKILL before and after the write that matters (a `sitecustomize.py` on the daemon's
PYTHONPATH kills it at that write). Never by sleeping. Two real daemons on this machine: A, this machine's daemon
(its state dir is the one `local` names), and B, in a UTS namespace of its own so it has a host name of its own
(`hostb`), as another machine would — so the log's `to` and `from` name two two. Needs root and unshare
(util-linux), as CI has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from chock.control import daemon_protocol as dp
from chock.control.framing import ErrorCode, ProtocolError
from chock.log.reader import owner_alive
from tests.conftest import Home
from tests.fakes.daemon import Daemon, Daemons, short_dir
from tests.fakes.projects import git_value, make_project
from tests.fakes.relay import CuttingRelay
from tests.fakes.sessions import replay_config, replayed_terminal_session, wait_for_event
from tests.fakes.wait import wait_until
from tests.test_move_children import (
    SLOW,
    _move_in,
    _move_out,
    _relay,
    hosts,  # noqa: F401 - the fixture: two Chock homes, two clones
)

HOST_B = "hostb"
# A session that writes a file and ends; each later `--continue` (or `say`) is answered "More done.".
ONE_FILE = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
    {"text": "Wrote it.", "tool_calls": []},
    *[{"text": "More done.", "tool_calls": []}] * 6,
]  # fmt: skip

# Killed with SIGKILL at the first write of a log line holding every one of NEEDLES, in a `chock run` whose argv
# holds FLAG: before the write (WHEN "before") or once it is made ("after"). Once: the death leaves ONCE behind, and
# later children write as any does.
DIES = """
import os
import sys

_write = os.write


def _dies(fd, data):
    if {flag!r} in sys.argv and all(n in bytes(data) for n in {needles!r}) and not os.path.exists({once!r}):
        open({once!r}, "x").close()
        if {when!r} == "before":
            os.kill(os.getpid(), 9)
        written = _write(fd, data)
        os.kill(os.getpid(), 9)
        return written
    return _write(fd, data)


os.write = _dies
"""


@dataclass
class Pair:
    home: Home
    a: Daemon
    b: Daemon
    env_a: dict[str, str]  # a command run "on A": its state dir is A's, so `local` is A's daemon
    env_b: dict[str, str]
    here: Path  # A's project
    there: Path  # B's clone of it

    def log(self, env: dict[str, str], session_id: str) -> Path:
        return Path(env["CHOCK_STATE_DIR"]) / "sessions" / session_id / "log.jsonl"

    def status(self, daemon: Daemon, session_id: str) -> str | None:
        """The session's status on that host, None when it holds no such session."""
        try:
            return str(daemon.client.call(dp.FindRequest(session_id)).row["status"])
        except ProtocolError as error:
            assert error.code == ErrorCode.NOT_FOUND, error
            return None

    def ended_on_a(self) -> str:
        """A session A's daemon ran to its end (a.txt written on its branch), its child gone."""
        session_id = self.a.client.call(dp.StartRequest(str(self.here), "write a file")).session_id
        wait_until(lambda: self.status(self.a, session_id) == "ended", 60, "the session to end on A")
        wait_until(lambda: not owner_alive(self.log(self.env_a, session_id)), 30, "its child to let go of its log")
        return session_id

    def move(
        self, session_id: str, to: str, *, project: Path | None = None, source: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """`chock move` run on A (its source A's daemon unless `source` names another), to `project` (B's)."""
        where = str(project or self.there)
        return self.home.chock("move", session_id, *source, "--to", to, "--project", where, env=self.env_a)

    def go_on(
        self, env: dict[str, str], project: Path, session_id: str, *more: str
    ) -> subprocess.CompletedProcess[str]:
        """`chock run --continue ID more` on that host: it carries the session on there, to its end."""
        return self.home.chock("run", "--yes", "--continue", session_id, *more, "more", cwd=project, env=env)


@pytest.fixture
def pair(home: Home, tmp_path: Path, daemons: Daemons) -> Callable[..., Pair]:
    """Start A and B, each with a state and a data dir of its own; `dies` (a DIES text) is on the PYTHONPATH of
    the one it is given for, so that host's children die where it says."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("these tests need root and unshare (util-linux) to give host B a host name of its own")
    replay_config(home, ONE_FILE)
    here = make_project(tmp_path / "here")
    there = tmp_path / "there"
    subprocess.run(["git", "clone", "-q", str(here), str(there)], check=True)
    hostname = ["unshare", "--uts", "sh", "-c", f'hostname {HOST_B} && exec "$@"', "sh"]

    def start(*, a_dies: str = "", b_dies: str = "") -> Pair:
        started, envs = [], []
        for name, dies, prefix in (("a", a_dies, ()), ("b", b_dies, hostname)):
            state = short_dir() / "state"  # short: A's `local` socket is <state dir>/daemon.sock
            state.mkdir()
            env = {"CHOCK_STATE_DIR": str(state), "CHOCK_DATA_DIR": str(tmp_path / name / "data")}
            envs.append(env)
            more = {}
            if dies:
                site = tmp_path / name / "site"
                site.mkdir(parents=True)
                (site / "sitecustomize.py").write_text(dies)
                more = {"PYTHONPATH": str(site) + os.pathsep + home.env.get("PYTHONPATH", "")}
            started.append(daemons.start(socket_path=state / "daemon.sock", prefix=prefix, env={**env, **more}))
        return Pair(home, started[0], started[1], envs[0], envs[1], here, there)

    return start


def _moved_out_to_b(log: Path) -> bool:
    """Whether the log ends with its handover to B (step 1 done)."""
    last = json.loads(log.read_bytes().splitlines()[-1])
    return (last["type"], last.get("reason"), last.get("to")) == ("session.end", "handover", HOST_B)


# The target adopted it; its answer was lost -----------------------------------------------------------------


def test_a_move_whose_adopt_answer_is_lost_leaves_the_target_the_one_owner(pair):
    """B adopts the session and the relay drops its `ok` to `move-in`: B owns it; A's `--continue` asks B (at
    the address the move reached it at) and refuses, naming B; B carries it on to its end; and a second
    `chock move` brings it back to A, whose log then tells the whole story."""
    two = pair()
    session_id = two.ended_on_a()
    with CuttingRelay(two.b.socket, verb="move-in", drop_reply=True) as relay:
        cut = two.move(session_id, relay.address)
        assert relay.cut == 1 and relay.dropped and relay.dropped[0].startswith(b"ok "), relay.dropped
        assert cut.returncode == 1, cut.stderr
        assert f"if {relay.address} did not adopt it, `chock run --continue {session_id}`" in cut.stderr
        assert "(it asks" in cut.stderr and "says whether" in cut.stderr

        assert two.status(two.b, session_id) == "ended"  # B adopted it: it is B's
        assert two.status(two.a, session_id) == "handed-over"
        assert _moved_out_to_b(two.log(two.env_a, session_id))
        before = two.log(two.env_a, session_id).read_bytes()
        refused = two.go_on(two.env_a, two.here, session_id)  # A asks B, through the relay, as it was reached
        assert refused.returncode == 3, refused.stderr
        assert f"moved out to {HOST_B}, and {HOST_B} holds it" in refused.stderr
        assert f"`chock run --continue {session_id} --force`" in refused.stderr
        assert two.log(two.env_a, session_id).read_bytes() == before

    done = two.go_on(two.env_b, two.there, session_id)
    assert done.returncode == 0, done.stderr
    assert two.status(two.b, session_id) == "ended"
    assert b'"text": "More done."' in two.log(two.env_b, session_id).read_bytes()
    assert git_value(two.there, "show", f"chock/{session_id}:a.txt") == "A"

    back = two.move(session_id, "local", source=("--daemon", two.b.address), project=two.here)
    assert back.returncode == 0, back.stderr
    assert two.status(two.a, session_id) == "ended"
    assert two.status(two.b, session_id) == "moved"
    kept = two.log(two.env_a, session_id).with_name("log.jsonl.moved-1").read_bytes()
    assert two.log(two.env_a, session_id).read_bytes().startswith(kept)  # all A had, then B's story
    assert b'"text": "More done."' in two.log(two.env_a, session_id).read_bytes()


def test_a_running_session_whose_adopt_answer_was_lost_comes_back_over_the_worktree_its_move_kept(hosts):  # noqa: F811
    """The children's steps, as `chock move` ordered them with B's answer lost: A's step 1 kept the worktree of
    the running session (step 3 would have removed it, and never ran); B carried it on to its end; moved back, A
    takes the log B sends (beginning with all of A's), removes that worktree, and carries it on from the branch."""
    a, b, project_a, project_b = hosts
    process, session_id = replayed_terminal_session(a, project_a, SLOW)
    wait_for_event(a, session_id, "tool.result", lambda e: e["call_id"] == "c1")  # waits in the slow model call
    sent = _move_out(a, session_id, "hostb")
    assert process.wait(30) == 8
    kept = a.layout.workspace_dir(session_id)
    assert kept.exists()  # step 3 never ran: A's worktree is still there
    b.replay_instance(SLOW)
    _relay(a, b, session_id, sent)
    taken = _move_in(b, session_id, project_b, "hosta", "--running")  # the adopt, its answer lost: no --moved on A
    assert taken.returncode == 0, taken.stderr  # it carried on there, to its end

    back = _move_out(b, session_id, "hosta")
    _relay(b, a, session_id, back)
    came = _move_in(a, session_id, project_a, "hostb")
    assert came.returncode == 0, came.stderr
    assert not kept.exists()
    assert a.layout.log_path(session_id).with_name("log.jsonl.moved-1").exists()
    assert git_value(project_a, "show", f"chock/{session_id}:b.txt") == "B"
    a.replay_instance([{"text": "More done.", "tool_calls": []}] * 6)
    done = a.chock("run", "--yes", "--continue", session_id, "more", cwd=project_a)
    assert done.returncode == 0, done.stderr
    assert a.events(session_id)[-1]["reason"] == "completed"


def test_forcing_back_a_session_whose_adopt_answer_was_lost_says_the_two_copies_may_diverge(pair):
    two = pair()
    session_id = two.ended_on_a()
    with CuttingRelay(two.b.socket, verb="move-in", drop_reply=True) as relay:
        assert two.move(session_id, relay.address).returncode == 1
        assert relay.cut == 1 and relay.dropped
    forced = two.go_on(two.env_a, two.here, session_id, "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"taken back without asking it (--force): if {HOST_B} adopted it, the two copies now diverge" in (
        forced.stderr
    )
    assert two.status(two.a, session_id) == "ended"


# A child killed with SIGKILL ------------------------------------------------------------------------------

HANDOVER = (b'"type": "session.end"', b'"reason": "handover"')
ADOPT_HERE = (b'"type": "session.adopt"', b'"via": "move"')


def _dies(flag: str, when: str, needles: tuple[bytes, ...]) -> str:
    return DIES.format(flag=flag, when=when, needles=needles, once=str(short_dir() / "died"))


def _holds_nothing(two: Pair, session_id: str) -> None:
    """B holds nothing of the session: no row, no log, nothing received, no branch."""
    assert two.status(two.b, session_id) is None
    assert not two.log(two.env_b, session_id).exists()
    assert not (Path(two.env_b["CHOCK_STATE_DIR"]) / "moves" / session_id).exists()
    assert git_value(two.there, "branch", "--list", f"chock/{session_id}") == ""


@pytest.mark.parametrize("when", ["before", "after"])
def test_the_sources_child_killed_at_its_handover_end_leaves_the_session_on_the_source(pair, when):
    """`chock run --move-out` killed just before its handover end is written (the span it began has no end and a
    dead owner: provably free), or just after (handed over to B, which never heard of it): A is the one owner,
    `chock move` says so and what to do, and `chock run --continue` completes it on A (asking B first, when the
    handover is logged)."""
    two = pair(a_dies=_dies("--move-out", when, HANDOVER))
    session_id = two.ended_on_a()
    failed = two.move(session_id, two.b.address)
    assert failed.returncode == 1, failed.stderr
    assert "`chock run --move-out` was killed by signal 9" in failed.stderr, failed.stderr
    assert f"{two.b.address} holds nothing of it" in failed.stderr, failed.stderr
    assert f"`chock run --continue {session_id}`" in failed.stderr, failed.stderr
    _holds_nothing(two, session_id)
    assert _moved_out_to_b(two.log(two.env_a, session_id)) == (when == "after")

    done = two.go_on(two.env_a, two.here, session_id)
    assert done.returncode == 0, done.stderr
    assert two.status(two.a, session_id) == "ended"
    assert b'"text": "More done."' in two.log(two.env_a, session_id).read_bytes()
    _holds_nothing(two, session_id)


def test_the_targets_child_killed_before_its_adopt_leaves_the_session_on_the_source(pair):
    """`chock run --move-in` killed just before its adopt: B never owned it, and what it wrote is a leftover no
    session of B's; `chock move` says it is unknown whether B adopted it and how to find out; A's `--continue`
    asks B, which does not hold it, and completes it on A; a second `chock move` replaces B's leftover."""
    two = pair(b_dies=_dies("--move-in", "before", ADOPT_HERE))
    session_id = two.ended_on_a()
    failed = two.move(session_id, two.b.address)
    assert failed.returncode == 1, failed.stderr
    assert f"if {two.b.address} did not adopt it, `chock run --continue {session_id}`" in failed.stderr
    assert not any(b'"via": "move"' in line and b'"from"' in line for line in _lines(two.log(two.env_b, session_id)))
    assert two.status(two.b, session_id) in (None, "handed-over")

    done = two.go_on(two.env_a, two.here, session_id)
    assert done.returncode == 0, done.stderr
    assert two.status(two.a, session_id) == "ended"

    again = two.move(session_id, two.b.address)  # the hook killed once: this one adopts it
    assert again.returncode == 0, again.stderr
    assert two.status(two.b, session_id) == "ended"
    assert two.status(two.a, session_id) == "moved"
    assert b'"text": "More done."' in two.log(two.env_b, session_id).read_bytes()


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def test_a_move_whose_target_and_then_source_were_killed_after_their_adopts_ends_on_the_source_when_run_again(pair):
    """B's `--move-in` killed just after its adopt (B owns the session, and its daemon says so), then A's last step
    killed just after its own adopt: both logs end one event past the handover, at the same id. `chock move` again
    sees that B went on past the handover and only ends the session on A; B carries it on."""
    two = pair(a_dies=_dies("--moved", "after", ADOPT_HERE), b_dies=_dies("--move-in", "after", ADOPT_HERE))
    session_id = two.ended_on_a()
    failed = two.move(session_id, two.b.address)
    assert failed.returncode == 1, failed.stderr
    assert f"and is {two.b.address}'s now, but ending it" in failed.stderr, failed.stderr
    assert f"`chock move {session_id} --to {two.b.address}` again ends it" in failed.stderr, failed.stderr
    ids = [json.loads(line)["id"] for line in (_lines(two.log(two.env_a, session_id))[-1],
                                               _lines(two.log(two.env_b, session_id))[-1])]  # fmt: skip
    assert ids[0] == ids[1], "both logs end one event past the handover"

    again = two.move(session_id, two.b.address)
    assert again.returncode == 0, again.stderr
    assert f"holds session {session_id} already" in again.stderr, again.stderr
    assert two.status(two.a, session_id) == "moved"
    done = two.go_on(two.env_b, two.there, session_id)
    assert done.returncode == 0, done.stderr
    assert two.status(two.b, session_id) == "ended"
    assert b'"text": "More done."' in two.log(two.env_b, session_id).read_bytes()
