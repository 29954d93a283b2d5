"""config.zon: what is accepted, and every refusal naming the key a person has to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from chock.config import Budget, Config, ConfigError, InstanceConfig, Price, Tuning, load_config
from chock.credentials.stores import STORE_NAMES, available_stores
from chock.errors import EXIT_REFUSED
from chock.providers.kinds import DEFAULT_ADDRESSES, KINDS, KindError, parse_kind

FULL = """// every setting there is
.{
    .instance = "demo",
    .instances = .{
        .demo = .{ .kind = "replay=demo.jsonl" },
        .local = .{ .kind = "openai-compat=http://127.0.0.1:5000/v1", .model = "qwen" },
        .work = .{
            .kind = "anthropic",
            .address = "https://proxy.example/v1",
            .model = "claude-x",
            .token = "tok-123",
        },
        .@"my box" = .{ .kind = "aiand" },
    },
    .approvals = .{ .shell = "deny" },
    .sandbox = .{ .network = true },
    .credentials = .{ .store = "file" },
}
"""


def write(tmp_path: Path, text: str, name: str = "config.zon") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refusal(tmp_path: Path, text: str, *, platform: str = "linux") -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, platform=platform)
    assert info.value.exit_code == EXIT_REFUSED
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


# ---- reading a good file -------------------------------------------------------------------------


def test_every_setting_is_read(tmp_path):
    path = write(tmp_path, FULL)
    config = load_config(path, platform="linux")
    assert config == Config(
        path=path,
        instance="demo",
        instances={
            "demo": InstanceConfig("demo", "replay", str(tmp_path / "demo.jsonl")),
            "local": InstanceConfig("local", "openai-compat", "http://127.0.0.1:5000/v1", model="qwen"),
            "work": InstanceConfig("work", "anthropic", "https://proxy.example/v1", model="claude-x", token="tok-123"),
            "my box": InstanceConfig("my box", "aiand", DEFAULT_ADDRESSES["aiand"]),
        },
        approvals_shell="deny",
        sandbox_network=True,
        credential_store="file",
        exists=True,
    )
    assert list(config.instances) == ["demo", "local", "work", "my box"]


def test_a_missing_file_is_an_empty_config(tmp_path):
    path = tmp_path / "nowhere" / "config.zon"
    config = load_config(path)
    assert config == Config(path=path)
    assert config.exists is False
    assert config.instances == {}
    assert (config.instance, config.approvals_shell, config.sandbox_network, config.credential_store) == (
        None,
        "ask",
        False,
        None,
    )


def test_an_empty_struct_is_the_defaults_but_exists(tmp_path):
    path = write(tmp_path, ".{}\n")
    assert load_config(path) == Config(path=path, exists=True)


def test_sections_may_be_empty(tmp_path):
    path = write(tmp_path, ".{ .instances = .{}, .approvals = .{}, .sandbox = .{}, .credentials = .{} }")
    assert load_config(path) == Config(path=path, exists=True)


@pytest.mark.parametrize("answer", ["ask", "allow", "deny"])
def test_approvals_take_strings_and_enum_literals(tmp_path, answer):
    as_string = load_config(write(tmp_path, f'.{{ .approvals = .{{ .shell = "{answer}" }} }}', "a.zon"))
    as_enum = load_config(write(tmp_path, f".{{ .approvals = .{{ .shell = .{answer} }} }}", "b.zon"))
    assert as_string.approvals_shell == as_enum.approvals_shell == answer
    assert type(as_enum.approvals_shell) is str


def test_token_is_not_in_the_repr(tmp_path):
    config = load_config(write(tmp_path, FULL), platform="linux")
    assert "tok-123" not in repr(config)
    assert config.instances["work"].token == "tok-123"


# ---- instance kinds and addresses ----------------------------------------------------------------


def test_relative_replay_path_is_relative_to_the_config_directory(tmp_path, monkeypatch):
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = write(config_dir, '.{ .instances = .{ .demo = .{ .kind = "replay=demos/a.jsonl" } } }')
    assert load_config(path).instances["demo"].address == str(config_dir / "demos" / "a.jsonl")


def test_relative_config_path_still_gives_an_absolute_replay_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl" } } }')
    address = load_config(Path("config.zon")).instances["demo"].address
    assert address == str(tmp_path / "demo.jsonl")


def test_absolute_replay_path_stays(tmp_path):
    path = write(tmp_path, '.{ .instances = .{ .demo = .{ .kind = "replay=/srv/demo.jsonl" } } }')
    assert load_config(path).instances["demo"].address == "/srv/demo.jsonl"


def test_address_overrides_the_kind_value(tmp_path):
    text = """.{ .instances = .{
        .a = .{ .kind = "openai-compat=http://one/v1", .address = "http://two/v1" },
        .b = .{ .kind = "openai-compat", .address = "http://three/v1" },
        .r = .{ .kind = "replay=one.jsonl", .address = "two.jsonl" },
    } }"""
    instances = load_config(write(tmp_path, text)).instances
    assert instances["a"].address == "http://two/v1"
    assert instances["b"].address == "http://three/v1"
    assert instances["r"].address == str(tmp_path / "two.jsonl")


@pytest.mark.parametrize("kind", ["anthropic", "aiand"])
def test_known_providers_get_their_default_address(tmp_path, kind):
    path = write(tmp_path, f'.{{ .instances = .{{ .x = .{{ .kind = "{kind}" }} }} }}')
    assert load_config(path).instances["x"].address == DEFAULT_ADDRESSES[kind]


def test_parse_kind():
    assert parse_kind("anthropic") == ("anthropic", "https://api.anthropic.com/v1")
    assert parse_kind("aiand") == ("aiand", "https://api.aiand.com/v1")
    assert parse_kind("anthropic=https://x/v1") == ("anthropic", "https://x/v1")
    assert parse_kind("openai-compat=http://127.0.0.1:5000/v1") == (
        "openai-compat",
        "http://127.0.0.1:5000/v1",
    )
    assert parse_kind("replay=demo.jsonl", base_dir=Path("/conf")) == ("replay", "/conf/demo.jsonl")
    assert parse_kind("replay=/abs/demo.jsonl", base_dir=Path("/conf")) == ("replay", "/abs/demo.jsonl")
    # only the first '=' splits: a URL may hold more
    assert parse_kind("openai-compat=http://h/v1?a=b") == ("openai-compat", "http://h/v1?a=b")


def test_parse_kind_without_base_dir_uses_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_kind("replay=demo.jsonl") == ("replay", str(tmp_path / "demo.jsonl"))
    assert parse_kind("replay=demo.jsonl", base_dir=Path("conf")) == (
        "replay",
        str(tmp_path / "conf" / "demo.jsonl"),
    )


def test_parse_kind_names_an_undecodable_kind_without_crashing():
    with pytest.raises(KindError, match="unknown instance kind"):
        parse_kind("gpt\udcff")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("openai-compat", "openai-compat has no default address: give one, as in openai-compat=http://"),
        ("replay", "replay needs the file to replay, as in replay=demo.jsonl"),
        ("anthropic=", "anthropic= needs a value after '='"),
        (
            "anthropic=api.anthropic.com",
            'anthropic address "api.anthropic.com" is not an http:// or https:// URL',
        ),
        ("gpt", 'unknown instance kind "gpt" (kinds: anthropic, aiand, openai-compat, replay)'),
        ("", 'unknown instance kind "" (kinds: '),
        ("Anthropic", 'unknown instance kind "Anthropic"'),
    ],
)
def test_parse_kind_refusals(text, words):
    with pytest.raises(KindError) as info:
        parse_kind(text)
    assert words in str(info.value)


def test_kinds_and_stores_are_what_the_spec_names():
    assert KINDS == ("anthropic", "aiand", "openai-compat", "replay")
    assert STORE_NAMES == ("secret_service", "keychain", "file", "secretspec")


# ---- refusals naming the key path ----------------------------------------------------------------


def test_syntax_error_has_file_line_and_column(tmp_path):
    message = refusal(tmp_path, '.{\n    .approvals = .{ .shell "ask" },\n}\n')
    assert message == "line 2, column 28: expected '=' after field name .shell, found '\"'"


def test_approvals_shell_must_be_a_known_answer(tmp_path):
    message = refusal(tmp_path, '.{ .approvals = .{ .shell = "maybe" } }')
    assert message == '.approvals.shell must be one of ask, allow, deny (got "maybe")'


def test_approvals_shell_as_enum_literal_is_shown_as_written(tmp_path):
    message = refusal(tmp_path, ".{ .approvals = .{ .shell = .sometimes } }")
    assert message == ".approvals.shell must be one of ask, allow, deny (got .sometimes)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            ".{ .colour = 1 }",
            "unknown key .colour (known keys in the config: instance, instances, budget, approvals, sandbox, "
            "credentials, after_reboot, connections, serve, mcp)",
        ),
        (
            ".{ .approvals = .{ .files = .ask } }",
            "unknown key .approvals.files (known keys in .approvals: shell, rules, timeout)",
        ),
        (".{ .sandbox = .{ .net = true } }", "unknown key .sandbox.net (known keys in .sandbox: network)"),
        (
            '.{ .credentials = .{ .backend = "file" } }',
            "unknown key .credentials.backend (known keys in .credentials: store)",
        ),
        (
            '.{ .instances = .{ .w = .{ .kind = "aiand", .url = "x" } } }',
            "unknown key .instances.w.url (known keys in .instances.w: kind, address, model, token, retries, price, "
            "context_window, budget)",
        ),
        (
            '.{ .instances = .{ .@"my-box" = .{ .kind = "aiand", .@"a b" = 1 } } }',
            'unknown key .instances.@"my-box".@"a b" (known keys in .instances.@"my-box": kind, address, model, '
            "token, retries, price, context_window, budget)",
        ),
    ],
)
def test_unknown_keys_are_named_with_their_path(tmp_path, text, message):
    assert refusal(tmp_path, text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1", "the config must be a struct .{ ... } (got 1)"),
        (".{ 1, 2 }", "the config must be a struct .{ ... } (got a list)"),
        (".{ .instance = 3 }", ".instance must be a string (got 3)"),
        ('.{ .instance = "" }', ".instance must not be empty"),
        (".{ .instances = .{ 1 } }", ".instances must be a struct of named instances (got a list)"),
        ('.{ .instances = "demo" }', '.instances must be a struct of named instances (got "demo")'),
        (".{ .instances = .{ .a = true } }", ".instances.a must be a struct .{ ... } (got true)"),
        (
            '.{ .instances = .{ .a = .{ .model = "m" } } }',
            ".instances.a has no .kind (kinds: anthropic, aiand, openai-compat, replay); an entry without one may "
            "hold only .retries, .price, .context_window, .budget, for the `chock login` instance of that name",
        ),
        (".{ .instances = .{ .a = .{ .kind = 5 } } }", ".instances.a.kind must be a string (got 5)"),
        (
            '.{ .instances = .{ .a = .{ .kind = "openai" } } }',
            '.instances.a.kind: unknown instance kind "openai" (kinds: anthropic, aiand, openai-compat, replay)',
        ),
        (
            '.{ .instances = .{ .a = .{ .kind = "openai-compat" } } }',
            ".instances.a.kind: openai-compat has no default address: give one, as in "
            "openai-compat=http://127.0.0.1:5000/v1",
        ),
        (
            '.{ .instances = .{ .a = .{ .kind = "anthropic", .address = "ftp://x" } } }',
            '.instances.a.address: anthropic address "ftp://x" is not an http:// or https:// URL',
        ),
        (
            '.{ .instances = .{ .a = .{ .kind = "aiand", .address = null } } }',
            ".instances.a.address must be a string (got null)",
        ),
        (
            '.{ .instances = .{ .a = .{ .kind = "aiand", .model = .{} } } }',
            ".instances.a.model must be a string (got a struct)",
        ),
        (
            '.{ .instances = .{ .a = .{ .kind = "aiand", .model = "" } } }',
            ".instances.a.model must not be empty",
        ),
        ('.{ .sandbox = .{ .network = "yes" } }', '.sandbox.network must be true or false (got "yes")'),
        (".{ .sandbox = .{ .network = 1 } }", ".sandbox.network must be true or false (got 1)"),
        (".{ .sandbox = true }", ".sandbox must be a struct .{ ... } (got true)"),
        ('.{ .approvals = "ask" }', '.approvals must be a struct .{ ... } (got "ask")'),
        (
            '.{ .credentials = .{ .store = "vault" } }',
            '.credentials.store must be one of secret_service, keychain, file, secretspec (got "vault")',
        ),
    ],
)
def test_bad_values_are_named_with_their_path(tmp_path, text, message):
    assert refusal(tmp_path, text) == message


@pytest.mark.parametrize(
    ("value", "got"),
    [("12345", "a number"), (".secret", "an enum literal"), ("true", "true/false"), ('.{ "x" }', "a list")],
)
def test_a_token_must_be_a_string_and_is_never_repeated(tmp_path, value, got):
    message = refusal(tmp_path, f'.{{ .instances = .{{ .w = .{{ .kind = "anthropic", .token = {value} }} }} }}')
    assert message == f'.instances.w.token must be a string "…" (got {got})'


def test_an_empty_token_is_refused(tmp_path):
    message = refusal(tmp_path, '.{ .instances = .{ .w = .{ .kind = "anthropic", .token = "" } } }')
    assert message.startswith(".instances.w.token is empty")


# ---- tuning: retries, price, context window ----------------------------------------------------------


def test_tuning_is_read_on_a_full_entry_and_on_a_kindless_one(tmp_path):
    path = write(
        tmp_path,
        """.{ .instances = .{
            .work = .{ .kind = "anthropic", .retries = 5, .context_window = 150_000,
                       .price = .{ .input = 3, .output = 15.0, .cache_read = 0.3, .cache_write = 3.75 } },
            .anthropic = .{ .retries = 0, .price = .{ .input = 1.5, .output = 2 } },
        } }""",
    )
    config = load_config(path)
    assert config.instances["work"].tuning == Tuning(
        retries=5, context_window=150_000, price=Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    )
    assert "anthropic" not in config.instances
    assert config.tunings == {"anthropic": Tuning(retries=0, price=Price(input=1.5, output=2.0))}


def test_a_price_costs_cache_reads_and_writes_at_their_own_price_or_the_inputs():
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_tokens": 600_000,
             "cache_write_tokens": 200_000}  # fmt: skip
    assert Price(3.0, 15.0, 0.3, 3.75).cost(usage) == pytest.approx(0.6 + 1.5 + 0.18 + 0.75)
    assert Price(3.0, 15.0).cost(usage) == pytest.approx(3.0 + 1.5)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (".retries = -1", ".instances.w.retries must be a whole number from 0 to 10 (got -1)"),
        (".retries = 2.5", ".instances.w.retries must be a whole number from 0 to 10 (got 2.5)"),
        (".retries = true", ".instances.w.retries must be a whole number from 0 to 10 (got true)"),
        (
            ".context_window = 500",
            ".instances.w.context_window must be a whole number of tokens from 1,000 to 100,000,000 (got 500)",
        ),
        (
            '.context_window = "200k"',
            '.instances.w.context_window must be a whole number of tokens from 1,000 to 100,000,000 (got "200k")',
        ),
        (".price = 3", ".instances.w.price must be a struct .{ ... } (got 3)"),
        (
            ".price = .{ .input = 3 }",
            ".instances.w.price has no .output (a price per million tokens, as in "
            ".price = .{ .input = 3.0, .output = 15.0 })",
        ),
        (
            ".price = .{ .input = 3, .output = -1 }",
            ".instances.w.price.output must be a number of at least 0, the price of a million tokens (got -1)",
        ),
        (
            ".price = .{ .input = 3, .output = 1, .cache = 1 }",
            "unknown key .instances.w.price.cache (known keys in .instances.w.price: input, output, cache_read, "
            "cache_write, currency)",
        ),
    ],
)
def test_bad_tuning_is_named_with_its_path(tmp_path, entry, message):
    assert refusal(tmp_path, f'.{{ .instances = .{{ .w = .{{ .kind = "aiand", {entry} }} }} }}') == message
    if "kind" not in message:  # the same refusal on an entry that adjusts a login
        assert refusal(tmp_path, f".{{ .instances = .{{ .w = .{{ {entry} }} }} }}") == message


def test_a_kindless_entry_adjusts_the_login_of_its_name_and_names_a_missing_one(tmp_path, monkeypatch):
    from chock import instances
    from chock.credentials.instance_index import IndexEntry, write_index
    from chock.errors import Refused
    from chock.paths import Layout

    monkeypatch.setenv("CHOCK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CHOCK_STATE_DIR", str(tmp_path / "state"))
    layout = Layout.from_env(str(tmp_path / "config.zon"))
    layout.data.mkdir(mode=0o700, parents=True)
    write_index(layout, {"claude": IndexEntry("anthropic", "https://api.anthropic.com/v1", None, "file")})
    config = load_config(
        write(tmp_path, ".{ .instances = .{ .claude = .{ .context_window = 50_000 }, .gone = .{ .retries = 1 } } }")
    )
    claude = instances.resolve(layout, config, "claude")
    assert (claude.kind, claude.origin, claude.tuning) == ("anthropic", "index", Tuning(context_window=50_000))
    with pytest.raises(Refused, match=r"adjusts instance 'gone' .* no `chock login` stored an instance"):
        instances.resolve(layout, config, "gone")


def test_a_bad_value_in_a_later_instance_names_that_instance(tmp_path):
    text = '.{ .instances = .{ .good = .{ .kind = "aiand" }, .bad = .{ .kind = "aiand", .model = 1 } } }'
    assert refusal(tmp_path, text) == ".instances.bad.model must be a string (got 1)"


def test_unreadable_config_is_a_refusal(tmp_path):
    path = tmp_path / "config.zon"
    path.mkdir()
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: cannot read the config: ")


# ---- stores and the platform ---------------------------------------------------------------------


def test_keychain_is_refused_on_linux(tmp_path):
    message = refusal(tmp_path, '.{ .credentials = .{ .store = "keychain" } }', platform="linux")
    assert message == (
        '.credentials.store "keychain" is not available on Linux '
        "(stores that work here: secret_service, file, secretspec)"
    )


def test_secret_service_is_refused_on_macos(tmp_path):
    message = refusal(tmp_path, ".{ .credentials = .{ .store = .secret_service } }", platform="darwin")
    assert message == (
        ".credentials.store .secret_service is not available on macOS "
        "(stores that work here: keychain, file, secretspec)"
    )


@pytest.mark.parametrize(
    ("platform", "store"),
    [
        ("linux", "secret_service"),
        ("linux", "file"),
        ("linux", "secretspec"),
        ("darwin", "keychain"),
        ("darwin", "file"),
        ("darwin", "secretspec"),
    ],
)
def test_stores_this_platform_has_are_accepted(tmp_path, platform, store):
    path = write(tmp_path, f'.{{ .credentials = .{{ .store = "{store}" }} }}')
    assert load_config(path, platform=platform).credential_store == store


def test_available_stores():
    assert available_stores("linux") == ("secret_service", "file", "secretspec")
    assert available_stores("darwin") == ("keychain", "file", "secretspec")


@pytest.mark.parametrize(
    "text",
    [
        '.{ .instances = .{ .w = .{ .kind = "anthropic", .token = SECRETVALUE123abc } } }\n',
        '.{ .instances = .{ .w = .{ .kind = "anthropic",\n  .token =\n    SECRETVALUE123abc,\n} } }\n',
        '.{ .instances = .{ .w = .{ .kind = "anthropic", .token = // the key:\n\n SECRETVALUE123abc } } }\n',
        '.{ .instances = .{ .w = .{ .kind = "anthropic", .@"token" =\n SECRETVALUE123abc } } }\n',
    ],
)
def test_a_parse_error_where_a_token_stands_never_repeats_the_token(tmp_path, text):
    path = tmp_path / "config.zon"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert "SECRETVALUE" not in str(refused.value)
    assert "column" in str(refused.value) and "expected a value" in str(refused.value)
    # Anywhere else, what stands there is quoted.
    path.write_text('.{ .instances = .{ .w = .{ .token = "x",\n .kind = anthropic } } }\n')
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert "found 'anthropic'" in str(refused.value)


@pytest.mark.parametrize("value", ['"resume"', '"list"', ".resume"])
def test_after_reboot_takes_list_or_resume(tmp_path, value):
    config = load_config(write(tmp_path, f".{{ .after_reboot = {value} }}"))
    assert config.after_reboot == value.strip('".')
    assert load_config(write(tmp_path, ".{}", "empty.zon")).after_reboot == "list"


def test_after_reboot_refuses_anything_else_when_the_file_is_read(tmp_path):
    message = refusal(tmp_path, '.{ .after_reboot = "restart" }')
    assert message == '.after_reboot must be one of list, resume (got "restart")'


# ---- currencies and budgets ----------------------------------------------------------------------


def test_a_price_without_a_currency_is_in_usd_and_a_budget_reads_as_written(tmp_path):
    path = write(tmp_path, """.{ .budget = .{ .amount = 5, .currency = "EUR" }, .instances = .{
        .a = .{ .kind = "aiand", .price = .{ .input = 1, .output = 2, .currency = "EUR" } },
        .b = .{ .kind = "aiand", .price = .{ .input = 1, .output = 2 },
                .budget = .{ .amount = 1.5, .currency = "USD" } },
    } }""")  # fmt: skip
    config = load_config(path)
    assert config.budget == Budget(5.0, "EUR")
    assert config.instances["a"].tuning.price == Price(1.0, 2.0, currency="EUR")
    assert config.instances["b"].tuning.price == Price(1.0, 2.0, currency="USD")
    assert config.instances["b"].tuning.budget == Budget(1.5, "USD")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '.{ .instances = .{ .w = .{ .kind = "aiand", .budget = .{ .amount = 1.0, .currency = "EUR" } } } }',
            ".instances.w.budget (1.00 EUR) covers instance 'w', but it has no .price",
        ),
        (
            '.{ .instances = .{ .w = .{ .retries = 1, .price = .{ .input = 1, .output = 1, .currency = "USD" },\n'
            '    .budget = .{ .amount = 1.0, .currency = "EUR" } } } }',
            ".instances.w.budget (1.00 EUR) covers instance 'w', but its .price is in USD",
        ),
        (
            '.{ .budget = .{ .amount = 1.0, .currency = "eur" } }',
            '.budget.currency must be an ISO 4217 currency code, three capital letters as "EUR" (got "eur")',
        ),
        (
            '.{ .budget = .{ .amount = -1, .currency = "EUR" } }',
            ".budget.amount must be a number of at least 0, what one session may spend (got -1)",
        ),
        (
            '.{ .budget = .{ .currency = "EUR" } }',
            ".budget has no .amount, as in .budget = .{ .amount = 5.0, .currency",
        ),
    ],
)
def test_budget_refusals_name_the_key(tmp_path, text, message):
    assert refusal(tmp_path, text).startswith(message)
