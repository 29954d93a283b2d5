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
