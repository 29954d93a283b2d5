"""What a person sees at a real pseudo-terminal while a session works (docs/architecture.md#what-reaches-a-terminal):
the spinner with its elapsed time, model text rendered as Markdown, colour only as asked, a `say` wherever the
session is shown, and model text that imitates rich's markup or a terminal's hyperlink shown as written."""

from __future__ import annotations

import re
import sys

import pytest

from chock.control import daemon_protocol as dp
from chock.terminal import notification
from tests.fakes.providers import FakeProvider
from tests.fakes.sessions import new_session, replay_config, wait_for_event
from tests.fakes.terminal import Terminal

SGR = re.compile(r"\x1b\[[0-9;]*m")
FRAME = re.compile(r"\r[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] thinking (\d+\.\d)s")
ANSWER = "# Findings\n\n- first point\n- second point\n\n```\nprint('hi')\n```\n\nThat is all.\n"


def _env(home, **changes: str | None) -> dict[str, str]:
    """The test home's environment as a person's terminal has it: a colour terminal, no NO_COLOR, unless told."""
    env = {key: value for key, value in home.env.items() if key not in ("NO_COLOR", "TERM_PROGRAM")}
    env["TERM"] = "xterm-256color"
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _chock(home, project, *args: str, **env: str | None) -> Terminal:
    """`chock ARGS` at a real pseudo-terminal in `project`, with `_env`'s environment."""
    return Terminal([sys.executable, "-m", "chock", *args], _env(home, **env), project)


def _run_slowly(home, project, text: str, *args: str, **env: str | None) -> Terminal:
    """`chock run ARGS` at a terminal against a loopback provider that takes a while over `text`, to its end."""
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text=text, deltas=[text], pause=0.4)
        home.write_config(f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}" }} }} }}\n')
        terminal = _chock(home, project, "run", *args, "look", **env)
        try:
            assert terminal.exit_code(60) == 0, terminal.text()
        finally:
            terminal.close()
    return terminal


def test_a_slow_call_shows_a_spinner_whose_time_grows_then_the_answer_as_markdown(home, project):
    terminal = _run_slowly(home, project, ANSWER)
    screen = terminal.text()
    before, answer = screen[: screen.index("Findings")], screen[screen.index("Findings") :]
    times = [float(seconds) for seconds in FRAME.findall(before)]  # the one call's frames, as they came
    assert len(times) >= 2 and times == sorted(times) and times[-1] > times[0], screen
    assert re.search(r"\r +\r", before)  # the spinner's line was cleared before the answer
    plain = SGR.sub("", answer)
    assert "• first point" in plain and "• second point" in plain
    assert "print('hi')" in plain and "```" not in plain and "# Findings" not in plain
    assert SGR.search(answer)  # styled: a colour terminal
    assert "That is all." in plain


def test_no_color_writes_no_sgr_sequence_and_the_text_plain(home, project):
    screen = _run_slowly(home, project, ANSWER, NO_COLOR="1").text()
    assert not SGR.search(screen) and "\x1b" not in screen
    assert "# Findings" in screen and "- first point" in screen  # as the model wrote it
    assert FRAME.search(screen)  # the spinner is no colour


def test_color_never_beats_a_terminal_and_color_always_beats_no_color(home, project):
    never = _run_slowly(home, project, ANSWER, "--color", "never").text()
    assert "\x1b" not in never and "# Findings" in never
    always = _run_slowly(home, project, ANSWER, "--color", "always", NO_COLOR="1").text()
    assert SGR.search(always) and "• first point" in SGR.sub("", always)


def test_progress_never_draws_no_spinner(home, project):
    screen = _run_slowly(home, project, ANSWER, "--progress", "never").text()
    assert not FRAME.search(screen) and "\r " not in screen
    assert "• first point" in SGR.sub("", screen)


def test_model_text_holding_rich_markup_and_an_osc_8_link_is_shown_as_written(home, project):
    hostile = (
        "Look: [bold red]x[/] :smile: <b>bold?</b> \x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\ and "
        "[the docs](https://docs.example/page).\n"
    )
    screen = _run_slowly(home, project, hostile).text()
    plain = " ".join(SGR.sub("", screen).split())  # as laid out, lines wrapped at the terminal's width
    assert "[bold red]x[/] :smile: <b>bold?</b>" in plain
    assert "\\x1b]8;;https://evil.example/\\x1b" in plain  # the escape shown as text
    assert "\x1b]8" not in screen  # no hyperlink, the model's or rich's
    assert "the docs (https://docs.example/page)" in plain


MADE_BY_ESCAPES = "\u202e\u202c\u200e\u00ad\u2028\u200d"


def test_characters_markdown_escapes_make_reach_the_terminal_escaped(home, project):
    """`&#x202E;` is U+202E once Markdown has read it, after the text was made safe: it is escaped again."""
    spelled = "Fine. File: &#x202E;txt.exe&#x202C; ok &lrm; &shy; &#x2028; &zwj;\n"
    screen = _run_slowly(home, project, spelled).text()
    assert "Fine" in screen and not set(MADE_BY_ESCAPES) & set(SGR.sub("", screen))
    from chock.session.rich_text import rendered

    shown = rendered("**a** &#x202E; b &#x2028; c &shy;soft\n", 80)
    assert shown is not None and "\\u202e b \\u2028 c \\xadsoft" in SGR.sub("", shown)  # laid out all the same


def _said(home, daemon, session_id: str, text: str, project) -> None:
    result = home.chock("say", "--daemon", daemon.address, session_id, text, cwd=project)
    assert result.returncode == 0, result.stderr


def test_a_say_appears_in_the_terminal_that_owns_the_session(home, project, daemon):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 3"}}]},
        {"text": "Heard you.", "tool_calls": []},
    ])  # fmt: skip
    terminal = _chock(home, project, "run", "--yes", "wait")
    try:
        session_id = new_session(home)
        wait_for_event(home, session_id, "tool.call")
        _said(home, daemon, session_id, "also the weather", project)
        terminal.wait_for("also the weather")
        assert terminal.exit_code(60) == 0
    finally:
        terminal.close()
    assert re.search(r"› \(said\)(\x1b\[[0-9;]*m)* also the weather", terminal.text())
    assert "\x07" not in terminal.text()  # --yes: no person is asked, no bell


def test_a_say_appears_in_chock_attach(home, project, daemon):
    replay_config(home, [
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 3"}}]},
        {"text": "Heard you.", "tool_calls": []},
    ], shell="allow")  # fmt: skip
    session_id = daemon.client.call(dp.StartRequest(project, "wait a little")).session_id
    wait_for_event(home, session_id, "tool.call")
    terminal = _chock(home, project, "attach", "--daemon", daemon.address, session_id)
    try:
        terminal.wait_for("sleep 3")
        _said(home, daemon, session_id, "and the tides", project)
        terminal.wait_for("and the tides")
        assert terminal.exit_code(60) == 0
    finally:
        terminal.close()
    assert "Heard you." in SGR.sub("", terminal.text())


TASK = "fix\x1b]0;pwned\x07 the\ttests\n" + "a" * 200


def test_an_approval_rings_the_bell_and_notifies_with_the_task_cut_and_cleaned(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo hi"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    terminal = _chock(home, project, "run", TASK, TERM_PROGRAM="WezTerm")
    try:
        terminal.wait_for("[y/N]")
        terminal.wait_for("\x07")
        terminal.type("y\r")
        assert terminal.exit_code(60) == 0
    finally:
        terminal.close()
    screen = terminal.text()
    cleaned = ("fix]0;pwned the tests " + "a" * 200)[:100]
    assert screen.count(f"\x07\x1b]9;Chock: approval needed: {cleaned}\x07") == 1, screen
    assert screen.count("\x07") == 2  # the bell, and the end of the one notification


@pytest.mark.parametrize(
    ("env", "sent"),
    [
        ({"TERM_PROGRAM": "iTerm.app"}, "\x1b]9;Chock: approval needed: a[2J b\x07"),
        ({"TERM_PROGRAM": "ghostty"}, "\x1b]9;Chock: approval needed: a[2J b\x07"),
        ({"TERM": "xterm-kitty"}, "\x1b]99;;Chock: approval needed: a[2J b\x1b\\"),
        ({"TERM_PROGRAM": "tmux", "TERM": "screen-256color"}, ""),
        ({"TERM_PROGRAM": "WezTerm", "TMUX": "/tmp/tmux-0/default,1,0"}, ""),  # tmux inside WezTerm: not shown
        ({"TERM": "foot"}, "\x1b]9;Chock: approval needed: a[2J b\x07"),
        ({"TERM": "xterm-256color"}, ""),
    ],
)
def test_a_notification_is_sent_only_where_the_terminal_shows_one(monkeypatch, env, sent):
    for variable in ("TERM_PROGRAM", "TMUX", "STY", "KITTY_WINDOW_ID"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert notification("a\x1b[2J\u202e\nb") == sent


def test_streamed_text_is_cut_into_whole_blocks_wherever_its_deltas_split_it():
    from chock.session.rich_text import Blocks

    text = "# A\n\none\nstill one\n\n```\ncode\n\nmore code\n```\nafter\n\nlast"
    cuts = {text.index(mark) + len(mark) for mark in ("# A\n\n", "still one\n\n", "code\n```\n", "after\n\n")}
    for size in (1, 2, 3, 5, 8, len(text)):
        blocks = Blocks()
        pieces = [blocks.add(text[i : i + size]) for i in range(0, len(text), size)] + [blocks.rest()]
        assert "".join(pieces) == text
        ends = {len("".join(pieces[: n + 1])) for n, piece in enumerate(pieces[:-1]) if piece}
        assert ends <= cuts, (size, pieces)  # never inside a block, nor at the blank line inside the fence
        assert size > 1 or ends == cuts  # delta by delta: each block as soon as it is whole


def test_markdown_that_would_lose_a_word_is_shown_as_written():
    from chock.session.rich_text import rendered

    assert rendered("- " * 12 + "hidden", 80) is None  # past markdown-it's nesting bound the block is dropped
    assert rendered("![chart](https://img.example/c.png)", 80) is None  # rich shows an image without its address
    assert rendered("x" * 120, 80) is None  # a word longer than the line would be cut in two
    shown = rendered("- kept, _em_ &amp; `code`\n\n```python\nprint(1)\n```\n", 80)
    assert shown is not None and "kept" in SGR.sub("", shown) and "```" not in shown
