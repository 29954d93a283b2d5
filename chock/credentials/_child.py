"""The child process every keystore and SecretSpec call runs in, and the parent's side of it.

Why a child: Debian 12's secretstorage 3.3 has no unlock timeout, keyring's own backend unlocks with none,
the SecretSpec SDK's native code cannot be interrupted, and the session process must stay single-threaded.
So each call is `python -m chock.credentials._child` in a session of its own, killed (with anything it
started) when the bound runs out (docs/credentials.md#the-keystore-child).

The request goes in on stdin and the answer comes back on stdout, as JSON lines: zero or more
`{"progress": "unlock"}` lines saying what the child is waiting on, then one `{"ok": true, "value": …}` or
`{"error": {"kind": …, "message": …}}`. A value to store travels in the request and a value read travels in
the answer: over those two pipes only, never argv and never the environment.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chock import module_argv
from chock.credentials.refusals import (
    FILE_STORE_HINT,
    CredentialError,
    NobodyAnswered,
    StoreTimeout,
    StoreUnavailable,
    by_kind,
)

# 30 s, the bound gh puts on its keyring calls; tests shorten it through the environment.
DEFAULT_TIMEOUT = 30.0
TIMEOUT_ENV = "CHOCK_KEYSTORE_TIMEOUT"
# The share of the bound an unlock prompt may wait, so that "nobody answered" arrives from the child itself
# (secretstorage 3.5's TimeoutError) before the parent has to kill it; the rest covers start-up and the call.
UNLOCK_SHARE = 0.8
# How much of a failing child's stderr a message quotes.
STDERR_LINES = 3
# A line of a source snippet, as SecretSpec's errors draw one below their words (the dotenv parser's `  |`,
# `1 | KEY="value`, `  |   ^`; miette's `╭─[…]`, ` 1 │ …`, `·`, `╰──`) or a line of markers alone. It quotes the
# file it points into, and that file holds secrets, so no message keeps one.
_SNIPPET = re.compile(r"^\s*(\d+\s*)?[|│┃┆╭╰├·]|^\s*[\^~─-]+\s*$|\s[|│]\s")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

PROGRESS_UNLOCK = "unlock"

# The module whose `serve(request, progress)` answers for each store, imported only in the child.
HANDLERS = {
    "secret_service": "chock.credentials.stores.secret_service",
    "keychain": "chock.credentials.stores.keychain",
    "secretspec": "chock.credentials.stores.secretspec",
}

# subprocess.Popen as it was at import, before any test could stand a fake in for it (see `_kill`).
_REAL_POPEN = subprocess.Popen

# The package root, so the child finds `chock` whatever directory it runs in.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# Where a child runs unless its store names a directory of Chock's: never the working directory, which may be a
# project, and a project must not decide what a store reads (docs/credentials.md#the-keystore-child).
NEUTRAL_DIR = "/"


def keystore_timeout(environ: Mapping[str, str] | None = None) -> float:
    """The bound on one keystore call: 30 s, or CHOCK_KEYSTORE_TIMEOUT seconds."""
    environ = os.environ if environ is None else environ
    text = environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise CredentialError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise CredentialError(f"{TIMEOUT_ENV}={text!r} must be more than 0 seconds")
    return value


def child_command() -> list[str]:
    return module_argv("chock.credentials._child")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + path if path else "")
    return env


def call(
    store: str,
    op: str,
    *,
    name: str | None = None,
    value: str | None = None,
    options: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    cwd: str | os.PathLike[str] = NEUTRAL_DIR,
) -> dict[str, Any]:
    """Run one store operation in a child under the bound, in `cwd`; return its answer or raise what it met."""
    bound = keystore_timeout() if timeout is None else timeout
    request = {
        "store": store,
        "op": op,
        "name": name,
        "value": value,
        "options": dict(options or {}),
        "unlock_timeout": bound * UNLOCK_SHARE,
    }
    done = run_bounded(child_command(), input=json.dumps(request).encode(), timeout=bound, env=_child_env(), cwd=cwd)
    if done.started_error is not None:
        raise StoreUnavailable(f"cannot start the process for the {store} store: {done.started_error}")
    lines = _answer_lines(done.stdout)
    if done.timed_out:
        if any(line.get("progress") == PROGRESS_UNLOCK for line in lines):
            raise NobodyAnswered(nobody_answered_message(store, bound))
        raise StoreTimeout(
            f"the {store} store did not answer within {bound:g} s ({TIMEOUT_ENV} sets the bound), so its "
            "call was stopped; check that the store works, then try again"
        )
    final = lines[-1] if lines else {}
    if final.get("ok") is True:
        return final
    error = final.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        raise by_kind(str(error.get("kind")))(scrub(error["message"], value))
    tail = scrub(_stderr_tail(done.stderr), value)
    raise StoreUnavailable(
        f"the {store} store failed (its process exited with status {done.returncode})" + (f": {tail}" if tail else "")
    )


@dataclass
class Finished:
    returncode: int | None
    stdout: bytes = field(repr=False)  # a child's answer may hold the credential it read
    stderr: bytes = field(repr=False)
    timed_out: bool = False
    started_error: OSError | None = None

    def check_ran(self, command: str, *, missing: str, bound: float, stopped: str) -> None:
        """Raise what a store command that did not run to its end means: `missing` when it is not there, its
        start's error, or StoreTimeout saying it was `stopped` at `bound` seconds."""
        if isinstance(self.started_error, FileNotFoundError):
            raise StoreUnavailable(missing)
        if self.started_error is not None:
            raise StoreUnavailable(f"cannot run `{command}`: {self.started_error}")
        if self.timed_out:
            raise StoreTimeout(
                f"`{command}` did not finish within {bound:g} s ({TIMEOUT_ENV} sets the bound) and {stopped}"
            )


def run_bounded(
    argv: list[str],
    *,
    input: bytes | None,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] = NEUTRAL_DIR,
) -> Finished:
    """Run `argv` in `cwd` with `input` on stdin (None: stdin closed), killed with everything it started at
    `timeout`.

    The process gets a session of its own, so the kill reaches its helpers too, and none of them is left
    holding our pipes open.
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return Finished(None, b"", b"", False, exc)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()  # what it wrote before it was killed is kept
        return Finished(proc.returncode, out or b"", err or b"", True)
    except BaseException:
        _kill(proc)
        proc.wait()
        raise
    return Finished(proc.returncode, out or b"", err or b"", False)


def nobody_answered_message(store: str, bound: float) -> str:
    return (
        f"the {store} store is locked, and nobody answered its unlock dialog within {bound:g} s (a prompt "
        "shown on a desktop you reached over ssh?). Unlock it on that desktop, or unlock the keyring here "
        "(e.g. `gnome-keyring-daemon --unlock`), and try again; " + FILE_STORE_HINT
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    # Only a real child has a process group of its own to kill: a test's stand-in Popen has a made-up pid,
    # and killpg of a made-up pid (0 is our own group) must never happen.
    if isinstance(proc, _REAL_POPEN) and _REAL_POPEN.__module__ == "subprocess" and proc.pid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _answer_lines(out: bytes) -> list[dict[str, Any]]:
    lines = []
    for raw in out.decode("utf-8", "replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def _stderr_tail(err: bytes) -> str:
    lines = _words_lines(err.decode("utf-8", "replace"))
    return " ".join(lines[-STDERR_LINES:])


def _words_lines(text: str) -> list[str]:
    """`text`'s lines without colours, blank lines or any line of a source snippet, each stripped."""
    lines = (line.strip() for line in _ANSI.sub("", text).splitlines() if not _SNIPPET.search(line))
    return [line for line in lines if line]


def scrub(text: str, value: str | None = None) -> str:
    """What a store said, fit for a message: one line, without colours and without the source snippet a
    parser's error quotes (it quotes the very file the secrets are in); and, belt and braces, without `value`.
    Every message a child sends back goes through here, and so does what a store's command prints."""
    words = " ".join(_words_lines(text))
    return words.replace(value, "[redacted]") if value else words


# ---- the child's side --------------------------------------------------------------------------------


def main() -> None:
    # stdout carries the answer alone: anything else that writes to fd 1 (a native library's warning) goes
    # to stderr instead, and the answer is written to a private copy of the original stdout.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    answer = os.fdopen(answer_fd, "w", encoding="utf-8")

    def emit(line: dict[str, Any]) -> None:
        answer.write(json.dumps(line) + "\n")
        answer.flush()

    def progress(stage: str) -> None:
        emit({"progress": stage})

    try:
        request = json.loads(sys.stdin.read())
        serve: Callable[[dict[str, Any], Callable[[str], None]], dict[str, Any]]
        serve = importlib.import_module(HANDLERS[request["store"]]).serve
        result = serve(request, progress)
        emit({"ok": True, **result})
    except CredentialError as exc:
        emit({"error": {"kind": exc.kind, "message": str(exc)}})
    except Exception as exc:  # an unexpected failure is still an answer, not a traceback at a person
        emit({"error": {"kind": "unavailable", "message": f"{type(exc).__name__}: {exc}"}})


if __name__ == "__main__":
    main()
