"""Private files: written whole or not at all (0600, in the 0700 data dir), refused when others can read them.

`write_private` is the only way `instances.zon` and `tokens.zon` change: a temporary file beside the target,
created 0600 by `mkstemp` (whatever the umask), written, fsynced, then renamed over the target, and the
directory fsynced so the rename itself survives a crash. A reader sees the old file or the new one, never a
torn one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from chock import zon
from chock.credentials.refusals import CredentialError, InsecureFile
from chock.paths import ensure_dir

# Group or others may read: a file that holds tokens with either bit set is refused (docs/credentials.md#lookup).
READABLE_BY_OTHERS = stat.S_IRGRP | stat.S_IROTH


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically; the file is 0600 and its directory is created 0700."""
    directory = ensure_dir(path.parent)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename has still happened
    finally:
        os.close(fd)


def check_private(path: Path, what: str) -> None:
    """Refuse `path`, by name, when group or others can read it. `what` says what it is refused for."""
    mode = os.stat(path).st_mode
    if mode & READABLE_BY_OTHERS:
        import shlex  # for this refusal alone: a session's start imports only what its first request uses

        raise InsecureFile(
            f"{path} can be read by other users (mode {stat.S_IMODE(mode):04o}), so {what} is refused. "
            f"Make it yours alone with `chmod 600 {shlex.quote(str(path))}` and try again."
        )


def read_zon_struct(path: Path, what: str) -> dict[str, Any] | None:
    """The struct in a ZON file Chock writes, or None when there is no file. A broken file names itself."""
    try:
        data = zon.load(path)
    except FileNotFoundError:
        return None
    except zon.ZonError as exc:
        # Only the position: the parser quotes what it found there, which in a token file may be a token.
        raise CredentialError(
            f"{path}: line {exc.line}, column {exc.column}: {what} is not valid ZON; fix or remove it"
        ) from None
    except OSError as exc:
        raise CredentialError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise CredentialError(f"{path}: {what} must be a struct .{{ ... }}; fix or remove it")
    return data
