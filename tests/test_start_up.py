"""The commands that must start fast start without click (docs/architecture.md#start-up): `chock --help`,
`chock sessions`, a socket-activated `chock daemon` — and whatever their tables do not take plainly still goes
to click, which explains it as it explains every command."""

from __future__ import annotations

import subprocess
import sys

from chock.overview import COMMANDS

# Runs the executable's entry, then names on stderr's last line every module it had imported.
LOADED = (
    "from chock.entry import main\n"
    "try:\n    main()\nfinally:\n    print('\\nloaded: ' + ' '.join(sys.modules), file=sys.stderr)\n"
)


def chock_loading(home, *args: str, cwd=None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`chock ARGS` through the executable's entry, and the modules it had imported when it ended."""
    done = subprocess.run(
        [sys.executable, "-c", f"import sys\nsys.argv = ['chock', *{list(args)!r}]\n{LOADED}"],
        env={**home.env, "COLUMNS": "80"}, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    *said, loaded = done.stderr.rstrip("\n").split("\n")
    assert loaded.startswith("loaded: "), done.stderr
    said_only = subprocess.CompletedProcess(done.args, done.returncode, done.stdout, "\n".join(said))
    return said_only, set(loaded.split()[1:])


def test_help_lists_every_command_without_importing_click_and_says_what_click_says(home):
    done, loaded = chock_loading(home, "--help")
    assert done.returncode == 0
    assert "click" not in loaded and "chock.cli" not in loaded
    for name, summary in COMMANDS.items():
        assert f"  {name:<12}" in done.stdout and summary.split()[0] in done.stdout
    # The same text through click, at the same width: the group prints chock.overview's help.
    through_click = subprocess.run(
        [sys.executable, "-m", "chock", "--config", str(home.layout.config), "--help"],
        env={**home.env, "COLUMNS": "80"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert through_click.stdout == done.stdout


def test_every_command_has_its_line_in_help_and_no_line_names_a_command_that_is_not():
    from chock.cli import main

    assert set(main.commands) == set(COMMANDS)
    assert all(main.commands[name].get_short_help_str(200) == line for name, line in COMMANDS.items())


def test_what_a_table_does_not_take_plainly_is_clicks_to_explain(home, project):
    for args, expected in [
        (("sessions", "--bogus"), ("No such option", "--bogus")),
        (("sessions", "--project"), ("--project", "requires an argument")),
        (("daemon", "--port", "abc"), ("'abc' is not a valid integer",)),
        (("daemon", "--idle-exit"), ("--idle-exit", "requires an argument")),
    ]:
        done, loaded = chock_loading(home, *args, cwd=project)
        assert done.returncode == 2 and all(part in done.stderr for part in expected), (args, done.stderr[-400:])
        assert "click" in loaded


def test_sessions_through_its_table_and_through_click_print_the_same(home, project):
    fast, loaded = chock_loading(home, "sessions", "--json", cwd=project)
    assert fast.returncode == 0 and "click" not in loaded
    slow = subprocess.run(
        [sys.executable, "-m", "chock", "--config", str(home.layout.config), "sessions", "--json"],
        env=home.env, cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert slow.returncode == 0 and slow.stdout == fast.stdout
