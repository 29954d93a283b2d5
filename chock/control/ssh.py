"""A daemon on another machine, reached through OpenSSH (docs/remote.md): the sans-I/O part.

`ssh://[user@]host[:port][/path/to/daemon.sock]` is parsed strictly here, every part by its own rule, and
anything else is refused naming the part. ssh always runs from an argv this module builds — never a shell
string — with options that keep it from asking anything (`BatchMode`), from accepting an unknown or changed host
key (`StrictHostKeyChecking`) and from forwarding anything; the person's own `~/.ssh/config`, keys, agent and
`known_hosts` apply. On the host, `chock dial-stdio` (chock/commands/dial.py) joins the connection to that
user's own daemon socket; it speaks no protocol, so the greeting's numbers are compared between this client and
the remote daemon. When the connection ends before the greeting, `explain` turns ssh's exit status and its
words, or dial-stdio's, into one line a person can act on.
"""

from __future__ import annotations

import re

from chock.errors import EXIT_NO_DAEMON, UsageError

SCHEME = "ssh://"
# What `chock dial-stdio` exits with when no daemon answers at the socket, its one line on stderr saying how
# to enable one there.
NO_DAEMON = EXIT_NO_DAEMON
# How long a master connection stays after its last use, and how long ssh waits to connect.
CONTROL_PERSIST = 60
CONNECT_TIMEOUT = 10
# What is kept of ssh's stderr to explain a failure.
STDERR_LIMIT = 8 * 1024

# Patterns, compiled (and cached by `re`) at their first use.
_USER = r"[A-Za-z0-9._][A-Za-z0-9._-]*"
_HOST = r"[A-Za-z0-9._][A-Za-z0-9._-]*"
_PATH = r"/[A-Za-z0-9._/-]+"
_PORT = r"[0-9]{1,5}"
_FORM = "ssh://[user@]host[:port][/path/to/daemon.sock]"


class BadAddress(UsageError):
    """An address that cannot be used as written: exit 2, naming the part that is wrong."""


class SshTarget:
    """A parsed `ssh://` address: who logs in where, and the daemon socket on that host (None: its own)."""

    __slots__ = ("host", "path", "port", "user")

    def __init__(self, host: str, user: str | None = None, port: int | None = None, path: str | None = None) -> None:
        self.host = host  # an IP literal without its brackets
        self.user = user
        self.port = port
        self.path = path

    def key(self) -> tuple[str, str | None, int | None, str | None]:
        return (self.host, self.user, self.port, self.path)

    @property
    def known_as(self) -> str:
        """The host as known_hosts names it: `host`, or `[host]:port` for a port other than 22."""
        return self.host if self.port in (None, 22) else f"[{self.host}]:{self.port}"

    @property
    def by_hand(self) -> str:
        """The ssh command that logs in as Chock does, for a person to run once."""
        port = f"-p {self.port} " if self.port is not None else ""
        return f"ssh {port}{self.login}"

    @property
    def login(self) -> str:
        """`user@host` (or `host`), as a person names the login in a message."""
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{SCHEME}{user}{host}{port}{self.path or ''}"


def _refuse(text: str, part: str, why: str) -> BadAddress:
    return BadAddress(f"{text!r} is not an ssh address: {part} {why} (write {_FORM})")


def _ip_literal(inside: str) -> bool:
    """An IP address, an IPv6 one's zone (`%eth0`) of the host's characters only: `ipaddress` takes any text as
    a zone, which would reach ssh's hostname (and a `%h` in the person's ~/.ssh/config) as written."""
    import ipaddress

    _, percent, zone = inside.partition("%")
    if percent and not re.fullmatch(_HOST, zone):
        return False
    try:
        ipaddress.ip_address(inside)
    except ValueError:
        return False
    return True


def parse_ssh(text: str) -> SshTarget:
    """`ssh://[user@]host[:port][/path]` as an SshTarget; anything else is BadAddress naming the bad part.

    The user is `[A-Za-z0-9._][A-Za-z0-9._-]*`, the host a name of `[A-Za-z0-9._-]` not starting with `-` or a
    bracketed IP literal, the port 1–65535 and the path `/[A-Za-z0-9._/-]+`: nothing ssh or a remote shell could
    read as an option, a word break or an expansion.
    """
    if not text.startswith(SCHEME):
        raise BadAddress(f"{text!r} is not an ssh address: it must start with {SCHEME} (write {_FORM})")
    rest = text[len(SCHEME) :]
    slash = rest.find("/")
    authority, path = (rest, None) if slash < 0 else (rest[:slash], rest[slash:])
    user = None
    if "@" in authority:
        user, _, authority = authority.partition("@")
        if not re.fullmatch(_USER, user):
            raise _refuse(
                text, f"the user {user!r}", "may hold only letters, digits, '.', '_' and '-', and not start with '-'"
            )
    port_text = None
    if authority.startswith("["):
        host, bracket, after = authority[1:].partition("]")
        if not bracket or not _ip_literal(host):
            raise _refuse(text, f"the host [{host}]", "in brackets must be an IP address, as in [fd00::5]")
        if after:
            if not after.startswith(":"):
                raise _refuse(text, f"what follows {authority[: len(host) + 2]!r}", "must be :port")
            port_text = after[1:]
    else:
        host, colon, port_part = authority.partition(":")
        if colon:
            if ":" in port_part:
                raise _refuse(text, f"the host {authority!r}", "is an IPv6 address: it goes in brackets, as [fd00::5]")
            port_text = port_part
        if not re.fullmatch(_HOST, host):
            raise _refuse(
                text,
                f"the host {host!r}",
                "must be a name of letters, digits, '.', '_' and '-' not starting with '-', or [an IP address]",
            )
    port = None
    if port_text is not None:
        if not re.fullmatch(_PORT, port_text) or not 0 < int(port_text) < 65536:
            raise _refuse(text, f"the port {port_text!r}", "must be a number from 1 to 65535")
        port = int(port_text)
    if path is not None and not re.fullmatch(_PATH, path):
        raise _refuse(text, f"the socket path {path!r}", "may hold only letters, digits, '.', '_', '-' and '/'")
    return SshTarget(host, user=user, port=port, path=path)


def ssh_options(control_dir: str) -> list[str]:
    """The options every ssh of Chock's runs with: no question asked, no unknown or changed host key taken, nothing
    forwarded, and one master connection per host kept CONTROL_PERSIST seconds in `control_dir`."""
    return [
        "-T",
        "-e",
        "none",
        *("-o", "BatchMode=yes"),
        *("-o", "StrictHostKeyChecking=yes"),
        *("-o", "ClearAllForwardings=yes"),
        *("-o", "ForwardAgent=no"),
        *("-o", "ForwardX11=no"),
        *("-o", "PermitLocalCommand=no"),
        *("-o", f"ConnectTimeout={CONNECT_TIMEOUT}"),
        *("-o", "ControlMaster=auto"),
        *("-o", f"ControlPersist={CONTROL_PERSIST}"),
        *("-o", f"ControlPath={control_dir}/%C"),
    ]


def _login(target: SshTarget) -> list[str]:
    return [*(("-l", target.user) if target.user else ()), *(("-p", str(target.port)) if target.port else ())]


def ssh_argv(target: SshTarget, control_dir: str, remote: tuple[str, ...] | None = None) -> list[str]:
    """`ssh OPTIONS [-l USER] [-p PORT] -- HOST chock dial-stdio [--socket PATH]` (or `remote` instead of the
    dial-stdio command). Every word of the remote command is of the parser's safe characters."""
    if remote is None:
        remote = ("chock", "dial-stdio", *(("--socket", target.path) if target.path else ()))
    return ["ssh", *ssh_options(control_dir), *_login(target), "--", target.host, *remote]


def control_argv(target: SshTarget, control_dir: str, operation: str) -> list[str]:
    """`ssh -O OPERATION` for the master of `target` (`check`, `exit`): the same ControlPath the connections use."""
    return ["ssh", *ssh_options(control_dir), *_login(target), "-O", operation, "--", target.host]


def _last_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def explain(target: SshTarget, returncode: int | None, stderr: bytes) -> str | None:
    """Why the connection to `target` ended before the greeting, in one line with what to do; None when ssh and
    dial-stdio said nothing that explains it. The words quoted are ssh's or the host's: the caller shows them
    through the safe printer (every error is, by chock.errors.complain)."""
    text = stderr[-STDERR_LIMIT:].decode("utf-8", "replace")
    last = _last_line(text)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key verification failed" in text:
        changed = "REMOTE HOST IDENTIFICATION HAS CHANGED" in text
        words = "its host key changed (ssh: REMOTE HOST IDENTIFICATION HAS CHANGED)" if changed else f"ssh: {last}"
        fix = (
            f"if the change is expected, run `ssh-keygen -R '{target.known_as}'` and then `{target.by_hand}` once "
            "by hand to check and accept the new key"
            if changed
            else f"run `{target.by_hand}` once by hand to check and accept its host key"
        )
        return f"ssh refused {target.login}: {words}; nothing was sent. {fix}"
    if returncode == NO_DAEMON and last:
        return f"{target.login} has no chock daemon answering: {last}"
    if returncode == 127:
        return (
            f"{target.login} has no `chock` on its non-interactive PATH ({last or 'command not found'}): install "
            f"Chock there, or put `chock` on the PATH a non-interactive shell gets (`{target.by_hand} chock "
            "--version` must work)"
        )
    if returncode == 2 and "dial-stdio" in text and "No such command" in text:
        return (
            f"the Chock on {target.login} is too old to be reached over ssh (it has no `chock dial-stdio`): "
            "update Chock there"
        )
    if returncode == 255 and last:
        if "Permission denied" in last:
            return (
                f"ssh could not log in to {target.login} ({last}): add your key to that user's "
                "~/.ssh/authorized_keys (no password is asked: ssh runs with BatchMode)"
            )
        return f"ssh could not reach {target.login}: {last}"
    if last:
        return f"the connection to {target.login} ended: {last}"
    return None
