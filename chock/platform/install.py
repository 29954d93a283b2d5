"""`chock daemon install|uninstall|start|stop|status`: the user service for installs that are not the
distro package (pip, pipx, a venv): docs/architecture.md#running-as-a-service.

The units are the packaged ones (`packaging/systemd/`, `packaging/launchd/`, carried in the wheel as
`chock/platform/units/`), with the path of the Debian package's `/usr/bin/chock` replaced by this
installation's `chock`. Nothing here guesses: every step runs `systemctl --user` or `launchctl` and reports
what it said.

Where a package installed the units system-wide (the .deb puts them in /usr/lib/systemd/user), units written to
`~/.config/systemd/user` would shadow them under the same names. So `install` explains and writes nothing
unless told `over_package`, and `uninstall` never disables or stops a unit a package also provides: the person's
`systemctl --user enable` of the package's units is theirs to undo.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from chock.errors import ChockError
from chock.paths import Layout, ensure_dir

SYSTEMD_UNITS = ("chock.socket", "chock.service", "chock-serve.socket", "chock-serve.service", "chock-resume.service")
SYSTEMD_SOCKETS = ("chock.socket", "chock-serve.socket")
LAUNCHD_AGENTS = ("dev.chock.daemon", "dev.chock.serve")
PACKAGED_CHOCK = "/usr/bin/chock"  # what the units name; rewritten for this installation
COMMAND_TIMEOUT = 30.0
# Where a package (or an administrator) puts user units: below ~/.config/systemd/user in systemd's search order
# (systemd.unit(5), "User Unit Search Path").
SYSTEM_UNIT_DIRS = (
    "/etc/systemd/user",
    "/usr/local/share/systemd/user",
    "/usr/share/systemd/user",
    "/usr/local/lib/systemd/user",
    "/usr/lib/systemd/user",
    "/lib/systemd/user",
)


class ServiceError(ChockError):
    pass


# The first line of every file `install` writes: what wrote it and the digest of the rest, so a later `install`
# knows the file is still as written (and may be replaced), and `uninstall` removes only such files.
STAMP = "Written by `chock daemon install` (sha256 {digest}); a later install replaces it only while it is unedited"
STAMP_PREFIX = STAMP.partition("{")[0]


@dataclass(frozen=True)
class Platform:
    """Where units go and how they are driven on this machine."""

    darwin: bool = sys.platform == "darwin"

    def unit_dir(self) -> Path:
        home = Path(os.environ.get("HOME") or Path.home())
        if self.darwin:
            return home / "Library" / "LaunchAgents"
        config = os.environ.get("XDG_CONFIG_HOME")
        return (Path(config) if config and os.path.isabs(config) else home / ".config") / "systemd" / "user"


def chock_executable() -> str:
    """This installation's `chock`: beside the running Python (a venv, pipx), else the one on PATH."""
    beside = Path(sys.executable).parent / "chock"
    if beside.exists():
        return str(beside)
    found = shutil.which("chock")
    if found is None:
        raise ServiceError("cannot find this installation's `chock` executable (not beside Python, not on PATH)")
    return os.path.abspath(found)


def _packaged(name: str) -> str:
    return resources.files("chock.platform").joinpath("units", name).read_text(encoding="utf-8")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ServiceError(f"{argv[0]} is not installed here") from None
    except subprocess.TimeoutExpired:
        raise ServiceError(f"`{' '.join(argv)}` did not finish within {COMMAND_TIMEOUT:g} s") from None


def _checked(argv: list[str]) -> str:
    result = _run(argv)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()
        raise ServiceError(f"`{' '.join(argv)}` failed (exit {result.returncode}): {said}")
    return result.stdout


def _launchd_target(label: str = "") -> str:
    return f"gui/{os.getuid()}" + (f"/{label}" if label else "")


def packaged_units() -> dict[str, Path]:
    """Chock's units that a package installed system-wide, by name (the first found in systemd's order)."""
    found: dict[str, Path] = {}
    for directory in SYSTEM_UNIT_DIRS:
        for name in SYSTEMD_UNITS:
            path = Path(directory, name)
            if name not in found and path.is_file():
                found[name] = path
    return found


def install(
    layout: Layout, platform: Platform | None = None, *, over_package: bool = False, force: bool = False
) -> list[Path]:
    """Write the units (or LaunchAgents) naming this installation's chock; return what was written. A file of
    the same name that is not as an earlier `install` wrote it (edited, or written by hand) is not replaced
    unless `force`, and then it is kept beside as `<name>.bak`; nothing is written until every file may be."""
    platform = platform or Platform()
    directory = platform.unit_dir()
    system_wide = {} if platform.darwin else packaged_units()
    if system_wide and not over_package:
        raise ServiceError(_shadow_refusal(system_wide, directory))
    chock = str(Path(chock_executable()).absolute())
    if platform.darwin:
        home = str(Path(os.environ.get("HOME") or Path.home()))
        files = {f"{label}.plist": _launchd_agent(label, chock, home, layout) for label in LAUNCHD_AGENTS}
    else:
        files = {name: _systemd_unit(name, chock, layout) for name in SYSTEMD_UNITS}
    earlier = _unstamped_renderings(platform, chock, layout)
    theirs = [name for name, text in files.items() if not _replaceable(directory / name, text, earlier.get(name))]
    if theirs and not force:
        raise ServiceError(_edited_refusal(theirs, directory, platform))
    directory.mkdir(parents=True, exist_ok=True)
    if platform.darwin:
        ensure_dir(layout.state)  # the socket's directory must be ours alone before launchd binds in it
    written = []
    for name, text in files.items():
        if name in theirs:
            os.replace(directory / name, directory / f"{name}.bak")
        written.append(_write(directory / name, text))
    if not platform.darwin:
        _checked(["systemctl", "--user", "daemon-reload"])
    return written


def _systemd_unit(name: str, chock: str, layout: Layout) -> str:
    """A packaged unit naming this installation's chock and this terminal's config, state and data (the service
    must read the same config.zon, credential store and state), each quoted as systemd.syntax(7) reads it."""
    paths = {
        "%h/.config/chock/config.zon": layout.config,
        "%h/.local/state/chock": layout.state,
        "%h/.local/share/chock": layout.data,
    }

    def here(value: str) -> str:
        for packaged, path in paths.items():
            value = value.replace(packaged, str(Path(path).absolute()))
        return value

    lines = []
    for line in _packaged(name).splitlines():
        key, equals, value = line.partition("=")
        if equals and key == "ExecStart" and value.startswith(PACKAGED_CHOCK + " "):
            line = f"ExecStart={_quoted(chock, exec_word=True)}{value[len(PACKAGED_CHOCK) :]}"
        elif equals and key == "Environment":
            line = f"Environment={_quoted(here(value))}"
        elif equals and key == "ListenStream" and value.startswith("%h/"):
            line = f"ListenStream={_specifiers_escaped(here(value))}"
        lines.append(line)
    return _stamped("# ", "\n".join(lines) + "\n", "")


def _launchd_agent(label: str, chock: str, home: str, layout: Layout) -> str:
    """A packaged LaunchAgent naming this installation's chock and this terminal's config, state and data, each
    escaped as XML text."""
    from xml.sax.saxutils import escape

    def filled(part: str) -> str:
        for packaged, path in (
            ("@HOME@/Library/Application Support/chock/state", layout.state),
            ("@HOME@/Library/Application Support/chock", layout.data),
            ("@HOME@/.config/chock/config.zon", layout.config),
            ("@HOME@", Path(home)),
            ("@CHOCK@", Path(chock)),
        ):
            part = part.replace(packaged, escape(_printable(str(Path(path).absolute()))))
        return part

    # The placeholders are filled in outside the comments only: a comment cannot hold a path's `--`.
    parts = re.split(r"(<!--.*?-->)", _packaged(f"{label}.plist"), flags=re.S)
    text = "".join(part if part.startswith("<!--") else filled(part) for part in parts)
    head, newline, rest = text.partition("\n")  # the XML declaration must stay the first line
    return head + newline + _stamped("<!-- ", rest, " -->")


def _printable(path: str) -> str:
    """`path` as a unit file or plist can carry it: one line, no control character."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        raise ServiceError(
            f"cannot write a unit for {path!r}: it holds a control character (a line break, a tab), which a "
            "unit file cannot carry; use a path without one"
        )
    return path


def _specifiers_escaped(value: str) -> str:
    """`value` with systemd's specifiers (`%h`, `%n`, …) escaped: a `%` in a path is a percent sign."""
    return _printable(value).replace("%", "%%")


def _quoted(value: str, *, exec_word: bool = False) -> str:
    """`value` as one double-quoted word of systemd.syntax(7): backslash and quote escaped, `%` as `%%`, and in
    an Exec line `$` as `$$` (systemd.service(5), "Command lines")."""
    text = _specifiers_escaped(value).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + (text.replace("$", "$$") if exec_word else text) + '"'


def _stamped(open_comment: str, text: str, close_comment: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{open_comment}{STAMP.format(digest=digest)}{close_comment}\n{text}"


def _as_written(path: Path) -> bool:
    """Whether the file at `path` is as a `chock daemon install` wrote it: stamped, and its digest still holds."""
    try:
        first, newline, rest = path.read_text(encoding="utf-8").partition("\n")
    except (OSError, ValueError):
        return False
    if first.startswith("<?xml"):  # a plist: its stamp is its second line
        first, newline, rest = rest.partition("\n")
    if STAMP_PREFIX not in first or not newline:
        return False
    digest = first.partition("(sha256 ")[2].partition(")")[0]
    return digest == hashlib.sha256(rest.encode("utf-8")).hexdigest()


def _replaceable(path: Path, text: str, unstamped: str | None = None) -> bool:
    """Whether `install` may write `text` at `path`: nothing is there, or what is there is as written (stamped by
    this install or an earlier one, or exactly as an install before the stamps wrote it: `unstamped`), or it
    already holds exactly `text`."""
    if not path.exists() and not path.is_symlink():
        return True
    return _as_written(path) or _holds(path, {text, unstamped})


def _holds(path: Path, texts: set[str | None]) -> bool:
    try:
        return path.read_text(encoding="utf-8") in texts
    except (OSError, ValueError):
        return False


def _unstamped_renderings(platform: Platform, chock: str, layout: Layout) -> dict[str, str]:
    """Each unit as an install before the stamps wrote it for this chock and these dirs (its paths put in as they
    are, unquoted), so that one is replaced or removed as written, not taken for the person's."""
    if platform.darwin:
        home = str(Path(os.environ.get("HOME") or Path.home()))
        return {
            f"{label}.plist": _packaged(f"{label}.plist").replace("@CHOCK@", chock).replace("@HOME@", home)
            for label in LAUNCHD_AGENTS
        }
    paths = {
        PACKAGED_CHOCK: chock,
        "%h/.config/chock/config.zon": str(Path(layout.config).absolute()),
        "%h/.local/state/chock": str(Path(layout.state).absolute()),
        "%h/.local/share/chock": str(Path(layout.data).absolute()),
    }
    renderings = {}
    for name in SYSTEMD_UNITS:
        text = _packaged(name)
        for packaged, here in paths.items():
            text = text.replace(packaged, here)
        renderings[name] = text
    return renderings


def _edited_refusal(names: list[str], directory: Path, platform: Platform) -> str:
    where = ", ".join(str(directory / name) for name in names)
    drop_in = "" if platform.darwin else f" (a drop-in keeps them across installs: systemctl --user edit {names[0]})"
    return (
        f"not replacing {where}: not as `chock daemon install` wrote it (edited since, or written by hand), and "
        f"your changes would be lost{drop_in}. To write chock's own anyway: chock daemon install --force (each "
        "one replaced is kept as <name>.bak)"
    )


def _write(path: Path, text: str) -> Path:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path


def _shadow_refusal(packaged: dict[str, Path], directory: Path) -> str:
    where = sorted({str(path.parent) for path in packaged.values()})
    return (
        f"chock's user units are already installed system-wide ({', '.join(sorted(packaged))} in "
        f"{', '.join(where)}, by a package), and units written to {directory} would shadow them under the same "
        "names. Use the package's: chock daemon start (systemctl --user enable --now chock.socket "
        "chock-serve.socket). To run this installation's chock from the service even so: chock daemon install "
        "--over-package (chock daemon uninstall gives the package's units back as they were)."
    )


@dataclass(frozen=True)
class Uninstalled:
    """What `uninstall` did: the files it removed, and the package's units left as the person had them."""

    removed: list[Path]
    packaged: list[str]
    restarted: list[str]
    kept: list[Path]  # files of chock's names that are not as `install` wrote them: the person's, left alone


def uninstall(layout: Layout, platform: Platform | None = None) -> Uninstalled:
    """Stop the service and remove the units `install` wrote, as it wrote them (a file of the same name that
    was edited since, or written by hand, is left, and said); a unit a package also provides is neither
    disabled nor left stopped when the person had enabled the package's (its enablement is theirs)."""
    platform = platform or Platform()
    directory = platform.unit_dir()
    names = [f"{label}.plist" for label in LAUNCHD_AGENTS] if platform.darwin else list(SYSTEMD_UNITS)
    present = [name for name in names if (directory / name).exists()]
    try:
        earlier = _unstamped_renderings(platform, str(Path(chock_executable()).absolute()), layout)
    except ServiceError:  # this installation's chock is not to be found: no unit can be known as its own
        earlier = {}
    ours = [name for name in present if _as_written(directory / name) or _holds(directory / name, {earlier.get(name)})]
    kept = [directory / name for name in present if name not in ours]
    packaged = {} if platform.darwin else packaged_units()
    if not ours:
        return Uninstalled([], sorted(packaged), [], kept)  # nothing of ours: neither the package's nor theirs
    theirs = [name for name in packaged if _enabled_from(directory, name) == {Path(os.path.realpath(packaged[name]))}]
    stop(platform)
    removed = []
    for name in ours:
        if not platform.darwin and name not in theirs:
            _run(["systemctl", "--user", "disable", name])
        (directory / name).unlink()
        removed.append(directory / name)
    restarted = []
    if not platform.darwin:
        _checked(["systemctl", "--user", "daemon-reload"])
        for name in SYSTEMD_SOCKETS:  # the package's sockets the person enabled listen again
            if name in theirs:
                _checked(["systemctl", "--user", "start", name])
                restarted.append(name)
    return Uninstalled(removed, sorted(packaged), restarted, kept)


def _enabled_from(directory: Path, name: str) -> set[Path]:
    """The unit files `name`'s enablement links in `directory` point at, each as its real path (a relative link, as
    GNU stow writes, is read from where the link really is, as systemd reads it): the package's file when the
    person enabled the package's unit, ours when `chock daemon start` enabled the ones `install` wrote."""
    return {Path(os.path.realpath(link)) for link in directory.glob(f"*.wants/{name}") if link.is_symlink()}


def start(layout: Layout, platform: Platform | None = None) -> None:
    """Listen on the sockets; the first connection starts the daemon (or serve). Refused while a daemon started
    by hand runs on the same state dir: the socket would take its address and leave it unreachable, and the
    daemon the socket starts would find the state dir taken."""
    platform = platform or Platform()
    _refuse_a_daemon_by_hand(layout, platform)
    if platform.darwin:
        for label in LAUNCHD_AGENTS:
            _checked(["launchctl", "bootstrap", _launchd_target(), str(platform.unit_dir() / f"{label}.plist")])
        return
    _checked(["systemctl", "--user", "enable", "--now", *SYSTEMD_SOCKETS])


def _refuse_a_daemon_by_hand(layout: Layout, platform: Platform) -> None:
    from chock.daemon.lock import holder

    pid = holder(str(layout.state / "daemon.lock"))
    if pid is None:
        return
    if pid and not platform.darwin:
        service = _run(["systemctl", "--user", "show", "--property", "MainPID", "--value", "chock.service"])
        if service.stdout.strip() == str(pid):
            return  # the service's own daemon: its socket is already listening
    who = f"pid {pid}" if pid else "a daemon starting up"
    raise ServiceError(
        f"a chock daemon started another way ({who}) runs on the state dir {layout.state}: the service's socket "
        "would take its address and leave it unreachable. Stop that daemon first (Ctrl-C where it runs, or "
        f"kill {pid or 'it'}; its sessions keep running), then chock daemon start"
    )


def stop(platform: Platform | None = None) -> None:
    """Stop listening and stop the daemon and serve; running sessions keep running in their own scopes."""
    platform = platform or Platform()
    if platform.darwin:
        for label in LAUNCHD_AGENTS:
            _run(["launchctl", "bootout", _launchd_target(label)])  # an agent that is not loaded is fine
        return
    _run(["systemctl", "--user", "stop", *SYSTEMD_SOCKETS, "chock.service", "chock-serve.service"])


def status(layout: Layout, platform: Platform | None = None) -> list[tuple[str, str]]:
    """(what, state) lines: each unit as the service manager sees it, then the daemon's own status record."""
    platform = platform or Platform()
    lines = []
    if platform.darwin:
        for label in LAUNCHD_AGENTS:
            loaded = _run(["launchctl", "print", _launchd_target(label)]).returncode == 0
            lines.append((label, "loaded" if loaded else "not loaded"))
    else:
        for name in SYSTEMD_UNITS:
            state = _run(["systemctl", "--user", "is-active", name]).stdout.strip() or "unknown"
            enabled = _run(["systemctl", "--user", "is-enabled", name]).stdout.strip() or "unknown"
            lines.append((name, f"{state} ({enabled})"))
    record = layout.state / "daemon-status.json"
    try:
        facts = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        lines.append(("daemon-status.json", "none (the daemon has not run, or not with this state dir)"))
    else:
        owned = len(facts.get("sessions_owned") or [])
        said = (
            f"{facts.get('state', '?')}, pid {facts.get('pid', '?')}, protocol {facts.get('protocol', '?')}, "
            f"{owned} session(s) owned, updated {facts.get('updated_at', '?')}"
        )
        lines.append(("daemon-status.json", said))
    return lines
