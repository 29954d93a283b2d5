"""The sandbox, for real: bwrap runs `sh -c` in a session's worktree and we look at what it can see and do."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chock.errors import ChockError, Refused
from chock.paths import Layout
from chock.session import sandbox as sandbox_module
from chock.session import workspace
from chock.session.ports import Launch, Sandboxed
from chock.session.sandbox import Sandbox, find_bwrap, for_workspace, host_environment
from chock.session.tools.shell import Shell
from chock.session.tools.tool import ToolRefused
from tests.fakes.projects import git_value as git
from tests.fakes.projects import make_project
from tests.fakes.sessions import no_process_left

SESSION = "20261201-073450-a1b2c3"
SECRET = "sk-secret-test"


@pytest.fixture
def person_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the person's HOME, holding the data and state dirs where they live by default."""
    home = tmp_path / "home" / "ada"
    home.mkdir(parents=True)
    (home / ".bashrc").write_text(f"export ANTHROPIC_API_KEY={SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    return home


@pytest.fixture
def layout(person_home: Path) -> Layout:
    layout = Layout(
        config=person_home / ".config" / "chock" / "config.zon",
        state=person_home / ".local" / "state" / "chock",
        data=person_home / ".local" / "share" / "chock",
    )
    layout.data.mkdir(parents=True)
    layout.tokens_path.write_text(f'.{{ .work = "{SECRET}" }}\n')
    layout.instances_path.write_text('.{ .work = .{ .kind = "anthropic" } }\n')
    layout.session_dir(SESSION).mkdir(parents=True)
    layout.log_path(SESSION).write_text('{"id": 1, "type": "session.start"}\n')
    layout.config.parent.mkdir(parents=True)
    layout.config.write_text('.{ .instance = "work" }\n')
    return layout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project", {"README.md": "hello\n"}, message="first commit")


@pytest.fixture
def box(layout: Layout, project: Path) -> Sandbox:
    directory = layout.workspace_dir(SESSION)
    worktree, _ = workspace.create(project, directory, f"chock/{SESSION}")
    return for_workspace(layout, worktree)


def run(box: Sandbox, script: str, *, shell: str = "/bin/sh") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        box.argv([shell, "-c", script], bwrap=find_bwrap()),
        env=host_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(box: Sandbox, script: str) -> str:
    done = run(box, script)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fails(box: Sandbox, script: str) -> bool:
    return run(box, script).returncode != 0


# find_bwrap / argv --------------------------------------------------------------------------------------


def test_find_bwrap_refuses_without_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Refused) as refused:
        find_bwrap()
    assert str(refused.value) == (
        "bwrap (bubblewrap) is not installed: install it with `apt install bubblewrap`; "
        "Chock never runs tools without a sandbox"
    )
    assert refused.value.exit_code == 3


def test_find_bwrap_finds_it_and_it_works() -> None:
    bwrap = find_bwrap()
    assert os.access(bwrap, os.X_OK)
    sandbox_module.check_bwrap(bwrap)


def test_check_bwrap_refuses_a_bwrap_that_cannot_sandbox(tmp_path: Path) -> None:
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(Refused, match="cannot build a sandbox on this machine: No permissions"):
        sandbox_module.check_bwrap(str(broken))


def test_argv_isolates_everything_and_never_binds_root(box: Sandbox) -> None:
    argv = box.argv(["true"], bwrap="/usr/bin/bwrap")
    assert argv[:7] == [
        "/usr/bin/bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--new-session",
        argv[6],
    ]
    assert "--share-net" not in argv
    pairs = list(itertools.pairwise(argv))
    assert all(not (a in {"--bind", "--ro-bind"} and b == "/") for a, b in pairs)
    for path in ("/bin", "/sbin", "/lib", "/lib64", "/usr", "/etc", "/lib32", "/libx32"):
        if os.path.islink(path):
            target = os.readlink(path)
            assert ("--symlink", target) in pairs and argv[argv.index(target) + 1] == path
        elif os.path.isdir(path):
            assert ("--ro-bind", path) in pairs
        else:
            assert path not in argv
    git_dir, admin = str(box.git_dir), str(box.worktree_admin)
    assert argv.index(git_dir) < argv.index(admin)  # .git read-only first, the admin dir read-write over it
    assert argv[argv.index(git_dir) - 1] == "--ro-bind"
    assert argv[argv.index(admin) - 1] == "--bind"
    assert argv[argv.index("--chdir") + 1] == str(box.workspace)
    assert "--clearenv" in argv
    assert argv[-2:] == ["--", "true"]
    networked = box.replace(network=True).argv(["true"], bwrap="bwrap")
    assert networked[1:3] == ["--unshare-all", "--share-net"]


def test_environment_is_built_from_scratch(box: Sandbox) -> None:
    assert box.environment() == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(box.home.resolve()),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    assert host_environment() == box.host_environment() == {"PATH": sandbox_module.HOST_PATH}


def test_argv_refuses_a_missing_workspace(box: Sandbox) -> None:
    shutil.rmtree(box.workspace)
    with pytest.raises(ChockError, match=r"the workspace .* does not exist"):
        box.argv(["true"], bwrap="bwrap")


def test_argv_creates_home_and_knowledgebase_0700(box: Sandbox, layout: Layout, project: Path) -> None:
    assert not layout.toolchains_dir(project).exists()
    box.argv(["true"], bwrap="bwrap")
    for path in (layout.toolchains_dir(project), layout.knowledgebase_dir(project)):
        assert oct(path.stat().st_mode & 0o777) == "0o700"


def test_a_command_line_built_again_after_its_dirs_went_remakes_home_or_refuses(
    box: Sandbox, layout: Layout, project: Path
) -> None:
    """The binds are built once per sandbox and reused; a directory they name that is gone since (HOME removed,
    the workspace removed) is noticed at the next command line, as at the first."""
    assert ok(box, "echo first > $HOME/a.txt && cat $HOME/a.txt") == "first\n"
    shutil.rmtree(layout.toolchains_dir(project))
    assert ok(box, "echo again > $HOME/b.txt && ls $HOME") == "b.txt\nknowledgebase\n"
    assert (layout.toolchains_dir(project) / "b.txt").read_text() == "again\n"
    shutil.rmtree(box.workspace)
    with pytest.raises(ChockError, match=r"the workspace .* does not exist"):
        box.argv(["true"], bwrap="bwrap")


# Inside, for real ---------------------------------------------------------------------------------------


def test_home_is_the_toolchain_dir_and_the_environment_holds_no_key(
    box: Sandbox, layout: Layout, project: Path
) -> None:
    assert os.environ["ANTHROPIC_API_KEY"] == SECRET
    out = ok(box, 'echo "HOME=$HOME"; echo "PWD=$(pwd)"; echo ---; env; echo ---; cat /proc/1/environ; true')
    lines = out.splitlines()
    assert lines[0] == f"HOME={layout.toolchains_dir(project).resolve()}"
    assert lines[1] == f"PWD={box.workspace}"
    env = dict(line.split("=", 1) for line in out.split("---\n")[1].splitlines())
    names = {"PATH", "HOME", "LANG", "TERM", "PYTHONDONTWRITEBYTECODE"}
    assert names <= set(env) <= names | {"PWD", "SHLVL"}
    assert SECRET not in out
    assert "ANTHROPIC" not in out


def test_nothing_of_the_persons_home_data_or_state_is_visible(
    box: Sandbox, layout: Layout, project: Path, person_home: Path
) -> None:
    for path in (
        person_home / ".bashrc",
        layout.tokens_path,
        layout.instances_path,
        layout.log_path(SESSION),
        layout.config,
    ):
        assert fails(box, f"cat {path}"), path
    # Every file under the person's HOME that the sandbox sees is in a directory it is meant to see.
    allowed = [box.workspace, box.home.resolve(), box.knowledgebase.resolve()]
    seen = ok(box, f"find {person_home} ! -type d").splitlines()
    assert seen, "the workspace's own files should be listed"
    assert [path for path in seen if not any(Path(path).is_relative_to(root) for root in allowed)] == []
    # The parents a bind creates are empty directories of the sandbox's own root, not the person's.
    assert ok(box, f"ls -A {person_home}").split() == [".local"]
    assert ok(box, f"ls -A {layout.data}").split() == ["projects", "workspaces"]
    assert fails(box, f"ls {layout.state}")


def test_the_real_root_home_is_not_there(box: Sandbox) -> None:
    assert ok(box, "ls -A /root 2>/dev/null; true") == ""
    if Path("/root/.bashrc").exists():
        assert fails(box, "cat /root/.bashrc")


def test_the_project_outside_its_git_dir_is_not_there(box: Sandbox, project: Path) -> None:
    assert fails(box, f"cat {project}/README.md")
    assert ok(box, "cat README.md") == "hello\n"


def test_etc_is_there_without_what_other_users_cannot_read(box: Sandbox) -> None:
    assert "root:" in ok(box, "cat /etc/passwd")
    if Path("/etc/shadow").exists():
        assert ("file", "/etc/shadow") in set(sandbox_module._hidden("/etc"))
        assert fails(box, "cat /etc/shadow")
    for kind, path in sandbox_module._hidden("/etc"):
        if kind == "file":
            assert fails(box, f"cat {path}"), path
        else:
            assert ok(box, f"ls -A {path}") == "", path
            assert fails(box, f"touch {path}/x"), path


def _needs_root() -> None:
    """These tests write a file in /etc, as CI's root does; elsewhere they fail saying so, never skip."""
    if os.geteuid() != 0:
        pytest.fail("this test writes a file in /etc: run it as root (CI does)")


def test_etc_masks_follow_a_file_that_appears_or_vanishes_between_calls(box: Sandbox) -> None:
    """The masks are walked once and kept: a secret file added to /etc after the first call is hidden from the
    next, and a masked file that vanished (a lock file `useradd` removed) does not make bwrap fail."""
    _needs_root()
    assert "root:" in ok(box, "cat /etc/passwd")  # the masks are known now
    secret = Path("/etc") / f"chock-test-secret-{os.getpid()}"
    try:
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"hidden\n")
        os.close(fd)
        assert fails(box, f"cat {secret}")
        secret.unlink()
        assert ok(box, "echo still runs") == "still runs\n"
    finally:
        secret.unlink(missing_ok=True)


class _Vanishing(Sandboxed):
    """The session's runner, while a masked /etc file is removed between its command line and bwrap's start (as
    `useradd` removes its lock file)."""

    def shell(self, command: str) -> Launch:
        launch = super().shell(command)
        for name in os.listdir("/etc"):
            if name.startswith(f"chock-test-lock-{os.getpid()}"):
                os.unlink(f"/etc/{name}")
        return launch


class _Context:
    def __init__(self, runner: Sandboxed) -> None:
        self.runner = runner


def test_a_masked_file_gone_before_bwrap_starts_costs_one_more_start_and_the_command_runs_once(box: Sandbox) -> None:
    """bwrap cannot bind over a mask that vanished ("Can't create file at …"): the tool call walks /etc again
    and starts the command once more; the command itself ran exactly once."""
    _needs_root()
    lock = Path("/etc") / f"chock-test-lock-{os.getpid()}"
    try:
        os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        runner = _Vanishing(box, find_bwrap())
        said = asyncio.run(Shell().run(_Context(runner), {"command": "echo ran >> ran.txt; echo done"}))  # type: ignore[arg-type]
        assert said == "done\n"
        assert (box.workspace / "ran.txt").read_text() == "ran\n"
        # A command that fails on its own is not started again.
        lock.touch(mode=0o600)
        os.chmod(lock, 0o600)
        with pytest.raises(ToolRefused) as refused:
            asyncio.run(Shell().run(_Context(runner), {"command": "echo once >> once.txt; exit 1"}))  # type: ignore[arg-type]
        assert "[exit code 1]" in str(refused.value) and "bwrap" not in str(refused.value)
        assert (box.workspace / "once.txt").read_text() == "once\n"
    finally:
        lock.unlink(missing_ok=True)


def test_writes_land_in_the_workspace_home_and_private_tmp_only(box: Sandbox, project: Path, layout: Layout) -> None:
    git_dir = box.git_dir
    for target in (
        "/usr/x",
        "/etc/x",
        "/x",
        "/root/x",
        "/home/x",
        f"{git_dir}/x",
        f"{git_dir}/objects/x",
        f"{git_dir}/refs/heads/x",
    ):
        assert fails(box, f"touch {target}"), target
    # The project and the data dir are only empty parents of the bind mounts here. Outside /tmp they sit on
    # bwrap's read-only root and a write fails; the test's tmp_path is below the private /tmp, where a write
    # succeeds on that tmpfs. Either way nothing reaches the host.
    for target in (project / "outside", layout.data / "x", layout.workspaces_dir / "x", layout.state / "x"):
        run(box, f"mkdir -p {target.parent} && touch {target}")
        assert not target.exists(), target

    ok(
        box,
        "echo made > made.txt && mkdir -p $HOME/.cargo && echo tool > $HOME/.cargo/bin-cache && "
        "echo note > $HOME/knowledgebase/note.md && echo private > /tmp/private.txt",
    )
    assert (box.workspace / "made.txt").read_text() == "made\n"
    assert (layout.toolchains_dir(project) / ".cargo" / "bin-cache").read_text() == "tool\n"
    assert (layout.knowledgebase_dir(project) / "note.md").read_text() == "note\n"
    assert not Path("/tmp/private.txt").exists()


def test_the_knowledgebase_is_at_home_knowledgebase(box: Sandbox, layout: Layout, project: Path) -> None:
    layout.knowledgebase_dir(project).mkdir(parents=True, exist_ok=True)
    (layout.knowledgebase_dir(project) / "build.md").write_text("run make\n")
    assert ok(box, "cat $HOME/knowledgebase/build.md") == "run make\n"


def test_git_status_diff_and_log_work_in_the_worktree(box: Sandbox) -> None:
    (box.workspace / "README.md").write_text("changed\n")
    (box.workspace / "new.txt").write_text("new\n")
    assert ok(box, "git status --porcelain").splitlines() == [" M README.md", "?? new.txt"]
    assert "+changed" in ok(box, "git diff")
    assert ok(box, "git log --format=%s").strip() == "first commit"
    assert ok(box, "git rev-parse --abbrev-ref HEAD").strip() == "HEAD"  # detached at the session's base
    # The repository itself stays read-only: nothing a tool does reaches the project's objects or refs.
    assert fails(box, "git add new.txt && git -c user.name=x -c user.email=y commit -qm sneaky")
    assert git(box.git_dir.parent, "log", "--all", "--format=%s").splitlines() == ["first commit"]


def test_the_projects_git_config_is_seen_without_what_reaches_other_machines(
    box: Sandbox, project: Path, tmp_path: Path
) -> None:
    included = tmp_path / "included.gitconfig"
    included.write_text("[credential]\n\thelper = store --file /secret/included\n")
    for key, value in [
        ("http.https://github.com/.extraheader", "AUTHORIZATION: basic c2VjcmV0LXRva2Vu"),
        ("credential.helper", "store --file /secret/store"),
        ("url.https://ghp_urlsecret@github.com/.insteadOf", "https://github.com/"),
        ("remote.origin.url", "https://me:ghp_remotesecret@github.com/me/x.git"),
        ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
        ("branch.main.remote", "origin"),
        # `git push -u <url> <branch>` writes the URL it was given, token and all, as the branch's remote
        ("branch.feature.remote", "https://x-access-token:ghp_branchsecret@github.com/me/x.git"),
        ("branch.feature.pushRemote", "https://ghp_pushsecret@github.com/me/x.git"),
        ("remote.pushDefault", "https://github.com/me/x.git?access_token=ghp_querysecret"),
        ("include.path", str(included)),
        ("user.name", 'Ada "the" Lovelace'),
        ("diff.renames", "copies"),
    ]:
        git(project, "config", key, value)
    seen = ok(box, 'git config --list --show-origin; cat "$(git rev-parse --git-common-dir)/config"')
    assert "secret" not in seen and "extraheader" not in seen and "store --file" not in seen, seen
    assert "remote.origin.url=https://***@github.com/me/x.git" in seen
    assert 'user.name=Ada "the" Lovelace' in seen and "diff.renames=copies" in seen
    assert "branch.main.remote=origin" in seen and "core.repositoryformatversion=0" in seen
    assert "branch.feature.remote=https://***@github.com/me/x.git" in seen
    assert "branch.feature.pushremote=https://***@github.com/me/x.git" in seen
    assert "remote.pushdefault=https://github.com/me/x.git?***" in seen
    assert ok(box, "git status --porcelain") == ""  # the repository reads as before
    assert "extraheader" in (project / ".git" / "config").read_text()  # the project's own file is untouched
    # A setting the person makes while the session runs is seen at the next call; nothing else.
    git(project, "config", "user.email", "ada@example.com")
    git(project, "config", "remote.mirror.url", "ssh://git@example.com/me/x.git")  # an ssh user: no secret
    git(project, "config", "branch.tab\tname.merge", "refs/heads/x")
    seen = ok(box, "git config --list")
    assert "user.email=ada@example.com" in seen and "remote.mirror.url=ssh://git@example.com/me/x.git" in seen
    assert "branch.tab\tname.merge=refs/heads/x" in seen and "secret" not in seen


def test_a_submodules_config_and_config_worktree_are_seen_without_what_reaches_other_machines(
    box: Sandbox, project: Path
) -> None:
    secret = "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0\n[core]\n\tbare = false\n"
    for at in ("modules/lib", "modules/vendor/deep"):  # a submodule's name may hold `/`
        module = project / ".git" / at
        module.mkdir(parents=True)
        (module / "HEAD").write_text("ref: refs/heads/main\n")
        (module / "config").write_text(secret)
    (project / ".git" / "config.worktree").write_text(secret)
    seen = ok(box, f"cd {project}/.git && cat modules/lib/config modules/vendor/deep/config config.worktree")
    assert "c2VjcmV0" not in seen and seen.count('bare = "false"') == 3, seen
    shutil.rmtree(project / ".git" / "modules" / "lib")  # a submodule removed while the session runs
    seen = ok(box, f"cd {project}/.git && cat modules/vendor/deep/config config.worktree")
    assert "c2VjcmV0" not in seen and seen.count('bare = "false"') == 2, seen


@pytest.fixture
def loopback_server() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # so the loop sees `stop` soon after the test
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(b"hello from the host\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


CONNECT = "exec 3<>/dev/tcp/127.0.0.1/{port} && head -n 1 <&3"


def test_network_is_off_by_default(box: Sandbox, loopback_server: int) -> None:
    done = run(box, CONNECT.format(port=loopback_server), shell="/bin/bash")
    assert done.returncode != 0
    assert "hello" not in done.stdout


def test_network_on_reaches_the_host(box: Sandbox, loopback_server: int) -> None:
    networked = box.replace(network=True)
    done = run(networked, CONNECT.format(port=loopback_server), shell="/bin/bash")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from the host\n"


# A sandbox left behind ------------------------------------------------------------------------------------

# A session's process (as `chock run` is) starts a sandbox whose outer bwrap then dies without taking the inner
# one along (it lacks --die-with-parent here, as a sandbox still being set up does), and sweeps what it adopted.
LEFT_BEHIND = """
import json, os, signal, subprocess, sys, time
from pathlib import Path
from chock.session import reaper

def child(pid):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if found:
            return int(found[0])
        time.sleep(0.01)
    sys.exit(f"{pid} started nothing")

reaper.adopt_orphans()
outer = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
inner = child(outer.pid)
child(inner)  # the sandbox is set up: its command runs
os.kill(outer.pid, signal.SIGKILL)
outer.wait()
print("adopted" if Path(f"/proc/{inner}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid()) else "lost")
reaper.kill_orphaned_sandboxes()
"""


def test_a_sandbox_whose_outer_bwrap_died_is_adopted_by_the_session_and_killed_with_everything_in_it(box):
    with no_process_left() as marker:
        argv = box.argv(["/bin/sh", "-c", f"sleep {marker} & sleep {marker}"], bwrap=find_bwrap())
        argv.remove("--die-with-parent")
        done = subprocess.run(
            [sys.executable, "-c", LEFT_BEHIND, json.dumps(argv)], capture_output=True, text=True, timeout=30
        )
        assert (done.returncode, done.stdout) == (0, "adopted\n"), done.stderr
