"""`chock run --continue` at a real terminal with no id: the recent sessions to pick from with the arrow keys and
Enter, the one picked continued (not the newest); Esc continues nothing; a task's escapes are shown as text."""

from __future__ import annotations

import re

from tests.fakes.terminal import Terminal

DOWN, ENTER, ESC = "\x1b[B", "\r", "\x1b"


def _two_sessions(home, project, first: str = "the older task", second: str = "the newer task") -> tuple[str, str]:
    """Two ended sessions of `project`: (older, newer)."""
    home.replay_instance([{"text": "Done.", "tool_calls": []}] * 4)
    for task in (first, second):
        done = home.chock("run", task, cwd=project)
        assert done.returncode == 0, done.stderr
    older, newer = home.sessions_by_start()
    return older, newer


def _adopted(home, session_id: str) -> bool:
    return any(event["type"] == "session.adopt" for event in home.events(session_id))


def _picker(home, project) -> Terminal:
    # A pty answers no cursor position request (a terminal emulator does): prompt_toolkit is told not to ask.
    home.env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    terminal = Terminal.chock(home, "run", "--continue", cwd=project)
    terminal.wait_for("Continue which session?")
    return terminal


def test_the_session_picked_with_the_arrow_keys_is_continued_not_the_newest(home, project) -> None:
    older, newer = _two_sessions(home, project)
    terminal = _picker(home, project)
    try:
        terminal.wait_for("the older task")
        assert "the newer task" in terminal.text() and "ended" in terminal.text() and " ago" in terminal.text()
        terminal.type(DOWN)
        terminal.read()
        terminal.type(ENTER)
        assert terminal.exit_code() == 0, terminal.text()
    finally:
        terminal.close()
    assert _adopted(home, older) and not _adopted(home, newer)


def test_escape_continues_nothing_and_exits_130(home, project) -> None:
    older, newer = _two_sessions(home, project)
    terminal = _picker(home, project)
    try:
        terminal.type(ESC)
        assert terminal.exit_code() == 130, terminal.text()
    finally:
        terminal.close()
    assert "nothing continued" in terminal.text()
    assert not _adopted(home, older) and not _adopted(home, newer)


def test_a_task_is_shown_through_the_safe_printer(home, project) -> None:
    _two_sessions(home, project, first="retitle\x1b]0;pwned\x07 me\nsecond line")
    terminal = _picker(home, project)
    try:
        terminal.wait_for("retitle")
        terminal.type(ESC)
        assert terminal.exit_code() == 130
    finally:
        terminal.close()
    assert b"\x1b]0;" not in terminal.screen and "retitle\\x1b]0;pwned\\x07 me" in terminal.text()
    assert "second line" not in terminal.text()  # the task's first line only


def test_one_session_is_continued_without_asking(home, project) -> None:
    home.replay_instance([{"text": "Done.", "tool_calls": []}] * 2)
    assert home.chock("run", "only one", cwd=project).returncode == 0
    home.env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    terminal = Terminal.chock(home, "run", "--continue", cwd=project)
    try:
        assert terminal.exit_code() == 0, terminal.text()
    finally:
        terminal.close()
    assert "Continue which session?" not in terminal.text() and _adopted(home, home.only_session())


def test_only_the_picker_imports_prompt_toolkit(home, project) -> None:
    from tests.test_start_up import chock_loading

    for args in (("--help",), ("sessions",), ("run", "--help")):
        done, loaded = chock_loading(home, *args, cwd=project)
        assert done.returncode == 0, done.stderr
        assert not {name for name in loaded if name.startswith(("prompt_toolkit", "chock.commands.picker"))}, args


def test_with_no_color_the_picker_writes_no_bold_nor_reverse_video(home, project) -> None:
    _two_sessions(home, project)
    home.env["NO_COLOR"] = "1"
    terminal = _picker(home, project)
    try:
        terminal.wait_for("the older task")
        terminal.type(ESC)
        assert terminal.exit_code() == 130
    finally:
        terminal.close()
    # The chosen line is marked with `>`; no SGR but a reset (prompt_toolkit's own, after each redraw).
    styled = {sgr for sgr in re.findall(rb"\x1b\[([0-9;]*)m", terminal.screen) if sgr not in (b"", b"0")}
    assert styled == set(), styled
    assert "> " in terminal.text()
