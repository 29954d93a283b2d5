"""`chock run` starts lean (docs/architecture.md#start-up): before its first request to the provider it has
imported only what the session uses — not httpx's command-line tool (rich, pygments) that Debian's httpx
imports on its own — measured under Debian's python3 with this checkout, as the installed package runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import chock
from chock.argv import parse
from chock.commands import run
from tests.fakes.providers import FakeProvider

DEBIAN_PYTHON = "/usr/bin/python3"
CHECKOUT = str(Path(chock.__file__).resolve().parents[1])

# Every top-level package (standard library or not) `chock run` imports before its first request, beyond
# what a bare interpreter has imported at its start (and those httpx tries and finds absent, like h2 or
# brotli): a new one here is a cost every session's start pays.
BEFORE_FIRST_REQUEST = {
    "__future__", "_ast", "_asyncio", "_bisect", "_blake2", "_bz2", "_collections",
    "_compression", "_contextvars", "_ctypes", "_datetime", "_functools", "_hashlib", "_heapq", "_json", "_locale",
    "_lzma", "_opcode", "_operator", "_posixsubprocess", "_queue", "_random", "_sha512", "_socket",
    "_sre", "_ssl", "_string", "_struct", "_typing", "_weakrefset", "_winapi", "anyio", "array", "ast",
    "asyncio", "atexit", "base64", "binascii", "bisect", "brotli", "brotlicffi", "bz2", "calendar", "certifi",
    "chock", "collections", "concurrent", "contextlib", "contextvars", "copy", "copyreg", "ctypes",
    "dataclasses", "datetime", "dis", "email", "encodings", "enum", "errno", "fcntl", "fnmatch",
    "functools", "h11", "h2", "hashlib", "heapq", "hmac", "http", "httpcore", "httpx",
    "idna", "importlib", "inspect", "ipaddress", "itertools", "json", "keyword", "linecache", "locale", "logging",
    "lzma", "math", "mimetypes", "msvcrt", "netrc", "nt", "ntpath", "opcode", "operator", "org",
    "pathlib", "queue", "quopri", "random", "re", "reprlib", "rfc3986", "runpy",
    "secrets", "select", "selectors", "shlex", "shutil", "signal", "sniffio", "socket", "socksio", "ssl", "string",
    "struct", "subprocess", "tempfile", "textwrap", "threading", "token", "tokenize", "traceback",
    "types", "typing", "unicodedata", "urllib", "warnings", "weakref", "winreg", "zlib",
}  # fmt: skip
# The command modules among them: what `chock run`'s table (chock/commands/run.py, read without click by
# chock/entry.py, which imports it through importlib: -X importtime does not name that one) is built from,
# never another command's, nor the click group's.
COMMAND_MODULES = {"chock.commands.move_steps", "chock.commands.shared_options"}
# Chock's modules a session imports where it first uses them, after its first request: the click group and the
# command tree, the approval rules (at the first decision), a continued session's moving, the catalog and its row
# cache (as the log is let go).
LATER = {
    "chock.commands.root", "chock.commands.base", "chock.commands.cli", "chock.rules", "chock.session.moving",
    "chock.log.catalog", "chock.log.rowcache",
}  # fmt: skip
# What Debian's httpx 0.23 imports for its command-line tool, which a session never runs; and click, which
# `chock run` is read without.
NEVER = {"rich", "pygments", "markdown_it", "mdurl", "attr", "click"}


def _imported(importtime: str) -> set[str]:
    """The modules an `-X importtime` report names."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines() if line.startswith("import time:")}


def test_chock_run_reaches_its_first_request_having_imported_a_fixed_list(home, project, tmp_path):
    report = tmp_path / "importtime"
    at_request: list[int] = []

    def answer(body: dict) -> dict:
        at_request.append(report.stat().st_size)  # -X importtime writes each import as it ends, unbuffered
        return {"text": "Done."}

    with FakeProvider(kind="openai", key=None).answer_with(answer) as fake, report.open("w") as stderr:
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "openai-compat={fake.address}", .model = "m" }} }} }}\n'
        )
        done = subprocess.run(
            [DEBIAN_PYTHON, "-X", "importtime", "-m", "chock", "run", "--yes", "say hello"],
            env={**home.env, "PYTHONPATH": CHECKOUT}, cwd=project, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, report.read_text()[-2000:]
    assert "Done." in done.stdout
    bare = subprocess.run([DEBIAN_PYTHON, "-X", "importtime", "-c", "pass"], capture_output=True, text=True)
    imported = _imported(report.read_text()[: at_request[0]]) - _imported(bare.stderr)
    assert not imported & NEVER, sorted(imported & NEVER)
    assert not imported & LATER, sorted(imported & LATER)
    packages = {name.split(".")[0] for name in imported}
    assert packages <= BEFORE_FIRST_REQUEST, sorted(packages - BEFORE_FIRST_REQUEST)
    commands = {name for name in imported if name.startswith("chock.commands")}
    assert commands == COMMAND_MODULES, sorted(commands ^ COMMAND_MODULES)


# Chock's classes on a session's way to its first request: what `chock run`'s modules import, and the provider.
DATACLASS_CHECK = """
import inspect, sys
from dataclasses import is_dataclass
import chock.commands.run, chock.session.render, chock.session.start, chock.providers.registry
import chock.providers.openai, chock.providers.anthropic
made = sorted(
    f"{name}.{cls.__qualname__}" for name, module in list(sys.modules.items()) if name.startswith("chock")
    for cls in vars(module).values() if inspect.isclass(cls) and cls.__module__ == name and is_dataclass(cls)
)
print("\\n".join(made))
"""


def test_no_class_a_session_s_start_builds_is_a_dataclass():
    """@dataclass compiles each class's methods at import: chock.value.Value classes are built instead."""
    done = subprocess.run(
        [DEBIAN_PYTHON, "-c", DATACLASS_CHECK], env={"PYTHONPATH": CHECKOUT, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


# Plain uses of `chock run`'s options, which chock/entry.py reads with the table alone.
PLAIN = (
    ["say hello"], ["--yes", "--json", "a task"], ["a task", "--yes"], ["--continue"], ["--continue", "--yes"],
    ["--continue", "20261206-101010-abcdef"], ["--continue=new words", "--allow-dirty"], ["--continue", "new words"],
    ["--color", "never", "--progress=never", "x"], ["--project", ".", "x"], ["--on", "local", "--model", "m", "x"],
    ["--instance", "i", "--session-id", "s", "--for-daemon", "--after-reboot", "--force", "x"], ["--adopt", "a"],
    ["--move-out", "ID", "--to", "h", "--wait", "5", "--address=a"], ["--move-in", "ID", "--from", "h", "--running"],
)  # fmt: skip
# What the table leaves to click, which explains it (or prints the help).
NOT_PLAIN = (
    ["--help"], ["-h"], ["a", "b"], ["--color", "bogus"], ["--bogus"], ["--yes=1"], ["--model"], ["--model", "--yes"],
    ["--daemon", "d", "x"], ["--port", "1"], ["--wait", "soon"], ["--project", "afile"], ["--", "-x"], ["-"],
)  # fmt: skip


@pytest.mark.parametrize("args", PLAIN)
def test_chock_run_s_table_reads_a_plain_command_line_as_click_does(args):
    values = parse(list(args), run.OPTIONS, run.WORDS)
    assert values is not None
    assert values == run.command().make_context("run", list(args)).params


@pytest.mark.parametrize("args", NOT_PLAIN)
def test_what_chock_run_s_table_does_not_take_plainly_is_left_to_click(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert parse(list(args), run.OPTIONS, run.WORDS) is None
