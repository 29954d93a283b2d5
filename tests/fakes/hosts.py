"""Hosts on this one machine, reached over real OpenSSH (docs/remote.md): a Unix user per host with its own home
and daemon, Debian's sshd per host on its own loopback address with a host key made here, and a client that is a
Unix user too (ssh reads ~/.ssh from the passwd entry's home, not $HOME).

`host(n)` listens on 127.X.Y.n:PORT, where 127.X.Y is picked per run (a free /24 of 127.0.0.0/8, checked by
binding): two runs at once — two engineers, two test files — never share an address.

Every user runs Debian's own python3 on a copy of the `chock` package in a world-readable directory: a checkout
may sit where other users cannot read it. Everything made — users, processes, directories — is removed by
`Hosts.cleanup`. Needs root (useradd, setpriv) and openssh-server (scripts/debian-packages.txt).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import chock
from tests.fakes.wait import wait_until

PYTHON = "/usr/bin/python3"
SSHD = "/usr/sbin/sshd"
PORT = 2222
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def _run(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


class User:
    """A Unix user made for the test: its name, ids, home and a fresh 0700 runtime directory."""

    def __init__(self, name: str, base: Path) -> None:
        self.name = name
        self.home = base / name
        _run("useradd", "-m", "-d", str(self.home), "-s", "/bin/sh", name)
        _run("usermod", "-p", "*", name)  # not locked: sshd refuses a locked account even for a key
        entry = _run("id", "-u", name).stdout.strip(), _run("id", "-g", name).stdout.strip()
        self.uid, self.gid = int(entry[0]), int(entry[1])
        # Short: ssh's control sockets live under it, and a socket's path holds at most 107 bytes.
        self.runtime = Path(f"/tmp/{name}.r")
        self.runtime.mkdir(mode=0o700)
        os.chown(self.runtime, self.uid, self.gid)

    def env(self, chock_dir: Path, **extra: str) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": SYSTEM_PATH,
            "XDG_RUNTIME_DIR": str(self.runtime),
            "PYTHONPATH": str(chock_dir),
            "LANG": "C.UTF-8",
            **extra,
        }

    def prefix(self) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--"]

    def give(self, path: Path) -> None:
        """Make `path` (and what is under it) this user's."""
        _run("chown", "-R", f"{self.uid}:{self.gid}", str(path))

    def processes(self, marker: str = "") -> list[int]:
        """This user's processes whose command line holds `marker`."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}").st_uid != self.uid:
                    continue
                line = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in line:
                found.append(int(entry))
        return found

    def remove(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not self.processes(), 10, f"{self.name}'s processes to end")
        subprocess.run(["userdel", "-r", "-f", self.name], capture_output=True)
        shutil.rmtree(self.runtime, ignore_errors=True)


class Host:
    """One machine: a user, its daemon (started by `start_daemon`) and an sshd on `ip`:PORT."""

    def __init__(self, hosts: Hosts, number: int, *, chock_on_path: bool = True) -> None:
        self.hosts = hosts
        self.ip = f"{hosts.network}.{number}"
        self.user = User(f"{hosts.prefix}h{number}", hosts.base)
        self.dir = hosts.base / f"sshd{number}"
        self.dir.mkdir(mode=0o755)
        self.key = self.dir / "host_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"host{number}", "-f", str(self.key))
        self.authorized = self.dir / "authorized_keys"
        self.authorized.write_text(hosts.client_key_pub)
        self.authorized.chmod(0o644)
        self.log = self.dir / "sshd.log"
        path = f"{hosts.bin}:{SYSTEM_PATH}" if chock_on_path else str(hosts.base / "empty")
        config = self.dir / "sshd_config"
        config.write_text(
            f"ListenAddress {self.ip}:{PORT}\n"
            f"HostKey {self.key}\n"
            "PidFile none\nUsePAM no\nStrictModes no\nLogLevel VERBOSE\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            f"AllowUsers {self.user.name}\n"
            f"AuthorizedKeysFile {self.authorized}\n"
            f"SetEnv PATH={path}\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # the privilege separation directory
        with open(self.log, "ab") as log:
            self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
        wait_until(lambda: "Server listening" in self.log.read_text() or self.sshd.poll() is not None, 10, "sshd")
        assert self.sshd.poll() is None, self.log.read_text()
        self.daemon: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ssh://{self.user.name}@{self.ip}:{PORT}"

    @property
    def state(self) -> Path:
        return self.user.home / ".local/state/chock"

    @property
    def socket(self) -> Path:
        return self.state / "daemon.sock"

    def public_key_line(self) -> str:
        kind, body = Path(f"{self.key}.pub").read_text().split()[:2]
        return f"[{self.ip}]:{PORT} {kind} {body}\n"

    def spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        """`argv` as this host's user, in its environment, in the background."""
        env = self.user.env(self.hosts.chock_dir)
        return subprocess.Popen(
            [*self.user.prefix(), *argv], env=env, cwd=self.user.home, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip

    def start_daemon(self) -> None:
        self.daemon = self.spawn(PYTHON, "-m", "chock", "daemon")
        wait_until(lambda: self.socket.exists() or self.daemon.poll() is not None, 30, "the host's daemon")
        assert self.daemon.poll() is None, self.daemon.stderr.read().decode() if self.daemon.stderr else ""

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            self.daemon.wait(30)
        self.daemon = None

    def accepted_logins(self) -> int:
        """How many logins this host's sshd let in."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def stop(self) -> None:
        self.stop_daemon()
        if self.sshd.poll() is None:
            self.sshd.terminate()
            self.sshd.wait(10)
        self.user.remove()


def _free(ip: str) -> bool:
    """Whether nothing listens on `ip`:PORT (binding it succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((ip, PORT))
        except OSError:
            return False
    return True


def free_network() -> str:
    """A `127.X.Y` whose .2 to .20 have nothing on PORT: this run's hosts' addresses (all loopback on Linux)."""
    for _ in range(50):
        network = f"127.{1 + secrets.randbelow(254)}.{secrets.randbelow(256)}"
        if all(_free(f"{network}.{number}") for number in range(2, 21)):
            return network
    raise RuntimeError(f"no free 127.X.Y.0/24 with port {PORT} unbound: are many host test runs going at once?")


class Hosts:
    """The client user and the hosts it reaches; `host(n)` makes host `network`.n (`free_network`)."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or not os.path.exists(SSHD):
            raise RuntimeError("these tests make Unix users and run sshd: run them as root with openssh-server")
        self.prefix = "chk" + secrets.token_hex(3)
        self.network = free_network()
        self.base = Path(tempfile.mkdtemp(prefix="chock-hosts-"))
        self.base.chmod(0o755)
        self.made: list[Host] = []
        self.client: User | None = None
        # The code under test, where every user can read it, and `chock` for a PATH.
        self.chock_dir = self.base / "lib"
        shutil.copytree(
            Path(chock.__file__).parent, self.chock_dir / "chock", ignore=shutil.ignore_patterns("__pycache__")
        )
        self.bin = self.base / "bin"
        self.bin.mkdir()
        (self.base / "empty").mkdir()  # a PATH with no `chock` (this machine may have one in /usr/bin)
        wrapper = self.bin / "chock"
        # As the .deb's /usr/bin/chock starts it: the entry point, not `-m` (runpy costs a remote request ~9 ms).
        wrapper.write_text(
            f"#!/bin/sh\nPYTHONPATH={self.chock_dir} exec {PYTHON} -c "
            '\'import sys; from chock.entry import main; sys.argv[0] = "chock"; main()\' "$@"\n'
        )
        wrapper.chmod(0o755)
        # Compiled as a package install compiles it: the users cannot write __pycache__ here.
        _run(PYTHON, "-m", "compileall", "-q", str(self.chock_dir))
        _run("chmod", "-R", "a+rX", str(self.chock_dir))
        # A project every user can read: the client names it, a host's sessions are of it.
        self.project = self.base / "project"
        self.project.mkdir()
        _run("git", "init", "-q", str(self.project))
        _run("chmod", "-R", "a+rX", str(self.project))
        self.client = User(f"{self.prefix}c", self.base)
        ssh = self.client.home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "client", "-f", str(ssh / "id_ed25519"))
        self.client_key_pub = (ssh / "id_ed25519.pub").read_text()
        (ssh / "known_hosts").write_text("")
        self.client.give(self.client.home)

    def host(self, number: int, *, chock_on_path: bool = True) -> Host:
        made = Host(self, number, chock_on_path=chock_on_path)
        self.made.append(made)
        known = self.client.home / ".ssh/known_hosts"
        with open(known, "a") as handle:
            handle.write(made.public_key_line())
        return made

    def trust(self, host: Host, line: str) -> None:
        """Replace what the client's known_hosts says of `host` with `line`."""
        known = self.client.home / ".ssh/known_hosts"
        kept = [each for each in known.read_text().splitlines(True) if not each.startswith(f"[{host.ip}]:")]
        known.write_text("".join(kept) + line)

    def chock(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`chock ARGS` as the client user, in its home; standard input is `input`, else nothing."""
        assert self.client is not None
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        return subprocess.run(
            [*self.client.prefix(), PYTHON, "-m", "chock", *args], env=self.client.env(self.chock_dir, **(env or {})),
            cwd=self.client.home, capture_output=True, text=True, timeout=timeout, **stdin,
        )  # fmt: skip

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        """`chock ARGS` as the client user, in the background."""
        assert self.client is not None
        return subprocess.Popen(
            [*self.client.prefix(), PYTHON, "-m", "chock", *args], env=self.client.env(self.chock_dir),
            cwd=self.client.home, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def write_client_config(self, text: str) -> Path:
        path = self.client.home / ".config/chock/config.zon"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.client.give(self.client.home / ".config")
        return path

    def cleanup(self) -> None:
        for each in self.made:
            each.stop()
        if self.client is not None:
            self.client.remove()
        shutil.rmtree(self.base, ignore_errors=True)


def listening_tcp(uids: set[int]) -> set[str]:
    """The TCP sockets in LISTEN state (IPv4 and IPv6) that processes of `uids` own, as `address:port` hex."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[7]) in uids:
                found.add(fields[1])
    return found


def listening_unix(under: Path) -> set[str]:
    """The unix sockets in LISTEN state whose path is below `under`."""
    found = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # Flags 00010000 is __SO_ACCEPTCON: a listening socket.
        if len(fields) >= 8 and fields[3] == "00010000" and fields[7].startswith(f"{under}/"):
            found.add(fields[7])
    return found
