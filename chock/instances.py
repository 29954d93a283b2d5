"""The one place that resolves an instance and its credential.

Instances come from `config.zon` and from `chock login`'s index; a name in both is taken from config.zon.
An entry of config.zon with no `.kind`, only `.retries`, `.price` or `.context_window`, adjusts the
index's instance of the same name. The one used is `--instance`, else config's `.instance`, else the only
one there is.
"""

from __future__ import annotations

from chock.config import Config, Tuning
from chock.errors import Refused
from chock.paths import Layout
from chock.providers.kinds import DEFAULT_ADDRESSES, MCP_SERVER, REPLAY
from chock.value import Value


class Instance(Value):
    __slots__ = ("address", "kind", "model", "name", "origin", "tuning")

    def __init__(
        self,
        name: str,
        kind: str,
        address: str | None,
        model: str | None,
        origin: str,
        tuning: Tuning | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.address = address
        self.model = model
        self.origin = origin  # "config" or "index"
        self.tuning = Tuning() if tuning is None else tuning


def available(layout: Layout, config: Config) -> dict[str, Instance]:
    """Every instance this person has, config.zon's winning over the index's of the same name. A credential for
    an MCP server (`chock login --provider mcp=URL`) is in the index too, and is no instance."""
    from chock.credentials.instance_index import read_index

    found = {
        name: Instance(name, entry.kind, entry.address, entry.model, "index", config.tunings.get(name, Tuning()))
        for name, entry in read_index(layout).items()
        if entry.kind != MCP_SERVER
    }
    for name, entry in config.instances.items():
        found[name] = Instance(name, entry.kind, entry.address, entry.model, "config", entry.tuning)
    return found


def default_name(config: Config, instances: dict[str, Instance]) -> str | None:
    """The instance used when none is named: config's `.instance`, else the only one there is; None when
    that leaves no choice (none, or several and no `.instance`)."""
    if config.instance:
        return config.instance if config.instance in instances else None
    return next(iter(instances)) if len(instances) == 1 else None


def listed(layout: Layout, config: Config) -> list[tuple[str, str, bool]]:
    """Every instance as (name, kind, whether it is the default), by name: what the daemon's `instances` says,
    and nothing more (no address, path, model or credential)."""
    instances = available(layout, config)
    default = default_name(config, instances)
    return [(name, instances[name].kind, name == default) for name in sorted(instances)]


def resolve(layout: Layout, config: Config, name: str | None = None) -> Instance:
    instances = available(layout, config)
    listing = ", ".join(sorted(instances)) or "none"
    chosen = name or config.instance
    if chosen:
        if chosen not in instances and chosen in config.tunings:
            raise Refused(
                f"{config.path} adjusts instance {chosen!r} (.instances.{chosen} has no .kind), but no "
                f"`chock login` stored an instance of that name: run `chock login --provider KIND --name "
                f"{chosen}`, or give the entry a .kind"
            )
        if chosen not in instances:
            raise Refused(
                f"there is no instance named {chosen!r} (instances here: {listing}); add it to "
                f"{config.path} under .instances, or run `chock login --provider KIND --name {chosen}`"
            )
        return instances[chosen]
    default = default_name(config, instances)
    if default is not None:
        return instances[default]
    if not instances:
        raise Refused(
            f"no instance is configured: run `chock login --provider anthropic` (or aiand, or "
            f"openai-compat=URL), or name one in {config.path} under .instances"
        )
    raise Refused(f"several instances exist ({listing}): choose one with --instance or .instance in {config.path}")


def credential(layout: Layout, config: Config, instance: Instance) -> str | None:
    """Look the credential up, and refuse the one shape that can only end in a 401: an instance at its
    kind's own address with no credential."""
    if instance.kind == REPLAY:
        return None
    from chock.credentials.lookup import lookup

    found = lookup(layout, config, instance.name)
    own_address = DEFAULT_ADDRESSES.get(instance.kind)
    if found is None and own_address and (instance.address or "").rstrip("/") == own_address:
        raise Refused(
            f"instance {instance.name!r} talks to {instance.address}, which refuses every request without a "
            f"credential, and none is stored for it: run `chock login --provider {instance.kind} "
            f"--name {instance.name}`"
        )
    return found
