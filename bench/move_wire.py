"""A move's parts through the wire: a 100 MB log, a 50 MB bundle and a scratchpad, from one daemon's `send` to
another's `receive`, relayed by a client as `chock move` relays them.

The parts are staged as `chock run --move-out` stages them (`<state>/moves/<id>/out/`), and a client process relays
each from the source daemon to the target daemon, which checks it against its sha256 and keeps it. The baseline,
measured in the same run, is what the issue compares a move with, on one machine: each part copied through two
pipes (`cat A | cat > B`, what `ssh A cat log | ssh B 'cat > x'` does without ssh). The figures: the relay's time
against the baseline's (the goal: at most 2×, the bundle travelling base64-encoded and every part hashed on both
sides), and the peak resident memory of the client and of each daemon (the goal: each under 64 MiB).

    python bench/move_wire.py           # a 100 MB log and a 50 MB bundle: the figures
    python bench/move_wire.py --quick   # 8 MB and 4 MB, under a minute: asserts the parts arrive whole only
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common

sys.path.insert(0, str(_common.REPO))
from chock.control import parts
from chock.daemon.move_relay import DIGESTS
from tests.fakes.move_parts import pieces_said

SESSION_ID = "20260101-000000-4d4d4d"
LINE = ('{"id": %d, "type": "tool.result", "output": "' + "x" * 900 + '"}\n').encode()

RELAY = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from chock.control import move_protocol as mp, parts
from chock.control.client import ControlClient
source, target = ControlClient(sys.argv[2], timeout=600), ControlClient(sys.argv[3], timeout=600)
for part in sys.argv[5].split():
    header, body = source.open_body(mp.SendRequest(sys.argv[4], part))
    target.call_with_body(mp.ReceiveRequest(sys.argv[4], part, header.body_length, header.sha256), body)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def stage(out: Path, log_bytes: int, bundle_bytes: int) -> tuple[dict[str, bytes], list[str]]:
    """The parts, written where move-out writes them: their sha256s, and the names they travel under (the bundle's
    pieces)."""
    out.mkdir(parents=True)
    with open(out / "log", "wb") as log:
        written, n = 0, 0
        while written < log_bytes:
            n += 1
            line = LINE % n
            log.write(line)
            written += len(line)
    with open(out / "bundle", "wb") as bundle:
        for _ in range(bundle_bytes // (1 << 20)):
            bundle.write(os.urandom(1 << 20))
    (out / "scratchpad").write_bytes(b"# notes\n" * 4096)
    (out / "log-end").write_bytes(LINE % (n + 1) + LINE % (n + 2))  # the span move-out ends the log with
    digests = {}
    for part in parts.PARTS:
        with open(out / part, "rb") as handle:
            digests[part] = hashlib.file_digest(handle, "sha256").digest()
    # As the source's daemon keeps them from move-out's lines, so `send` need not read a part through first.
    said = {part: [(out / part).stat().st_size, digest.hex()] for part, digest in digests.items() if part != "bundle"}
    for piece in pieces_said((out / "bundle").read_bytes()):
        said[str(piece["part"])] = [piece["length"], piece["sha256"]]
    (out / DIGESTS).write_text(json.dumps(said))
    return digests, list(said)


def peak(state: Path) -> int:
    """The daemon's peak resident memory (VmHWM), by its pid in daemon-status.json."""
    pid = json.loads((state / "daemon-status.json").read_text())["pid"]
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for the daemon {pid}")


def main() -> None:
    options = _common.parse(_common.arguments(__doc__ or "", "8 MB and 4 MB: asserts the parts arrive whole"))
    log_bytes, bundle_bytes = (8, 4) if options.quick else (100, 50)
    log_bytes, bundle_bytes = log_bytes * 1000 * 1000, bundle_bytes * (1 << 20)
    with _common.scratch() as root:
        (root / "a").mkdir()
        (root / "b").mkdir()
        for side in ("a", "b"):
            (root / side / "runtime").mkdir(mode=0o700)
        with _common.running_daemon(root / "a") as a, _common.running_daemon(root / "b") as b:
            out = _common.layout(root / "a").state / "moves" / SESSION_ID / "out"
            digests, names = stage(out, log_bytes, bundle_bytes)
            baseline_dir = root / "copies"
            baseline_dir.mkdir()

            def baseline() -> float:
                started = time.perf_counter()
                for part in ("log", "scratchpad", "bundle"):
                    subprocess.run(
                        ["sh", "-c", 'cat "$1" | cat > "$2"', "sh", str(out / part), str(baseline_dir / part)],
                        check=True,
                    )
                return time.perf_counter() - started

            client_peak = 0

            def relay() -> float:
                nonlocal client_peak
                started = time.perf_counter()
                argv = [str(_common.REPO), f"unix:{a}", f"unix:{b}", SESSION_ID, " ".join(names)]
                done = subprocess.run([sys.executable, "-c", RELAY, *argv], check=True, capture_output=True, text=True)
                client_peak = max(client_peak, int(done.stdout.split()[-1]))
                return time.perf_counter() - started

            rounds = 1 if options.quick else 3
            times = _common.interleaved({"baseline": baseline, "relay": relay}, rounds)
            received = _common.layout(root / "b").state / "moves" / SESSION_ID / "in"
            for part, digest in digests.items():
                with open(received / part, "rb") as handle:
                    assert hashlib.file_digest(handle, "sha256").digest() == digest, f"the {part} arrived changed"
            peaks = {"source daemon": peak(root / "a" / "state"), "target daemon": peak(root / "b" / "state")}
    if options.quick:
        print(f"move_wire --quick: {log_bytes // 10**6} MB log and {bundle_bytes >> 20} MiB bundle arrived whole")
        return
    ratio = times["relay"] / times["baseline"]
    print(f"a {log_bytes // 10**6} MB log, a {bundle_bytes >> 20} MiB bundle and a 32 KiB scratchpad, relayed")
    print(f"  baseline (cat | cat > x, each part): {times['baseline']:.2f} s")
    print(f"  chock's relay (send -> client -> receive, each checked): {times['relay']:.2f} s ({ratio:.2f}x)")
    print(f"  peak resident memory: client {client_peak / 2**20:.1f} MiB, " + ", ".join(
        f"{name} {value / 2**20:.1f} MiB" for name, value in peaks.items()
    ))  # fmt: skip


if __name__ == "__main__":
    main()
