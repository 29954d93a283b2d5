"""Tool calls a hostile model makes to stop the session or spend it: a pattern that backtracks without end is
stopped at its deadline or by Ctrl-C, a pattern or path that breaks Python's own code is the model's error and
the session goes on, a chain of directories thousands deep is walked to a depth and noted, an edit that would
multiply a file is refused, and a write that fails leaves the file as it was."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chock.session import tools
from chock.session.tools import confined, edit_file, search
from chock.session.tools.tool import Tool
from tests.fakes.wait import wait_until
from tests.test_tools import Workspace, call, chain, peak_bytes

BACKTRACKS = "(a+)+$"  # on forty `a`s and a `!`: 2^40 ways to fail
SLOW_LINE = "a" * 40 + "!\n"


def children() -> list[int]:
    """The processes whose parent is this one."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


# search: a pattern too slow ----------------------------------------------------------------------------


def test_a_search_too_slow_is_stopped_at_its_deadline_and_leaves_nothing_running(root, monkeypatch, no_hang):
    monkeypatch.setattr(search, "SEARCH_SECONDS", 1)  # 60 s in a session
    (root / "f.txt").write_text(SLOW_LINE)
    (root / "g.txt").write_text("aaa\n")
    before = set(children())
    output, is_error = call(root, "search", pattern=BACKTRACKS)
    assert is_error and output.startswith("search stopped after 1 s: the pattern is too slow on these files; simplify")
    assert set(children()) <= before  # the search's process was killed and collected
    assert call(root, "search", pattern="a+$", path="g.txt") == ("g.txt:1:aaa", False)  # the next call is served


def test_ctrl_c_stops_a_session_whose_search_is_slow(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [
            {"call_id": "w", "name": "write_file", "args": {"path": "f.txt", "content": SLOW_LINE}},
            {"call_id": "s", "name": "search", "args": {"pattern": BACKTRACKS, "path": "f.txt"}}]},
        {"text": "done", "tool_calls": []},
    ])  # fmt: skip
    process = home.spawn("run", "--yes", "--json", "t", cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        sessions = home.layout.sessions_dir
        sid = wait_until(lambda: sessions.is_dir() and os.listdir(sessions), 60, "the session to start")[0]
        wait_until(
            lambda: any(e.get("call_id") == "s" for e in home.events(sid) if e["type"] == "tool.call"),
            60,
            "the search to start",
        )
        process.send_signal(signal.SIGINT)  # what a person's Ctrl-C does
        process.communicate(timeout=50)  # a bound on a hang only: a stop ends the session at once
    finally:
        process.kill()
        process.wait()
    events = home.events(sid)
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "interrupted"
    assert not any(e["type"] == "tool.result" and e["call_id"] == "s" for e in events)  # stopped, not finished


def test_a_search_in_a_file_of_lines_a_pattern_could_run_across_is_linear(root, no_hang):
    """`x[^z]*z` can match newlines: searched over a whole run of lines it would try from each `x` to the run's
    end, some 10^11 steps here. Each line is searched within its own bounds, and the search ends."""
    (root / "f").write_text("x\n" * 1_000_000)
    for pattern in ("x[^z]*z", r"x\s*z", "(?s)x.*z"):
        assert call(root, "search", pattern=pattern) == ("(no matches)", False), pattern
    (root / "f").write_text("x\n" * 10 + "x z\n")
    assert call(root, "search", pattern=r"x[^z]*z") == ("f:11:x z", False)


# calls that break Python's own code ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("a{4294967296}", "the repetition number is too large"),
        ("(" * 1500 + ")" * 1500, "it nests groups too deeply"),
        ("(?:" * 2000 + "a" + ")" * 2000, "it nests groups too deeply"),
        ("a(b", "it is not a valid regular expression: missing ), unterminated subpattern at position 1"),
    ],
    ids=["overflow", "recursion", "recursion-2", "invalid"],
)
def test_a_pattern_python_cannot_compile_is_the_models_error(root, pattern, why):
    output, is_error = call(root, "search", pattern=pattern)
    assert is_error and output.startswith("the pattern ") and output.endswith(f" cannot be compiled: {why}"), output
    assert len(output) < 300  # the pattern is quoted in its first characters


def test_a_symlink_loop_is_refused_by_every_file_tool_naming_it(root):
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    for name, args in [
        ("read_file", {"path": "a"}),
        ("write_file", {"path": "a/x", "content": "x"}),
        ("edit_file", {"path": "a", "old": "x", "new": "y"}),
        ("list_files", {"path": "a"}),
        ("search", {"pattern": "x", "path": "a"}),
    ]:
        output, is_error = call(root, name, **args)
        assert is_error and output == f"{args['path']} is a loop of symlinks; name the file itself", name


class Faulty(Tool):
    name = "faulty"
    description = "a tool whose code fails"
    parameters: ClassVar[dict[str, Any]] = {}

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def run(self, context, args):
        raise self.error


def test_any_other_exception_of_a_tool_is_its_error_but_a_cancel_or_an_interrupt_is_not(root):
    def dispatched(error: BaseException) -> tools.Result:
        return asyncio.run(tools.dispatch({"faulty": Faulty(error)}, Workspace(root), "faulty", {}))

    result = dispatched(RuntimeError("Symlink loop from '/x'"))
    assert (result.output, result.is_error) == ("faulty failed: RuntimeError: Symlink loop from '/x'", True)
    assert dispatched(MemoryError()).output == "faulty failed: MemoryError: "
    for error in (asyncio.CancelledError(), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            dispatched(error)


def test_calls_that_once_crashed_the_session_are_errors_and_it_goes_on(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [
            {"call_id": "overflow", "name": "search", "args": {"pattern": "a{4294967296}"}},
            {"call_id": "deep", "name": "search", "args": {"pattern": "(" * 1500 + ")" * 1500}},
            {"call_id": "mk", "name": "shell", "args": {"command": "ln -s b a && ln -s a b"}},
            {"call_id": "loop", "name": "read_file", "args": {"path": "a"}}]},
        {"text": "done", "tool_calls": []},
    ])  # fmt: skip
    result = home.chock("run", "--yes", "--json", "t", cwd=project, timeout=120)
    events = [json.loads(line) for line in result.stdout.splitlines()]
    results = {e["call_id"]: e for e in events if e["type"] == "tool.result"}
    assert [results[c]["is_error"] for c in ("overflow", "deep", "mk", "loop")] == [True, True, False, True]
    assert results["loop"]["output"] == "a is a loop of symlinks; name the file itself"
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed", result.stderr


# a walk of a chain of directories -----------------------------------------------------------------------


def test_a_walk_goes_down_to_its_depth_and_notes_what_is_deeper(root):
    deep = confined.WALK_DEPTH + 5
    chain(root, deep, "bottom.txt")
    try:
        first = "d/" * (confined.WALK_DEPTH + 1)
        note = (
            f"[not walked: 1 directory more than {confined.WALK_DEPTH} levels below the directory walked, "
            f"the first …{first[-confined.NOTE_PATH - 1 : -1]}; "
        )
        output, is_error = call(root, "list_files")
        assert not is_error and output == "d/top.txt\n" + note + "list a subdirectory]"
        output, is_error = call(root, "search", pattern="needle")
        assert not is_error and output == "d/top.txt:1:needle\n" + note + "narrow the path]"
        below = "d/" * 10
        output, _ = call(root, "list_files", path=below)  # from deeper down, the bottom is in reach
        assert output == f"{below}{'d/' * (deep - 10)}bottom.txt"
    finally:  # pytest's own clean-up of tmp dirs recurses, and would fail on this tree in a later run
        subprocess.run(["rm", "-rf", str(root / "d")], check=True)


def test_a_walk_of_a_chain_thousands_deep_holds_little(root):
    chain(root, 3000, "bottom.txt")
    try:
        (output, is_error), peak = peak_bytes(lambda: call(root, "list_files"))
        assert not is_error and output.startswith("d/top.txt\n[not walked: 1 directory")
        assert peak < 2 * 1024 * 1024, peak  # a path per level held 3,000 paths of 1,500 parts on average
    finally:
        subprocess.run(["rm", "-rf", str(root / "d")], check=True)


# edit_file and write_file -------------------------------------------------------------------------------


def test_an_edit_of_every_occurrence_that_would_pass_the_limit_is_refused_before_it_is_made(root):
    (root / "f.txt").write_text("a" * 100_000)
    output, is_error = call(root, "edit_file", path="f.txt", old="a", new="b" * 100, all=True)
    assert is_error and output == (
        "f.txt would have 10,000,000 bytes after replacing 100,000 occurrence(s); edit_file writes files up to "
        f"{edit_file.EDIT_LIMIT // 2**20} MiB: replace fewer, or change it with shell (e.g. sed -i)"
    )
    assert (root / "f.txt").read_text() == "a" * 100_000
    assert call(root, "edit_file", path="f.txt", old="a", new="bb", all=True) == (
        "replaced 100000 occurrence(s) in f.txt",
        False,
    )
    assert (root / "f.txt").read_text() == "b" * 200_000


def test_a_write_of_text_utf8_cannot_encode_leaves_the_file_as_it_was(root):
    (root / "main.py").write_text("important code\n")
    content = json.loads('"new \\ud800 text"')  # a lone surrogate, as a tool call's JSON arguments can hold
    for name, args in [
        ("write_file", {"path": "main.py", "content": content}),
        ("edit_file", {"path": "main.py", "old": "important", "new": content}),
    ]:
        output, is_error = call(root, name, **args)
        assert is_error and output.startswith("main.py was left as it was: the text holds '\\ud800' at character"), name
        assert (root / "main.py").read_text() == "important code\n", name
    assert sorted(os.listdir(root)) == ["main.py"]


def test_a_write_the_disk_refuses_leaves_the_file_as_it_was_and_keeps_its_mode(root):
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho important\n")
    script.chmod(0o750)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limit[1]))  # a write past it fails (EFBIG), as on a full disk
    try:
        output, is_error = call(root, "write_file", path="run.sh", content="#!/bin/sh\n" + "echo x\n" * 20_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    assert (output, is_error) == ("write_file failed: File too large", True)
    assert script.read_text() == "#!/bin/sh\necho important\n"
    assert sorted(os.listdir(root)) == ["run.sh"]  # nothing half-written left beside it
    assert call(root, "write_file", path="run.sh", content="#!/bin/sh\necho new\n") == (
        "wrote 19 bytes to run.sh",
        False,
    )
    assert script.read_text() == "#!/bin/sh\necho new\n" and script.stat().st_mode & 0o7777 == 0o750


def test_a_file_with_another_name_or_owner_is_written_in_place_as_they_expect(root):
    """A file hard-linked elsewhere, another user's or another group's, is written where it is: its other name
    reads the new text and its owner and group stay; only a file of our own with no other name is replaced by a
    new one renamed over it."""
    shared = root / "shared.txt"
    shared.write_text("old\n")
    os.link(shared, root / "other-name.txt")
    theirs = root / "theirs.txt"
    theirs.write_text("old\n")
    os.chown(theirs, 65534, 65534)
    team = root / "team.txt"  # ours, but of a group the team shares
    team.write_text("old\n")
    os.chown(team, os.geteuid(), 65534)
    for path in ("shared.txt", "theirs.txt", "team.txt"):
        inode = (root / path).stat().st_ino
        assert call(root, "write_file", path=path, content="new\n") == (f"wrote 4 bytes to {path}", False)
        assert (root / path).stat().st_ino == inode
    assert (root / "other-name.txt").read_text() == "new\n"
    assert (theirs.stat().st_uid, theirs.stat().st_gid) == (65534, 65534) and theirs.read_text() == "new\n"
    assert team.stat().st_gid == 65534
    mine = root / "mine.txt"
    mine.write_text("old\n")
    inode = mine.stat().st_ino
    assert call(root, "edit_file", path="mine.txt", old="old", new="new")[1] is False
    assert mine.read_text() == "new\n" and mine.stat().st_ino != inode  # replaced whole: a failure leaves it be


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
