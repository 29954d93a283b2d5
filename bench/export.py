"""`chock export`'s memory does not grow with the log: each event is rendered and written as it is read.

A session log of SMALL MB and one of LARGE MB (tool results of about 48 KiB and small events between them) are
exported through a real daemon, in each format, to a file; the figure is the export process's peak resident
memory (its own rusage, from wait4) for the large log against the small one, measured in the same run. A
streaming export stays where it was (a ratio near 1); one that held the log would grow by the log's size.

    python bench/export.py           # 16 MB against 256 MB: the figures
    python bench/export.py --quick   # 4 MB against 32 MB, under a minute: asserts the output is whole and that
                                     # peak memory grew by less than a quarter of the log's growth
"""

from __future__ import annotations

import filecmp
import os
import subprocess
from pathlib import Path

import _common

from chock.log.events import encode, timestamp

OUTPUT = "output line of a build, " * 2000  # about 48 KiB
FORMATS = ("markdown", "html", "jsonl")


def write_log(path: Path, session_id: str, size: int) -> int:
    """A finished session's log of about `size` bytes; the number of events in it."""
    at = timestamp()
    path.parent.mkdir(parents=True, mode=0o700)
    number, written = 0, 0
    with open(path, "wb", buffering=1 << 20) as handle:

        def put(**event: object) -> None:
            nonlocal number, written
            number += 1
            line = encode({"id": number, "at": at, **event})
            handle.write(line)
            written += len(line)

        put(type="session.start", session=session_id, project="/nowhere", message="export everything")
        while written < size:
            call = f"c{number}"
            put(type="assistant.message", text=f"step {number}: run the build", tool_calls=[])
            put(type="tool.call", call_id=call, name="shell", args={"command": f"make step-{number}"})
            put(type="tool.result", call_id=call, name="shell", output=OUTPUT, is_error=False)
            put(type="turn.end")
        put(type="session.end", reason="completed", exit_code=0)
    return number


# Runs the command given and prints its peak resident memory (KiB). A process's peak counts what it held before
# its exec, so the export is started from this small launcher rather than from the benchmark, which is larger.
LAUNCHER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvpe(sys.argv[1], sys.argv[1:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n"
)


def export(root: Path, socket_path: Path, session_id: str, form: str, out: Path) -> int:
    """Export once; the export process's peak resident memory in bytes."""
    command = _common.chock("export", "--daemon", f"unix:{socket_path}", session_id, "--format", form, "-o", str(out))
    done = subprocess.run(
        [_common.python(), "-S", "-c", LAUNCHER, *command], env=_common.environment(root), capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    code, peak = done.stdout.split()
    assert code == "0", done.stderr
    return int(peak) * 1024


def check(out: Path, form: str, log: Path, events: int) -> None:
    """The export is whole: jsonl is the log's bytes; a transcript ends with the session's end and its tail."""
    if form == "jsonl":
        assert filecmp.cmp(out, log, shallow=False), "jsonl differs from the log"
        return
    with open(out, "rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - 4096))
        tail = handle.read().decode()
    assert f"{events}. Session ended" in tail, "the transcript lacks the session's end"
    assert tail.endswith("</html>\n" if form == "html" else "\n")


def main() -> None:
    options = _common.parse(_common.arguments(__doc__ or "", "4 MB against 32 MB; asserts correctness", installed=True))
    small, large = (4 << 20, 32 << 20) if options.quick else (16 << 20, 256 << 20)
    with _common.scratch() as root:
        state = _common.layout(root).state
        sessions = {}
        for name, size in (("small", small), ("large", large)):
            session_id = f"20260101-00000{len(sessions)}-e4e4e4"
            log = state / "sessions" / session_id / "log.jsonl"
            sessions[name] = (session_id, log, write_log(log, session_id, size))
        with _common.running_daemon(root) as socket_path:
            # The first chock process compiles the modules it imports (kept for the rest): not measured.
            export(root, socket_path, sessions["small"][0], "markdown", root / "warm-up")
            for form in FORMATS:
                peaks = {}
                for name, (session_id, log, events) in sessions.items():
                    out = root / f"{name}.{form}"
                    peaks[name] = export(root, socket_path, session_id, form, out)
                    check(out, form, log, events)
                    out.unlink()
                grown = peaks["large"] - peaks["small"]
                low, high = peaks["small"], peaks["large"]
                print(
                    f"export --format {form}: peak RSS {low / 2**20:.1f} MiB for {small >> 20} MB, "
                    f"{high / 2**20:.1f} MiB for {large >> 20} MB (ratio {high / low:.2f})"
                )
                assert grown < (large - small) / 4, f"{form}: peak memory grew by {grown >> 20} MiB with the log"
    if options.quick:
        print("export: quick mode: every export whole, and memory did not follow the log")


if __name__ == "__main__":
    main()
