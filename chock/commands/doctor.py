"""`chock doctor`: one screen that says whether each piece works here, and the fix when it does not.

Each check is one small function returning a `Finding`; none of them changes anything.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chock.control.address import Address
from chock.errors import ChockError
from chock.paths import Layout
from chock.platform.host import process_alive


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    essential: bool = True  # a failing essential piece makes `chock doctor` exit 1
    notes: tuple[str, ...] = ()  # lines a person may type next, printed under the finding


def _python(layout: Layout) -> Finding:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info >= (3, 11)
    return Finding("python", ok, f"{version} at {sys.executable}", "" if ok else "Chock needs Python 3.11 or newer")


def _bwrap(layout: Layout) -> Finding:
    from chock.session.sandbox import check_bwrap, find_bwrap

    try:
        path = find_bwrap()
        check_bwrap(path)
    except ChockError as error:
        return Finding("bwrap", False, str(error).split(":")[0], "apt install bubblewrap (and allow user namespaces)")
    return Finding("bwrap", True, f"{path} builds a sandbox")


def _git(layout: Layout) -> Finding:
    path = shutil.which("git")
    if path is None:
        return Finding("git", False, "not found on PATH", "apt install git")
    from chock.session import hostgit

    return Finding("git", True, hostgit.version())


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=10)


def _user_manager(layout: Layout) -> Finding:
    from chock.platform.systemd import under_user_manager

    if sys.platform == "darwin":
        return Finding("user manager", True, "launchd (sessions run in their own process groups)", essential=False)
    if under_user_manager():
        return Finding("user manager", True, "systemd --user is reachable: each session gets its own scope")
    return Finding(
        "user manager",
        False,
        "no systemd user manager is reachable: sessions run in process groups",
        "log in through a session that starts `systemd --user` (or set XDG_RUNTIME_DIR)",
        essential=False,
    )


def _units(layout: Layout) -> Finding:
    from chock.platform.systemd import under_user_manager

    if sys.platform == "darwin" or not under_user_manager():
        return Finding("units", False, "not checked: no systemd user manager", essential=False)
    try:
        enabled = _systemctl("is-enabled", "chock.socket").stdout.strip()
        active = _systemctl("is-active", "chock.socket").stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        return Finding("units", False, f"systemctl --user failed: {error}", essential=False)
    ok = enabled == "enabled" and active == "active"
    return Finding(
        "units",
        ok,
        f"chock.socket is {enabled or 'unknown'} and {active or 'unknown'}",
        "" if ok else "systemctl --user enable --now chock.socket chock-serve.socket",
        essential=False,
    )


def _linger(layout: Layout) -> Finding:
    if sys.platform == "darwin":
        return Finding("lingering", True, "not needed with launchd", essential=False)
    user = pwd.getpwuid(os.getuid()).pw_name
    lingering = Path("/var/lib/systemd/linger", user).exists()
    return Finding(
        "lingering",
        lingering,
        "on: sessions outlive a logout" if lingering else "off: sessions end when you log out",
        "" if lingering else f"loginctl enable-linger {user}  (your choice)",
        essential=False,
    )


# How to read Chock's records (chock.platform.journal): sessions run in scopes of their own, not under
# chock.service, so one session's are found by identifier and id.
READ_RECORDS = (
    "journalctl --user -u chock.service                      (the daemon)",
    "journalctl --user -u chock-serve.service                (serve)",
    "journalctl --user -t chock-session CHOCK_SESSION=<id>   (one session)",
)


def _journal(layout: Layout) -> Finding:
    from chock.platform.journal import JOURNAL_SOCKET, journal_problem

    if sys.platform == "darwin":
        return Finding("journal", True, "none on macOS: the daemon's and serve's records go to stderr", essential=False)
    problem = journal_problem()
    if problem is not None:
        return Finding(
            "journal",
            False,
            f"{problem}: the daemon's and serve's records go to stderr",
            "run the daemon under systemd with systemd-journald, and python-systemd installed (python3-systemd)",
            essential=False,
        )
    return Finding("journal", True, f"systemd-journald listens at {JOURNAL_SOCKET}", notes=READ_RECORDS)


def _store(layout: Layout) -> Finding:
    from chock.config import load_config
    from chock.credentials.stores import default_store, open_store

    try:
        config = load_config(layout.config)
        name = config.credential_store or default_store()
        open_store(name, layout, can_prompt=False).check()
    except ChockError as error:
        return Finding("credential store", False, str(error))  # the store's own message names the fix
    return Finding("credential store", True, f"{name} is reachable and unlocked")


def _daemon(layout: Layout, named: Address | None = None) -> Finding:
    from chock.control.client import ControlClient

    address = named or Address(path=str(layout.daemon_socket))
    try:
        number = ControlClient(address, timeout=5).ping()
    except ChockError as error:
        return Finding("daemon", False, str(error))  # the client's message says how to start one
    return Finding("daemon", True, f"answers at {address}, protocol chock-control {number}")


def _serve(layout: Layout) -> Finding:
    """serve wherever it listens: the listeners its `serve-status.json` names while it serves, else the
    state dir's socket, where the socket unit listens."""
    listeners, pid = _serve_listeners(layout)
    if not listeners:
        listeners = [str(layout.serve_socket)]
    said: list[str] = []
    failed: list[str] = []
    for listener in listeners:
        answer = _health(listener)
        (said if " 200 " in f"{answer} " else failed).append(f"{listener}: {answer}")
    if not failed:
        return Finding("serve", True, "; ".join(said), essential=False)
    if pid is None:
        fix = "systemctl --user start chock-serve.socket  (or run `chock serve`)"
    else:
        fix = f"serve (pid {pid}) said it listens there: look at its output (journalctl --user -u chock-serve.service)"
    return Finding("serve", False, "; ".join(failed + said), fix, essential=False)


def _serve_listeners(layout: Layout) -> tuple[list[str], int | None]:
    """The listeners of a serve that is running, from its record; nothing when none is (or it is gone)."""
    try:
        with open(layout.serve_status_text, encoding="utf-8") as file:
            record = json.load(file)
        pid = int(record["pid"])
        listeners = [str(each) for each in record["listeners"]]
    except (OSError, ValueError, KeyError, TypeError):
        return [], None
    if record.get("state") != "serving" or not process_alive(pid, None):
        return [], None
    return listeners, pid


def _health(listener: str) -> str:
    """`GET /api/health` at a unix socket path or an `http://host:port/` URL: the status line, or why none."""
    address: str | tuple[str, int]
    if listener.startswith("http://"):
        name = listener[len("http://") :].rstrip("/")
        host, _, port = name.rpartition(":")
        family, address = socket.AF_INET6 if host.startswith("[") else socket.AF_INET, (host.strip("[]"), int(port))
    else:
        name, family, address = "localhost", socket.AF_UNIX, listener
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(address)
            sock.sendall(f"GET /api/health HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
            return sock.recv(64).split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError as error:
        return f"nobody answers ({error.strerror or error})"


CHECKS: list[Callable[[Layout], Finding]] = [
    _python,
    _bwrap,
    _git,
    _user_manager,
    _units,
    _linger,
    _journal,
    _store,
    _daemon,
    _serve,
]


def examine(layout: Layout, daemon: Address | None = None) -> list[Finding]:
    """Every check's finding; the daemon checked is the one named (chock.control.address.named_address), else
    the state dir's."""
    findings = []
    for check in CHECKS:
        try:
            findings.append(_daemon(layout, daemon) if check is _daemon else check(layout))
        except Exception as error:  # a broken check is itself a finding, never a crash
            findings.append(Finding(check.__name__.strip("_"), False, f"the check failed: {error}"))
    findings.extend(_connections(layout))
    findings.extend(_mcp_servers(layout))
    return findings


def _mcp_servers(layout: Layout) -> list[Finding]:
    """Each MCP server a session here would start, started as `chock mcp list` starts it (chock.mcp.probing):
    not essential, since a session goes on without a server that fails."""
    from chock.commands.mcp_servers import current_project
    from chock.config import load_config
    from chock.mcp.probing import NOT_STARTED, STARTED, reports

    try:
        found = reports(layout, load_config(layout.config), current_project(None))
    except ChockError as error:
        return [Finding("mcp servers", False, str(error), essential=False)]
    return [
        Finding(
            f"mcp {each.name or '(all)'}",
            each.state == STARTED,
            f"{each.origin}: {len(each.tools)} tools" if each.state == STARTED else f"{each.state}: {each.reason}",
            "" if each.state == STARTED else "`chock mcp trust`" if each.state == NOT_STARTED else "`chock mcp list`",
            essential=False,
        )
        for each in found
    ]


def _connections(layout: Layout) -> list[Finding]:
    """Each connection config.zon names, asked at once (chock/commands/connections.py): not essential here."""
    from chock.commands.connections import probe_all
    from chock.config import load_config

    try:
        named = load_config(layout.config).connections
    except ChockError:
        return []  # the credential store's finding already says what is wrong with the config
    return [
        Finding(
            f"connection {each.name}",
            each.ok,
            f"{each.address}: protocol chock-control {each.protocol}, chock {each.version}" if each.ok else each.state,
            "" if each.ok else "see docs/remote.md: setting up a host",
            essential=False,
        )
        for each in probe_all(named)
    ]
