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

import json
import os
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


def install(layout: Layout, platform: Platform | None = None, *, over_package: bool = False) -> list[Path]:
    """Write the units (or LaunchAgents) naming this installation's chock; return what was written."""
    platform = platform or Platform()
    directory = platform.unit_dir()
    system_wide = {} if platform.darwin else packaged_units()
    if system_wide and not over_package:
        raise ServiceError(_shadow_refusal(system_wide, directory))
    directory.mkdir(parents=True, exist_ok=True)
    chock = chock_executable()
    written = []
    if platform.darwin:
        home = str(Path(os.environ.get("HOME") or Path.home()))
        ensure_dir(layout.state)  # the socket's directory must be ours alone before launchd binds in it
        for label in LAUNCHD_AGENTS:
            text = _packaged(f"{label}.plist").replace("@CHOCK@", chock).replace("@HOME@", home)
            written.append(_write(directory / f"{label}.plist", text))
        return written
    for name in SYSTEMD_UNITS:
        text = _packaged(name).replace(PACKAGED_CHOCK, chock)
        # The service must read the same config.zon (and credential store) and state as this terminal.
        for packaged, here in (
            ("%h/.config/chock/config.zon", layout.config),
            ("%h/.local/state/chock", layout.state),
            ("%h/.local/share/chock", layout.data),
        ):
            text = text.replace(packaged, str(Path(here).absolute()))
        written.append(_write(directory / name, text))
    _checked(["systemctl", "--user", "daemon-reload"])
    return written


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


def uninstall(platform: Platform | None = None) -> Uninstalled:
    """Stop the service and remove the units `install` wrote; a unit a package also provides is neither
    disabled nor left stopped when the person had enabled the package's (its enablement is theirs)."""
    platform = platform or Platform()
    directory = platform.unit_dir()
    names = [f"{label}.plist" for label in LAUNCHD_AGENTS] if platform.darwin else list(SYSTEMD_UNITS)
    ours = [name for name in names if (directory / name).exists()]
    packaged = {} if platform.darwin else packaged_units()
    if not ours:
        return Uninstalled([], sorted(packaged), [])  # nothing of ours: the package's units are not ours to stop
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
    return Uninstalled(removed, sorted(packaged), restarted)


def _enabled_from(directory: Path, name: str) -> set[Path]:
    """The unit files `name`'s enablement links in `directory` point at, each as its real path (a relative link, as
    GNU stow writes, is read from where the link really is, as systemd reads it): the package's file when the
    person enabled the package's unit, ours when `chock daemon start` enabled the ones `install` wrote."""
    return {Path(os.path.realpath(link)) for link in directory.glob(f"*.wants/{name}") if link.is_symlink()}


def start(platform: Platform | None = None) -> None:
    """Listen on the sockets; the first connection starts the daemon (or serve)."""
    platform = platform or Platform()
    if platform.darwin:
        for label in LAUNCHD_AGENTS:
            _checked(["launchctl", "bootstrap", _launchd_target(), str(platform.unit_dir() / f"{label}.plist")])
        return
    _checked(["systemctl", "--user", "enable", "--now", *SYSTEMD_SOCKETS])


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
