"""`instances.zon`, the instance index (docs/credentials.md#the-index): what `chock login` stored, and in which store.

    .{ .work = .{ .kind = "anthropic", .address = "https://…", .model = "…", .stored = "secret_service" } }

Only login and logout rewrite it, under the login lock, and always whole (`files.write_private`). It holds no
credential: `.stored` names the store the credential went to, so a lookup asks that store and not whatever
store config.zon names today.
"""

from __future__ import annotations

from typing import Any

from chock import zon
from chock.credentials.files import check_data_dir, check_ours, read_zon_struct, write_private
from chock.credentials.refusals import CredentialError
from chock.paths import Layout
from chock.value import Value

WHAT = "the instance index"


class IndexEntry(Value):
    __slots__ = ("address", "kind", "model", "stored")

    def __init__(self, kind: str, address: str | None, model: str | None, stored: str) -> None:
        self.kind = kind
        self.address = address
        self.model = model
        self.stored = stored

    def as_zon(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"kind": self.kind}
        if self.address is not None:
            entry["address"] = self.address
        if self.model is not None:
            entry["model"] = self.model
        entry["stored"] = self.stored
        return entry


def read_index(layout: Layout) -> dict[str, IndexEntry]:
    """Every entry of `instances.zon` by instance name; no file is an empty index. Refused, by name, when
    another user owns the data dir or the file, or may write either: an entry's .address decides where its
    credential is sent."""
    path = layout.instances_path
    check_data_dir(layout.data, f"reading {WHAT}")
    check_ours(path, "where your credentials are sent", f"reading {WHAT}")
    data = read_zon_struct(path, WHAT)
    if data is None:
        return {}
    return {name: _entry(path, name, value) for name, value in data.items()}


def write_index(layout: Layout, entries: dict[str, IndexEntry]) -> None:
    """Replace `instances.zon` with `entries` (atomically; 0600 in the 0700 data dir)."""
    write_private(layout.instances_path, zon.dumps({name: entry.as_zon() for name, entry in entries.items()}))


def _entry(path: object, name: str, value: Any) -> IndexEntry:
    where = f"{path}: {zon.dot_name(name)}"
    if not isinstance(value, dict):
        raise CredentialError(f"{where} must be a struct with .kind and .stored; fix or remove it")
    fields = {}
    for key in ("kind", "address", "model", "stored"):
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise CredentialError(f"{where}.{key} must be a string; fix or remove the entry")
        fields[key] = str(item) if item is not None else None
    for key in ("kind", "stored"):
        if not fields[key]:
            raise CredentialError(f"{where} has no .{key}; run `chock login` for it again or remove the entry")
    return IndexEntry(**fields)  # type: ignore[arg-type]
