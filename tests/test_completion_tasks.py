"""A session id completes with its task's first line as its description, in a real fish and through the protocol
zsh's script speaks (bash shows the ids alone); `chock say` and `chock sessions remove` complete ids too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_completion import complete

BIN = str(Path(sys.executable).parent)
LONG = "rename every helper in the storage layer so that each name says what it returns, then fix the callers"
HOSTILE = "retitle\x1b]0;pwned\x07 the\u202e window\r\nsecond line"


def _sessions(home, project) -> dict[str, str]:
    """Three ended sessions of `project`: their ids, newest first, with the description each should complete with."""
    from chock.log.catalog import rows

    home.replay_instance([{"text": "Done.", "tool_calls": []}] * 3)
    described = {
        "\n  add a greeting, with a test  \nand a second line": "add a greeting, with a test",
        LONG: LONG[:59] + "…",
        HOSTILE: "retitle]0;pwned the window",
    }
    for task in described:
        done = home.chock("run", task, cwd=project)
        assert done.returncode == 0, done.stderr
    newest_first = [row["id"] for row in reversed(rows(home.layout, project.resolve()))]
    tasks = {session: home.events(session)[0]["message"] for session in newest_first}
    by_task = {task.strip(): description for task, description in described.items()}  # a task is kept stripped
    return {session: by_task[tasks[session]] for session in newest_first}


def _env(home) -> dict[str, str]:
    return {**home.env, "PATH": f"{BIN}:{os.environ['PATH']}"}


def _needs(shell: str) -> None:
    """A real shell, as every real component of the suite: missing, the test fails saying how to get it."""
    if shutil.which(shell) is None:
        pytest.fail(f"{shell} is not installed: run scripts/system-packages (debian-packages.txt lists it)")


def test_fish_shows_each_session_with_its_task(home, project) -> None:
    _needs("fish")
    expected = _sessions(home, project)
    script = 'chock completion fish | source; complete -C "chock attach "; complete -C "chock say 2"'
    done = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, cwd=project,
                          env=_env(home), timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines == [f"{session}\t{task}" for session, task in expected.items()] * 2, lines


def test_zsh_protocol_describes_each_session_with_its_task(home, project) -> None:
    expected = _sessions(home, project)
    for words in ("chock attach ", "chock run --continue ", "chock sessions remove ", "chock say "):
        env = {**_env(home), "_CHOCK_COMPLETE": "zsh_complete", "COMP_WORDS": words, "COMP_CWORD": "2"}
        if words.count(" ") == 3:
            env["COMP_CWORD"] = "3"
        done = subprocess.run([sys.executable, "-m", "chock"], capture_output=True, text=True, cwd=project, env=env,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        answer = done.stdout.split("\n")
        triples = [tuple(answer[i : i + 3]) for i in range(0, len(answer) - 2, 3)]
        assert triples == [("plain", session, task) for session, task in expected.items()], (words, triples)


def test_say_and_sessions_remove_complete_ids_in_bash(home, project) -> None:
    newest, *older = _sessions(home, project)
    assert complete(home, ["chock", "say", ""], project) == [newest, *older]
    assert complete(home, ["chock", "sessions", "remove", ""], project) == [newest, *older]
    assert complete(home, ["chock", "sessions", "remove", newest, older[0][:-2]], project) == [older[0]]
    # After the session, `say` takes a message: nothing completes.
    assert complete(home, ["chock", "say", newest, ""], project) == []


# A real interactive zsh on a pseudo-terminal (zsh's own zpty), with compinit and `chock completion zsh` loaded:
# the line is typed, then the list of choices asked for (list-choices on Ctrl-T), until $UNTIL shows or 20 s pass.
ZSH_LISTING = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'stty columns 200; PS1="> "; autoload -Uz compinit; compinit -u -D; eval "$(chock completion zsh)"'
zpty -w z 'zle -C list-them list-choices _main_complete; bindkey "^T" list-them'
zpty -w z "$LINE"$'\x14'
out=""
for i in {1..200}; do
  zpty -r -t z chunk && out+=$chunk
  [[ $out == *$UNTIL* ]] && break
  sleep 0.1
done
print -r -- "$out"
zpty -d z
"""


def test_a_real_zsh_lists_each_session_with_its_task(home, project) -> None:
    _needs("zsh")
    expected = _sessions(home, project)
    oldest = list(expected.values())[-1]
    env = {**_env(home), "LINE": "chock attach ", "UNTIL": oldest, "TERM": "xterm"}
    done = subprocess.run(["zsh", "-f", "-c", ZSH_LISTING], capture_output=True, text=True, cwd=project, env=env,
                          timeout=60)  # fmt: skip
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", done.stdout)
    for session, task in expected.items():
        assert re.search(rf"^{session}\s+--\s+{re.escape(task)}\s*$", screen, re.M), (session, task, screen)
