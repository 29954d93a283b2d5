"""A path a person did not choose the name of (a cloned repository's directory, a socket path handed on) reaches
the terminal escaped: an OSC, a newline or a bidi override in it is shown as its escape, never acted on."""

from __future__ import annotations

from tests.fakes.projects import make_project

HOSTILE = "evil\x1b]0;PWNED\x07\nforged line \u202eexe"
ESCAPED = "evil\\x1b]0;PWNED\\x07\\x0aforged line \\u202eexe"


def raw(text: str) -> bool:
    return any(char in text for char in ("\x1b", "\x07", "\u202e"))


def test_rules_shows_a_hostile_project_path_escaped_on_one_line(home, tmp_path):
    project = make_project(tmp_path / HOSTILE)
    done = home.chock("rules", "--project", str(project), cwd=project)
    assert done.returncode == 0, done.stderr
    assert not raw(done.stdout) and done.stdout.count("\n") == 1, done.stdout
    assert ESCAPED in done.stdout and done.stdout.startswith("no rules: every call of ")


def test_dial_stdio_shows_a_hostile_socket_path_escaped(home, tmp_path):
    done = home.chock("dial-stdio", "--socket", str(tmp_path / HOSTILE / "d.sock"))
    assert done.returncode == 69
    assert not raw(done.stderr) and done.stderr.count("\n") == 1, done.stderr
    assert ESCAPED in done.stderr


def test_a_refusal_naming_a_hostile_path_is_one_line_that_forges_no_other(home, tmp_path):
    """`chock: …` is one line whatever it quotes: a newline in a directory's name cannot start a line of its own
    that reads as another message."""
    missing = tmp_path / HOSTILE / "project"
    done = home.chock("sessions", "--project", str(missing))
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("chock: "), done.stderr
    assert not raw(done.stderr) and ESCAPED in done.stderr
