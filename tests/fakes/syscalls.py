"""A process tree's file system calls as strace records them, for tests of what reaches the disk when.

`traced(argv)` is the argv run under `strace -f -e trace=SYSCALLS -s 200 -o FILE` (one file, the calls of every
process in the order they happened); `Trace.read(FILE)` parses it. A call another process interrupted is
recorded in two lines (`… <unfinished ...>`, then `<... name resumed> …`): a call is placed where it started
(`start`) and where it returned (`end`), so "A returned before B began" is `a.end < b.start`.

Descriptors are followed by process: `Trace.fds(pid, path_suffix)` gives the descriptors a process opened a file
as, with the span of the trace each one named it (from its `openat` to its `close`).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SYSCALLS = ("openat", "write", "fdatasync", "fsync", "execve", "close", "renameat", "renameat2")

_LINE = re.compile(r"^(?P<pid>\d+) +(?P<rest>.*)$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<rest>.*)$")
_CALL = re.compile(r"^(?P<name>\w+)\((?P<args>.*)$")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_RESULT = re.compile(r"\) += (?P<result>-?\d+)(?: [A-Z]+ \(.*\))?$")  # the line's end: "= 3", "= -1 ENOENT (…)"


@dataclass
class Call:
    pid: int
    name: str
    args: str  # the text between the parentheses, as strace printed it (strings escaped, cut at 200 bytes)
    result: int | None
    start: int  # the call's place in the trace: where it began
    end: int  # and where it returned
    strings: list[str] = field(default_factory=list)  # its string arguments, unescaped

    @property
    def fd(self) -> int | None:
        """The descriptor a write, fsync, fdatasync or close names."""
        head = re.match(r"(\d+)[,)]", self.args)
        return int(head[1]) if head else None


def _unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace")


def strace() -> str:
    """The strace command, or the test fails saying how to get it."""
    found = shutil.which("strace")
    if found is None:
        pytest.fail("needs strace: apt-get install strace (scripts/debian-packages.txt lists it)")
    return found


def traced(argv: Sequence[str], output: Path) -> list[str]:
    """`argv` run under strace, every process it starts followed, into `output`."""
    return [strace(), "-f", "-qq", "-e", f"trace={','.join(SYSCALLS)}", "-s", "200", "-o", str(output), *argv]


class Trace:
    def __init__(self, calls: list[Call]) -> None:
        self.calls = calls

    @classmethod
    def read(cls, path: Path) -> Trace:
        calls: list[Call] = []
        unfinished: dict[int, tuple[str, int]] = {}  # pid -> (the call's first half, where it began)
        for place, line in enumerate(path.read_text(errors="replace").splitlines()):
            matched = _LINE.match(line)
            if matched is None:
                continue
            pid, rest = int(matched["pid"]), matched["rest"]
            start = place
            resumed = _RESUMED.match(rest)
            if resumed is not None:
                if pid not in unfinished:
                    continue
                head, start = unfinished.pop(pid)
                rest = head + resumed["rest"]
            elif rest.endswith("<unfinished ...>"):
                unfinished[pid] = (rest.removesuffix("<unfinished ...>").rstrip(), place)
                continue
            call = _CALL.match(rest)
            if call is None:  # a signal, an exit
                continue
            result = _RESULT.search(rest)
            args = call["args"]
            calls.append(
                Call(
                    pid=pid,
                    name=call["name"],
                    args=args,
                    result=int(result["result"]) if result else None,
                    start=start,
                    end=place,
                    strings=[_unescape(text) for text in _STRING.findall(args)],
                )
            )
        return cls(calls)

    def named(self, name: str, pid: int | None = None) -> list[Call]:
        return [c for c in self.calls if c.name == name and (pid is None or c.pid == pid)]

    def opened(self, suffix: str, *, flag: str = "") -> list[Call]:
        """The successful openat calls of a path ending in `suffix` (with `flag` among their flags)."""
        return [
            c
            for c in self.named("openat")
            if c.strings and c.strings[0].endswith(suffix) and flag in c.args and (c.result or -1) >= 0
        ]

    def fd_span(self, opened: Call) -> tuple[int, int]:
        """Where the descriptor `opened` returned names that file: from the open to its close in that process."""
        closes = [c.start for c in self.named("close", opened.pid) if c.fd == opened.result and c.start > opened.end]
        return opened.end, min(closes, default=len(self.calls) * 10**6)

    def on(self, opened: Call, name: str) -> list[Call]:
        """The calls `name` (write, fsync, fdatasync) made on the descriptor `opened` returned, while it named it."""
        begin, end = self.fd_span(opened)
        return [c for c in self.named(name, opened.pid) if c.fd == opened.result and begin < c.start and c.end < end]

    def execs(self, program: str) -> list[Call]:
        """The successful execve calls of `program` (a path or a name)."""
        return [
            c
            for c in self.named("execve")
            if c.strings and Path(c.strings[0]).name == Path(program).name and c.result == 0
        ]
