"""A real agent against real providers (issue 14): `chock run` as a real process against loopback servers that
speak the providers' wires (tests/fakes/providers.py) — retries, nothing received lost, prompt caching, the
project's AGENTS.md, compaction, `chock plan`, and a workspace kept free of bytecode caches."""

from __future__ import annotations

import copy
import itertools
import json
import os
import subprocess
import time
from typing import Any

import pytest

from chock.control.client import SessionClient
from chock.control.session_protocol import APPROVAL
from chock.session.compaction import SUMMARY_PROMPT
from tests.conftest import git, git_value
from tests.fakes.providers import FakeProvider
from tests.test_detach import _wait_for_end
from tests.test_run import _wait_for_event, _wait_for_session

ASYNCIO_WARNINGS = ("Task was destroyed", "Exception ignored", "was never awaited", "Unclosed", "unclosed")


def remote(home, fake: FakeProvider, *, kind: str = "anthropic", extra: str = "") -> None:
    """One instance, `remote`, pointed at the fake."""
    wire = "anthropic" if kind == "anthropic" else "openai-compat"
    home.write_config(
        f'.{{ .instances = .{{ .remote = .{{ .kind = "{wire}={fake.address}", .model = "fake-model"{extra} }} }} }}\n'
    )


def run(home, project, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = home.chock("run", *args, cwd=project, **kwargs)
    for warning in ASYNCIO_WARNINGS:
        assert warning not in result.stderr, result.stderr
    return result


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [event for event in events if event["type"] == kind]


# --- retries -------------------------------------------------------------------------------------------------


def test_a_429_with_retry_after_is_waited_out_logged_and_the_session_completes(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.fail(status=429, message="slow down", headers={"retry-after": "1"})
        fake.script(text="Done at last.")
        remote(home, fake)
        result = run(home, project, "hello")
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(fake.calls) == 2
        assert fake.requests[1].at - fake.requests[0].at >= 1.0
    events = home.events(home.only_session())
    (retry,) = of_type(events, "provider.retry")
    assert (retry["attempt"], retry["status"], retry["wait_seconds"]) == (1, 429, 1.0)
    assert "rate limited" in retry["error"]
    assert "rate limited, retrying in 1 s" in result.stdout
    assert events[-1]["reason"] == "completed"


def test_the_session_answers_its_socket_while_it_waits_to_retry(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.fail(status=529, message="Overloaded", headers={"retry-after": "4"})
        fake.script(text="ok")
        remote(home, fake)
        process = home.spawn("run", "hello", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            session_id = _wait_for_session(home)
            retry = _wait_for_event(home, session_id, "provider.retry")
            assert retry["status"] == 529
            started = time.monotonic()
            with SessionClient(home.layout.session_socket(session_id, "approval"), APPROVAL) as client:
                assert client.pending() == []
            assert time.monotonic() - started < 2.0
            assert len(fake.calls) == 1  # answered during the wait, before the call was sent again
            assert process.wait(60) == 0
        finally:
            process.kill()
        assert len(fake.calls) == 2


def test_three_529s_in_a_row_end_the_session_after_three_requests(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        for _ in range(3):
            fake.fail(status=529, message="Overloaded", headers={"retry-after-ms": "100"})
        fake.script(text="never asked for")
        remote(home, fake)
        result = run(home, project, "hello")
        assert len(fake.calls) == 3
    assert result.returncode == 1
    assert "HTTP 529" in result.stdout and "gave up after 3 attempts" in result.stdout
    events = home.events(home.only_session())
    assert [e["attempt"] for e in of_type(events, "provider.retry")] == [1, 2]
    assert events[-1]["type"] == "session.end" and "HTTP 529" in events[-1]["error"]


def test_a_401_is_never_retried(home, project):
    with FakeProvider(kind="openai", key="sk-right") as fake:
        fake.script(text="never asked for")
        remote(home, fake, kind="openai", extra=', .token = "sk-wrong", .retries = 5')
        result = run(home, project, "hello")
        assert len(fake.calls) == 1
    assert result.returncode == 1 and "HTTP 401" in result.stdout
    assert of_type(home.events(home.only_session()), "provider.retry") == []


# --- nothing received is lost --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("deltas", [["Hello", "!"], ["Hi"]])
def test_text_before_an_error_event_is_logged_before_the_end_with_its_usage(home, project, kind, deltas):
    with FakeProvider(kind=kind, key=None) as fake:
        # The Messages stream opens with message_start and ping, then the text block; chat completions with
        # the role's chunk. The error event follows the last delta.
        before = 3 if kind == "anthropic" else 1
        fake.script(deltas=deltas, stream_error="Overloaded", cut_after=before + len(deltas), input_tokens=42)
        remote(home, fake, kind=kind)
        result = run(home, project, "hello")
    assert result.returncode == 1 and "Overloaded" in result.stdout
    events = home.events(home.only_session())
    end = next(i for i, e in enumerate(events) if e["type"] == "session.end")
    assert "".join(e["text"] for e in of_type(events[:end], "assistant.delta")) == "".join(deltas)
    (usage,) = of_type(events[:end], "usage")
    assert usage["input_tokens"] == (42 if kind == "anthropic" else 0)  # chat completions report usage last
    assert "".join(deltas) in result.stdout


# --- prompt caching ------------------------------------------------------------------------------------------


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: without_cache_control(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(item) for item in value]
    return value


def breakpoints(body: dict) -> list[str]:
    """Where a request marks `cache_control`: tools[i], system[i], messages[i][j]."""
    found = [f"tools[{i}]" for i, tool in enumerate(body.get("tools") or []) if "cache_control" in tool]
    found += [f"system[{i}]" for i, block in enumerate(body.get("system") or []) if "cache_control" in block]
    for i, message in enumerate(body["messages"]):
        found += [f"messages[{i}][{j}]" for j, block in enumerate(message["content"]) if "cache_control" in block]
    return found


def shares_prefix(earlier: dict, later: dict) -> bool:
    """`later` repeats `earlier` byte for byte up to `earlier`'s last cache breakpoint (breakpoints aside:
    where they stand is not part of the cached prefix)."""
    last = max(i for i, message in enumerate(earlier["messages"]) if "cache_control" in message["content"][-1])

    def prefix(body: dict) -> str:
        kept = {**body, "messages": body["messages"][: last + 1]}
        return json.dumps(without_cache_control([kept["tools"], kept["system"], kept["messages"]]))

    return len(later["messages"]) > last and prefix(earlier) == prefix(later)


def test_anthropic_calls_mark_at_most_four_breakpoints_and_cache_tokens_reach_chock_usage(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        for number in range(3):
            fake.script(
                text=f"Step {number}.",
                tool_calls=[{"id": f"t{number}", "name": "read_file", "args": {"path": "app.py"}}],
                input_tokens=10,
                cache_read_tokens=1000 * number,
                cache_write_tokens=100,
            )
        fake.script(text="Done.", input_tokens=10, cache_read_tokens=3000, cache_write_tokens=100)
        remote(home, fake, extra=", .price = .{ .input = 3.0, .output = 15.0, .cache_read = 0.3, .cache_write = 3.75 }")
        result = run(home, project, "read app.py three times")
        assert result.returncode == 0, result.stdout + result.stderr
        assert fake.rejections == []
        bodies = fake.calls
    assert len(bodies) == 4
    last_tool = f"tools[{len(bodies[0]['tools']) - 1}]"
    assert breakpoints(bodies[0]) == [last_tool, "system[0]", "messages[0][0]"]
    for body in bodies[1:]:
        marks = breakpoints(body)
        assert len(marks) == 4 and marks[:2] == [last_tool, "system[0]"]
        last = len(body["messages"]) - 1
        assert marks[2:] == [f"messages[{last - 2}][{len(body['messages'][last - 2]['content']) - 1}]",
                             f"messages[{last}][{len(body['messages'][last]['content']) - 1}]"]  # fmt: skip
    assert all(shares_prefix(a, b) for a, b in itertools.pairwise(bodies))
    line = home.chock("usage", cwd=project).stdout.splitlines()[-1]
    # input = uncached + cache reads + cache writes, per call: 4 × 10 + 6000 + 400
    assert "in      6440  out        20  cache read      6000  write       400" in line
    cost = (40 * 3.0 + 20 * 15.0 + 6000 * 0.3 + 400 * 3.75) / 1e6
    assert f"cost {cost:>9.4f}" in line
    assert f"cost {cost:.4f}" in result.stdout  # the end of chock run says it too


def test_openai_cached_tokens_are_counted_as_cache_reads(home, project):
    with FakeProvider(kind="openai", key=None) as fake:
        fake.script(text="Hi.", input_tokens=10, cache_read_tokens=90)
        remote(home, fake, kind="openai")
        assert run(home, project, "hello").returncode == 0
    (usage,) = of_type(home.events(home.only_session()), "usage")
    assert (usage["input_tokens"], usage["cache_read_tokens"], usage["cache_write_tokens"]) == (100, 90, 0)
    assert "cost" not in usage  # no price, no cost
    assert "cost" not in home.chock("usage", cwd=project).stdout


# --- the project's AGENTS.md ---------------------------------------------------------------------------------


def system_text(body: dict) -> str:
    return "".join(block["text"] for block in body["system"])


def test_agents_md_reaches_the_system_prompt_and_a_handed_over_session_sends_the_same(home, project, daemon):
    (project / "AGENTS.md").write_text("Always run the tests with `make check`.\n")
    git(project, "add", "AGENTS.md")
    git(project, "commit", "-q", "-m", "instructions")
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="", tool_calls=[{"id": "t1", "name": "shell", "args": {"command": "sleep 2"}}])
        fake.script(text="Done.")
        remote(home, fake)
        process = home.spawn("run", "--yes", "work", cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            session_id = _wait_for_session(home)
            _wait_for_event(home, session_id, "tool.call")
            # HEAD moves on: the session keeps the instructions of the commit it started from.
            (project / "AGENTS.md").write_text("Something else entirely.\n")
            git(project, "commit", "-q", "-am", "other instructions")
            detached = home.chock("detach", session_id, "--daemon", daemon.address, cwd=project)
            assert detached.returncode == 0, detached.stderr
            assert process.wait(30) == 8
            _wait_for_end(home, session_id, "completed")
        finally:
            process.kill()
        first, second = fake.calls
    assert "Always run the tests with `make check`." in system_text(first)
    assert system_text(second) == system_text(first)
    start = home.events(session_id)[0]
    assert start["instructions"] == "Always run the tests with `make check`.\n"


def test_an_agents_md_symlink_is_refused_and_its_target_reaches_no_request(home, project, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("TOP-SECRET-KEY-MATERIAL\n")
    os.symlink(secret, project / "AGENTS.md")
    git(project, "add", "AGENTS.md")
    git(project, "commit", "-q", "-m", "a link")
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="Done.")
        remote(home, fake)
        result = run(home, project, "hello")
        assert result.returncode == 0, result.stdout + result.stderr
        assert all(b"TOP-SECRET" not in body for body in fake.raw_bodies)
        assert "AGENTS.md" not in system_text(fake.calls[0])
    start = home.events(home.only_session())[0]
    assert "instructions" not in start and "is a symlink" in start["instructions_note"]
    assert "AGENTS.md at the project root is a symlink" in result.stdout
    assert "TOP-SECRET" not in home.layout.log_path(home.only_session()).read_text()


def test_a_large_agents_md_is_cut_and_says_so(home, project):
    (project / "AGENTS.md").write_text("rule\n" * 10_000)
    git(project, "add", "AGENTS.md")
    git(project, "commit", "-q", "-m", "long instructions")
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="Done.")
        remote(home, fake)
        result = run(home, project, "hello")
        system = system_text(fake.calls[0])
    assert result.returncode == 0
    assert "AGENTS.md is 50,000 bytes; only its first 32 KiB are used" in system
    assert system.count("rule\n") == 32 * 1024 // 5
    assert "only its first 32 KiB are used" in result.stdout


# --- compaction ----------------------------------------------------------------------------------------------


def is_summary_request(body: dict) -> bool:
    last = body["messages"][-1]["content"]
    return any(block.get("type") == "text" and block.get("text") == SUMMARY_PROMPT for block in last)


def test_a_forty_turn_session_fits_a_small_window_by_compacting(home, project):
    window = 6000
    (project / "notes.txt").write_text("".join(f"line {n:04d} of the notes\n" for n in range(80)))  # ~2 KiB
    git(project, "add", "notes.txt")
    git(project, "commit", "-q", "-m", "notes")
    turns = {"n": 0}
    summaries: list[str] = []

    def answer(body: dict) -> dict:
        if is_summary_request(body):
            summaries.append(f"Summary {len(summaries) + 1}: read notes.txt {turns['n']} times.")
            return {"text": summaries[-1]}
        turns["n"] += 1
        if turns["n"] > 40:
            return {"text": "Read it forty times."}
        call = {"id": f"t{turns['n']}", "name": "read_file", "args": {"path": "notes.txt"}}
        return {"text": f"Reading, time {turns['n']}.", "tool_calls": [call]}

    with FakeProvider(kind="anthropic", key=None, context_window=window) as fake:
        fake.answer_with(answer)
        remote(home, fake, extra=f", .context_window = {window}")
        result = run(home, project, "read notes.txt forty times")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        assert fake.too_long == [] and fake.rejections == []
        assert max(len(raw) // 4 for raw in fake.raw_bodies) <= window
        bodies = fake.calls
    session_id = home.only_session()
    events = home.events(session_id)
    compactions = of_type(events, "compaction")
    assert len(compactions) >= 3 and [c["summary"] for c in compactions] == summaries
    assert all(c["window"] == window and c["tokens"] >= 0.8 * window for c in compactions)
    assert "compacted the conversation" in result.stdout
    assert len([u for u in of_type(events, "usage") if u.get("for") == "compaction"]) == len(compactions)
    # Between two compactions consecutive turn requests share their prefix up to the last breakpoint.
    turn_bodies = [body for body in bodies if not is_summary_request(body)]
    segments: list[list[dict]] = [[]]
    for body in bodies:
        if is_summary_request(body):
            segments.append([])
        else:
            segments[-1].append(body)
    assert len(turn_bodies) == 41 and sum(len(segment) for segment in segments) == 41
    for segment in segments:
        assert all(shares_prefix(a, b) for a, b in itertools.pairwise(segment))
    # A later run starts from the latest summary and what followed, not the whole history.
    with FakeProvider(kind="anthropic", key=None, context_window=window) as fake:
        fake.script(text="Nothing more to do.")
        remote(home, fake, extra=f", .context_window = {window}")
        again = run(home, project, "--continue", session_id, "anything else?")
        assert again.returncode == 0, again.stdout + again.stderr
        (body,) = fake.calls
    first = body["messages"][0]["content"][0]["text"]
    assert summaries[-1] in first and "read notes.txt forty times" in first
    assert "Reading, time 1." not in json.dumps(body)
    kept = [e for e in of_type(events, "assistant.message") if e["id"] > compactions[-1]["through"]]
    assert len(body["messages"]) == 1 + 2 * len(kept)  # the summary, then each kept answer and its reply


def test_usage_reported_near_the_window_compacts_before_the_next_call(home, project):
    with FakeProvider(kind="openai", key=None) as fake:
        fake.script(text="Looking.", tool_calls=[{"id": "t1", "name": "read_file", "args": {"path": "app.py"}}],
                    input_tokens=95_000)  # fmt: skip
        fake.script(text="What was done: read app.py.")  # the summary
        fake.script(text="Done.")
        remote(home, fake, kind="openai", extra=", .context_window = 100_000")
        result = run(home, project, "look at app.py")
        assert result.returncode == 0, result.stdout + result.stderr
        summary_call, after = fake.calls[1:]
    assert summary_call["messages"][-1] == {"role": "user", "content": SUMMARY_PROMPT}
    assert [m["role"] for m in summary_call["messages"]] == ["system", "user", "assistant", "tool", "user"]
    (compaction,) = of_type(home.events(home.only_session()), "compaction")
    assert compaction["tokens"] >= 95_000 and compaction["summary"] == "What was done: read app.py."
    # Nothing came before the latest turn but the task: the summary covers it all.
    assert [m["role"] for m in after["messages"]] == ["system", "user"]
    assert "What was done: read app.py." in after["messages"][1]["content"]


def test_a_prompt_the_provider_refuses_as_too_long_is_compacted_and_sent_again(home, project):
    (project / "notes.txt").write_text("".join(f"line {n:04d} of the notes\n" for n in range(80)))
    git(project, "add", "notes.txt")
    git(project, "commit", "-q", "-m", "notes")
    turns = {"n": 0}

    def answer(body: dict) -> dict:
        if is_summary_request(body):
            return {"text": f"Read notes.txt {turns['n']} times."}
        turns["n"] += 1
        if turns["n"] > 8:
            return {"text": "Enough."}
        return {"text": "Again.", "tool_calls": [{"id": f"t{turns['n']}", "name": "read_file",
                                                    "args": {"path": "notes.txt"}}]}  # fmt: skip

    with FakeProvider(kind="anthropic", key=None, context_window=3000) as fake:
        fake.answer_with(answer)
        remote(home, fake)  # "fake-model": a window Chock does not know
        result = run(home, project, "read notes.txt again and again")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        assert fake.too_long  # refused at least once ...
    events = home.events(home.only_session())
    assert len(of_type(events, "compaction")) >= 1  # ... and compacted, then sent again
    assert [e["text"] for e in of_type(events, "assistant.message")][-1] == "Enough."


def test_a_replay_scripts_its_compactions_summary(home, project):
    (project / "big.txt").write_text("x" * 6000)
    git(project, "add", "big.txt")
    git(project, "commit", "-q", "-m", "big")
    read = {"name": "read_file", "args": {"path": "big.txt"}}
    home.write_replay("demo.jsonl", [
        {"text": "one", "tool_calls": [{"call_id": "c1", **read}]},
        {"for": "compaction", "text": "Read big.txt once."},
        {"text": "two", "tool_calls": [{"call_id": "c2", "name": "read_file", "args": {"path": "app.py"}}]},
        {"text": "done", "tool_calls": []},
    ])  # fmt: skip
    home.write_config('.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl", .context_window = 3000 } } }\n')
    result = run(home, project, "read it")
    assert result.returncode == 0, result.stdout + result.stderr
    events = home.events(home.only_session())
    (compaction,) = of_type(events, "compaction")
    assert compaction["summary"] == "Read big.txt once."
    assert [e["text"] for e in of_type(events, "assistant.message")] == ["one", "two", "done"]


# --- the plan --------------------------------------------------------------------------------------------------


PLAN = [
    {"text": "Planning.", "tool_calls": [{"call_id": "p1", "name": "plan", "args": {"steps": [
        {"step": "Read app.py", "status": "in_progress"}, {"step": "Write notes", "status": "pending"}]}}]},
    {"text": "", "tool_calls": [{"call_id": "p2", "name": "plan", "args": {"steps": [
        {"step": "Read app.py", "status": "done"}, {"step": "Write notes", "status": "in_progress"}]}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip
SHOWN = ["[x] Read app.py", "[>] Write notes"]


def test_chock_plan_shows_the_steps_a_session_set_locally_and_through_a_daemon_on_tcp(home, project, daemons):
    home.replay_instance(PLAN)
    result = run(home, project, "plan it")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[>] Read app.py\n  [ ] Write notes" in result.stdout  # the terminal shows each change
    session_id = home.only_session()
    plans = of_type(home.events(session_id), "plan")
    assert [len(p["steps"]) for p in plans] == [2, 2]
    local = home.chock("plan", cwd=project)
    assert local.returncode == 0 and local.stdout.splitlines() == SHOWN
    assert home.chock("plan", session_id).stdout.splitlines() == SHOWN
    daemon = daemons.start("--host", "127.0.0.1", "--port", "0")
    remote_plan = home.chock("plan", session_id, "--daemon", daemon.tcp, cwd=project)
    assert remote_plan.returncode == 0, remote_plan.stderr
    assert remote_plan.stdout.splitlines() == SHOWN
    newest = home.chock("plan", "--daemon", daemon.tcp, cwd=project)
    assert newest.stdout.splitlines() == SHOWN


def test_a_plan_with_a_bad_step_is_the_tools_error(home, project):
    bad = {"call_id": "p1", "name": "plan", "args": {"steps": [{"step": "x", "status": "finished"}]}}
    home.replay_instance([{"text": "", "tool_calls": [bad]}, {"text": "ok", "tool_calls": []}])
    assert run(home, project, "plan").returncode == 0
    events = home.events(home.only_session())
    (result,) = of_type(events, "tool.result")
    assert result["is_error"] and "must be one of pending, in_progress, done" in result["output"]
    assert of_type(events, "plan") == []
    assert "has no plan" in home.chock("plan", cwd=project).stdout


# --- the workspace holds what the agent made ---------------------------------------------------------------


def test_running_python_leaves_no_bytecode_cache_on_the_branch(home, project):
    home.replay_instance([
        {"text": "", "tool_calls": [
            {"call_id": "c1", "name": "write_file", "args": {"path": "helper.py", "content": "VALUE = 7\n"}},
            {"call_id": "c2", "name": "shell",
             "args": {"command": "python3 -c 'import helper; print(helper.VALUE)'"}}]},
        {"text": "ok", "tool_calls": []},
    ])  # fmt: skip
    result = run(home, project, "--yes", "use python")
    assert result.returncode == 0, result.stdout + result.stderr
    session_id = home.only_session()
    output = of_type(home.events(session_id), "tool.result")[1]["output"]
    assert "7" in output
    files = git_value(project, "ls-tree", "-r", "--name-only", f"chock/{session_id}").splitlines()
    assert "helper.py" in files and not any("__pycache__" in name or name.endswith(".pyc") for name in files)


# --- readers skip what they do not know ----------------------------------------------------------------------


def test_event_types_from_a_newer_chock_are_skipped_by_every_reader(home, project):
    home.replay_instance([{"text": "First.", "tool_calls": []}, {"text": "Second.", "tool_calls": []}])
    assert run(home, project, "one").returncode == 0
    session_id = home.only_session()
    log = home.layout.log_path(session_id)
    events = home.events(session_id)
    future = copy.deepcopy(events[-1])
    future.update(id=len(events) + 1, type="from.the.future", steps=7, summary={"odd": True})
    log.write_text(log.read_text() + json.dumps(future) + "\n")
    assert home.chock("sessions", cwd=project).returncode == 0
    assert home.chock("usage", cwd=project).returncode == 0
    assert "has no plan" in home.chock("plan", cwd=project).stdout
    again = run(home, project, "--continue", session_id, "two")
    assert again.returncode == 0, again.stdout + again.stderr
