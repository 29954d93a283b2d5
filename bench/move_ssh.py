"""`chock move` of a session with a 100 MB log and a 50 MiB branch between two hosts over real OpenSSH, against
`ssh A cat log | ssh B 'cat > x'` plus `git bundle` of that branch (docs/remote.md#moving-a-session).

Hosts are made on this machine as the tests make them (tests/fakes/hosts.py: a Unix user with its own daemon
behind Debian's sshd on a loopback address of its own, a client user with a key): it needs root and
openssh-server, and fails saying so without them. The session is a real one, run on host A by its daemon; its log
is then padded to 100 MB with `assistant.delta` events (ids renumbered, its end kept last) and a 50 MiB file of
random bytes is committed on its branch. Each run moves it the other way (A -> B, B -> A, …): the whole move, the
client's `chock move` from its start to its exit, the ssh masters already up. The baseline, measured in the same
run on the same masters: the log piped from the host holding it to the other through the client, and `git
bundle create` of the branch on that host. Printed: low / median / high of each and of their ratio (the goal: at
most 2×), the same per direction with each step's seconds (from the client's line for it to the next), the first
move alone (the only one that carries the whole log and branch: a later one carries only what its target lacks —
of the log, what it gained since that host last held it; of the branch, here nothing), and the peak resident
memory (VmHWM) of each daemon and the largest of the client's processes (the goal: each under 64 MiB). The
baseline is not the same both ways: on A the 50 MiB file is a loose object, which `git bundle create` compresses
again (1.8-2.2 s on a loaded 2-CPU machine), while B received it in a pack, which the bundle reuses (0.2-0.4 s);
so B -> A has the smaller baseline, and the higher ratio, for a move that takes as long as a later A -> B. On A the
move's own bundle of the loose random bytes is written stored (chock/session/move_bundle.py: they do not compress),
so its making takes a fraction of the baseline's; on B both copy the pack as it is, and a branch of text would be
compressed by both alike.

    python bench/move_ssh.py           # a 100 MB log and a 50 MiB branch, 5 moves: the figures
    python bench/move_ssh.py --quick   # 4 MB and 2 MiB, 2 moves: asserts the session arrives whole each time
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import _common

sys.path.insert(0, str(_common.REPO))
from tests.fakes.hosts import PYTHON, Host, Hosts
from tests.test_move_ssh import _ended, _host, _log, _replays, _start

# Run as the host's user: the session's log padded to SIZE bytes with model text, its end kept last, and written
# whole under a new inode (so no cached row is believed); then a file of BRANCH random bytes committed on its branch.
PAD = r"""
import json, os, subprocess, sys
log, size, project, session, branch = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
events = [json.loads(line) for line in open(log, "rb")]
end = events.pop()
assert end["type"] == "session.end", end
pad = {"type": "assistant.delta", "at": end["at"], "text": "x" * 960}
count = max(1, (size - os.path.getsize(log)) // len(json.dumps({"id": 99999, **pad}) + "\n"))
with open(log + ".new", "w") as out:
    for n, event in enumerate([*events, *([pad] * count), end], 1):
        out.write(json.dumps({**event, "id": n}) + "\n")
os.replace(log + ".new", log)
git = ["git", "-C", project, "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
ref = f"refs/heads/chock/{session}"
tip = subprocess.run([*git, "rev-parse", ref], capture_output=True, text=True).stdout.strip()
if not tip:
    tip = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
big = os.path.join(os.path.dirname(log), "big.bin")
with open(big, "wb") as out:
    out.write(os.urandom(branch))
blob = subprocess.run([*git, "hash-object", "-w", big], capture_output=True, text=True, check=True).stdout.strip()
os.unlink(big)
index = dict(os.environ, GIT_INDEX_FILE=os.path.join(os.path.dirname(log), "bench.index"))
subprocess.run([*git, "read-tree", tip], env=index, check=True)
subprocess.run([*git, "update-index", "--add", "--cacheinfo", f"100644,{blob},big.bin"], env=index, check=True)
tree = subprocess.run([*git, "write-tree"], env=index, capture_output=True, text=True, check=True).stdout.strip()
os.unlink(index["GIT_INDEX_FILE"])
commit = subprocess.run([*git, "commit-tree", tree, "-p", tip, "-m", "big"], capture_output=True, text=True,
                        check=True).stdout.strip()
subprocess.run([*git, "update-ref", ref, commit], check=True)
"""

# Run as the client user: ARGV, then the largest resident memory any of its processes reached, in bytes.
PEAK = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
sys.exit(done.returncode)
"""


def as_user(host: Host, *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*host.user.prefix(), *argv], env=host.user.env(host.hosts.chock_dir), cwd=host.user.home,
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def vmhwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def ssh(hosts: Hosts, host: Host, command: str) -> list[str]:
    """The client's ssh to `host` running `command`, on the master chock's own connections use."""
    from chock.control.ssh import parse_ssh, ssh_argv

    assert hosts.client is not None
    control = hosts.client.runtime / "chock/ssh"
    return ssh_argv(parse_ssh(host.url), str(control), ("sh", "-c", shlex.quote(command)))


def baseline(hosts: Hosts, source: Host, target: Host, session_id: str, project: Path, base: str) -> float:
    """`ssh SOURCE cat log | ssh TARGET 'cat > x'`, then `git bundle create` of the branch on SOURCE: seconds."""
    assert hosts.client is not None
    log = _log(source, session_id)
    pipe = (
        f"{shlex.join(ssh(hosts, source, f'cat {log}'))} | "
        f"{shlex.join(ssh(hosts, target, f'cat > {target.user.home}/baseline.log'))}"
    )
    bundle = f"git -C {project} bundle create --quiet {source.user.home}/baseline.bundle chock/{session_id} ^{base}"
    started = time.perf_counter()
    for command in (["sh", "-c", pipe], ssh(hosts, source, bundle)):
        done = subprocess.run(
            [*hosts.client.prefix(), *command], env=hosts.client.env(hosts.chock_dir), cwd=hosts.client.home,
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    took = time.perf_counter() - started
    assert (target.user.home / "baseline.log").stat().st_size == log.stat().st_size
    return took


def move(hosts: Hosts, session_id: str, source: str, target: str, project: Path) -> tuple[float, int, dict[str, float]]:
    """`chock move SOURCE:ID --to TARGET`: seconds, the largest resident memory of the client's processes, and the
    seconds of each step it said on standard error (from its line to the next, the last to its exit)."""
    assert hosts.client is not None
    argv = [PYTHON, "-m", "chock", "move", f"{source}:{session_id}", "--to", target, "--project", str(project)]
    started = time.perf_counter()
    running = subprocess.Popen(
        [*hosts.client.prefix(), PYTHON, "-c", PEAK, *argv], env=hosts.client.env(hosts.chock_dir),
        cwd=hosts.client.home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert running.stderr is not None and running.stdout is not None
    said = [(time.perf_counter(), line) for line in running.stderr]
    out = running.stdout.read()
    running.wait(1800)
    took = time.perf_counter() - started
    assert running.returncode == 0, "".join(line for _, line in said)
    steps: dict[str, float] = {"start": said[0][0] - started if said else 0.0}
    for (at, line), (after, _) in zip(said, [*said[1:], (started + took, "")], strict=True):
        named = [name for start, name in STEP_NAMES if line.startswith(start) or f" {start}" in line]
        steps[named[0] if named else line.split()[0]] = after - at
    return took, int(out.split()[-1]), steps


# The client's step lines (a line that starts with, or says, the words) as the per-step figures name them.
# "move-out" lasts until the source has staged the log, "log" and "bundle" while they are sent and the source makes
# the rest (the bundle's pieces sent as git writes them), "parts" from every part staged to every part received.
STEP_NAMES = (
    ("asking", "check"), ("taking session", "move-out"), ("sending its log (", "log"),
    ("sending its bundle", "bundle"), ("every part staged", "parts"), ("adopts it", "adopt"), ("ending it", "moved"),
)  # fmt: skip


def main() -> None:
    options = _common.parse(_common.arguments(__doc__ or "", "4 MB and 2 MiB, 2 moves: asserts it arrives whole"))
    log_bytes = (4 if options.quick else 100) * 1000 * 1000
    branch_bytes = (2 if options.quick else 50) << 20
    moves = 2 if options.quick else 5
    hosts = Hosts()
    try:
        a, b = _host(hosts, 2), _host(hosts, 3)
        there = b.user.home / "there"
        subprocess.run(["git", "clone", "-q", str(a.project), str(there)], check=True, capture_output=True)
        for host in (a, b):
            host.user.give(host.user.home)
            host.start_daemon()
        assert hosts.client is not None
        _replays(hosts.client.home, f', .connections = .{{ .a = "{a.url}", .b = "{b.url}" }}')
        hosts.client.give(hosts.client.home)

        session_id = _start(a, "demo")
        _ended(a, session_id)
        as_user(
            a, PYTHON, "-c", PAD, str(_log(a, session_id)), str(log_bytes), str(a.project), session_id,
            str(branch_bytes),
        )  # fmt: skip
        opened = [
            e for e in map(json.loads, _log(a, session_id).read_bytes().splitlines()) if e["type"] == "workspace.open"
        ]
        base = opened[0]["base"] or opened[0]["commit"]
        hosts.chock("sessions", "--all")  # every master up

        sides = [(a, "a", b, "b", there), (b, "b", a, "a", a.project)]
        projects = {"a": a.project, "b": there}
        ours, theirs, client_peak = [], [], 0
        steps: list[tuple[str, dict[str, float]]] = []
        for turn in range(moves):
            source, source_name, target, target_name, target_project = sides[turn % 2]
            theirs.append(baseline(hosts, source, target, session_id, projects[source_name], base))
            took, peak, said = move(hosts, session_id, source_name, target_name, target_project)
            ours.append(took)
            steps.append((f"{source_name}->{target_name}", said))
            client_peak = max(client_peak, peak)
            events = [json.loads(line) for line in _log(target, session_id).read_bytes().splitlines()]
            assert events[-1]["type"] in ("workspace.open", "session.end"), events[-1]
            arrived = _log(target, session_id).stat().st_size
            assert arrived > 0.99 * log_bytes, (arrived, _log(source, session_id).stat().st_size, events[:3])
            size = subprocess.run(
                ["git", "-c", "safe.directory=*", "-C", str(target_project), "cat-file", "-s",
                 f"chock/{session_id}:big.bin"], capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            assert int(size) == branch_bytes, size
        peaks = {name: vmhwm(host.daemon.pid) for name, host in (("a", a), ("b", b)) if host.daemon}
        hosts.chock("connections", "--close")
    finally:
        hosts.cleanup()
    if options.quick:
        print(f"move_ssh --quick: {moves} moves of a {log_bytes // 10**6} MB log and a {branch_bytes >> 20} MiB branch")
        return
    ratios = [mine / base_time for mine, base_time in zip(ours, theirs, strict=True)]
    print(f"a {log_bytes // 10**6} MB log and a {branch_bytes >> 20} MiB branch, moved {moves} times over ssh")
    print(_common.labelled("  baseline (ssh cat log | ssh cat > x, then git bundle create)", theirs))
    print(_common.labelled("  chock move", ours))
    print(_common.labelled("  ratio", ratios, "x") + " (goal: at most 2x)")
    # The first move carries the whole log and branch; a later one only what its target lacks (of the log, what it
    # gained away; of the branch, nothing: no work is done between moves), while the baseline carries both every time.
    first = f"{ours[0]:.2f} s against {theirs[0]:.2f} s, {ratios[0]:.2f}x"
    print(f"  first move (the whole log and branch travel): {first}")
    print("    " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in steps[0][1].items()))
    for direction in sorted({way for way, _ in steps}):
        mine = [ratio for ratio, (way, _) in zip(ratios, steps, strict=True) if way == direction]
        print(_common.labelled(f"  ratio {direction}", mine, "x"))
        for name in dict.fromkeys(step for way, said in steps if way == direction for step in said):
            values = [said.get(name, 0.0) for way, said in steps if way == direction]
            print(_common.labelled(f"    {name}", values))
    print(
        f"  peak resident memory: client {client_peak / 2**20:.1f} MiB, "
        + ", ".join(f"daemon {name} {value / 2**20:.1f} MiB" for name, value in peaks.items())
        + " (goal: each under 64 MiB)"
    )


if __name__ == "__main__":
    main()
