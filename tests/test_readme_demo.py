"""Every command line of the README's "Using it" and steering sections, run against scripts/demo's world as a
person would after pasting the lines the demo prints: each exits 0 with the output the README promises.

The lines are read from README.md, so a line added there with no expectation here fails the test. Left out:
`chock login` (a provider's account), `systemctl` and `journalctl` (a systemd user manager and its journal), and
`chock doctor`, which is checked to name each piece it looks at. Placeholders are filled from the demo's sessions:
`your-project` and `/srv/app` are the demo's project, `<session>`, `[SESSION]` and the README's example ids are
sessions of it, and `build` is the connection the demo's config names (its own daemon, under that name).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.sessions import processes_with_environment
from tests.fakes.wait import wait_until

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_IDS = ("20261201-073450-a1b2c3",)
NOT_RUN = ("chock login", "systemctl ", "journalctl ", "chock doctor")


def readme_lines() -> list[str]:
    """The command lines of the README's "Using it" block and its steering section's blocks, comments cut."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    using = text.split("## Using it", 1)[1].split("\n### ", 1)[0]
    steering = text.split("### The daemon, the browser, and steering a session", 1)[1].split("\n### ", 1)[0]
    lines = []
    for section in (using, steering):
        for block in re.findall(r"```sh\n(.*?)```", section, re.S):
            for line in block.splitlines():
                command = re.sub(r"\s+#\s.*$", "", line).strip()
                if command:
                    lines.append(command)
    return lines


@dataclass
class Demo:
    """scripts/demo-run, running: its directory, the lines it printed to paste, its project and first session."""

    process: subprocess.Popen[bytes]
    directory: Path
    pasted: str
    project: Path
    first: str
    env: dict[str, str]

    def sh(self, line: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`line` in bash, after the lines the demo printed, pasted as printed."""
        stdin = None if input else subprocess.DEVNULL
        return subprocess.run(["bash", "-c", f"{self.pasted}\n{line}"], input=input, capture_output=True,
                              text=True, env=self.env, timeout=timeout, stdin=stdin)  # fmt: skip

    def background(self, line: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", f"{self.pasted}\n{line}"], stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.env)  # fmt: skip

    def answering(self, line: str) -> subprocess.CompletedProcess[str]:
        """`line` (an attach) with `y` typed once the session it watches waits on an approval (a line typed
        before that is a message for the session, not an answer), until it exits."""
        before = {session for session, row in self.rows().items() if row["status"] == "waiting"}
        watching = self.background(line, stdin=subprocess.PIPE)
        waiting: set[str] = set()

        def asks() -> bool:
            waiting.update(s for s, row in self.rows().items() if row["status"] == "waiting" and s not in before)
            return bool(waiting)

        wait_until(asks, 60, "the session to wait for an approval")
        out, _ = watching.communicate("y\n", timeout=120)
        return subprocess.CompletedProcess(line, watching.returncode, out, "")

    def rows(self) -> dict[str, dict]:
        done = self.sh("chock sessions --json")
        assert done.returncode == 0, done.stderr
        return {row["id"]: row for row in map(json.loads, done.stdout.splitlines())}

    def status(self, session: str) -> str:
        return self.rows().get(session, {}).get("status", "")

    def newest(self) -> str:
        return max(self.rows().items(), key=lambda item: (item[1]["started_at"], item[0]))[0]

    def started(self, line: str) -> tuple[str, subprocess.Popen[str]]:
        """`line` (a `chock run`) in the background, once its session is listed."""
        before = set(self.rows())
        running = self.background(line)
        wait_until(lambda: set(self.rows()) - before, 60, "the session to start")
        (session,) = set(self.rows()) - before
        return session, running

    def waiting_session(self, line: str) -> tuple[str, subprocess.Popen[str]]:
        """`line` (a `chock run`) in the background until its session waits on its shell command's approval."""
        session, running = self.started(line)
        wait_until(lambda: self.status(session) == "waiting", 60, "the session to wait for its approval")
        return session, running

    def until_ended(self, session: str) -> None:
        wait_until(lambda: self.status(session) in ("ended", "abandoned"), 60, f"session {session} to end")


@pytest.fixture
def demo(home) -> Iterator[Demo]:
    env = {**home.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "CHOCK_DEMO_PORT": "0"}
    process = subprocess.Popen([str(REPO / "scripts/demo-run")], env=env, stdout=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    printed = ""
    deadline = time.monotonic() + 60
    try:
        # Read as it comes, with a deadline that holds when the demo prints nothing more.
        while "no model account is asked for" not in printed and time.monotonic() < deadline:
            if select.select([process.stdout], [], [], 1)[0]:
                printed += os.read(process.stdout.fileno(), 65536).decode()  # type: ignore[union-attr]
        assert "from another terminal, paste:\n" in printed, f"the demo printed no lines to paste: {printed}"
        pasted = printed.split("from another terminal, paste:\n", 1)[1].split("\n\n", 1)[0]
        assert "export CHOCK_CONFIG=" in pasted and "PATH=" in pasted, printed
        directory = Path(re.search(r"Everything lives in (\S+);", printed).group(1))  # type: ignore[union-attr]
        first = re.search(r"&session=(\S+)", printed).group(1)  # type: ignore[union-attr]
        # The person's shell: nothing of the test's own home is in force but what the pasted lines set.
        shell_env = {key: value for key, value in env.items() if not key.startswith("CHOCK_")}
        yield Demo(process, directory, "\n".join(map(str.strip, pasted.splitlines())), directory / "project", first,
                   shell_env)  # fmt: skip
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_every_command_of_using_it_and_steering_works_against_the_demo(demo: Demo) -> None:
    lines = readme_lines()
    ran: set[str] = set()

    def run(line: str, expected: tuple[str, ...], input: str | None = None, **fill: str) -> str:
        """The README's `line`, its placeholders filled, run as pasted: exit 0, with each of `expected` printed."""
        assert line in lines, f"the README has no line {line!r}"
        ran.add(line)
        command = line.replace("your-project", str(demo.project)).replace("/srv/app", str(demo.project))
        for placeholder, value in fill.items():
            command = command.replace(placeholder, value)
        done = demo.answering(command) if input == "y, once asked" else demo.sh(command, input=input)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        for text in expected:
            assert text in done.stdout + done.stderr, (command, text, done.stdout, done.stderr)
        return done.stdout

    # Using it ------------------------------------------------------------------------------------------------
    run("cd your-project", ())
    task = 'chock run "add a --verbose flag"'
    assert task in lines
    ran.add(task)
    session, running = demo.waiting_session(task)  # it asks before its shell command, as the README says
    run("chock approve <session>", ("approved",), input="y\n", **{"<session>": session})
    out, _ = running.communicate(timeout=60)
    assert running.returncode == 0 and f"changes committed to branch chock/{session}" in out, out
    assert "session ended: completed" in out
    listed = run("chock sessions", (session, "ended"))
    assert listed.index(session) < listed.index(demo.first)  # newest first
    run("chock usage", (session, "total"))
    run("chock plan [SESSION]", ("Look at the project",), **{"[SESSION]": session})
    run('chock run --continue [SESSION] "now add a test for it"', ("session ended: completed",),
        **{"[SESSION]": session})  # fmt: skip
    run("chock workspace list", ())
    run("chock mcp list", ("no MCP servers",))
    doctor = demo.sh("chock doctor")
    for piece in ("python", "bwrap", "git", "user manager", "credential store", "daemon", "serve", "connection build"):
        assert re.search(rf"^(ok|no)\s+{piece}", doctor.stdout, re.M), (piece, doctor.stdout)

    # Steering -------------------------------------------------------------------------------------------------
    run("chock approve <session>", ("approved",), input="y\n", **{"<session>": demo.first})  # the page's session
    demo.until_ended(demo.first)
    # Handed over at its next turn boundary: the replay's first replies come a second apart, before any approval.
    handed, running = demo.started('chock run "fix the flaky test"')
    run("chock detach", (handed,))
    running.communicate(timeout=60)
    assert running.returncode == 8  # handed over
    run("chock attach", ("session ended: completed",), input="y, once asked")
    demo.until_ended(handed)
    run('chock say "also update the changelog"', (handed,))
    wait_until(lambda: _said(demo, handed, "also update the changelog"), 60, "the say to be taken")
    demo.until_ended(handed)
    example = EXAMPLE_IDS[0]
    run(f'chock say {example} "look at the tests too"', (handed,), **{example: handed})
    wait_until(lambda: _said(demo, handed, "look at the tests too"), 60, "the say to be taken")
    demo.until_ended(handed)
    run(f'echo "look at the tests too" | chock say {example}', (handed,), **{example: handed})
    demo.until_ended(handed)
    run("chock say -- 20261201-101010-build failed again", (handed,))
    wait_until(lambda: _said(demo, handed, "20261201-101010-build failed again"), 60, "the say to be taken")
    demo.until_ended(handed)
    stopped, running = demo.waiting_session('chock run "a task to stop"')
    run("chock stop", (stopped,))
    running.communicate(timeout=60)
    assert running.returncode == 130 and demo.rows()[stopped]["end_reason"] == "interrupted"
    asking, running = demo.waiting_session('chock run "add a --verbose flag"')
    run("chock approve", (f"session {asking} on local", "approved"), input="y\n")  # each waiting one, in turn
    running.communicate(timeout=60)
    assert running.returncode == 0
    run("chock sessions remove <session>", (session,), **{"<session>": session})  # the first, completed one
    assert session not in demo.rows()
    branches = subprocess.run(["git", "-C", str(demo.project), "branch", "--list", f"chock/{session}"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    assert branches.stdout.strip() == f"chock/{session}"  # its branch stays
    every = run("chock sessions --all", (str(demo.project),))
    assert re.search(rf"^local\s+{handed}", every, re.M) and re.search(rf"^build\s+{handed}", every, re.M), every
    before = set(demo.rows())
    run('chock run --on build --project /srv/app "fix the build"', ("session ended: completed",),
        input="y, once asked")  # fmt: skip
    (built,) = set(demo.rows()) - before
    run("chock attach build:<session>", ("session ended: completed",), **{"<session>": built})
    run("chock export <session> --format html -o session.html", ("events written to session.html",),
        **{"<session>": handed})  # fmt: skip
    page = (demo.project / "session.html").read_text()
    assert "Content-Security-Policy" in page and "also update the changelog" in page

    skipped = {line for line in lines if line.startswith(NOT_RUN)}
    assert set(lines) == ran | skipped, set(lines) - ran - skipped


def _said(demo: Demo, session: str, text: str) -> bool:
    """Whether `session`'s log holds a user message `text` (a `say` taken)."""
    log = demo.directory / "state/sessions" / session / "log.jsonl"
    return any(
        event.get("type") == "user.message" and event.get("text") == text
        for event in map(json.loads, log.read_text().splitlines())
    )


def test_demo_shell_opens_a_shell_so_prepared_and_leaving_it_stops_the_demo(home) -> None:
    env = {key: value for key, value in home.env.items() if not key.startswith("CHOCK_")}
    env.update(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", CHOCK_DEMO_PORT="0", SHELL="/bin/bash")
    # The shell reads what a person would type: the README's `chock sessions`, then leaving it.
    done = _demo_run("--shell", input="chock sessions\npwd\nexit\n", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    session = re.search(r"&session=(\S+)", done.stdout).group(1)  # type: ignore[union-attr]
    directory = Path(re.search(r"Everything lives in (\S+);", done.stdout).group(1))  # type: ignore[union-attr]
    assert re.search(rf"^{session}\s+(running|waiting)", done.stdout, re.M), done.stdout
    assert f"{directory}/project\n" in done.stdout  # in the demo's project
    # Leaving it stopped it all: the demo's session too, which as any daemon's session would outlive its daemon.
    assert not _processes_of(directory), _processes_of(directory)
    wait_until(lambda: not (directory / "state/daemon.sock").exists(), 20, "the daemon to stop with the shell")


def test_demo_refuses_an_unknown_option(home) -> None:
    done = _demo_run("--bogus", input="", env={**home.env, "CHOCK_DEMO_PORT": "0"})
    assert done.returncode == 2 and "--bogus" in done.stderr and "--shell" in done.stderr


def _demo_run(*args: str, input: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """scripts/demo-run ARGS to its end, in a process group of its own that is ended after it (all of it, when
    it has to be stopped: a demo that did not stop leaves no daemon behind)."""
    process = subprocess.Popen([str(REPO / "scripts/demo-run"), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)  # fmt: skip
    try:
        out, err = process.communicate(input, timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _processes_of(directory: Path) -> list[int]:
    """The processes that run with the demo's state dir (its daemon, serve and sessions)."""
    return processes_with_environment(f"CHOCK_STATE_DIR={directory}/state")
