"""Every refusal a provider documents is heard (issue: refusals): `chock run` as a real process against loopback
servers that answer in each server's own shape (tests/fakes/providers.py, `REFUSALS`) — a prompt refused as too
long is compacted and sent again, the window the refusal teaches is kept for the rest of the session and across
`--continue`, and an overloaded stream that opens with an error event is sent again."""

from __future__ import annotations

import json

import pytest

from chock.session.compaction import SUMMARY_PROMPT
from tests.fakes.projects import git
from tests.fakes.providers import ANTHROPIC, FakeProvider
from tests.test_agent import of_type, remote, run

NOTES = "".join(f"line {n:04d} of the notes\n" for n in range(80))  # ~2 KiB, ~500 tokens a read

# shape -> (the fake's wire, the window it is started with, the input window that leaves for Chock). Anthropic's
# second shape counts the request's `max_tokens` (8192) against the window.
SHAPES = {
    "anthropic": ("anthropic", 3000, 3000),
    "anthropic-max-tokens": ("anthropic", 8192 + 3000, 3000),
    "openai": ("openai", 3000, 3000),
    "openai-input-limit": ("openai", 3000, 3000),
    "openai-code": ("openai", 3000, None),  # the code alone: no window stated
    "vllm": ("openai", 3000, 3000),
    "sglang": ("openai", 3000, 3000),
    "llama.cpp": ("openai", 3000, 3000),
}


def commit_notes(project) -> None:
    (project / "notes.txt").write_text(NOTES)
    git(project, "add", "notes.txt")
    git(project, "commit", "-q", "-m", "notes")


def is_summary_request(body: dict) -> bool:
    return SUMMARY_PROMPT in json.dumps(body["messages"][-1])


def reader(reads: int, turns: dict[str, int]):
    """A model that reads notes.txt `reads` times, one tool call a turn, then says it is done; it summarizes
    when asked."""

    def answer(body: dict) -> dict:
        if is_summary_request(body):
            return {"text": f"Read notes.txt {turns['n']} times."}
        turns["n"] += 1
        if turns["n"] > reads:
            return {"text": "Enough."}
        call = {"id": f"t{turns['n']}", "name": "read_file", "args": {"path": "notes.txt"}}
        return {"text": "Again.", "tool_calls": [call]}

    return answer


def wire_kind(fake: FakeProvider) -> str:
    return "anthropic" if fake.kind == ANTHROPIC else "openai"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_servers_refusal_is_compacted_and_the_resent_request_fits(home, project, shape):
    kind, window, stated = SHAPES[shape]
    commit_notes(project)
    with FakeProvider(kind=kind, key=None, context_window=window, refuse_as=shape) as fake:
        fake.answer_with(reader(8, {"n": 0}))
        remote(home, fake, kind=wire_kind(fake))  # "fake-model": a window Chock does not know
        result = run(home, project, "read notes.txt again and again")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        assert fake.too_long  # refused ...
        refused = fake.refused
    # ... and every refusal is followed by a summary request and the resent request, both fitting.
    for i, was in enumerate(refused):
        if was:
            assert refused[i + 1 : i + 3] == [False, False], refused
    events = home.events(home.only_session())
    learned = [c for c in of_type(events, "compaction") if c.get("window_from") == "refusal"]
    assert learned
    if stated is not None:
        assert learned[0]["window"] == stated  # the server's own window, less what it reserves for the answer
    else:
        assert learned[0]["window"] <= learned[0]["tokens"]  # at most the refused request
    assert [e["text"] for e in of_type(events, "assistant.message")][-1] == "Enough."


def test_a_small_llama_cpp_window_is_learned_once_and_kept_across_continue(home, project):
    commit_notes(project)
    with FakeProvider(kind="openai", key=None, context_window=4096, refuse_as="llama.cpp") as fake:
        fake.answer_with(reader(30, {"n": 0}))
        remote(home, fake, kind="openai")
        result = run(home, project, "read notes.txt thirty times")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        assert len(fake.too_long) == 1  # refused once: the window it stated is kept from then on
        assert len([body for body in fake.calls if not is_summary_request(body)]) == 31 + 1  # one call resent
    session_id = home.only_session()
    compactions = of_type(home.events(session_id), "compaction")
    assert len(compactions) >= 3
    assert compactions[0]["window"] == 4096 and compactions[0]["window_from"] == "refusal"
    # A later run of the session knows the window before the server says it again.
    with FakeProvider(kind="openai", key=None, context_window=4096, refuse_as="llama.cpp") as fake:
        fake.answer_with(reader(10, {"n": 0}))
        remote(home, fake, kind="openai")
        again = run(home, project, "--continue", session_id, "and ten more times")
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr
        assert fake.too_long == []
    later = of_type(home.events(session_id), "compaction")[len(compactions) :]
    assert later and all("window_from" not in c and c["window"] == 4096 for c in later)


def test_a_task_larger_than_the_servers_window_ends_naming_that_window(home, project):
    with FakeProvider(kind="openai", key=None, context_window=4096, refuse_as="llama.cpp") as fake:
        fake.script(text="never asked for")
        remote(home, fake, kind="openai")
        result = run(home, project, "summarize this: " + "lorem ipsum " * 2000)
        assert len(fake.calls) == 1
    assert result.returncode == 1
    end = home.events(home.only_session())[-1]
    assert end["type"] == "session.end"
    assert "context window holds 4,096 tokens" in end["error"] and "4,096" in result.stdout
    assert ".context_window" not in end["error"]  # the server's window is not the config's to change


def test_an_anthropic_stream_opening_with_overloaded_is_sent_again_and_completes(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(stream_error="Overloaded", cut_after=0)  # HTTP 200, then the error as the only event
        fake.script(text="Done after all.")
        remote(home, fake)
        result = run(home, project, "hello")
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(fake.calls) == 2 and fake.calls[0] == fake.calls[1]
    events = home.events(home.only_session())
    (retry,) = of_type(events, "provider.retry")
    assert retry["status"] == 529 and "Overloaded" in retry["error"] and retry["wait_seconds"] > 0
    assert [e["text"] for e in of_type(events, "assistant.message")] == ["Done after all."]
    assert events[-1]["reason"] == "completed"


def test_retry_after_zero_waits_the_backoff(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.fail(status=529, message="Overloaded", headers={"retry-after": "0"})
        fake.script(text="ok")
        remote(home, fake)
        result = run(home, project, "hello")
        assert result.returncode == 0, result.stdout + result.stderr
        first, second = (r.at for r in fake.requests if r.method == "POST")
    (retry,) = of_type(home.events(home.only_session()), "provider.retry")
    assert retry["wait_seconds"] > 0 and second - first >= retry["wait_seconds"]
