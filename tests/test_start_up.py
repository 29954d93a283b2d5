"""The commands that must start fast start without click (docs/architecture.md#start-up): `chock --help`,
`chock sessions`, a socket-activated `chock daemon` — and whatever their tables do not take plainly still goes
to click, which explains it as it explains every command."""

from __future__ import annotations

import subprocess
import sys

from chock.commands.overview import COMMANDS

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


def by_click(home, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    """`chock ARGS` through click: a global option first (`--config`, the one the test home uses anyway) is
    what the fast path leaves to click."""
    return home.chock("--config", str(home.layout.config), *args, **kwargs)


def test_help_lists_every_command_without_importing_click_and_says_what_click_says(home):
    done, loaded = chock_loading(home, "--help")
    assert done.returncode == 0
    assert "click" not in loaded and "chock.commands.cli" not in loaded
    for name, summary in COMMANDS.items():
        assert f"  {name:<12}" in done.stdout and summary.split()[0] in done.stdout
    # The same text through click, at the same width: the group prints chock.commands.overview's help.
    through_click = by_click(home, "--help", env={"COLUMNS": "80"})
    assert through_click.stdout == done.stdout


def test_a_fast_start_loads_no_command_module_but_its_own(home, project):
    """chock/commands/__init__.py imports nothing: `chock --help` and `chock sessions` pass through the package
    to the one module each needs (and the option rows), never the click commands or another command's work."""
    for args, own in [
        (("--help",), {"chock.commands.overview"}),
        (("sessions",), {"chock.commands.listing", "chock.commands.shared_options"}),
    ]:
        done, loaded = chock_loading(home, *args, cwd=project)
        assert done.returncode == 0, done.stderr
        assert {name for name in loaded if name.startswith("chock.commands.")} == own, (args, sorted(loaded))


def test_every_command_has_its_line_in_help_and_no_line_names_a_command_that_is_not():
    from chock.commands.cli import main

    assert {name for name, each in main.commands.items() if not each.hidden} == set(COMMANDS)
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
    slow = by_click(home, "sessions", "--json", cwd=project)
    assert slow.returncode == 0 and slow.stdout == fast.stdout


def test_a_reader_that_stops_early_ends_the_command_quietly(home, project):
    """`chock sessions | head -1` over many rows, and `chock --help | head -1`: no traceback, as through click."""
    from chock.log.events import encode

    for number in range(3000):
        session_id = f"20260101-{number:06d}-{number:06x}"
        log = home.layout.log_path(session_id)
        log.parent.mkdir(parents=True)
        start = {"id": 1, "at": "2026-01-01T00:00:00.000Z", "type": "session.start", "session": session_id}
        log.write_bytes(encode({**start, "project": str(project), "message": "a task " * 10}))
    for command in ("sessions", "--help"):
        done = subprocess.run(
            ["sh", "-c", f'"$0" -m chock {command} | head -1', sys.executable],
            env=home.env, cwd=project, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.stdout.count("\n") == 1 and done.stderr == "", (command, done.stderr[-500:])


def test_a_terminal_that_cannot_show_a_character_gets_it_replaced_not_a_crash(home, project):
    done = home.chock("sessions", cwd=project, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "no sessions in this project yet" in done.stdout, done.stderr


def test_what_click_refuses_the_fast_path_leaves_to_click(home, project, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    done, loaded = chock_loading(home, "sessions", "--project", str(a_file), cwd=project)
    assert done.returncode == 2 and "is a file" in done.stderr and "click" in loaded, done.stderr
    home.env["CHOCK_CONFIG"] = str(tmp_path)  # a directory: click refuses it for every command
    for args in (("sessions",), ("daemon", "--idle-exit", "1")):
        done, loaded = chock_loading(home, *args, cwd=project)
        assert done.returncode == 2 and "is a directory" in done.stderr and "click" in loaded, (args, done.stderr)


def test_help_is_as_wide_as_clicks_for_any_columns(home):
    for columns in ("60", "0", "200"):
        fast = home.chock("--help", env={"COLUMNS": columns})
        slow = by_click(home, "--help", env={"COLUMNS": columns})
        assert fast.stdout == slow.stdout, columns
