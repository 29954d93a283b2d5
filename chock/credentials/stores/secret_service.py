"""The Secret Service store: gnome-keyring or kwallet over D-Bus, items service `chock`, user = instance name.

A keystore can look reachable and still be unusable: on a machine with no desktop session the bus is there,
the service starts when asked, a session opens, and then the collection is locked and the prompt that would
unlock it cannot be drawn. So the lock is checked first, with secretstorage, in the calls that neither create
a collection nor prompt without a bound (docs/credentials.md#facts-the-stores-are-built-on), and only then is
keyring's SecretService backend used, constructed directly: never `keyring.get_keyring()`, which honours env
and config and, with keyrings.alt installed, chains to a plaintext file without saying so.

`SecretServiceStore` is the parent's side; `serve` runs in the child process (`chock.credentials._child`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

from chock.credentials import _child
from chock.credentials.refusals import FILE_STORE_HINT, NobodyAnswered, StoreLocked, StoreUnavailable
from chock.credentials.stores.keystore import KeystoreCalls, keyring_call

NAME = "secret_service"
# What to do about a locked collection, in every message that meets one.
UNLOCK_HINT = (
    "Unlock the keyring (log in to the desktop session, or run `gnome-keyring-daemon --unlock` and type its "
    "password) and try again, " + FILE_STORE_HINT
)


class SecretServiceStore(KeystoreCalls):
    name = NAME

    def __init__(self, *, can_prompt: bool = False) -> None:
        # A person at a terminal may be shown an unlock prompt; nobody else is (no terminal, or CI set).
        self.can_prompt = can_prompt

    def __repr__(self) -> str:
        return f"SecretServiceStore(can_prompt={self.can_prompt})"

    def _call(self, op: str, instance: str | None = None, value: str | None = None) -> dict[str, Any]:
        return _child.call(NAME, op, name=instance, value=value, options={"can_prompt": self.can_prompt})

    def check(self, instance: str | None = None) -> None:
        self._call("check")


# ---- in the child ------------------------------------------------------------------------------------


def serve(request: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    import secretstorage
    from secretstorage.collection import DEFAULT_COLLECTION

    connection = _connect(secretstorage)
    with contextlib.closing(connection):
        _ensure_unlocked(secretstorage, connection, request, progress)
    op = request["op"]
    if op == "check":
        return {}
    from keyring.backends import SecretService

    keyring = SecretService.Keyring()
    # The default alias, as checked above: keyring would otherwise call get_default_collection(), which
    # creates a collection (and prompts, with no timeout) when there is none.
    # keyring reads this optional attribute with hasattr() and does not declare it.
    keyring.preferred_collection = DEFAULT_COLLECTION  # type: ignore[attr-defined]
    from keyring.errors import PasswordDeleteError

    # "No such password!" is the PasswordDeleteError of a delete that found nothing.
    return keyring_call(keyring, request, NAME, nothing_stored=lambda exc: isinstance(exc, PasswordDeleteError))


def _connect(secretstorage: Any) -> Any:
    try:
        return secretstorage.dbus_init()
    except (secretstorage.exceptions.SecretServiceNotAvailableException, OSError) as exc:
        # secretstorage maps an unset address and a refused connection; a missing socket is an OSError.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StoreUnavailable(
            f"the {NAME} store cannot work here: there is no D-Bus session bus to reach it ({reason}). Run "
            f"from a desktop session (or one with DBUS_SESSION_BUS_ADDRESS set), {FILE_STORE_HINT}"
        ) from None


def _ensure_unlocked(
    secretstorage: Any, connection: Any, request: dict[str, Any], progress: Callable[[str], None]
) -> None:
    from secretstorage.collection import Collection
    from secretstorage.exceptions import ItemNotFoundException, SecretStorageException

    try:
        # The default alias; never get_default_collection(), which creates one and prompts with no timeout.
        collection = Collection(connection)
    except ItemNotFoundException:
        raise StoreUnavailable(
            f"the {NAME} store has no default collection (this account has never had a keyring set up). "
            f"Create one by logging in to a desktop session once (or with seahorse), {FILE_STORE_HINT}"
        ) from None
    except SecretStorageException as exc:
        raise StoreUnavailable(f"the {NAME} store cannot work here: {exc}. {FILE_STORE_HINT}") from None
    if not collection.is_locked():
        return
    if not request.get("options", {}).get("can_prompt"):
        raise StoreLocked(
            f"the {NAME} store is locked, and there is no way to ask you to unlock it here (no terminal, "
            f"or CI is set). {UNLOCK_HINT}"
        )
    progress(_child.PROGRESS_UNLOCK)  # from here, a kill at the bound means nobody answered the prompt
    timeout = float(request.get("unlock_timeout") or _child.DEFAULT_TIMEOUT * _child.UNLOCK_SHARE)
    try:
        dismissed = _unlock(collection, timeout)
    except TimeoutError:
        raise NobodyAnswered(_child.nobody_answered_message(NAME, timeout)) from None
    if dismissed or collection.is_locked():
        raise StoreLocked(
            f"the {NAME} store is locked, and its unlock prompt was dismissed or could not be shown (no "
            f"display to draw it on?). {UNLOCK_HINT}"
        )


def _unlock(collection: Any, timeout: float) -> bool:
    """`unlock(timeout=…)` where secretstorage has it (3.5); Debian 12's 3.3 has none, and the parent's kill
    at the bound stands in for it."""
    if "timeout" in inspect.signature(collection.unlock).parameters:
        return bool(collection.unlock(timeout=timeout))
    return bool(collection.unlock())
