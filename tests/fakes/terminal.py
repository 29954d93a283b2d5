"""A command on a real pseudo-terminal, as a person at a terminal would run it (`pty`, standard library only)."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path


class Terminal:
    """A command on a real pseudo-terminal: what it printed so far, and keys to type."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: become the command
            if cwd is not None:
                os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.pid, self.fd = pid, fd
        self.screen = b""
        self.code: int | None = None

    @classmethod
    def chock(cls, home, *args: str, cwd: Path) -> Terminal:
        """`chock ARGS` in `cwd`, with the test home's environment."""
        return cls([sys.executable, "-m", "chock", *args], home.env, cwd)

    def read(self, timeout: float = 0.2) -> None:
        while select.select([self.fd], [], [], timeout)[0]:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen += data
            timeout = 0.05

    def wait_for(self, text: bytes | str, timeout: float = 30.0) -> None:
        wanted = text.encode() if isinstance(text, str) else text
        deadline = time.monotonic() + timeout
        while wanted not in self.screen:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {wanted!r}; the screen: {self.screen.decode(errors='replace')}"
                )
            self.read()

    def type(self, keys: str | bytes) -> None:
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def exit_code(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.code is None:
            self.read()
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.code = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                raise AssertionError(f"the command did not exit; the screen: {self.screen.decode(errors='replace')}")
        self.read()
        return self.code

    def text(self) -> str:
        return self.screen.decode("utf-8", "replace")

    def lines(self) -> list[str]:
        return self.text().replace("\r\n", "\n").split("\n")

    def close(self) -> None:
        if self.code is None:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)
