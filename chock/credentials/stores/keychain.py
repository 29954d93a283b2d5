"""The macOS Keychain store: keyring's macOS backend, never allowed to ask anything.

Before every use, `security show-keychain-info <login keychain>` runs with stdin closed and a timeout: exit 0
is unlocked, exit 36 is locked in a session that cannot ask (ssh, screen). A locked Keychain is refused at
once, naming `security unlock-keychain`, which the person runs themselves: Chock never runs
`unlock-keychain -p`, which would put the password in argv.

keyring maps only -128 to KeyringLocked; -25308 (errSecInteractionNotAllowed) arrives as "Unknown Error" and
is recognised here by its code, and an account that has never had a desktop login has no login keychain at
all (-25307, "A default keychain could not be found") — a different problem that unlocking cannot fix, so it
has a message of its own (docs/credentials.md#facts-the-stores-are-built-on).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.credentials import _child
from chock.credentials.refusals import (
    FILE_STORE_HINT,
    NoLoginKeychain,
    StoreLocked,
    StoreUnavailable,
)
from chock.credentials.stores.keystore import KeystoreCalls, keyring_call

NAME = "keychain"
# `security show-keychain-info` exits with this when the keychain is locked and no UI may be shown.
EXIT_LOCKED_CANNOT_ASK = 36
# OSStatus codes (Security/SecBase.h).
ERR_SEC_INTERACTION_NOT_ALLOWED = -25308
ERR_SEC_NO_DEFAULT_KEYCHAIN = -25307
ERR_SEC_ITEM_NOT_FOUND = -25300
ERR_SEC_AUTH_FAILED = -25293
ERR_USER_CANCELED = -128
NO_KEYCHAIN_WORDS = ("A default keychain could not be found", "could not be found", "-25307")
LOCKED_WORDS = ("User interaction is not allowed", "-25308")

# The login keychain's file, newest format first.
LOGIN_KEYCHAIN_FILES = ("login.keychain-db", "login.keychain")

LOCKED_MESSAGE = (
    "the keychain store is locked, and Chock never lets the Keychain ask you anything. Unlock it with "
    "`security unlock-keychain` (it asks for your password) and run this again, " + FILE_STORE_HINT
)
NO_KEYCHAIN_MESSAGE = (
    "the keychain store cannot work for this account: it has no login keychain (an account only ever "
    "reached over ssh has never had a desktop login to create one), so unlocking cannot help. Log in to the "
    "desktop once to create it, " + FILE_STORE_HINT
)


def login_keychain(home: Path | None = None) -> Path | None:
    """The login keychain's path, or None when the account has none."""
    directory = (home if home is not None else Path.home()) / "Library" / "Keychains"
    for name in LOGIN_KEYCHAIN_FILES:
        if (directory / name).exists():
            return directory / name
    return None


class KeychainStore(KeystoreCalls):
    name = NAME

    def __init__(self, *, home: Path | None = None) -> None:
        self.home = home

    def __repr__(self) -> str:
        return "KeychainStore()"

    def check(self, instance: str | None = None) -> None:
        path = login_keychain(self.home)
        if path is None:
            raise NoLoginKeychain(NO_KEYCHAIN_MESSAGE)
        bound = _child.keystore_timeout()
        done = _child.run_bounded(["security", "show-keychain-info", str(path)], input=None, timeout=bound)
        done.check_ran(
            "security show-keychain-info",
            missing=f"the keychain store needs macOS's `security` command, which is not here; {FILE_STORE_HINT}",
            bound=bound,
            stopped="was stopped; nothing was read or stored",
        )
        if done.returncode == 0:
            return
        words = _text(done.stderr) or _text(done.stdout)
        if done.returncode == EXIT_LOCKED_CANNOT_ASK or any(w in words for w in LOCKED_WORDS):
            raise StoreLocked(LOCKED_MESSAGE)
        if any(w in words for w in NO_KEYCHAIN_WORDS):
            raise NoLoginKeychain(NO_KEYCHAIN_MESSAGE)
        raise StoreUnavailable(
            f"`security show-keychain-info {path}` failed (exit {done.returncode})" + (f": {words}" if words else "")
        )

    def _call(self, op: str, instance: str | None = None, value: str | None = None) -> dict[str, Any]:
        self.check()
        return _child.call(NAME, op, name=instance, value=value)


def _text(data: bytes | str | None) -> str:
    if not data:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return " ".join(text.split())


# ---- in the child ------------------------------------------------------------------------------------


def serve(request: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    _forbid_interaction()
    from keyring.backends import macOS

    keyring = macOS.Keyring()
    try:
        return keyring_call(keyring, request, NAME, nothing_stored=lambda exc: ERR_SEC_ITEM_NOT_FOUND in _statuses(exc))
    except StoreUnavailable:
        raise
    except Exception as exc:
        raise keychain_error(exc) from None


def keychain_error(exc: BaseException) -> StoreUnavailable:
    """What a keyring/Security failure means: locked, no login keychain, or the store's own words."""
    statuses = _statuses(exc)
    words = " ".join(str(e) for e in _chain(exc))
    if ERR_SEC_INTERACTION_NOT_ALLOWED in statuses or ERR_USER_CANCELED in statuses:
        return StoreLocked(LOCKED_MESSAGE)
    if ERR_SEC_NO_DEFAULT_KEYCHAIN in statuses or NO_KEYCHAIN_WORDS[0] in words:
        return NoLoginKeychain(NO_KEYCHAIN_MESSAGE)
    if any(w in words for w in LOCKED_WORDS) or type(exc).__name__ == "KeyringLocked":
        return StoreLocked(LOCKED_MESSAGE)
    return StoreUnavailable(f"the keychain store failed: {exc}")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _statuses(exc: BaseException) -> set[int]:
    """The OSStatus codes in an exception chain: keyring's api.Error carries `(status, message)` as args."""
    return {arg for e in _chain(exc) for arg in e.args if isinstance(arg, int) and not isinstance(arg, bool)}


def _forbid_interaction() -> None:
    """Tell Security.framework that this process may show no UI, so a locked keychain answers -25308
    instead of drawing a dialog nobody may be there to answer. Best effort: the deprecated call may go."""
    if os.uname().sysname != "Darwin":
        return
    import ctypes
    import ctypes.util

    with contextlib.suppress(Exception):
        security = ctypes.CDLL(ctypes.util.find_library("Security"))
        security.SecKeychainSetUserInteractionAllowed(ctypes.c_ubyte(0))
