"""`chock config` and `chock config check`, and the README's config example, all against chock.config's one table of
keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from chock import zon
from chock.config import KEYS, ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent

CONFIG = """.{
    .instance = "work",
    .instances = .{
        .work = .{
            .kind = "openai-compat=http://127.0.0.1:9/v1",
            .token = "sk-very-secret-42",
            .price = .{ .input = 3.0, .output = 15.0, .currency = "EUR" },
        },
    },
    .budget = .{ .amount = 5.0, .currency = "EUR" },
    .approvals = .{
        .rules = .{ .{ .allow = "git status" } },
    },
    .serve = .{ .daemons = .{ "local" } },
}
"""


def rows(stdout: str) -> dict[str, tuple[str, str]]:
    """`chock config`'s rows by key path: (value, origin)."""
    found = {}
    for line in stdout.splitlines()[1:]:
        path, value, origin = re.split(r"\s{2,}", line.strip(), maxsplit=2)
        found[path] = (value, origin)
    return found


def test_chock_config_says_where_each_value_came_from_and_hides_the_token(home):
    path = home.write_config(CONFIG)
    done = home.chock("config")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"config file {path} (from $CHOCK_CONFIG)"
    found = rows(done.stdout)
    assert found[".instance"] == ('"work"', f"{path}:2")
    assert found[".instances.work.kind"] == ('"openai-compat=http://127.0.0.1:9/v1"', f"{path}:5")
    assert found[".instances.work.token"] == ("set (hidden)", f"{path}:6")
    assert found[".instances.work.price.currency"] == ('"EUR"', f"{path}:7")
    assert found[".budget.amount"] == ("5.0", f"{path}:10")
    assert found[".approvals.rules[0]"] == ('.{ .allow = "git status" }', f"{path}:12")
    assert found[".approvals.shell"] == ('"ask"', "default")
    assert found[".sandbox.network"] == ("false", "default")
    assert found[".serve.daemons"] == ('.{ "local" }', f"{path}:14")
    assert "sk-very-secret-42" not in done.stdout + done.stderr
    # Every key of the table that has no NAME in it is shown, set or not.
    assert {key.path for key in KEYS if "NAME" not in key.path} <= set(found) | {".approvals.rules"}


def test_an_environment_variable_that_overrides_a_key_is_named_over_the_file(home):
    path = home.write_config(CONFIG)
    found = rows(home.chock("config", env={"CHOCK_DAEMON": "build"}).stdout)
    assert found[".serve.daemons"] == ('.{ "build" }', f"$CHOCK_DAEMON, over {path}:14")


def test_a_password_in_an_address_is_shown_by_neither_config_nor_credentials(home):
    home.write_config(
        '.{ .instances = .{ .local = .{ .kind = "openai-compat=http://user:PASSWORDX@127.0.0.1:9/v1" },\n'
        '  .proxied = .{ .kind = "anthropic", .address = "https://me:PASSWORDY@proxy.example/v1" } } }\n'
    )
    shown = home.chock("config")
    listed = home.chock("credentials")
    assert shown.returncode == listed.returncode == 0, shown.stderr + listed.stderr
    assert "PASSWORD" not in shown.stdout + listed.stdout
    assert "openai-compat=http://***@127.0.0.1:9/v1" in shown.stdout
    assert "http://***@127.0.0.1:9/v1" in listed.stdout and "https://***@proxy.example/v1" in listed.stdout


def test_chock_config_with_no_file_shows_the_defaults(home):
    done = home.chock("config")
    assert done.returncode == 0, done.stderr
    assert "it does not exist, so every value is its default" in done.stdout.splitlines()[0]
    assert all(origin == "default" for _, origin in rows(done.stdout).values())


def test_chock_config_refuses_a_config_loading_refuses(home):
    home.write_config('.{ .budget = .{ .amount = 1.0, .currency = "euro" } }\n')
    done = home.chock("config")
    assert done.returncode == 3
    assert '.budget.currency must be an ISO 4217 currency code, three capital letters as "EUR"' in done.stderr


def test_config_check_exit_codes_and_the_error_loading_gives(home, tmp_path):
    good = tmp_path / "good.zon"
    good.write_text(CONFIG)
    done = home.chock("config", "check", str(good))
    assert (done.returncode, done.stdout) == (0, f"{good}: valid\n")

    bad = tmp_path / "bad.zon"
    bad.write_text('.{ .instances = .{ .w = .{ .kind = "aiand", .price = .{ .input = 1.0, .output = 1.0 } } },\n'
                   '   .budget = .{ .amount = 2.0, .currency = "EUR" } }\n')  # fmt: skip
    with pytest.raises(ConfigError) as loading:
        load_config(bad)
    done = home.chock("config", "check", str(bad))
    assert done.returncode == 3
    assert done.stderr == f"chock: {loading.value}\n"
    assert ".budget (2.00 EUR) covers instance 'w', but its .price is in USD" in done.stderr

    assert home.chock("config", "check").returncode == 2
    assert home.chock("config", "check", str(tmp_path / "missing.zon")).returncode == 2


def readme_example() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Configuration", 1)[1]
    return section.split("```zig\n", 1)[1].split("```", 1)[0]


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """The table's paths of every key `value` (a parsed config) sets: a chosen name is `NAME`."""
    if not isinstance(value, dict):
        return {prefix}
    found = set()
    for name, item in value.items():
        named = prefix in (".instances", ".connections", ".mcp.servers")
        here = f"{prefix}.{'NAME' if named else name}"
        leaf = here in {key.path for key in KEYS}
        found |= {here} if leaf else key_paths(item, here)
    return found


def test_the_readmes_config_example_uses_only_keys_of_the_table_and_loads(tmp_path):
    text = readme_example()
    used = key_paths(zon.loads(text))
    assert used <= {key.path for key in KEYS}, used - {key.path for key in KEYS}
    assert {".instances.NAME.budget.amount", ".instances.NAME.price.currency"} <= used  # the example shows what is new
    path = tmp_path / "config.zon"
    path.write_text(text)
    (tmp_path / "demo.jsonl").write_text("")
    config = load_config(path, platform="linux")
    assert config.tunings["anthropic"].budget is not None and config.instances["local"].model == "qwen2.5-coder"
