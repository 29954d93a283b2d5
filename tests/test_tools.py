"""The tools on real files: each file tool reads no more than it returns, a special or huge file is refused or
cut with a note, a symlink swapped in is never followed, `shell`'s timeout is validated, and a stop or a timeout
at any moment of a command's start kills all of its sandbox; and `chock run` under a memory limit reads and
searches a 4 GiB sparse file and goes on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from chock.log.events import TOOL_OUTPUT_LIMIT
from chock.session import tools
from chock.session.ports import Sandboxed
from chock.session.sandbox import Sandbox, find_bwrap
from chock.session.tools import confined, edit_file, search, shell
from chock.session.tools.tool import ToolRefused
from tests.fakes.sessions import no_process_left


class Workspace:
    """The context a file tool runs in (chock.session.tools.tool.Files): only the workspace."""

    def __init__(self, root: Path) -> None:
        self.workspace = root


def call(root: Path, name: str, **args: object) -> tuple[str, bool]:
    """One call through the session's table, as the loop makes it: (output, is_error)."""
    result = asyncio.run(tools.dispatch(tools.SESSION_TOOLS, Workspace(root), name, args))
    return result.output, result.is_error


def peak_bytes(action) -> tuple[object, int]:
    """What `action()` returns, and the most memory Python held at once while it ran."""
    tracemalloc.start()
    try:
        value = action()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def numbered(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


# read_file --------------------------------------------------------------------------------------------


def test_read_file_gives_the_lines_asked_for(root):
    (root / "a.txt").write_text(numbered(100))
    assert call(root, "read_file", path="a.txt", offset=10, limit=3) == ("line 11\nline 12\nline 13\n", False)
    assert call(root, "read_file", path="a.txt", offset="98") == ("line 99\nline 100\n", False)
    assert call(root, "read_file", path="a.txt", limit=2) == ("line 1\nline 2\n", False)
    assert call(root, "read_file", path="a.txt", offset=500) == ("", False)
    assert call(root, "read_file", path="a.txt") == (numbered(100), False)


def test_read_file_stops_at_the_event_bound_and_the_offset_it_names_reads_on(root):
    text = numbered(20_000)
    (root / "a.txt").write_text(text)
    first, is_error = call(root, "read_file", path="a.txt")
    assert not is_error and len(first.encode()) <= TOOL_OUTPUT_LIMIT
    note = first.splitlines()[-1]
    assert note.startswith("[cut at ") and f"a.txt has {len(text)} bytes" in note
    offset = int(re.search(r"offset (\d+)", note).group(1))
    shown = first[: first.rindex("\n[cut")]
    assert text.startswith(shown)
    second, _ = call(root, "read_file", path="a.txt", offset=offset)
    assert text.startswith(shown[: shown.rindex("\n") + 1] + second[: second.index("\n") + 1])


def test_a_line_longer_than_the_bound_is_cut_and_never_held_whole(root):
    (root / "one-line.txt").write_bytes(b"needle " + b"a" * (20 * 1024 * 1024) + b"\nneedle two\n")
    (output, is_error), peak = peak_bytes(lambda: call(root, "read_file", path="one-line.txt"))
    assert not is_error and len(output.encode()) <= TOOL_OUTPUT_LIMIT
    assert output.startswith("needle aaaa") and output.endswith(
        "alone is longer than 65024 bytes; use shell for the rest of it]"
    )
    assert peak < 2 * 1024 * 1024  # of a 20 MiB line
    (output, is_error), peak = peak_bytes(lambda: call(root, "search", pattern="needle"))
    hits = output.splitlines()
    assert hits[0].startswith("one-line.txt:1:needle aaa") and len(hits[0]) < search.HIT_LIMIT + 40
    assert hits[1] == "one-line.txt:2:needle two"
    assert hits[2] == "[1 line(s) longer than 1 MiB searched in their first MiB]"
    assert peak < 8 * 1024 * 1024


# Lines that a search of many lines at once could get wrong: a match across lines, CRLF, an empty line,
# a character cut by nothing but invalid UTF-8, and anchors.
TRICKY = (
    b"alpha\nbeta gamma\r\n\nalpha beta\n\xff\xfebroken alpha\nword\r\n   \n"
    b"a\nb a b\n\xc3\xa9t\xc3\xa9 alpha\nend without newline alpha"
)
CROSSING = ["alpha\\s+beta", "^beta", "beta$", "(?s)a.b", "a\\s+b", "^$", "\\balpha\\b", "[^z]{4}\\n", "a", "x*",
            "\\Aalpha", "(?<=a )b", "t\\S+ alpha$", "\\s$", "$", "alpha$"]  # fmt: skip


@pytest.mark.parametrize("run", [confined.RUN, 7])
def test_search_finds_exactly_what_searching_each_line_alone_finds(root, monkeypatch, run):
    """However the file is read (one run of lines, or runs of a few bytes that cut lines apart), each line is
    reported exactly when the pattern matches in it alone, with its number."""
    monkeypatch.setattr(confined, "RUN", run)
    (root / "t.txt").write_bytes(TRICKY)
    lines = TRICKY.decode("utf-8", "replace").splitlines(keepends=True)
    for pattern in CROSSING:
        expected = [
            f"t.txt:{number}:{line.rstrip()}"
            for number, line in enumerate(lines, 1)
            if re.search(pattern, line.replace("\r\n", "\n"))
        ]
        output, is_error = call(root, "search", pattern=pattern)
        assert not is_error
        assert output.splitlines() == (expected or ["(no matches)"]), pattern


def test_a_match_deep_in_a_long_line_is_shown_around_the_match(root):
    (root / "min.js").write_text("x" * 5000 + "FINDME" + "y" * 5000 + "\n")
    output, _ = call(root, "search", pattern="FINDME")
    assert "FINDME" in output and output.startswith("min.js:1:…x") and output.endswith("y…")
    assert len(output) <= len("min.js:1:") + search.HIT_LIMIT + 2


def test_binary_files_are_text_up_to_their_first_nul_byte(root):
    (root / "image.png").write_bytes(b"\x89PNG needle\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 10)
    (root / "late.bin").write_bytes(numbered(2000).encode() + b"needle\x00needle\n" + b"\x00" * 100_000)
    output, is_error = call(root, "read_file", path="image.png")
    assert (output, is_error) == (
        "[stopped: image.png is binary (a NUL byte in its first 8000 bytes); read_file shows text, shell shows bytes"
        " (xxd)]",
        False,
    )
    output, _ = call(root, "read_file", path="late.bin", offset=1998)
    assert output == (
        "line 1999\nline 2000\nneedle\n[stopped: late.bin is binary (a NUL byte in line 2001); read_file shows text,"
        " shell shows bytes (xxd)]"
    )
    output, _ = call(root, "search", pattern="needle")
    assert output == "late.bin:2001:needle\n[binary, not searched from their first NUL byte on: image.png, late.bin]"


def test_a_fifo_is_refused_by_every_file_tool_and_never_blocks_one(root, no_hang):
    os.mkfifo(root / "pipe")
    (root / "a.txt").write_text("needle\n")
    for name, args in [
        ("read_file", {"path": "pipe"}),
        ("edit_file", {"path": "pipe", "old": "a", "new": "b"}),
        ("write_file", {"path": "pipe", "content": "x"}),
    ]:
        output, is_error = call(root, name, **args)
        assert is_error and output == "pipe is not a file", name
    assert call(root, "search", pattern="needle") == ("a.txt:1:needle", False)
    assert call(root, "search", pattern="needle", path="pipe") == ("(no matches)", False)
    assert call(root, "list_files") == ("a.txt\npipe", False)


def test_a_symlink_swapped_in_after_the_check_is_never_followed(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET\n")
    (root / "sub").mkdir()
    (root / "sub" / "f.txt").write_text("mine\n")
    (root / "g.txt").write_text("mine\n")
    in_dir = confined.inside(root, "sub/f.txt")
    last = confined.inside(root, "g.txt")
    (root / "sub" / "f.txt").unlink()
    (root / "sub").rmdir()
    (root / "sub").symlink_to(outside)  # a directory on the way swapped for a symlink
    (root / "g.txt").unlink()
    (root / "g.txt").symlink_to(outside / "f.txt")  # the file itself swapped for one
    for path in (in_dir, last):
        with pytest.raises(ToolRefused, match="changed to a symlink while it was opened"):
            confined.open_file(root, path)
        with pytest.raises(ToolRefused, match="changed to a symlink while it was opened"):
            confined.write(root, path, "overwritten")
    assert (outside / "f.txt").read_text() == "SECRET\n"


def test_a_directory_swapped_for_a_symlink_during_a_walk_is_not_walked(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host-file").write_text("x")
    (root / "a.txt").write_text("x")
    (root / "b").mkdir()
    (root / "b" / "c.txt").write_text("x")
    walk = iter(confined.Walk(root, root.resolve()))
    assert next(walk).name == "a.txt"  # b is listed, not yet opened
    (root / "b" / "c.txt").unlink()
    (root / "b").rmdir()
    (root / "b").symlink_to(outside)
    assert list(walk) == []


# the diffs write_file and edit_file give beside their output -------------------------------------------


def changed(root: Path, name: str, **args: object) -> tools.Result:
    return asyncio.run(tools.dispatch(tools.SESSION_TOOLS, Workspace(root), name, args))


def test_write_and_edit_give_the_change_as_git_shows_it_and_the_model_only_the_output(root):
    new = changed(root, "write_file", path="sub/a.txt", content="one\ntwo")
    assert (new.output, new.is_error) == ("wrote 7 bytes to sub/a.txt", False)
    assert new.diff == ("--- /dev/null\n+++ b/sub/a.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n")
    (root / "big.txt").write_text(numbered(100_000))
    edited = changed(root, "edit_file", path="big.txt", old="line 70000\n", new="line seventy thousand\n")
    assert edited.output == "replaced 1 occurrence(s) in big.txt"
    expected = subprocess.run(
        ["diff", "-u", "--label", "a/big.txt", "--label", "b/big.txt", "-", str(root / "big.txt")],
        input=numbered(100_000), capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert edited.diff == expected  # the hunk numbered from the file's first line, as diff(1) numbers it
    same = changed(root, "write_file", path="big.txt", content=(root / "big.txt").read_text())
    assert same.diff == "" and not same.is_error


def test_a_diff_is_bounded_and_a_file_that_is_not_text_gets_none(root):
    from chock.session.tools import diff

    many = changed(root, "write_file", path="many.txt", content=numbered(5000))
    lines = many.diff.splitlines()
    assert len(many.diff.encode()) < diff.DIFF_LIMIT + 200
    assert lines[-1].startswith("… ") and f"cut at {diff.DIFF_LIMIT // 1024} KiB" in lines[-1]
    assert lines[3] == "+line 1" and int(lines[-1].split()[1]) + len(lines) - 4 == 5000  # said how many were left
    rewrite = changed(root, "write_file", path="many.txt", content=numbered(5000).replace("line", "row"))
    assert rewrite.diff.startswith("--- a/many.txt\n+++ b/many.txt\n@@ -1,5000 +1,5000 @@\n-line 1\n")
    assert len(rewrite.diff.encode()) < diff.DIFF_LIMIT + 200
    huge = changed(root, "write_file", path="many.txt", content="".join(f"{n}\n" for n in range(30_000)))
    assert huge.diff.endswith("(5000 lines from line 1 on became 30000: too many to compare)\n")
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    binary = changed(root, "write_file", path="latin.txt", content="coffee\n")
    assert (binary.output, binary.is_error, binary.diff) == ("wrote 7 bytes to latin.txt", False, "")
    assert changed(root, "read_file", path="latin.txt").diff == ""


# edit_file, list_files, search ------------------------------------------------------------------------


def test_edit_file_refuses_a_file_over_its_bound_and_one_that_is_not_utf8(root):
    big = root / "big.txt"
    with open(big, "wb") as handle:
        handle.truncate(edit_file.EDIT_LIMIT + 1)
    output, is_error = call(root, "edit_file", path="big.txt", old="a", new="b")
    assert is_error and output.startswith(
        f"big.txt has {edit_file.EDIT_LIMIT + 1} bytes; edit_file edits files up to 8 MiB"
    )
    (root / "latin.txt").write_bytes(b"caf\xe9 ol\xe9\n")
    output, is_error = call(root, "edit_file", path="latin.txt", old="caf", new="tea")
    assert is_error and output.startswith("latin.txt is not UTF-8 text")
    assert (root / "latin.txt").read_bytes() == b"caf\xe9 ol\xe9\n"
    (root / "ok.txt").write_text("hello\n")
    assert call(root, "edit_file", path="ok.txt", old="hello", new="bye") == (
        "replaced 1 occurrence(s) in ok.txt",
        False,
    )
    assert (root / "ok.txt").read_text() == "bye\n"


def chain(root: Path, depth: int, file: str, *, top: bool = True) -> None:
    """`depth` nested directories `d` below `root`, `file` in the deepest, and (with `top`) `top.txt` in the
    first, each holding `needle`."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
        if level == 0 and top:
            Path(f"/proc/self/fd/{fd}/top.txt").write_text("needle\n")
    with open(os.open(file, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
        handle.write("needle\n")
    os.close(fd)


def test_list_files_and_search_walk_a_tree_deeper_than_pythons_recursion_limit(root, monkeypatch):
    depth = sys.getrecursionlimit() + 100
    monkeypatch.setattr(confined, "WALK_DEPTH", depth)  # the walk recurses at no depth it is let go to
    try:
        chain(root, depth, "bottom.txt", top=False)
        bottom = "d/" * depth + "bottom.txt"
        assert call(root, "list_files") == (bottom, False)
        assert call(root, "search", pattern="needle") == (f"{bottom}:1:needle", False)
    finally:  # pytest's own clean-up of tmp dirs recurses, and would fail on this tree in a later run
        subprocess.run(["rm", "-rf", str(root / "d")], check=True)


def test_a_walk_stops_at_its_bound_with_a_note(root, monkeypatch):
    monkeypatch.setattr(confined, "WALK_LIMIT", 50)
    for n in range(100):
        (root / f"f{n:03}").write_text("needle\n")
    output, _ = call(root, "list_files")
    assert output.splitlines()[-1] == "[stopped after reading 50 directory entries; list a subdirectory]"
    assert len(output.splitlines()) == 51
    output, _ = call(root, "search", pattern="needle")
    assert output.splitlines()[-1] == "[stopped after reading 50 directory entries; narrow the path]"


def test_a_call_stops_at_its_read_bound_with_a_note(root, monkeypatch):
    monkeypatch.setattr(confined, "SCAN_LIMIT", 1024 * 1024)
    (root / "log.txt").write_text(numbered(300_000))  # about 3.5 MiB
    output, is_error = call(root, "read_file", path="log.txt", offset=250_000, limit=1)
    assert (output, is_error) == (
        "[stopped: read_file reads through at most 1 MiB in one call; use shell (sed -n) to reach further into"
        " log.txt]",
        False,
    )
    output, _ = call(root, "search", pattern="^line 299999$")
    assert output == "(no matches)\n[stopped after reading 1 MiB; narrow the path]"


def test_search_stops_at_its_bound_on_matches_and_on_bytes(root):
    (root / "many.txt").write_text("needle\n" * (search.SEARCH_LIMIT + 100))
    output, _ = call(root, "search", pattern="needle")
    lines = output.splitlines()
    assert len(lines) == search.SEARCH_LIMIT + 1
    assert lines[-1] == "[stopped: too many matches; narrow the pattern or the path]"
    (root / "many.txt").write_text(("needle " + "x" * 390 + "\n") * 400)
    output, _ = call(root, "search", pattern="needle")
    assert len(output.encode()) <= TOOL_OUTPUT_LIMIT
    assert output.endswith("\n[stopped: too many matches; narrow the pattern or the path]")


# shell's timeout --------------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", ["nan", "NaN", -1, "-5", "abc", 0, "0", 1e9, "inf", 10**400, True, [5]])
def test_a_timeout_that_is_not_a_finite_positive_number_within_the_limit_is_the_tools_error(root, timeout):
    output, is_error = call(root, "shell", command="sleep 1", timeout=timeout)
    assert is_error and output.startswith("shell's `timeout` must be")


@pytest.mark.parametrize(("timeout", "seconds"), [(None, 600.0), ("", 600.0), (5, 5.0), ("2.5", 2.5), (3600, 3600.0)])
def test_a_valid_timeout_is_taken(timeout, seconds):
    assert shell.timeout_of({"timeout": timeout}) == seconds


def test_a_command_killed_at_its_timeout_is_an_error_and_a_bad_timeout_is_refused_before_approval(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [
            {"call_id": "c1", "name": "shell", "args": {"command": "echo started; sleep 30", "timeout": 0.5}},
            {"call_id": "c2", "name": "shell", "args": {"command": "sleep 30", "timeout": "nan"}},
            {"call_id": "c3", "name": "shell", "args": {"command": "sleep 30", "timeout": -1}},
            {"call_id": "c4", "name": "shell", "args": {"command": "echo fine", "timeout": "5"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    result = home.chock("run", "--yes", "timeouts", cwd=project, timeout=60)
    assert result.returncode == 0, result.stderr
    events = home.events(home.only_session())
    results = {e["call_id"]: e for e in events if e["type"] == "tool.result"}
    assert results["c1"]["is_error"] and results["c1"]["output"] == "started\n\n[killed after 0.5 s]"
    for call_id in ("c2", "c3"):
        assert results[call_id]["is_error"] and "`timeout` must be more than 0" in results[call_id]["output"]
    assert results["c4"] == {**results["c4"], "is_error": False, "output": "fine\n"}
    asked = [e["call_id"] for e in events if e["type"] == "approval.request"]
    assert asked == ["c1", "c4"]


# shell's kill ------------------------------------------------------------------------------------------


class SandboxContext:
    """What `shell` asks of a session (chock.session.tools.tool.Context): a real sandbox, and the background
    work it hands over, which the test cancels as a stop does (leaving chock.session.scopes.Nursery)."""

    def __init__(self, root: Path) -> None:
        dirs = [root / name for name in ("workspace", "git", "admin", "home", "knowledgebase")]
        for path in dirs:
            path.mkdir()
        self.runner = Sandboxed(Sandbox(*dirs), find_bwrap())
        self.workspace = dirs[0]
        self.work: list[asyncio.Task[None]] = []

    def emit(self, type: str, **fields: object) -> None:
        pass

    def handle(self, prefix: str) -> str:
        return f"{prefix}-{len(self.work)}"

    def track(self, handle: str, work) -> None:
        self.work.append(asyncio.ensure_future(work))


async def settled(*tasks: asyncio.Future) -> None:
    """Every task ends within 5 s of being killed, whatever its sandbox was doing."""
    _, pending = await asyncio.wait(tasks, timeout=5)
    assert not pending, "a killed command's call never ended"


# Every millisecond of a command's first 20: creating the bwrap process, bwrap cloning the sandbox's pid 1,
# which starts a session of its own and only then binds its life to the outer bwrap's.
DELAYS = [n / 1000 for n in range(20)]


def test_a_stop_or_a_timeout_in_any_moment_of_a_commands_start_leaves_no_process_of_it(tmp_path):
    context = SandboxContext(tmp_path)

    async def stopped_after(delay: float, command: str) -> None:
        call = asyncio.ensure_future(shell.Shell().run(context, {"command": command, "background": True}))
        await asyncio.sleep(delay)
        call.cancel()  # the stop, wherever the session's loop is
        await settled(call)
        for work in context.work:  # then the background work the session holds
            work.cancel()
        if context.work:
            await settled(*context.work)
        context.work.clear()

    async def timed_out_after(delay: float, command: str) -> None:
        call = asyncio.ensure_future(shell.Shell().run(context, {"command": command, "timeout": delay}))
        await settled(call)
        with pytest.raises(ToolRefused, match=r"\[killed after"):
            call.result()

    async def rounds(marker: str) -> None:
        for repeat in range(8):
            for n, delay in enumerate(DELAYS):
                await stopped_after(delay, f"sleep {marker}{repeat}{n:02d}")
                await timed_out_after(delay + 0.0005, f"sleep {marker}{repeat}{n:02d}")

    with no_process_left() as marker:
        asyncio.run(rounds(marker))


# A whole session under a memory limit -----------------------------------------------------------------

# Address space for `chock run` and every process it starts: a replay session peaks at about 32 MiB of it
# (VmPeak), so 512 MiB is room to spare, and reading the 4 GiB file whole would need eight times that.
MEMORY_LIMIT = 512 * 1024 * 1024


def test_read_file_and_search_on_a_4_gib_sparse_file_under_a_memory_limit(home, project):
    sparse = "seq 1 20000 > big.bin && truncate -s 4G big.bin"  # 108,894 bytes of text, then 4 GiB of NUL bytes
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "make", "name": "shell", "args": {"command": sparse}}]},
        {"text": "", "tool_calls": [
            {"call_id": "head", "name": "read_file", "args": {"path": "big.bin"}},
            {"call_id": "tail", "name": "read_file", "args": {"path": "big.bin", "offset": 19_997}},
            {"call_id": "one", "name": "read_file", "args": {"path": "big.bin", "offset": 20_000, "limit": 1}},
            {"call_id": "all", "name": "search", "args": {"pattern": "^1999[0-9]$"}},
            {"call_id": "file", "name": "search", "args": {"pattern": "^20000$", "path": "big.bin"}}]},
        {"text": "", "tool_calls": [{"call_id": "size", "name": "shell", "args": {"command": "stat -c %s big.bin"}},
                                    {"call_id": "rm", "name": "shell", "args": {"command": "rm big.bin"}}]},
        {"text": "Read it.", "tool_calls": []},
    ])  # fmt: skip
    result = subprocess.run(
        ["prlimit", f"--as={MEMORY_LIMIT}", "--", sys.executable, "-m", "chock", "run", "--yes", "--json", "sparse"],
        cwd=project, env=home.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    results = {e["call_id"]: e for e in events if e["type"] == "tool.result"}
    assert not any(r["is_error"] for r in results.values()), results
    assert results["size"]["output"] == f"{4 * 1024**3}\n"
    head = results["head"]["output"]
    assert head.startswith("1\n2\n3\n") and len(head.encode()) <= TOOL_OUTPUT_LIMIT
    shown, note = head.rsplit("\n", 1)
    whole_lines = shown.splitlines()[:-1]  # the last one is cut
    assert whole_lines == [str(n) for n in range(1, len(whole_lines) + 1)]
    assert note == f"[cut at 65024 bytes: big.bin has {4 * 1024**3} bytes; read on with offset {len(whole_lines)}]"
    binary = "[stopped: big.bin is binary (a NUL byte in line 20001); read_file shows text, shell shows bytes (xxd)]"
    assert results["tail"]["output"] == "19998\n19999\n20000\n" + binary
    assert results["one"]["output"] == binary
    assert results["all"]["output"] == "\n".join(
        [f"big.bin:{n}:{n}" for n in range(19990, 20000)]
        + ["[binary, not searched from their first NUL byte on: big.bin]"]
    )
    assert (
        results["file"]["output"] == "big.bin:20000:20000\n[binary, not searched from their first NUL byte on: big.bin]"
    )
    assert events[-1]["type"] == "session.end" and events[-1]["reason"] == "completed"
