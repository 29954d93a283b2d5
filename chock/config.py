"""Loading and validating `config.zon`: every mistake is refused when the file is read.

A person writes this file by hand, so an unknown key or a bad value is an error that names its key path
(`.approvals.shell`, `.instances.work.kind`) and what would have been accepted, before anything starts.
A store this platform does not have is refused here too, not later when a credential is needed. The kinds
and their `KIND=VALUE` are read by `chock.providers.kinds`, the store names are `chock.credentials.stores`'.
The only I/O is reading the one file; a `.token` is kept as written and never appears in an error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock import zon
from chock.config_keys import (  # noqa: F401 - re-exported: the table is read as chock.config's
    APPROVALS_KEYS,
    BUDGET_KEYS,
    CREDENTIALS_KEYS,
    INSTANCE_KEYS,
    KEYS,
    PRICE_KEYS,
    SANDBOX_KEYS,
    SERVE_KEYS,
    TOP_KEYS,
    TUNING_KEYS,
    Key,
    children,
)
from chock.control.endpoint import CONNECTION_NAME, LOCAL, Address, BadAddress, parse_address
from chock.credentials.stores import STORE_NAMES, available_stores
from chock.errors import Refused
from chock.mcp.declarations import DeclarationError, ServerSpec, parse_servers
from chock.providers.kinds import KINDS, KindError, kind_address, split_kind
from chock.value import Value

APPROVALS = ("ask", "allow", "deny")
# What the daemon does at its start with the sessions it owned that a reboot interrupted
# (docs/architecture.md#after-a-reboot): list them (free, one `chock run --continue` away), or carry them on.
AFTER_REBOOT = ("list", "resume")
PLATFORM_NAMES = {"darwin": "macOS", "linux": "Linux"}


# A price or a budget written without a currency (every config.zon before currencies) is in US dollars, the
# currency the providers' price lists use.
DEFAULT_CURRENCY = "USD"
# Sending a failed call again more than this many times only delays the error a person has to act on.
MAX_RETRIES = 10
# No model worth running has a smaller window: the system prompt and the tools alone take a good part of it.
MIN_CONTEXT_WINDOW = 1000
MAX_CONTEXT_WINDOW = 100_000_000
RULE_VERDICTS = ("allow", "ask", "deny")
# `.approvals.timeout`: `<n>s`, `<n>m` or `<n>h`, from a second to a week (docs/approvals.md#a-deadline).
TIMEOUT_UNITS = {"s": 1, "m": 60, "h": 3600}
MAX_TIMEOUT = 7 * 24 * 3600


class ConfigError(Refused):
    """`config.zon` cannot be used: refused before anything starts (exit 3)."""


class Price(Value):
    """What a million tokens cost, in `currency` (ISO 4217); cache reads and writes cost the input price unless
    said otherwise."""

    __slots__ = ("cache_read", "cache_write", "currency", "input", "output")

    def __init__(
        self, input: float, output: float, cache_read: float | None = None, cache_write: float | None = None,
        currency: str = DEFAULT_CURRENCY
    ) -> None:  # fmt: skip
        self.input = input
        self.output = output
        self.cache_read = cache_read
        self.cache_write = cache_write
        self.currency = currency

    def cost(self, usage: dict[str, int]) -> float:
        """The cost of one call's `usage` (a `usage` event's fields)."""
        read = usage.get("cache_read_tokens", 0)
        written = usage.get("cache_write_tokens", 0)
        plain = max(0, usage.get("input_tokens", 0) - read - written)
        total = (
            plain * self.input
            + usage.get("output_tokens", 0) * self.output
            + read * (self.input if self.cache_read is None else self.cache_read)
            + written * (self.input if self.cache_write is None else self.cache_write)
        )
        return total / 1_000_000


class Budget(Value):
    """What one session may spend over all its calls, in `currency` (ISO 4217)."""

    __slots__ = ("amount", "currency")

    def __init__(self, amount: float, currency: str) -> None:
        self.amount = amount
        self.currency = currency

    def __str__(self) -> str:
        return f"{self.amount:.2f} {self.currency}"


class Tuning(Value):
    """How an instance is used: None is the default (the retry policy's, the model family's window, no price, the
    global budget)."""

    __slots__ = ("budget", "context_window", "price", "retries")

    def __init__(
        self, retries: int | None = None, price: Price | None = None, context_window: int | None = None,
        budget: Budget | None = None
    ) -> None:  # fmt: skip
        self.retries = retries
        self.price = price
        self.context_window = context_window
        self.budget = budget


class InstanceConfig(Value):
    __slots__ = ("address", "kind", "model", "name", "token", "tuning")
    SECRET = ("token",)

    def __init__(
        self, name: str, kind: str, address: str, model: str | None = None, token: str | None = None,
        tuning: Tuning | None = None
    ) -> None:  # fmt: skip
        self.name = name
        self.kind = kind
        # replay: the absolute path of the replay file; anthropic/aiand: their default address when none is given.
        self.address = address
        self.model = model
        self.token = token  # never printed by accident
        self.tuning = Tuning() if tuning is None else tuning


class ConfigRule(Value):
    """One rule of `.approvals.rules`: its verdict, its pattern (as `chock.rules.rule.check_pattern` normalised
    it), its id (`c<N>`, the N-th rule) and its origin (the file and line a person finds it at)."""

    __slots__ = ("id", "origin", "pattern", "verdict")

    def __init__(self, verdict: str, pattern: str, id: str, origin: str) -> None:
        self.verdict = verdict
        self.pattern = pattern
        self.id = id
        self.origin = origin


class Config(Value):
    __slots__ = (
        "after_reboot", "approvals_rules", "approvals_shell", "approvals_timeout", "budget", "connections",
        "credential_store", "exists", "instance", "instances", "mcp", "path", "sandbox_network", "serve_daemons",
        "tunings"
    )  # fmt: skip

    def __init__(
        self, path: Path, instance: str | None = None, instances: dict[str, InstanceConfig] | None = None,
        tunings: dict[str, Tuning] | None = None, budget: Budget | None = None, approvals_shell: str = "ask",
        approvals_rules: tuple[ConfigRule, ...] = (), approvals_timeout: float | None = None,
        sandbox_network: bool = False, credential_store: str | None = None, after_reboot: str = "list",
        connections: dict[str, Address] | None = None, serve_daemons: tuple[str, ...] = (),
        mcp: dict[str, ServerSpec] | None = None, exists: bool = False
    ) -> None:  # fmt: skip
        self.path = path  # where it was read from (it may not exist)
        self.instance = instance
        self.instances = {} if instances is None else instances
        # Entries with no .kind, only tuning: they adjust the `chock login` instance of the same name.
        self.tunings = {} if tunings is None else tunings
        self.budget = budget  # every session's, unless its instance has a .budget of its own
        self.approvals_shell = approvals_shell
        self.approvals_rules = approvals_rules
        self.approvals_timeout = approvals_timeout  # seconds; None: an approval waits until it is answered
        self.sandbox_network = sandbox_network
        self.credential_store = credential_store  # None: the OS keystore (decided by the credentials code)
        self.after_reboot = after_reboot
        # Named daemons on other machines (docs/remote.md): `--daemon NAME` and `$CHOCK_DAEMON=NAME` reach them.
        self.connections = {} if connections is None else connections
        # The hosts `chock serve` is a client of when no --daemon names them: `local` or connections' names.
        self.serve_daemons = serve_daemons
        self.mcp = {} if mcp is None else mcp  # `.mcp.servers`, by name (chock.mcp.declarations)
        self.exists = exists


def load_config(path: Path, *, platform: str = sys.platform) -> Config:
    """Read and validate the config at `path`; a missing file is an empty config (`exists=False`)."""
    path = Path(path)
    try:
        data = zon.load(path, source=str(path), placed=True)
    except FileNotFoundError:
        return Config(path=path)
    except zon.ZonError as exc:
        raise ConfigError(_parse_error(exc, path)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc.strerror or exc}") from None
    return _Reader(path, platform).config(data)


def session_budget(config: Config, name: str, tuning: Tuning) -> Budget | None:
    """The budget a session on instance `name` is held to: its own `.budget`, else the global one. Refused when
    the instance has no `.price` in the budget's currency: its calls could not be counted against it."""
    own = tuning.budget is not None
    budget = tuning.budget or config.budget
    if budget is None:
        return None
    price = tuning.price
    if price is not None and price.currency == budget.currency:
        return budget
    where = f".instances{zon.dot_name(name)}"
    said = f"{where}.budget" if own else ".budget"
    has = f"its .price is in {price.currency}" if price is not None else "it has no .price"
    raise ConfigError(
        f"{config.path}: {said} ({budget}) covers instance {name!r}, but {has}: its calls could not be counted "
        f'against the budget. Give {where}.price in {budget.currency} (.currency = "{budget.currency}"), or '
        f"{where} a .budget of its own in {price.currency if price else 'the currency of a price you add'}"
    )


def _parse_error(error: zon.ZonError, path: Path) -> str:
    """The parser's message, except that text quoted from where a `.token`'s value stands — on its key's line or
    on a line after it, before the next key — is not repeated."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[: error.line]
    except OSError:
        lines = []
    import re

    line = lines[-1] if len(lines) == error.line else ""
    before = "\n".join([*lines[:-1], line[: max(error.column - 1, 0)]])
    keys = re.findall(r'\.\s*@?"?([A-Za-z_][A-Za-z0-9_]*)"?\s*=', before)  # `.token =`, `.@"token" =`
    if "token" not in line and (not keys or keys[-1] != "token"):
        return str(error)
    expected = error.what.split(", found", 1)[0]
    return (
        f"{path}: line {error.line}, column {error.column}: {expected} (what stands there is not shown: "
        "it may be a .token's value)"
    )


def _shown_path(path: Path) -> str:
    """A file's path as a person reads it: `~/…` under the home directory."""
    home = os.path.expanduser("~")
    text = str(path.absolute())
    return "~" + text[len(home) :] if home not in ("", "/") and text.startswith(home + "/") else text


def _check_tool(pattern: str, where: str, error: Callable[[str], ConfigError]) -> None:
    """A `tool:<name>` rule must name a tool a session has (a misspelt one would never match anything)."""
    if not pattern.startswith("tool:"):
        return
    from chock.session.tools import SESSION_TOOLS

    name = pattern[len("tool:") :]
    if name not in SESSION_TOOLS:
        raise error(f"{where}: there is no tool named {name!r}; the tools are {', '.join(SESSION_TOOLS)}")


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
        if "budget" in top:
            fields["budget"] = self.budget(top["budget"], ".budget")
        if "instances" in top:
            fields.update(self.instances(top["instances"]))
        if "approvals" in top:
            fields.update(self.approvals(top["approvals"]))
        if "sandbox" in top:
            fields.update(self.sandbox(top["sandbox"]))
        if "credentials" in top:
            fields.update(self.credentials(top["credentials"]))
        if "after_reboot" in top:
            fields["after_reboot"] = self.choice(top["after_reboot"], ".after_reboot", AFTER_REBOOT)
        if "connections" in top:
            fields["connections"] = self.connections(top["connections"])
        if "serve" in top:
            fields["serve_daemons"] = self.serve(top["serve"], fields.get("connections", {}))
        if "mcp" in top:
            try:
                fields["mcp"] = parse_servers(top["mcp"], ".mcp", origin="config")
            except DeclarationError as error:
                raise self.error(str(error)) from None
        config = Config(path=self.path, exists=True, **fields)
        for name, tuning in [*((n, i.tuning) for n, i in config.instances.items()), *config.tunings.items()]:
            session_budget(config, name, tuning)  # refused now, not when a session starts
        return config

    def instances(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(f".instances must be a struct of named instances (got {zon.as_written(value)})")
        instances, tunings = {}, {}
        for name, entry in value.items():
            where = f".instances{zon.dot_name(name)}"
            entry = self.struct(entry, where, INSTANCE_KEYS)
            if "kind" in entry:
                instances[name] = self.instance(name, entry)
            elif entry and all(key in TUNING_KEYS for key in entry):
                tunings[name] = self.tuning(entry, where)
            else:
                raise self.error(
                    f"{where} has no .kind (kinds: {', '.join(KINDS)}); an entry without one may hold only "
                    f"{', '.join('.' + key for key in TUNING_KEYS)}, for the `chock login` instance of that name"
                )
        return {"instances": instances, "tunings": tunings}

    def instance(self, name: str, entry: dict[str, Any]) -> InstanceConfig:
        where = f".instances{zon.dot_name(name)}"
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
            tuning=self.tuning(entry, where),
        )

    def tuning(self, entry: dict[str, Any], where: str) -> Tuning:
        retries = window = price = None
        if "retries" in entry:
            retries = self.whole(entry["retries"], f"{where}.retries", 0, MAX_RETRIES, "")
        if "context_window" in entry:
            window = self.whole(
                entry["context_window"], f"{where}.context_window", MIN_CONTEXT_WINDOW, MAX_CONTEXT_WINDOW, " of tokens"
            )
        if "price" in entry:
            price = self.price(entry["price"], f"{where}.price")
        budget = self.budget(entry["budget"], f"{where}.budget") if "budget" in entry else None
        return Tuning(retries=retries, price=price, context_window=window, budget=budget)

    def whole(self, value: Any, where: str, low: int, high: int, unit: str) -> int:
        """A whole number from `low` to `high`."""
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.error(
                f"{where} must be a whole number{unit} from {low:,} to {high:,} (got {zon.as_written(value)})"
            )
        return value

    def price(self, value: Any, where: str) -> Price:
        section = self.struct(value, where, PRICE_KEYS)
        for key in ("input", "output"):
            if key not in section:
                raise self.error(
                    f"{where} has no .{key} (a price per million tokens, as in "
                    ".price = .{ .input = 3.0, .output = 15.0 })"
                )
        amounts: dict[str, float] = {}
        for key, amount in section.items():
            if key != "currency":
                amounts[key] = self.amount(amount, f"{where}.{key}", "the price of a million tokens")
        currency = self.currency(section["currency"], f"{where}.currency") if "currency" in section else None
        return Price(**amounts, currency=currency or DEFAULT_CURRENCY)

    def amount(self, value: Any, where: str, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise self.error(f"{where} must be a number of at least 0, {what} (got {zon.as_written(value)})")
        return float(value)

    def currency(self, value: Any, where: str) -> str:
        """An ISO 4217 code: three capital letters, as "EUR"."""
        if not isinstance(value, str) or not (len(value) == 3 and value.isascii() and value.isalpha()
                                              and value.isupper()):  # fmt: skip
            raise self.error(f'{where} must be an ISO 4217 currency code, three capital letters as "EUR" '
                             f"(got {zon.as_written(value)})")  # fmt: skip
        return str(value)

    def budget(self, value: Any, where: str) -> Budget:
        """`.budget = .{ .amount = 5.0, .currency = "EUR" }`: both are needed (a budget in no currency is no bound)."""
        section = self.struct(value, where, BUDGET_KEYS)
        for key in BUDGET_KEYS:
            if key not in section:
                raise self.error(f'{where} has no .{key}, as in {where} = .{{ .amount = 5.0, .currency = "EUR" }}')
        amount = self.amount(section["amount"], f"{where}.amount", "what one session may spend")
        return Budget(amount, self.currency(section["currency"], f"{where}.currency"))

    def connections(self, value: Any) -> dict[str, Address]:
        """`.connections = .{ .build = "ssh://me@build.lan" }`: each name a connection's, each value an address."""
        if not isinstance(value, dict):
            raise self.error(
                f'.connections must be a struct of named addresses, as .{{ .build = "ssh://me@build.lan" }} '
                f"(got {zon.as_written(value)})"
            )
        found = {}
        for name, text in value.items():
            where = f".connections{zon.dot_name(name)}"
            if name == LOCAL:
                raise self.error(f"{where}: `{LOCAL}` is this machine's own daemon and cannot name a connection")
            if not CONNECTION_NAME.fullmatch(name):
                raise self.error(
                    f"{where}: a connection's name is a lowercase letter, then up to 31 lowercase letters, digits, "
                    "'_' or '-'"
                )
            try:
                found[name] = parse_address(self.string(text, where))
            except BadAddress as exc:
                raise self.error(f"{where}: {exc}") from None
        return found

    def serve(self, value: Any, connections: dict[str, Address]) -> tuple[str, ...]:
        """`.serve = .{ .daemons = .{ "local", "build" } }`: each `local` or a connection's name, once each."""
        section = self.struct(value, ".serve", SERVE_KEYS)
        daemons = section.get("daemons", [])
        if isinstance(daemons, dict) and not daemons:
            daemons = []  # `.{}`: an empty list reads as an empty struct
        if not isinstance(daemons, list):
            raise self.error(
                f'.serve.daemons must be a list of names, as .{{ "local", "build" }} (got {zon.as_written(daemons)})'
            )
        names: list[str] = []
        for index, item in enumerate(daemons):
            name = self.string(item, f".serve.daemons[{index}]")
            if name != LOCAL and name not in connections:
                known = ", ".join(sorted(connections)) or "none"
                raise self.error(
                    f".serve.daemons[{index}]: {name!r} is neither `{LOCAL}` nor a connection in .connections "
                    f"(connections: {known})"
                )
            if name in names:
                raise self.error(f".serve.daemons[{index}]: {name!r} is named twice; name each host once")
            names.append(name)
        return tuple(names)

    def approvals(self, value: Any) -> dict[str, Any]:
        section = self.struct(value, ".approvals", APPROVALS_KEYS)
        fields: dict[str, Any] = {}
        if "shell" in section:
            fields["approvals_shell"] = self.choice(section["shell"], ".approvals.shell", APPROVALS)
        if "rules" in section:
            fields["approvals_rules"] = self.rules(section["rules"])
        if "timeout" in section:
            fields["approvals_timeout"] = self.timeout(section["timeout"])
        return fields

    def rules(self, value: Any) -> tuple[ConfigRule, ...]:
        """`.approvals.rules`: a list of `.{ .allow = "git status" }` (or `.ask`, `.deny`), each checked as a
        pattern (chock.rules.rule.check_pattern) and a `tool:<name>` naming a tool there is."""
        if value == {}:
            return ()
        if not isinstance(value, list):
            raise self.error(
                f'.approvals.rules must be a list .{{ .{{ .allow = "git status" }}, ... }} '
                f"(got {zon.as_written(value)})"
            )
        from chock.rules.rule import check_pattern  # only for a config that has rules (docs/architecture.md#start-up)

        shown = _shown_path(self.path)
        rules = []
        for index, entry in enumerate(value):
            where = f".approvals.rules[{index}]"
            item = self.struct(entry, where, RULE_VERDICTS)
            if len(item) != 1:
                raise self.error(f"{where} must hold exactly one of .allow, .ask or .deny (got {len(item)})")
            [(verdict, pattern)] = item.items()
            line = getattr(pattern, "line", 0)
            at = f" (line {line})" if line else ""
            pattern = self.string(pattern, f"{where}.{verdict}")
            try:
                pattern = check_pattern(pattern)
            except ValueError as refusal:
                raise self.error(f"{where}.{verdict}{at}: {refusal}") from None
            _check_tool(pattern, f"{where}.{verdict}{at}", self.error)
            origin = f"{shown} line {line}" if line else f"{shown} {where}"
            rules.append(ConfigRule(verdict, pattern, f"c{index + 1}", origin))
        return tuple(rules)

    def timeout(self, value: Any) -> float:
        """`.approvals.timeout`: `<n>s`, `<n>m` or `<n>h`, between 1 s and 7 days."""
        where = ".approvals.timeout"
        text = self.string(value, where)
        number, unit = text[:-1], text[-1:]
        if unit not in TIMEOUT_UNITS or not number.isascii() or not number.isdigit() or len(number) > 9:
            raise self.error(
                f'{where} must be a whole number and s, m or h, like "30m" or "2h" (got {zon.as_written(value)})'
            )
        seconds = int(number) * TIMEOUT_UNITS[unit]
        if not 1 <= seconds <= MAX_TIMEOUT:
            raise self.error(f"{where} must be between 1s and 7 days (168h); got {text}")
        return float(seconds)

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
