"""`chock export` (docs/architecture.md#export): a session's transcript read through a real daemon — Markdown whose
structure no text of the log can change, jsonl exactly the log's lines (across pages), another host's session by
`NAME:SESSION`, the safe printer at a terminal, and clear refusals. The HTML in a real Chromium is
tests/test_export_browser.py.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading

import pytest

from chock.paths import Layout
from chock.transcript.stream import PAGE
from tests.fakes.terminal import Terminal
from tests.test_catalog import append, write_session

# Texts a model could write to break a transcript out of its blocks.
HOSTILE = [
    "plain words",
    "```\n# Forged heading\n```",
    "````python\nprint('x')\n````\n## 9. Session ended `completed`",
    "<script>alert(1)</script>\n<img src=x onerror=alert(2)>",
    "a `code` span and `` double `` and ``````` seven",
    "~~~\nnot a fence of ours\n~~~",
    "   ```\nindented fence",
    "line\r```\rcarriage returns",
]


WHOLE_DIFF = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new\n"


def session_body(texts: list[str]) -> list[dict]:
    """A finished session: each text once as a message, an assistant's answer, a tool call's argument and output,
    a diff, and an approval's command; then an event no Chock knows, a wrong-typed field, and the end."""
    body: list[dict] = [{"type": "workspace.open", "directory": "/w", "commit": "abc123"}]
    for number, text in enumerate(texts):
        call = f"c{number}"
        body += [
            {"type": "user.message", "text": text, "via": "socket"},
            {"type": "assistant.delta", "text": "streamed piece"},
            {"type": "assistant.message", "text": text, "tool_calls": []},
            {"type": "tool.call", "call_id": call, "name": "shell\n## forged", "args": {"command": text}},
            {"type": "approval.request", "request_id": f"r{number}", "tool": "shell", "summary": text,
             "call_id": call, "by_config": False, "rule": "shell: ask"},
            {"type": "approval.answer", "request_id": f"r{number}", "answer": "yes", "via": "socket"},
            {"type": "tool.result", "call_id": call, "name": "write_file", "output": text, "is_error": False,
             "diff": text},
            {"type": "turn.end"},
        ]  # fmt: skip
    body += [
        {"type": "workspace.close", "branch": "chock/x", "commit": "def456", "whole_diff": WHOLE_DIFF},
        {"type": "future.thing", "detail": {"x": [1, 2]}, "note": "from a newer chock"},
        {"type": "tool.result", "call_id": 7, "name": ["not", "text"], "output": 12, "is_error": "maybe"},
        {"type": "session.end", "reason": "completed", "exit_code": 0},
    ]
    return body


def fenced_blocks(markdown: str) -> tuple[list[str], list[str]]:
    """The contents of the fenced code blocks of `markdown` and the lines outside them, by CommonMark 0.31's rule
    (4.5): a fence is 3 or more backticks after at most 3 spaces, closed by a line of at least as many backticks
    and nothing else but spaces; any line ending (\\n, \\r, \\r\\n) ends a line."""
    blocks, outside = [], []
    lines = re.split(r"\r\n|\r|\n", markdown)
    index = 0
    while index < len(lines):
        opening = re.match(r"^ {0,3}(`{3,})([^`]*)$", lines[index])
        if not opening:
            outside.append(lines[index])
            index += 1
            continue
        size, body = len(opening.group(1)), []
        index += 1
        while index < len(lines) and not re.match(rf"^ {{0,3}}`{{{size},}} *$", lines[index]):
            body.append(lines[index])
            index += 1
        blocks.append("\n".join(body))
        index += 1
    return blocks, outside


@pytest.fixture
def local(home, daemons):
    """This machine's own daemon (`local`)."""
    return daemons.start(socket_path=home.layout.daemon_socket)


def test_markdown_keeps_every_text_in_its_block_and_only_chocks_headings(home, project, local):
    session = write_session(home.layout, 1, project, session_body(HOSTILE))
    done = home.chock("export", session, "--format", "markdown", cwd=project)
    assert done.returncode == 0, done.stderr

    blocks, outside = fenced_blocks(done.stdout)
    normal = [re.sub(r"\r\n|\r", "\n", text) for text in HOSTILE]
    for text in normal:  # as a message, the assistant's text, the command, the output and the diff
        assert blocks.count(text) >= 5, (text, blocks)
    assert json.loads(blocks[3]) == {"command": HOSTILE[0]}  # the first tool call's arguments, as JSON
    headings = [line for line in outside if line.startswith("#")]
    assert headings[0] == f"# Chock session ` {session} `"
    kinds = [re.match(r"^## \d+\. ([A-Z][a-z]+(?: [a-z]+)*)", line) for line in headings[1:]]
    assert all(kinds), headings  # no heading but Chock's own, numbered by event id
    assert headings[1].startswith(f"## 1. Session started ` {session} ` · ` 2026-")
    assert headings[2].startswith("## 2. Workspace opened · ")
    said = [k.group(1) for k in kinds]
    assert said.count("Message said while it ran") == len(HOSTILE) and said.count("Assistant") == len(HOSTILE)
    assert said[-4:] == ["Workspace closed", "Event", "Tool result", "Session ended"]
    assert "- rule: ` shell: ask `" in outside  # a field a newer Chock adds is shown, not dropped
    assert "- by: ` a person, through chock approve, attach or the page `" in outside
    assert not any("streamed piece" in line for line in done.stdout.splitlines())
    assert any('"detail"' in block for block in blocks)  # the unknown event, generically
    assert "whole?diff:" not in outside and "whole_diff:" in outside and WHOLE_DIFF.rstrip("\n") in blocks
    assert "```diff" in done.stdout


def test_each_event_type_shown_reads_only_fields_its_type_declares() -> None:
    from chock.log.events import EVENTS
    from chock.transcript.entries import KNOWN, READS

    assert set(KNOWN) == set(EVENTS)  # every type of this Chock has its own view
    for kind, fields in READS.items():
        assert set(fields) <= set(EVENTS[kind]), (kind, set(fields) - set(EVENTS[kind]))


@pytest.mark.parametrize("form", ["markdown", "html"])
def test_an_event_whose_type_is_no_text_is_shown_as_an_unknown_one(home, project, local, form):
    """A log written elsewhere (a session moved in) or damaged: an event's `type` that is a list or an object."""
    session = write_session(home.layout, 8, project, [
        {"type": ["future", "thing"], "detail": 1},
        {"type": {"kind": "x"}},
        {"type": "session.end", "reason": "completed", "exit_code": 0},
    ])  # fmt: skip
    done = home.chock("export", session, "--format", form, cwd=project)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "future" in done.stdout and "completed" in done.stdout


def test_jsonl_is_the_logs_lines_exactly_across_pages_and_stops_before_a_torn_tail(home, project, local):
    body = [{"type": "usage", "input_tokens": n, "output_tokens": 1} for n in range(PAGE * 2 + 10)]
    session = write_session(home.layout, 2, project, [*body, {"type": "session.end", "reason": "completed"}])
    append(home.layout, session, b'{"id": 99999, "type": "torn')
    whole = home.layout.log_path(session).read_bytes()
    done = home.chock("export", session, "--format", "jsonl", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.encode() == whole[: whole.rindex(b"\n") + 1]

    out = project / "transcript.jsonl"
    written = home.chock("export", session, "--format", "jsonl", "-o", str(out), cwd=project)
    assert written.returncode == 0, written.stderr
    assert out.read_bytes() == done.stdout.encode() and out.stat().st_mode & 0o077 == 0
    assert f"{PAGE * 2 + 12} events written to {out}" in written.stderr


def test_another_hosts_session_by_name_and_by_address(home, tmp_path, daemons, project):
    state = tmp_path / "build-state"
    there = Layout(config=home.layout.config, state=state, data=tmp_path / "data")
    session = write_session(there, 3, "/srv/app", session_body(HOSTILE[:2]))
    build = daemons.start(env={"CHOCK_STATE_DIR": str(state)})
    home.write_config(f'.{{ .connections = .{{ .build = "{build.address}" }} }}\n')
    away = tmp_path / "not-a-project"
    away.mkdir()

    by_name = home.chock("export", f"build:{session}", "--format", "jsonl", cwd=away)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.encode() == there.log_path(session).read_bytes()
    assert f"session {session} on build" in by_name.stderr, by_name.stderr  # which host it acted on
    by_address = home.chock("export", "--daemon", build.address, session, cwd=away)
    assert by_address.returncode == 0, by_address.stderr
    assert "## 1. Session started ` 20260101-000003-000003 `" in by_address.stdout
    assert "```text\ntask 3\n```" in by_address.stdout


def test_a_terminal_gets_every_text_through_the_safe_printer(home, project, local):
    session = write_session(home.layout, 4, project, [
        {"type": "assistant.message", "text": "title\x1b]0;owned\x07 \u202eevil", "tool_calls": []},
        {"type": "session.end", "reason": "completed", "exit_code": 0},
    ])  # fmt: skip
    for form in ("markdown", "jsonl"):
        shown = Terminal.chock(home, "export", session, "--format", form, cwd=project)
        try:
            assert shown.exit_code() == 0
            screen = shown.screen
        finally:
            shown.close()
        assert b"\x1b]0" not in screen and b"\x07" not in screen and "\u202e".encode() not in screen
        if form == "markdown":  # each escape in reverse video, as the safe printer shows one at a terminal
            assert b"\x1b[7m\\x1b\x1b[27m]0;owned\x1b[7m\\x07\x1b[27m" in screen, screen
        else:  # the same JSON value, escaped
            assert b"\\u001b]0;owned\\u0007 \\u202eevil" in screen, screen
    piped = home.chock("export", session, cwd=project)
    assert "title\x1b]0;owned\x07 \u202eevil\n" in piped.stdout  # a file or a pipe gets the text exactly


def test_refusals_say_what_was_refused_and_what_to_do(home, tmp_path, project, local):
    session = write_session(home.layout, 5, project)
    missing = home.chock("export", "20260101-000099-000063", cwd=project)
    assert missing.returncode == 2 and "no session '20260101-000099-000063'" in missing.stderr, missing.stderr
    assert "`chock sessions` lists them" in missing.stderr
    shape = home.chock("export", "../../etc/passwd", cwd=project)
    assert shape.returncode == 2 and "no session '../../etc/passwd'" in shape.stderr, shape.stderr
    form = home.chock("export", session, "--format", "pdf", cwd=project)
    assert form.returncode == 2 and "'pdf' is not one of 'markdown', 'html', 'jsonl'" in form.stderr, form.stderr
    nowhere = tmp_path / "no-such-dir" / "t.md"
    unwritable = home.chock("export", session, "-o", str(nowhere), cwd=project)
    assert unwritable.returncode == 1 and f"cannot write {nowhere}" in unwritable.stderr, unwritable.stderr
    assert not nowhere.parent.exists()


def test_without_a_daemon_it_says_how_to_start_one(home, project):
    session = write_session(home.layout, 6, project)
    done = home.chock("export", session, cwd=project)
    assert done.returncode != 0 and "no chock daemon answers" in done.stderr and "chock daemon" in done.stderr


def test_completion_offers_this_projects_sessions(home, project):
    session = write_session(home.layout, 7, project)
    env = {"_CHOCK_COMPLETE": "bash_complete", "COMP_WORDS": "chock export ", "COMP_CWORD": "2"}
    done = home.chock(env=env, cwd=project)
    assert session in {line.split(",", 1)[1] for line in done.stdout.splitlines()}, done.stdout


def test_output_through_a_link_a_fifo_or_a_device_writes_there_and_leaves_it_be(home, tmp_path, project, local):
    session = write_session(home.layout, 8, project)
    whole = home.chock("export", session, "--format", "jsonl", cwd=project).stdout.encode()

    real, link, dangling = tmp_path / "real.jsonl", tmp_path / "link.jsonl", tmp_path / "dangling.jsonl"
    real.write_text("old\n")
    link.symlink_to(real)
    dangling.symlink_to(tmp_path / "made.jsonl")
    for path, written in ((link, real), (dangling, tmp_path / "made.jsonl")):
        done = home.chock("export", session, "--format", "jsonl", "-o", str(path), cwd=project)
        assert done.returncode == 0, done.stderr
        assert path.is_symlink() and written.read_bytes() == whole  # the link stays; the file it names is written

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    done = home.chock("export", session, "--format", "jsonl", "-o", str(fifo), cwd=project)
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert read == [whole] and stat.S_ISFIFO(fifo.lstat().st_mode)

    device = tmp_path / "null"  # a character device of our own (1, 3: what /dev/null is)
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    done = home.chock("export", session, "-o", str(device), cwd=project)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(device.lstat().st_mode) and device.lstat().st_rdev == os.makedev(1, 3)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".part")]


def test_output_refuses_an_empty_name_and_a_directory(home, tmp_path, project, local):
    session = write_session(home.layout, 9, project)
    empty = home.chock("export", session, "-o", "", cwd=project)
    assert empty.returncode == 2 and "-o/--output names no file" in empty.stderr, empty.stderr
    assert "Traceback" not in empty.stderr
    directory = home.chock("export", session, "-o", str(tmp_path), cwd=project)
    assert directory.returncode == 2 and "it is a directory" in directory.stderr, directory.stderr
