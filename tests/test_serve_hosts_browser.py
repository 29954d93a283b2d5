"""One page over three daemons in a real Chromium (docs/remote.md#one-page-over-several-daemons): this machine's own
daemon (`local`) and two hosts, `a` and `b`, each a Unix user with its own daemon behind Debian's sshd on its own
loopback address, named in the client's config.zon as connections (tests/fakes/hosts.py). serve runs as the client
user, with `--daemon local --daemon a --daemon b`; every session is a real `chock run` on a `replay` instance.

The hosts are numbers 12 and 13 of the run's loopback /24 (tests/fakes/hosts.py picks a free one per run). Needs
root, openssh-server and chromium, as CI has.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chock.paths import Layout
from tests.fakes.hosts import PYTHON, SSHD, Host, Hosts, User, listening_tcp, listening_unix
from tests.fakes.projects import make_project
from tests.fakes.wait import wait_until

pytestmark = pytest.mark.browser

A, B = 12, 13  # 127.X.Y.12 and 127.X.Y.13 of the run's /24


# Each session: two shell calls, each waiting for an approval, then a last word.
def steps(name: str) -> list[dict[str, Any]]:
    return [
        {"text": f"{name}: first step.", "tool_calls": [
            {"call_id": f"{name}1", "name": "shell", "args": {"command": f"echo {name}-one"}}]},
        {"text": f"{name}: second step.", "tool_calls": [
            {"call_id": f"{name}2", "name": "shell", "args": {"command": f"echo {name}-two"}}]},
        {"text": f"{name}: third step.", "tool_calls": [
            {"call_id": f"{name}3", "name": "shell", "args": {"command": f"echo {name}-three"}}]},
        {"text": f"{name} is done.", "tool_calls": []},
    ]  # fmt: skip


# As the user, through its own daemon: answer yes to a pending approval (used while that host's sshd is down).
ANSWER = (
    "import sys\n"
    "from chock.control import daemon_protocol as dp\n"
    "from chock.control.address import Address\n"
    "from chock.control.client import ControlClient\n"
    "from chock.paths import Layout\n"
    "client = ControlClient(Address(path=str(Layout.from_env().daemon_socket)))\n"
    "client.call(dp.AnswerRequest(sys.argv[1], sys.argv[2], sys.argv[3], True))\n"
)


def machine(hosts: Hosts, user: User, name: str) -> Path:
    """`user`'s project (a git repository with a commit) and config.zon: two replay instances, `idle` the
    default and `steps` (approvals asked), and the client's connections to a and b."""
    project = make_project(user.home / "project")
    replays = user.home / "replays"
    replays.mkdir()
    (replays / "steps.jsonl").write_text(
        "".join(json.dumps({"type": "assistant.message", **e}) + "\n" for e in steps(name))
    )
    (replays / "idle.jsonl").write_text(json.dumps({"type": "assistant.message", "text": "idle."}) + "\n")
    config = user.home / ".config/chock/config.zon"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'.{{ .instance = "idle", .approvals = .{{ .shell = "ask" }}, .instances = .{{\n'
        f'  .idle = .{{ .kind = "replay={replays}/idle.jsonl" }},\n'
        f'  .steps = .{{ .kind = "replay={replays}/steps.jsonl" }} }} }}\n'
    )
    user.give(user.home)
    return project


def start_daemon(hosts: Hosts, user: User) -> subprocess.Popen[bytes]:
    daemon = subprocess.Popen(
        [*user.prefix(), PYTHON, "-m", "chock", "daemon"], env=user.env(hosts.chock_dir), cwd=user.home,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    socket = Layout(config=user.home, state=user.home / ".local/state/chock", data=user.home).daemon_socket
    wait_until(lambda: socket.exists() or daemon.poll() is not None, 30, f"{user.name}'s daemon")
    assert daemon.poll() is None, daemon.stderr.read().decode() if daemon.stderr else ""
    return daemon


def log_of(user: User, session_id: str) -> list[dict[str, Any]]:
    layout = Layout(config=user.home, state=user.home / ".local/state/chock", data=user.home)
    path = layout.log_path(session_id)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_log(user: User, session_id: str) -> str:
    """What the session's `chock run` said (its run.log), to explain a session that did not get far."""
    path = Layout(config=user.home, state=user.home / ".local/state/chock", data=user.home).session_dir(session_id)
    return "".join(each.read_text(errors="replace") for each in path.glob("*.log")) if path.exists() else ""


def pending(user: User, session_id: str) -> str | None:
    """The request id of the session's approval still waiting, from its log on its host."""
    events = log_of(user, session_id)
    answered = {e["request_id"] for e in events if e["type"] == "approval.answer"}
    asked = [e["request_id"] for e in events if e["type"] == "approval.request" and e["request_id"] not in answered]
    return asked[-1] if asked else None


def descendants(pid: int) -> list[int]:
    """Every process below `pid`."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def masters_to(user: User, ip: str) -> list[int]:
    """`user`'s ssh master processes with a TCP connection to `ip`."""
    peer = "".join(f"{int(part):02X}" for part in reversed(ip.split(".")))
    inodes = set()
    for table in ("/proc/net/tcp",):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[2].startswith(peer + ":"):
                inodes.add(f"socket:[{fields[9]}]")
    found = []
    for pid in user.processes("[mux]"):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                found.append(pid)
        except OSError:
            continue
    return found


def kill_sshd(host: Host, client: User) -> None:
    """B goes away: its sshd listener, every connection it serves (and what runs in them), and the client's
    master to it, so nothing cached survives."""
    masters = masters_to(client, host.ip)
    assert masters, "the client keeps a master connection to the host"
    below = descendants(host.sshd.pid)
    for pid in [host.sshd.pid, *below, *masters]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    host.sshd.wait(10)
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in [*below, *masters]), 10, "them to end")


def restart_sshd(host: Host) -> None:
    listening = host.log.read_text().count("Server listening")
    with open(host.log, "ab") as log:
        host.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(host.dir / "sshd_config")], stdout=log, stderr=log)
    wait_until(lambda: host.log.read_text().count("Server listening") > listening, 10, "sshd again")


@pytest.fixture(scope="module")
def three() -> Iterator[dict[str, Any]]:
    hosts = Hosts()
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        assert hosts.client is not None
        made = {"local": hosts.client, "a": hosts.host(A).user, "b": hosts.host(B).user}
        projects = {name: machine(hosts, user, name) for name, user in made.items()}
        for user in made.values():
            daemons.append(start_daemon(hosts, user))
        a, b = hosts.made
        config = hosts.client.home / ".config/chock/config.zon"
        config.write_text(config.read_text()[:-2] + f', .connections = .{{ .a = "{a.url}", .b = "{b.url}" }} }}\n')
        yield {"hosts": hosts, "users": made, "projects": projects, "a": a, "b": b}
    finally:
        for daemon in daemons:
            daemon.terminate()
            daemon.wait(30)
        hosts.cleanup()


def test_one_page_over_three_daemons_lists_answers_stops_and_rides_out_a_host_going_away(three, chromium, tmp_path):
    hosts: Hosts = three["hosts"]
    users: dict[str, User] = three["users"]
    projects: dict[str, Path] = three["projects"]
    b_host: Host = three["b"]
    client = hosts.client
    assert client is not None
    uids = {user.uid for user in users.values()}
    tcp_before = listening_tcp(uids)

    serve = subprocess.Popen(
        [*client.prefix(), PYTHON, "-m", "chock", "serve", "--host", "127.0.0.1", "--port", "0",
         "--daemon", "local", "--daemon", "a", "--daemon", "b"],
        env=client.env(hosts.chock_dir), cwd=client.home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = serve.stdout.readline() if serve.stdout else ""
        assert line.startswith("listening on http://127.0.0.1:"), line + (serve.stderr.read() if serve.stderr else "")
        url = line.split()[-1]
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        run_page(hosts, users, projects, b_host, chromium, url, tmp_path)
        # No TCP listener but serve's own; no unix listener but the daemons' and the ssh masters' sockets.
        assert listening_tcp(uids) - tcp_before == {f"0100007F:{port:04X}"}
        # (A running session's own sockets are in its state directory, or in the runtime directory's chock/.)
        for name, user in users.items():
            found = listening_unix(user.home) | listening_unix(user.runtime)
            state, runtime = user.home / ".local/state/chock", user.runtime / "chock"
            assert str(state / "daemon.sock") in found, (name, found)
            assert all(path.startswith((f"{state}/", f"{runtime}/")) for path in found), (name, found)
            if name != "local":  # only the client keeps ssh masters, each listening on its control socket
                assert not listening_unix(user.runtime / "chock/ssh"), (name, found)
    finally:
        serve.terminate()
        serve.wait(30)


def run_page(hosts, users, projects, b_host, chromium, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    page = chromium.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    for name in ("local", "a", "b"):
        page.wait_for_selector(f"#hosts li[data-host='{name}'][data-state='reachable']", timeout=60000)

    # A session on each host, started from the page: the project opened on its host, the `steps` instance
    # chosen (`start-with`; the default would be `start`).
    started = {}
    for name in ("local", "a", "b"):
        page.select_option("#project-host", name)
        page.fill("#project", str(projects[name]))
        page.click("#project-form button[type=submit]")
        page.wait_for_selector(f"#start-form:not([hidden]) #start-host:text-is('{name}')")
        page.wait_for_selector("#start-instance option[value='steps']", state="attached")
        page.select_option("#start-instance", "steps")
        page.fill("#message", f"steps on {name}")
        page.click("#start-button")
        page.wait_for_selector(f"#session-host:text-is('{name}')")
        started[name] = page.text_content("#session-id")
        try:
            page.wait_for_selector("#timeline [data-type='approval.request']", timeout=60000)
        except Exception:
            raise AssertionError(
                f"{name}: {page.text_content('#main')}\n{run_log(users[name], started[name])}"
            ) from None
    assert len(set(started.values())) == 3

    # All three in one list, each with its host; the filter shows one host's.
    for name, session_id in started.items():
        page.wait_for_selector(f"#sessions button[data-host='{name}'][data-session='{session_id}']", timeout=30000)
    assert page.locator("#sessions button[data-session] .host").all_text_contents().count("b") == 1
    page.select_option("#host-filter", "a")
    page.wait_for_selector("#sessions button[data-host='b']", state="detached")
    assert page.locator("#sessions button[data-session]").count() == 1
    page.select_option("#host-filter", "")
    page.wait_for_selector("#sessions button[data-host='b']")

    # B's approval, answered from the page, lands on B: B's log has the answer, local's and A's do not. (B's
    # session is opened afresh from the list: `window.chock.seen` holds every event id the page applied.)
    page.click(f"#sessions button[data-host='local'][data-session='{started['local']}']")
    page.wait_for_selector("#session-host:text-is('local')")
    page.wait_for_selector("#timeline [data-type='approval.request']")
    mark = len(page.evaluate("window.chock.seen"))
    page.click(f"#sessions button[data-host='b'][data-session='{started['b']}']")
    page.wait_for_selector("#session-host:text-is('b')")
    page.click("[data-type='approval.request']:not(.done) button.approve")
    page.wait_for_selector("details.tool[data-call-id='b1'][data-result-event-id]", timeout=60000)
    assert any(e["type"] == "approval.answer" for e in log_of(users["b"], started["b"]))
    for name in ("local", "a"):
        assert not any(e["type"] == "approval.answer" for e in log_of(users[name], started[name]))
    page.wait_for_selector("details.tool[data-call-id='b2']", timeout=60000)

    # A second tab follows A: its first approval, answered there, streams on while B is away.
    other = chromium.new_page(viewport={"width": 1200, "height": 900})
    other.goto(url)
    other.click(f"#sessions button[data-host='a'][data-session='{started['a']}']")
    other.wait_for_selector("#session-host:text-is('a')")
    other.wait_for_selector("[data-type='approval.request']")

    # B goes away with every connection it serves.
    kill_sshd(b_host, hosts.client)
    page.wait_for_selector("#hosts li[data-host='b'][data-state='unreachable']", timeout=60000)
    reason = page.text_content("#hosts li[data-host='b']")
    assert "unreachable: " in reason and reason.split("unreachable: ")[1].strip(), reason
    page.wait_for_selector("#stream-state:has-text('reconnecting')", timeout=60000)
    # While it is away: its session goes on (answered on B itself), A and local keep working and streaming.
    request_id = wait_until(lambda: pending(users["b"], started["b"]), 30, "B's second approval")
    subprocess.run(
        [*users["b"].prefix(), PYTHON, "-c", ANSWER, str(projects["b"]), started["b"], request_id],
        env=users["b"].env(hosts.chock_dir), cwd=users["b"].home, check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    wait_until(lambda: pending(users["b"], started["b"]) not in (None, request_id), 60, "B's third approval")
    other.click("[data-type='approval.request']:not(.done) button.approve")
    other.wait_for_selector("details.tool[data-call-id='a1'][data-result-event-id]", timeout=60000)
    other.wait_for_selector("details.tool[data-call-id='a2']", timeout=60000)  # an event written on A appears
    assert other.locator("#hosts li[data-host='local'][data-state='reachable']").count() == 1

    # Stop on A stops A's session, and only A's.
    other.click("#stop-button")
    other.wait_for_selector("#timeline [data-type='session.end']", timeout=60000)
    assert [e for e in log_of(users["a"], started["a"]) if e["type"] == "session.end"]
    assert not [e for e in log_of(users["local"], started["local"]) if e["type"] == "session.end"]

    # B comes back: its stream resumes from the last event shown, every event once and in order.
    restart_sshd(b_host)
    page.wait_for_selector("#hosts li[data-host='b'][data-state='reachable']", timeout=60000)
    page.wait_for_selector("details.tool[data-call-id='b3']", timeout=60000)
    page.click("[data-type='approval.request']:not(.done) button.approve")
    page.wait_for_selector("#timeline [data-type='session.end']", timeout=60000)
    events = log_of(users["b"], started["b"])
    assert page.evaluate("window.chock.seen")[mark:] == [e["id"] for e in events]
    assert page.evaluate("window.chock.reconnects") >= 1
    assert "b-two" in page.locator("details.tool[data-call-id='b2'] .output").text_content()
    page.screenshot(path=str(tmp_path / "three.png"), full_page=True)
    assert not errors, errors
