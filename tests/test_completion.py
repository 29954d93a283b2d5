"""Shell completion in a real bash with `chock completion bash` sourced, as a person's ~/.bashrc does it:
subcommands, this project's session ids and instance names complete."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

BIN = str(Path(sys.executable).parent)


def complete(home, words: list[str], cwd: Path) -> list[str]:
    """COMPREPLY for `words` (the last one being completed) in bash with chock's script sourced."""
    script = (
        "source <(chock completion bash)\n"
        f"COMP_WORDS=({' '.join(shlex.quote(word) for word in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_chock_completion chock\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**home.env, "PATH": f"{BIN}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_sessions_and_instances(home, project) -> None:
    home.replay_instance([{"text": "Done.", "tool_calls": []}], name="demo")
    first = home.chock("run", "one", cwd=project)
    second = home.chock("run", "two", cwd=project)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    older, newer = home.sessions_by_start()

    assert complete(home, ["chock", "st"], project) == ["stop"]
    assert complete(home, ["chock", "daemon", "st"], project) == ["start", "status", "stop"]
    assert complete(home, ["chock", "s"], project) == ["say", "serve", "sessions", "stop"]
    assert complete(home, ["chock", "completion", ""], project) == ["bash", "zsh", "fish"]
    # Session ids of this project, newest first, wherever an argument or option takes one.
    assert complete(home, ["chock", "detach", ""], project) == [newer, older]
    assert complete(home, ["chock", "approve", older[:-3]], project) == [older]
    assert complete(home, ["chock", "run", "--continue", ""], project) == [newer, older]
    assert complete(home, ["chock", "workspace", "show", ""], project) == [newer, older]
    assert complete(home, ["chock", "attach", ""], project) == [newer, older]
    # ... and none of another project's.
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(["git", "init", "-q", str(elsewhere)], check=True)
    assert complete(home, ["chock", "detach", ""], elsewhere) == []
    # Instance names: config.zon's and the logged-in ones.
    assert complete(home, ["chock", "run", "--instance", ""], project) == ["demo"]
    assert complete(home, ["chock", "logout", "d"], project) == ["demo"]


def test_a_broken_config_completes_nothing_and_says_nothing(home, project) -> None:
    home.write_config(".{ .instances = \n")
    assert complete(home, ["chock", "run", "--instance", ""], project) == []


@pytest.mark.parametrize(("shell", "marker"), [("zsh", "compdef _chock_completion chock"), ("fish", "complete ")])
def test_zsh_and_fish_scripts(home, shell: str, marker: str) -> None:
    done = home.chock("completion", shell)
    assert done.returncode == 0, done.stderr
    assert "_CHOCK_COMPLETE" in done.stdout and marker in done.stdout


def test_an_unknown_shell_is_a_usage_error(home) -> None:
    done = home.chock("completion", "tcsh")
    assert done.returncode == 2 and "bash" in done.stderr


CRAFTED = (
    ".{ .instances = .{\n"
    '    .@"$(touch pwned)" = .{ .kind = "replay=demo.jsonl" },\n'
    '    .@"two\\nlines" = .{ .kind = "replay=demo.jsonl" },\n'
    '    .@"title\\x1b]0;hi\\x07" = .{ .kind = "replay=demo.jsonl" },\n'
    '    .demo = .{ .kind = "replay=demo.jsonl" },\n'
    "} }\n"
)


def test_a_crafted_instance_name_is_inserted_quoted_and_one_with_a_newline_is_skipped(home, project) -> None:
    home.write_config(CRAFTED)
    offered = complete(home, ["chock", "run", "--instance", ""], project)
    assert offered == [r"\$\(touch\ pwned\)", "demo"]  # quoted as bash reads it back; no newline, no escape
    assert complete(home, ["chock", "logout", "$"], project) == [r"\$\(touch\ pwned\)"]
    assert not (project / "pwned").exists()
    # The completed line, as the person's Enter runs it: the name is an argument, never a command.
    line = f"printf '%s\\n' {offered[0]}"
    done = subprocess.run(["bash", "--norc", "-c", line], capture_output=True, text=True, cwd=project, timeout=30)
    assert done.stdout == "$(touch pwned)\n" and not (project / "pwned").exists()


def test_completing_session_ids_opens_no_connection_even_to_a_listening_daemon(home, project) -> None:
    import socket

    home.replay_instance([{"text": "Done.", "tool_calls": []}])
    assert home.chock("run", "one", cwd=project).returncode == 0
    home.layout.daemon_socket.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(home.layout.daemon_socket))
        listening.listen(8)
        listening.setblocking(False)
        home.env["CHOCK_DAEMON"] = f"unix:{home.layout.daemon_socket}"
        assert complete(home, ["chock", "attach", ""], project) == [home.only_session()]
        with pytest.raises(BlockingIOError):
            listening.accept()  # nobody connected
