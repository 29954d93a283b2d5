"""What the benchmarks share: the `--quick` and `--installed` switches, a scratch root under /tmp with the
environment a chock process gets there, a daemon or serve started in it (and stopped at the end), and
percentiles.

A benchmark runs as `python bench/NAME.py`, so this directory is on sys.path and `import _common` finds this
module; importing it puts the checkout first on sys.path too, so `chock` is the checkout's, in this process
and (through PYTHONPATH) in every chock process started from `environment()` — unless `--installed` is given:
then every chock process measured is the installed `/usr/bin/chock` (the Debian package, under Debian's
/usr/bin/python3), and the baseline interpreter is that one too.

Every chock process runs from compiled modules, as an installed package does: an environment with
PYTHONDONTWRITEBYTECODE would otherwise have each process compile every module it imports at every start.
The compiled files are kept in the scratch root (PYTHONPYCACHEPREFIX) and written by a benchmark's first run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chock.paths import Layout  # noqa: E402 - the checkout's, once it is on sys.path

# A daemon answers its first ping within a second or two; this much means it is not coming.
READY_SECONDS = 30.0
STOP_SECONDS = 15.0


# The installed command and its interpreter, measured with --installed.
INSTALLED_CHOCK = "/usr/bin/chock"
INSTALLED_PYTHON = "/usr/bin/python3"
_installed = False


def arguments(doc: str, quick: str, *, installed: bool = False) -> argparse.ArgumentParser:
    """The benchmark's command line: its docstring as the help, `--quick` (a short run under a minute that
    asserts correctness; `quick` says what it skips) and, for a benchmark that measures chock processes,
    `--installed`. A benchmark adds its own options to it and reads them with `parse`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick)
    if installed:
        parser.add_argument(
            "--installed",
            action="store_true",
            help=f"Measure the installed {INSTALLED_CHOCK} under {INSTALLED_PYTHON} instead of this checkout.",
        )
    return parser


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The benchmark's options; with --installed, every command `chock()` gives is the installed one."""
    global _installed
    options = parser.parse_args()
    _installed = getattr(options, "installed", False)
    if _installed and not os.access(INSTALLED_CHOCK, os.X_OK):
        parser.error(f"--installed: there is no {INSTALLED_CHOCK}; install the Debian package first")
    return options


def python() -> str:
    """The interpreter chock runs under: the baseline `python3 -c pass` is measured with it."""
    return INSTALLED_PYTHON if _installed else sys.executable


def chock(*args: str) -> list[str]:
    """The command line of `chock ARGS`, as the installed command or as the checkout's module."""
    return [INSTALLED_CHOCK, *args] if _installed else [sys.executable, "-m", "chock", *args]


def bare_interpreter() -> None:
    """The baseline of a start: the same interpreter, started with nothing to do."""
    subprocess.run([python(), "-c", "pass"], check=True)


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A fresh root under /tmp (short, so a socket path in it fits) with its 0700 runtime dir; removed after."""
    root = Path(tempfile.mkdtemp(prefix="chock-bench-", dir="/tmp"))
    try:
        (root / "runtime").mkdir(mode=0o700)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def layout(root: Path) -> Layout:
    """Where a chock process run with `environment(root)` keeps its config, state, data and cache."""
    return Layout(root / "config.zon", root / "state", root / "data", root / "cache")


def environment(root: Path) -> dict[str, str]:
    """The environment of a chock process whose home, state, data, config, cache and runtime dir are all in
    `root`."""
    ours = ("CHOCK_", "LISTEN_", "NOTIFY_", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    env = {key: value for key, value in os.environ.items() if not key.startswith(ours)}
    roots = layout(root)
    env.update(
        HOME=str(root),
        CHOCK_STATE_DIR=str(roots.state),
        CHOCK_DATA_DIR=str(roots.data),
        CHOCK_CONFIG=str(roots.config),
        CHOCK_CACHE_DIR=str(roots.cache),
        XDG_RUNTIME_DIR=str(root / "runtime"),
        PYTHONPYCACHEPREFIX=str(root / "pycache"),
    )
    if not _installed:
        env["PYTHONPATH"] = str(REPO)
    return env


@contextlib.contextmanager
def stopped_at_exit(process: subprocess.Popen) -> Iterator[subprocess.Popen]:  # type: ignore[type-arg]
    """`process`, sent SIGTERM when the block ends well (and then it must exit 0), killed when it fails."""
    try:
        yield process
    except BaseException:
        process.kill()
        process.wait(STOP_SECONDS)
        raise
    process.send_signal(signal.SIGTERM)
    code = process.wait(STOP_SECONDS)
    assert code == 0, f"{shlex.join(process.args)} exited {code} on SIGTERM"


@contextlib.contextmanager
def running_daemon(root: Path) -> Iterator[Path]:
    """`chock daemon --socket ROOT/d.sock`, once it answers a ping: its socket's path. Run in `root`: `python -m`
    puts its working directory first on sys.path, where a checkout's `chock` would shadow the one measured."""
    from chock.control.client import ControlClient
    from chock.control.framing import ProtocolError

    socket_path = root / "d.sock"
    process = subprocess.Popen(
        chock("daemon", "--socket", str(socket_path)),
        env=environment(root), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=root,
    )  # fmt: skip
    with stopped_at_exit(process):
        client = ControlClient(f"unix:{socket_path}")
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                client.ping()
                break
            except ProtocolError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        yield socket_path


@contextlib.contextmanager
def running_serve(root: Path, daemon_socket: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`chock serve` for the daemon at `daemon_socket`, on 127.0.0.1 at a free port: (its process, the port)."""
    process = subprocess.Popen(
        chock("serve", "--daemon", f"unix:{daemon_socket}", "--host", "127.0.0.1", "--port", "0"),
        env=environment(root), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, cwd=root,
    )  # fmt: skip
    with stopped_at_exit(process):
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        yield process, int(line.strip().rstrip("/").rsplit(":", 1)[1])


def percentile(values: Sequence[float], p: int) -> float:
    """The p-th percentile (1 to 99) of the samples, as `statistics.quantiles` cuts them; one sample is itself."""
    if len(values) > 1:
        return statistics.quantiles(values, n=100)[p - 1]
    return values[0] if values else 0.0


def timed(function: Callable[[], object], repeats: int) -> list[float]:
    """Seconds each of `repeats` calls of `function` took."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return samples


def spread(values: Sequence[float], *, scale: float = 1000.0, unit: str = "ms", digits: int = 1) -> str:
    """Low, median and high of `values`, each times `scale`, in `unit` (seconds as milliseconds by default)."""
    low, median, high = (value * scale for value in (min(values), statistics.median(values), max(values)))
    return f"{low:8.{digits}f} {median:8.{digits}f} {high:8.{digits}f} {unit}"


def labelled(label: str, values: Sequence[float], unit: str = "s", digits: int = 2) -> str:
    """`label: low …, median …, high …` of `values` as they are, in `unit`."""
    low, median, high = min(values), statistics.median(values), max(values)
    return f"{label}: low {low:.{digits}f} {unit}, median {median:.{digits}f} {unit}, high {high:.{digits}f} {unit}"


def median_time(function: Callable[[], object], repeats: int) -> float:
    """The median of `timed`'s seconds."""
    return statistics.median(timed(function, repeats))


def stopwatch(function: Callable[[], object]) -> Callable[[], float]:
    """A call that runs `function` and returns the seconds it took."""

    def run() -> float:
        started = time.perf_counter()
        function()
        return time.perf_counter() - started

    return run


def interleaved(timers: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """The median of each timer's seconds (each call returns what it measured), the timers taking turns round
    after round, so that the machine's noise falls on all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].append(timer())
    return {name: statistics.median(values) for name, values in samples.items()}


class Echo:
    """The baseline of a daemon's round trip: a unix socket server that echoes one line per connection and
    closes, so what a daemon adds to a connect, a line each way and a close is what the two differ by."""

    def __init__(self, path: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(64)
        self.path = path
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(data)

    def round_trip(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(self.path))
            sock.sendall(b"hello chock-control 1\n")
            assert sock.recv(4096) == b"hello chock-control 1\n"
