"""The credential stores: their names, one small interface, and one module per store.

    secret_service   the freedesktop Secret Service (gnome-keyring, kwallet) through keyring + secretstorage
    keychain         the macOS Keychain through keyring's macOS backend, never allowed to prompt
    file             <data>/tokens.zon, 0600 in a 0700 directory
    secretspec       whatever SecretSpec is configured to use: read through its SDK, written through its CLI
    keystore         what the two keystores share: their service name, get/set/delete over a bounded child

Every store answers `get` with None for "nobody has stored this yet", and raises for a store that cannot
work: nothing is guessed and nothing falls back to a less protected store. Keystore items are service
`chock`, user = the instance name; SecretSpec's secrets are `CHOCK_<NAME>`. This module holds what config.zon's
check and `open_store` need; no store imports it, so the package and its stores never import each other.
"""

from __future__ import annotations

import sys
from typing import Protocol

from chock.credentials.refusals import CredentialError
from chock.paths import Layout

STORE_NAMES = ("secret_service", "keychain", "file", "secretspec")
# The operating system's own keystore, used when config.zon names no store.
OS_STORES = {"linux": "secret_service", "darwin": "keychain"}


class Store(Protocol):
    name: str

    def check(self, instance: str | None = None) -> None:
        """Raise, saying what to do, when this store cannot work here (before any secret is read)."""

    def get(self, instance: str) -> str | None:
        """The credential stored for `instance`, or None when none is stored yet."""

    def set(self, instance: str, value: str) -> None:
        """Store `value` for `instance`, replacing what was there."""

    def delete(self, instance: str) -> None:
        """Remove what is stored for `instance`; nothing stored is not an error."""


def available_stores(platform: str = sys.platform) -> tuple[str, ...]:
    """The stores that can work on `platform`, in `STORE_NAMES` order: every one but the other operating
    system's keystore (Secret Service is Linux and the freedesktop, Keychain is macOS)."""
    lacking = "secret_service" if platform == "darwin" else "keychain"
    return tuple(store for store in STORE_NAMES if store != lacking)


def default_store(platform: str = sys.platform) -> str:
    """The operating system's own keystore: secret_service on Linux, keychain on macOS."""
    for prefix, store in OS_STORES.items():
        if platform.startswith(prefix):
            return store
    raise CredentialError(
        f"this platform ({platform}) has no keystore Chock can use; name one in config.zon, "
        'such as .credentials = .{ .store = "file" }'
    )


def open_store(name: str, layout: Layout, *, can_prompt: bool = False) -> Store:
    """The store called `name`. `can_prompt`: a person is at a terminal to answer an unlock prompt."""
    if name == "secret_service":
        from chock.credentials.stores.secret_service import SecretServiceStore

        return SecretServiceStore(can_prompt=can_prompt)
    if name == "keychain":
        from chock.credentials.stores.keychain import KeychainStore

        return KeychainStore()
    if name == "file":
        from chock.credentials.stores.file import FileStore

        return FileStore(layout.tokens_path)
    if name == "secretspec":
        from chock.credentials.stores.secretspec import SecretSpecStore

        return SecretSpecStore(layout.secretspec_dir)
    raise CredentialError(f"there is no credential store called {name!r} (stores: {', '.join(STORE_NAMES)})")
