"""What the two keystores (Secret Service and the macOS Keychain) share: the service name of their items, and
get/set/delete over one bounded call in the keystore child process (`chock.credentials._child`)."""

from __future__ import annotations

from typing import Any

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
