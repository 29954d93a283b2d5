"""Nothing the agent writes runs on the host: a replay session plants what would make git on the host execute
a program of its own, then every command that touches its workspace runs, for real (a `chock` process, real
git, real bwrap, a real daemon for `chock detach`).

Each payload appends a line to a marker file in a directory of the test's that the sandbox cannot see: the
line appears only if the host runs the payload. Before Chock's commands run, the test shows with plain host
git (what `chock workspace show` ran before) that each planted payload does fire.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fakes.projects import git
from tests.fakes.sessions import replayed_terminal_session, wait_for_end, wait_for_event

HOOKS = ("post-checkout", "pre-commit", "commit-msg", "post-commit", "reference-transaction", "post-index-change",
         "pre-auto-gc", "post-rewrite")  # fmt: skip


def payloads(marker: Path) -> list[dict]:
    """write_file calls for the three programs git could be made to run; each says on the host that it ran."""
    scripts = {
        "fsmonitor.sh": f'#!/bin/sh\necho "fsmonitor $*" >> {marker}\nexit 1\n',
        "hook.sh": f'#!/bin/sh\necho "hook $0" >> {marker}\nexit 1\n',
        "filter.sh": f'#!/bin/sh\necho "filter $*" >> {marker}\nexec cat\n',
    }
    return [
        {"call_id": f"w-{name}", "name": "write_file", "args": {"path": name, "content": text}}
        for name, text in scripts.items()
    ]


def configure(config_file: str) -> str:
    """Shell that makes `config_file` name every payload: fsmonitor, hooks, and a filter driver."""
    settings = {
        "core.fsmonitor": '"$PWD/fsmonitor.sh"',
        "filter.evil.clean": '"$PWD/filter.sh"',
        "filter.evil.smudge": '"$PWD/filter.sh"',
        "filter.evil.process": '"$PWD/filter.sh"',
    }
    return " && ".join(f'git config -f "{config_file}" {key} {value}' for key, value in settings.items())


def install_hooks(directory: str, config_file: str) -> str:
    copies = " && ".join(f'cp hook.sh "{directory}/{hook}"' for hook in HOOKS)
    return f'mkdir -p "{directory}" && {copies} && git config -f "{config_file}" core.hooksPath "{directory}"'


ADMIN = "admin=$(sed -n 's/^gitdir: //p' .git)"
ATTRIBUTES = "printf '* filter=evil\\n' > .gitattributes"

PLANTS = {
    # A git dir of the agent's, with core.fsmonitor, hooks and a filter, behind a rewritten `.git` file.
    "git-file": " && ".join([
        "git init -q fake",
        configure("fake/.git/config"),
        install_hooks("$PWD/hooks", "fake/.git/config"),
        ATTRIBUTES,
        "printf 'gitdir: %s\\n' \"$PWD/fake/.git\" > .git",
    ]),
    # The admin dir's `commondir` rewritten to name a common dir of the agent's, with the same.
    "commondir": " && ".join([
        ADMIN,
        "git init -q --bare fakecommon",
        "git config -f fakecommon/config core.bare false",
        configure("fakecommon/config"),
        install_hooks("$PWD/fakecommon/hooks", "fakecommon/config"),
        ATTRIBUTES,
        'echo "$PWD/fakecommon" > "$admin/commondir"',
    ]),
    # Hooks in the admin dir, and its config.worktree (read when the project has extensions.worktreeConfig,
    # as `git sparse-checkout` sets) naming them, fsmonitor and a filter.
    "admin-dir": " && ".join([
        ADMIN,
        configure("$admin/config.worktree"),
        install_hooks("$admin/hooks", "$admin/config.worktree"),
        ATTRIBUTES,
    ]),
}  # fmt: skip


def plant(marker: Path, kind: str) -> dict:
    calls = [*payloads(marker), {"call_id": "plant", "name": "shell",
                                 "args": {"command": f"chmod +x *.sh && {PLANTS[kind]}"}}]  # fmt: skip
    return {"text": "", "tool_calls": calls}


AFTER = {"call_id": "after", "name": "write_file", "args": {"path": "after.txt", "content": "written later\n"}}
WRITE_AFTER = {"text": "", "tool_calls": [AFTER]}
DONE = {"text": "Done.", "tool_calls": []}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where a payload says it ran: a directory the host has and the sandbox has not."""
    directory = tmp_path / "host-only"
    directory.mkdir()
    return directory / "marker"


def person_uses_worktree_config(project: Path) -> None:
    git(project, "config", "core.repositoryformatversion", "1")
    git(project, "config", "extensions.worktreeConfig", "true")


def plain_git_fires(workspace: Path, marker: Path, env: dict[str, str]) -> set[str]:
    """What plain host git in the workspace runs of the payloads (then the marker is cleared)."""
    commit = ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]
    for args in (["status", "--short"], ["checkout", "-q", "-b", "probe"], ["add", "-A"], commit):
        subprocess.run(["git", "-C", str(workspace), *args], env=env, capture_output=True, timeout=60)
    fired = {line.split()[0] for line in marker.read_text().splitlines()} if marker.exists() else set()
    marker.unlink(missing_ok=True)
    return fired


def tool_errors(home, session_id: str) -> list[str]:
    return [e["output"] for e in home.events(session_id) if e["type"] == "tool.result" and e["is_error"]]


def branch_files(project: Path, session_id: str) -> set[str]:
    return set(git(project, "ls-tree", "-r", "--name-only", f"chock/{session_id}").splitlines())


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_what_the_agent_plants_never_runs_on_the_host(home, project, marker, kind):
    if kind == "admin-dir":
        person_uses_worktree_config(project)
    first = plant(marker, kind)
    home.replay_instance([first])  # the replay then runs out: the session fails and keeps its workspace
    assert home.chock("run", "--yes", "plant things", cwd=project).returncode == 1
    session_id = home.only_session()
    workspace = home.layout.workspace_dir(session_id)
    assert tool_errors(home, session_id) == []
    assert plain_git_fires(workspace, marker, home.env) == {"fsmonitor", "filter", "hook"}

    def untouched(step: str) -> None:
        assert not marker.exists(), f"{step} ran the agent's payload: {marker.read_text()}"

    listed = home.chock("workspace", "list")
    untouched("workspace list")
    assert session_id in listed.stdout

    shown = home.chock("workspace", "show", session_id)
    untouched("workspace show")
    assert shown.returncode == 0, shown.stderr
    for line in ("A .gitattributes", "A fsmonitor.sh", "A hook.sh", "A filter.sh"):
        assert line in shown.stdout
    if kind == "git-file":
        assert "left out   fake (a nested repository)" in shown.stdout

    # --continue takes the kept workspace over (the sandbox from what the log recorded) and fails again.
    home.replay_instance([first, WRITE_AFTER])
    again = home.chock("run", "--continue", session_id, "--yes", "go on", cwd=project)
    untouched("run --continue")
    assert again.returncode == 1, again.stderr
    assert (workspace / "after.txt").read_text() == "written later\n"
    assert "A after.txt" in home.chock("workspace", "show", session_id).stdout
    untouched("workspace show")

    removed = home.chock("workspace", "remove", session_id)
    untouched("workspace remove")
    assert removed.returncode == 0, removed.stderr
    assert not workspace.exists()
    files = branch_files(project, session_id)
    assert {".gitattributes", "fsmonitor.sh", "hook.sh", "filter.sh", "after.txt"} <= files
    assert not any(name.startswith("fake/") for name in files)

    # --continue once more: a fresh worktree from the branch (agent's .gitattributes and all), to completion.
    home.replay_instance([first, WRITE_AFTER, DONE])
    done = home.chock("run", "--continue", session_id, "--yes", "finish", cwd=project)
    untouched("run --continue to completion")
    assert done.returncode == 0, done.stderr
    events = home.events(session_id)
    assert events[-1]["reason"] == "completed"
    assert [e["admin"] for e in events if e["type"] == "workspace.open"][-1] == str(
        (project / ".git" / "worktrees" / session_id).resolve()
    )
    assert not workspace.exists()
    assert not (project / ".git" / "worktrees" / session_id).exists()
    assert git(project, "show", f"chock/{session_id}:after.txt") == "written later\n"
    assert git(project, "rev-parse", "main") == git(project, "rev-parse", f"chock/{session_id}~1")  # one commit


def test_detach_moves_a_planted_workspace_to_the_daemon_and_nothing_runs(home, project, marker, daemon):
    person_uses_worktree_config(project)
    # The admin dir planted, then the `.git` file rewritten too: both ways at once.
    git_file = {"call_id": "git-file", "name": "shell", "args": {"command": PLANTS["git-file"]}}
    wait = {"call_id": "wait", "name": "shell", "args": {"command": "sleep 2"}}
    entries = [plant(marker, "admin-dir"), {"text": "", "tool_calls": [git_file, wait]}, WRITE_AFTER, DONE]
    process, session_id = replayed_terminal_session(home, project, entries)
    wait_for_event(home, session_id, "tool.call", lambda e: e["call_id"] == "wait")
    result = home.chock("detach", session_id, "--daemon", daemon.address, cwd=project)
    assert result.returncode == 0, result.stderr
    assert process.wait(30) == 8
    wait_for_end(home, session_id, "completed")
    assert not marker.exists(), marker.read_text()
    assert tool_errors(home, session_id) == []
    close = [e for e in home.events(session_id) if e["type"] == "workspace.close"][-1]
    assert close["skipped"] == ["fake (a nested repository)"]
    assert {"after.txt", ".gitattributes", "fsmonitor.sh"} <= branch_files(project, session_id)


def test_the_persons_own_git_config_runs_nothing_on_the_host(home, project, tmp_path, marker):
    """Host git reads the person's identity and global excludes file, and runs nothing their global config or
    the project's own names (the hardening holds even where the config is the person's)."""
    payload = tmp_path / "host-only" / "payload.sh"
    payload.write_text(f'#!/bin/sh\necho "person $0 $*" >> {marker}\nexec cat\n')
    payload.chmod(0o755)
    hooks = tmp_path / "host-only" / "hooks"
    hooks.mkdir()
    for hook in HOOKS:
        (hooks / hook).symlink_to(payload)
    (home.root / "attributes").write_text("* filter=evil\n")
    (home.root / "ignore").write_text("*.secret\n")
    (home.root / ".gitconfig").write_text(
        "[user]\n\tname = Global Person\n\temail = global@example.org\n"
        f"[core]\n\tfsmonitor = {payload}\n\thooksPath = {hooks}\n"
        f"\tattributesFile = {home.root / 'attributes'}\n\texcludesFile = {home.root / 'ignore'}\n"
        f'[filter "evil"]\n\tclean = {payload}\n\tsmudge = {payload}\n\tprocess = {payload}\n'
    )
    git(project, "config", "core.fsmonitor", str(payload))
    git(project, "config", "core.hooksPath", str(hooks))
    (project / "app.py").write_text("print('dirty')\n")  # --allow-dirty runs git in the project too
    env = {"GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{payload}'"}  # the person's environment: not used either
    home.replay_instance([{"text": "", "tool_calls": [
        {"call_id": "a", "name": "write_file", "args": {"path": "notes.txt", "content": "notes\n"}},
        {"call_id": "b", "name": "write_file", "args": {"path": "token.secret", "content": "not for the branch\n"}},
    ]}, DONE])  # fmt: skip
    result = home.chock("run", "--yes", "--allow-dirty", "take notes", cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), marker.read_text()
    session_id = home.only_session()
    branch = f"chock/{session_id}"
    plain = {**home.env, "GIT_CONFIG_GLOBAL": "/dev/null"}  # the test's own reads, kept from the payload too
    show = subprocess.run(
        ["git", "-C", str(project), "log", "-1", "--format=%an <%ae>%n%H", branch],
        env=plain, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert show[:3] == ["Global", "Person", "<global@example.org>"]
    names = subprocess.run(
        ["git", "-C", str(project), "ls-tree", "-r", "--name-only", branch],
        env=plain, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "notes.txt" in names and "token.secret" not in names
    # The same config does reach plain git: the payload is live.
    subprocess.run(["git", "-C", str(project), "status"], env=home.env, capture_output=True, timeout=60)
    assert marker.exists()


def test_a_log_without_the_recorded_admin_dir_uses_gits_name_for_the_session(home, project):
    """Logs written before `workspace.open` recorded the admin dir still continue, and never read `.git`."""
    home.replay_instance([{"text": "", "tool_calls": [
        {"call_id": "w", "name": "write_file", "args": {"path": "a.txt", "content": "A"}},
        {"call_id": "g", "name": "shell", "args": {"command": "printf 'gitdir: /nowhere\\n' > .git"}}]}])  # fmt: skip
    assert home.chock("run", "--yes", "old", cwd=project).returncode == 1
    session_id = home.only_session()
    log = home.layout.log_path(session_id)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for event in events:
        event.pop("admin", None)
    log.write_text("".join(json.dumps(event) + "\n" for event in events))
    home.replay_instance([{"text": "", "tool_calls": []}, DONE])
    done = home.chock("run", "--continue", session_id, "--yes", "finish", cwd=project)
    assert done.returncode == 0, done.stderr
    assert git(project, "show", f"chock/{session_id}:a.txt") == "A"
