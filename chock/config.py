"""Loading and validating `config.zon`: every mistake is refused when the file is read.

A person writes this file by hand, so an unknown key or a bad value is an error that names its key path
(`.approvals.shell`, `.instances.work.kind`) and what would have been accepted, before anything starts.
A store this platform does not have is refused here too, not later when a credential is needed. The kinds
and their `KIND=VALUE` are read by `chock.providers.kinds`, the store names are `chock.credentials.stores`'.
The only I/O is reading the one file; a `.token` is kept as written and never appears in an error.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chock import zon
from chock.credentials.stores import STORE_NAMES, available_stores
from chock.errors import Refused
from chock.providers.kinds import KINDS, KindError, kind_address, split_kind

APPROVALS = ("ask", "allow", "deny")
PLATFORM_NAMES = {"darwin": "macOS", "linux": "Linux"}

TOP_KEYS = ("instance", "instances", "approvals", "sandbox", "credentials")
INSTANCE_KEYS = ("kind", "address", "model", "token")
APPROVALS_KEYS = ("shell",)
SANDBOX_KEYS = ("network",)
CREDENTIALS_KEYS = ("store",)


class ConfigError(Refused):
    """`config.zon` cannot be used: refused before anything starts (exit 3)."""


@dataclass(frozen=True)
class InstanceConfig:
    name: str
    kind: str
    # replay: the absolute path of the replay file; anthropic/aiand: their default address when none is given.
    address: str
    model: str | None = None
    token: str | None = field(default=None, repr=False)  # never printed by accident


@dataclass(frozen=True)
class Config:
    path: Path  # where it was read from (it may not exist)
    instance: str | None = None
    instances: dict[str, InstanceConfig] = field(default_factory=dict)
    approvals_shell: str = "ask"
    sandbox_network: bool = False
    credential_store: str | None = None  # None: the OS keystore (decided by the credentials code)
    exists: bool = False


def load_config(path: Path, *, platform: str = sys.platform) -> Config:
    """Read and validate the config at `path`; a missing file is an empty config (`exists=False`)."""
    path = Path(path)
    try:
        data = zon.load(path, source=str(path))
    except FileNotFoundError:
        return Config(path=path)
    except zon.ZonError as exc:
        raise ConfigError(_parse_error(exc, path)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc.strerror or exc}") from None
    return _Reader(path, platform).config(data)


def _parse_error(error: zon.ZonError, path: Path) -> str:
    """The parser's message, except that text quoted from a line holding a `.token` is not repeated."""
    try:
        line = path.read_text(encoding="utf-8", errors="replace").splitlines()[error.line - 1]
    except (OSError, IndexError):
        line = ""
    if "token" not in line:
        return str(error)
    expected = error.what.split(", found", 1)[0]
    return (
        f"{path}: line {error.line}, column {error.column}: {expected} (what stands there is not shown: "
        "the line holds a .token)"
    )


def _kind_of(value: Any) -> str:
    """What sort of value this is, for messages that must not repeat the value itself (a token)."""
    if isinstance(value, zon.EnumLiteral):
        return "an enum literal"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return zon.as_written(value)


class _Reader:
    """One validation pass over a parsed config; every error carries the file and the key path."""

    def __init__(self, path: Path, platform: str) -> None:
        self.path = path
        self.platform = platform
        self.base_dir = path.absolute().parent

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {message}")

    def struct(self, value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """`value` as a struct whose keys are all among `keys`; `where` is its key path ("" at the top)."""
        shown = where or "the config"
        if not isinstance(value, dict):
            raise self.error(f"{shown} must be a struct .{{ ... }} (got {zon.as_written(value)})")
        for key in value:
            if key not in keys:
                raise self.error(f"unknown key {where}{zon.dot_name(key)} (known keys in {shown}: {', '.join(keys)})")
        return value

    def string(self, value: Any, where: str) -> str:
        """A non-empty string (an enum literal such as `.ask` counts: it reads the same)."""
        if not isinstance(value, str):
            raise self.error(f"{where} must be a string (got {zon.as_written(value)})")
        if not value:
            raise self.error(f"{where} must not be empty")
        return str(value)

    def choice(self, value: Any, where: str, choices: tuple[str, ...]) -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.error(f"{where} must be one of {', '.join(choices)} (got {zon.as_written(value)})")
        return str(value)

    def config(self, data: Any) -> Config:
        top = self.struct(data, "", TOP_KEYS)
        fields: dict[str, Any] = {}
        if "instance" in top:
            fields["instance"] = self.string(top["instance"], ".instance")
        if "instances" in top:
            fields["instances"] = self.instances(top["instances"])
        if "approvals" in top:
            fields.update(self.approvals(top["approvals"]))
        if "sandbox" in top:
            fields.update(self.sandbox(top["sandbox"]))
        if "credentials" in top:
            fields.update(self.credentials(top["credentials"]))
        return Config(path=self.path, exists=True, **fields)

    def instances(self, value: Any) -> dict[str, InstanceConfig]:
        if not isinstance(value, dict):
            raise self.error(f".instances must be a struct of named instances (got {zon.as_written(value)})")
        return {name: self.instance(name, entry) for name, entry in value.items()}

    def instance(self, name: str, value: Any) -> InstanceConfig:
        where = f".instances{zon.dot_name(name)}"
        entry = self.struct(value, where, INSTANCE_KEYS)
        if "kind" not in entry:
            raise self.error(f"{where} has no .kind (kinds: {', '.join(KINDS)})")
        kind_text = self.string(entry["kind"], f"{where}.kind")
        try:
            kind, value_text = split_kind(kind_text)
        except KindError as exc:
            raise self.error(f"{where}.kind: {exc}") from None
        value_where = f"{where}.kind"
        if "address" in entry:  # .address overrides the =VALUE of .kind
            value_text = self.string(entry["address"], f"{where}.address")
            value_where = f"{where}.address"
        try:
            address = kind_address(kind, value_text, base_dir=self.base_dir)
        except KindError as exc:
            raise self.error(f"{value_where}: {exc}") from None
        model = self.string(entry["model"], f"{where}.model") if "model" in entry else None
        token = None
        if "token" in entry:
            token = entry["token"]
            if not isinstance(token, str) or isinstance(token, zon.EnumLiteral):
                raise self.error(f'{where}.token must be a string "…" (got {_kind_of(token)})')
            if not token:
                raise self.error(f"{where}.token is empty (leave .token out to send no credential)")
        return InstanceConfig(
            name=name,
            kind=kind,
            address=address,
            model=model,
            token=token,
        )

    def approvals(self, value: Any) -> dict[str, Any]:
        section = self.struct(value, ".approvals", APPROVALS_KEYS)
        if "shell" not in section:
            return {}
        return {"approvals_shell": self.choice(section["shell"], ".approvals.shell", APPROVALS)}

    def sandbox(self, value: Any) -> dict[str, Any]:
        section = self.struct(value, ".sandbox", SANDBOX_KEYS)
        if "network" not in section:
            return {}
        network = section["network"]
        if not isinstance(network, bool):
            raise self.error(f".sandbox.network must be true or false (got {zon.as_written(network)})")
        return {"sandbox_network": network}

    def credentials(self, value: Any) -> dict[str, Any]:
        section = self.struct(value, ".credentials", CREDENTIALS_KEYS)
        if "store" not in section:
            return {}
        store = self.choice(section["store"], ".credentials.store", STORE_NAMES)
        here = available_stores(self.platform)
        if store not in here:
            platform = PLATFORM_NAMES.get(self.platform, self.platform)
            raise self.error(
                f".credentials.store {zon.as_written(section['store'])} is not available on {platform} "
                f"(stores that work here: {', '.join(here)})"
            )
        return {"credential_store": store}
