"""What the two keystores (Secret Service and the macOS Keychain) share: the service name of their items,
get/set/delete over one bounded call in the keystore child process (`chock.credentials._child`), and, in that
child, the one keyring call each operation makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chock.credentials.refusals import StoreUnavailable

# The service name of every keystore item; the item's user is the instance name.
SERVICE = "chock"


class KeystoreCalls:
    """get/set/delete for the stores whose every call runs in a bounded child process (the keystores):
    a subclass says how to make one call, `_call(op, instance, value) -> the child's answer`."""

    def _call(self, op: str, instance: str | None = None, value: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def get(self, instance: str) -> str | None:
        value = self._call("get", instance).get("value")
        return value if isinstance(value, str) else None

    def set(self, instance: str, value: str) -> None:
        self._call("set", instance, value)

    def delete(self, instance: str) -> None:
        self._call("delete", instance)


def keyring_call(
    keyring: Any, request: dict[str, Any], store: str, *, nothing_stored: Callable[[Exception], bool]
) -> dict[str, Any]:
    """In the child: the request's get, set or delete on a keyring backend. A delete whose failure
    `nothing_stored` recognises found nothing to remove, which is not an error."""
    name, op = request["name"], request["op"]
    if op == "get":
        return {"value": keyring.get_password(SERVICE, name)}
    if op == "set":
        keyring.set_password(SERVICE, name, request["value"])
        return {}
    if op == "delete":
        try:
            keyring.delete_password(SERVICE, name)
        except Exception as exc:
            if not nothing_stored(exc):
                raise
        return {}
    raise StoreUnavailable(f"unknown operation {op!r} for the {store} store")
