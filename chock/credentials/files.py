"""Private files: written whole or not at all (0600, in the 0700 data dir), refused when others can read them,
and refused, with the data dir, when another user owns them or may write them.

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
from chock.paths import DIR_MODE, FILE_MODE, ensure_dir

# Group or others may read: a file that holds tokens with either bit set is refused (docs/credentials.md#lookup).
READABLE_BY_OTHERS = stat.S_IRGRP | stat.S_IROTH
# Group or others may write: the data dir, instances.zon or tokens.zon with either bit set is refused.
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


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


def check_data_dir(directory: Path, acting: str) -> None:
    """Refuse the data dir, by name, when another user owns it or group or others may write in it: whoever can
    put a file there can replace instances.zon, whose .address decides where a credential is sent, and
    tokens.zon. `acting` says what is refused (a missing dir is created 0700 later, and is not refused)."""
    check_dir_ours(
        directory,
        f"whoever can write in it can replace instances.zon, which decides where your credentials are sent, so "
        f"{acting} is refused",
    )


def check_dir_ours(directory: Path, why: str) -> None:
    """Refuse a directory of Chock's, by name, when another user owns it or group or others may write in it;
    `why` says what such a user could do, and what is refused. A missing directory is not refused."""
    _check_ours(directory, why, DIR_MODE)


def check_ours(path: Path, what: str, acting: str) -> None:
    """Refuse `path` (`what`: instances.zon or tokens.zon), by name, when another user owns it or group or
    others may write it. A missing file is not refused."""
    _check_ours(path, f"whoever can write it chooses {what}, so {acting} is refused", FILE_MODE)


def _check_ours(path: Path, why: str, mode_wanted: int) -> None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    import shlex  # for a refusal alone: a session's start imports only what its first request uses

    quoted = shlex.quote(str(path))
    if info.st_uid != os.getuid():
        raise InsecureFile(
            f"{path} belongs to another user (uid {info.st_uid}; you are uid {os.getuid()}): {why}. If it is "
            f"yours, give it back to yourself (as root: `chown {os.getuid()} {quoted}`, then `chmod "
            f"{mode_wanted:o} {quoted}`); if not, move it away. Then try again."
        )
    if info.st_mode & WRITABLE_BY_OTHERS:
        raise InsecureFile(
            f"{path} can be written by other users (mode {stat.S_IMODE(info.st_mode):04o}): {why}. Make it yours "
            f"alone with `chmod {mode_wanted:o} {quoted}` and try again."
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
