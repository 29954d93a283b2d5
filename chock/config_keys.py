"""The keys of `config.zon`, declared once: each one's path, type, default and meaning (`Key`), in the order the
manual and `chock config` give them. Validation's known keys (chock/config.py), `chock config` and `config check`
(chock/commands/configuration.py) and `man 5 chock-config` (debian/make-manpages) all read this one table.
"""

from __future__ import annotations

from chock.value import Value


class Key(Value):
    """One key of config.zon: its path (`NAME` stands for a name the person chooses), its type as written, its
    default as `chock config` and the manual say it, and what it means. A `secret` is never shown; `env` is the
    variable that overrides it."""

    __slots__ = ("default", "env", "meaning", "path", "secret", "type")

    def __init__(
        self, path: str, type: str, default: str, meaning: str, secret: bool = False, env: str | None = None
    ) -> None:  # fmt: skip
        self.path = path
        self.type = type
        self.default = default
        self.meaning = meaning
        self.secret = secret
        self.env = env


# Every key there is, in the order the manual and `chock config` give them. What validation accepts (the unknown
# key refusals), `chock config`, `chock config check` and `man 5 chock-config` all read this one table.
KEYS: tuple[Key, ...] = (
    Key(".instance", "string", "the only instance, when there is one",
        "The instance a session uses when `chock run` names none."),
    Key(".instances.NAME.kind", "string", "none: the entry tunes the `chock login` instance NAME",
        "anthropic, aiand, openai-compat=URL or replay=FILE (relative to this file's directory)."),
    Key(".instances.NAME.address", "string", "the kind's (after =, else the provider's)",
        "Where the provider is; overrides the =VALUE of .kind."),
    Key(".instances.NAME.model", "string", "the provider's default", "The model asked for."),
    Key(".instances.NAME.token", "string", "none: the credential stores' (chock login)",
        "The credential sent to the provider.", secret=True),
    Key(".instances.NAME.retries", "whole number 0-10", "2",
        "How often a call that failed before its answer began is sent again."),
    Key(".instances.NAME.price.input", "number", "none: calls are not priced",
        "What a million input tokens cost."),
    Key(".instances.NAME.price.output", "number", "none", "What a million output tokens cost."),
    Key(".instances.NAME.price.cache_read", "number", "the input price", "What a million tokens read from the "
        "prompt cache cost."),
    Key(".instances.NAME.price.cache_write", "number", "the input price", "What a million tokens written to the "
        "prompt cache cost."),
    Key(".instances.NAME.price.currency", "ISO 4217 code", '"USD"', "The currency of the price, three capital "
        "letters; a price written without one is in USD."),
    Key(".instances.NAME.context_window", "whole number of tokens", "the model family's, else none",
        "Past 80% of it the session has the model summarize the work so far."),
    Key(".instances.NAME.budget.amount", "number", "the global .budget",
        "What one session on this instance may spend, counted over all its calls."),
    Key(".instances.NAME.budget.currency", "ISO 4217 code", "none (required with .amount)",
        "The budget's currency: the instance's .price must be in it."),
    Key(".budget.amount", "number", "none: no bound",
        "What one session may spend, counted over all its calls, continues, compactions and subagents included; "
        "past it the session ends (reason budget, exit 1) and continues once the budget is raised."),
    Key(".budget.currency", "ISO 4217 code", "none (required with .amount)",
        "The budget's currency: every instance it covers needs a .price in it."),
    Key(".approvals.shell", "ask | allow | deny", '"ask"', "What a shell command no rule names gets."),
    Key(".approvals.rules", "list of .{ .allow/.ask/.deny = PATTERN }", "none",
        "Rules that decide calls without asking (docs/approvals.md); deny beats ask beats allow."),
    Key(".approvals.timeout", '"<n>s", "<n>m" or "<n>h"', "none: a question waits for its answer",
        "An approval unanswered this long is a no (1s to 7 days)."),
    Key(".sandbox.network", "true | false", "false", "Whether tools in the sandbox reach the network."),
    Key(".credentials.store", "secret_service | keychain | file | secretspec", "the OS keystore",
        "Where `chock login` keeps credentials."),
    Key(".after_reboot", "list | resume", '"list"',
        "What the daemon does with the sessions a reboot interrupted: list them, or carry them on."),
    Key(".connections.NAME", "address", "none", "A daemon on another machine (docs/remote.md), as "
        '"ssh://me@build.lan"; --daemon NAME reaches it.'),
    Key(".serve.daemons", "list of names", '"local"',
        "The hosts `chock serve` is a client of: local or connections' names.", env="CHOCK_DAEMON"),
    Key(".mcp.servers.NAME.command", "list of strings", "none (one of .command, .url)",
        'An MCP server run in its sandbox over stdio, by its argv: .{ "docs-mcp", "--stdio" } (docs/mcp.md).'),
    Key(".mcp.servers.NAME.url", "https URL", "none", "A remote MCP server's Streamable HTTP address (http only "
        "to this machine)."),
    Key(".mcp.servers.NAME.credential", "string", "none", "The `chock login --provider mcp=URL` credential sent "
        "to .url's origin, and nowhere else."),
    Key(".mcp.servers.NAME.network", "true | false", "false", "Whether a stdio server reaches the network."),
    Key(".mcp.servers.NAME.workspace", "read | write", '"read"', "Whether a stdio server may write the "
        "workspace (never with .network)."),
    Key(".mcp.servers.NAME.timeout", "seconds, 1-3600", "120", "How long one call of the server's tools may take."),
)  # fmt: skip


def children(prefix: str) -> tuple[str, ...]:
    """The names of the keys directly under `prefix` (`""` is the top; `.instances.NAME` an instance), in order."""
    found: list[str] = []
    for key in KEYS:
        if key.path.startswith(prefix + "."):
            name = key.path[len(prefix) + 1 :].split(".", 1)[0]
            if name not in found:
                found.append(name)
    return tuple(found)


TOP_KEYS = children("")
# How an instance is used, apart from where it is: an entry with only these adjusts the `chock login` instance of
# the same name (whose own entry has no room for them).
TUNING_KEYS = ("retries", "price", "context_window", "budget")
INSTANCE_KEYS = children(".instances.NAME")
PRICE_KEYS = children(".instances.NAME.price")
BUDGET_KEYS = children(".budget")
APPROVALS_KEYS = children(".approvals")
SANDBOX_KEYS = children(".sandbox")
CREDENTIALS_KEYS = children(".credentials")
SERVE_KEYS = children(".serve")
