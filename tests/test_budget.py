"""`.budget`: a session ends at the first call that takes its spend past the budget (`session.end {reason:
budget}`, exit 1), counting every span, and `chock run --continue` carries it on once the budget is raised."""

from __future__ import annotations

from tests.fakes.providers import FakeProvider

# A thousand input tokens cost 1.00 EUR: each scripted call below costs exactly that.
PRICED = '.price = .{ .input = 1000.0, .output = 0.0, .currency = "EUR" }'


def configure(home, fake: FakeProvider, budget: float) -> None:
    home.write_config(
        f'.{{ .budget = .{{ .amount = {budget}, .currency = "EUR" }}, .instances = .{{ .remote = .{{ '
        f'.kind = "anthropic={fake.address}", .model = "fake-model", {PRICED} }} }} }}\n'
    )


def script_reads(fake: FakeProvider, count: int) -> None:
    for number in range(count):
        fake.script(
            text=f"Step {number}.",
            tool_calls=[{"id": f"t{number}", "name": "read_file", "args": {"path": "app.py"}}],
            input_tokens=1000,
        )


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [event for event in events if event["type"] == kind]


def test_a_budget_ends_the_session_at_the_call_that_passes_it_and_continue_completes_once_raised(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        script_reads(fake, 4)
        fake.script(text="Done.", input_tokens=1000)
        configure(home, fake, 2.5)
        stopped = home.chock("run", "read app.py four times", cwd=project)
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert len(fake.calls) == 3  # 1.00, 2.00, then 3.00: past 2.50, and no call after it
        session = home.only_session()
        events = home.events(session)
        end = of_type(events, "session.end")[-1]
        assert end["reason"] == "budget" and end["exit_code"] == 1
        assert "spent 3.0000 EUR, past its budget of 2.50 EUR" in end["error"]
        assert f"chock run --continue {session}" in stopped.stdout + stopped.stderr
        assert [usage["cost"] for usage in of_type(events, "usage")] == [1.0, 1.0, 1.0]
        assert home.chock("run", "--continue", session, cwd=project).returncode == 1  # not raised: no call made
        assert len(fake.calls) == 3

        configure(home, fake, 10)
        carried_on = home.chock("run", "--continue", session, cwd=project)
        assert carried_on.returncode == 0, carried_on.stdout + carried_on.stderr
        assert len(fake.calls) == 5
    events = home.events(session)
    assert of_type(events, "session.end")[-1]["reason"] == "completed"
    usage = home.chock("usage", cwd=project).stdout
    assert "5.0000 EUR" in usage and "budget 10.00 EUR" in usage, usage


def test_a_budget_over_an_instance_priced_in_another_currency_is_refused_with_its_key(home, project):
    home.write_config(
        '.{ .budget = .{ .amount = 5.0, .currency = "EUR" }, .instances = .{\n'
        '    .cheap = .{ .kind = "openai-compat=http://127.0.0.1:9/v1", .price = .{ .input = 1.0, .output = 2.0 } },\n'
        "} }\n"
    )
    refused = home.chock("run", "anything", cwd=project)
    assert refused.returncode == 3
    assert ".budget (5.00 EUR) covers instance 'cheap', but its .price is in USD" in refused.stderr
    assert '.instances.cheap.price in EUR (.currency = "EUR")' in refused.stderr
    assert not home.layout.sessions_dir.exists() or not any(home.layout.sessions_dir.iterdir())


def test_a_subagents_calls_count_against_the_budget(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(
            text="",
            tool_calls=[{"id": "t0", "name": "subagent", "args": {"task": "find the greeting"}}],
            input_tokens=1000,
        )
        # The parent's second call and the subagent's only one, in whichever order they come: 1.00 EUR each.
        fake.script(text="Noted.", input_tokens=1000)
        fake.script(text="Noted.", input_tokens=1000)
        fake.script(text="Never asked for.", input_tokens=1000)
        configure(home, fake, 2.5)
        done = home.chock("run", "ask a subagent", cwd=project)
        assert done.returncode == 1, done.stdout + done.stderr
        assert len(fake.calls) == 3
    events = home.events(home.only_session())
    assert [(usage.get("for", ""), usage["cost"]) for usage in of_type(events, "usage")].count(("subagent", 1.0)) == 1
    assert of_type(events, "session.end")[-1]["reason"] == "budget"


def test_a_provider_reporting_negative_or_absurd_token_counts_cannot_lower_the_spend(home, project):
    # Output tokens cost as much as input ones here: a count of -1e9 would be a credit of a million euros.
    with FakeProvider(kind="openai-compat", key=None) as fake:
        fake.script(
            text="",
            tool_calls=[{"id": "t0", "name": "read_file", "args": {"path": "app.py"}}],
            input_tokens=1000,
            output_tokens=-(10**9),
        )
        fake.script(
            text="",
            tool_calls=[{"id": "t1", "name": "read_file", "args": {"path": "app.py"}}],
            input_tokens=1000,
            output_tokens=10**400,  # past any float: no count, rather than a crash or an infinite cost
        )
        script_reads(fake, 3)
        fake.script(text="Done.", input_tokens=1000)
        home.write_config(
            f'.{{ .budget = .{{ .amount = 2.5, .currency = "EUR" }}, .instances = .{{ .remote = .{{ '
            f'.kind = "openai-compat={fake.address}", .model = "fake-model", '
            '.price = .{ .input = 1000.0, .output = 1000.0, .currency = "EUR" } } } }\n'
        )
        stopped = home.chock("run", "read app.py", cwd=project)
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert len(fake.calls) == 3, (
            stopped.stdout + stopped.stderr
        )  # 1.00, 2.00, 3.00 EUR: the reported counts below zero or past 2**53 count nothing
    events = home.events(home.only_session())
    assert [(usage["output_tokens"], usage["cost"]) for usage in of_type(events, "usage")] == [
        (0, 1.0),
        (0, 1.0),
        (5, 1.005),
    ]
    assert of_type(events, "session.end")[-1]["reason"] == "budget"


def test_a_continue_under_a_budget_in_another_currency_than_the_spend_so_far_is_refused(home, project):
    # 3.00 USD spent, then the config prices the instance in EUR under a 3.50 EUR budget: the dollars are not euros,
    # so the continue is refused (before anything is written) rather than counting them as 3.00 EUR.
    with FakeProvider(kind="anthropic", key=None) as fake:
        script_reads(fake, 2)
        fake.script(text="Done.", input_tokens=1000)
        home.write_config(
            f'.{{ .instances = .{{ .remote = .{{ .kind = "anthropic={fake.address}", .model = "fake-model", '
            f"{PRICED.replace('EUR', 'USD')} }} }} }}\n"
        )
        assert home.chock("run", "read app.py twice", cwd=project).returncode == 0
        session = home.only_session()
        before = home.events(session)
        configure(home, fake, 3.5)
        refused = home.chock("run", "--continue", session, "and once more", cwd=project)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "has spent 3.0000 USD" in refused.stderr and "3.50 EUR" in refused.stderr, refused.stderr
        assert len(fake.calls) == 3
    assert home.events(session) == before
