"""Every refusal a provider documents is heard: the refusal table and the in-stream errors read from each
server's own shapes (tests/fakes/refusals.py), then `chock run` as a real process against loopback servers that
answer in them — a prompt refused as too long is compacted and sent again, the window the refusal teaches is
kept for the rest of the session and across `--continue`, and an overloaded stream that opens with an error
event is sent again."""

from __future__ import annotations

import json

import pytest

from chock.providers import ProviderError, Reply, Retrying, retry
from chock.providers.anthropic import MessageStream
from chock.providers.failures import TooLong, status_failure, too_long
from chock.providers.openai import ChatStream
from chock.session.compaction import SUMMARY_PROMPT
from tests.fakes.projects import git
from tests.fakes.providers import ANTHROPIC, FakeProvider
from tests.fakes.refusals import REFUSALS
from tests.test_agent import of_type, remote, run
from tests.test_providers import KEY, provider_for, stream_all

NOTES = "".join(f"line {n:04d} of the notes\n" for n in range(80))  # ~2 KiB, ~500 tokens a read

# shape -> (the fake's wire, the window it is started with, the input window that leaves for Chock). Anthropic's
# second shape counts the request's `max_tokens` (8192) against the window.
SHAPES = {
    "anthropic": ("anthropic", 3000, 3000),
    "anthropic-max-tokens": ("anthropic", 8192 + 3000, 3000),
    "anthropic-bytes": ("anthropic", 3000, None),  # a 413 for the request's bytes: no window stated
    "openai": ("openai", 3000, 3000),
    "openai-input-limit": ("openai", 3000, 3000),
    "openai-code": ("openai", 3000, None),  # the code alone: no window stated
    "vllm": ("openai", 3000, 3000),
    "sglang": ("openai", 3000, 3000),
    "llama.cpp": ("openai", 3000, 3000),
}


# --- the table and the stream's errors, read without a session ---------------------------------------------


# The shapes of `REFUSALS` (each server's own), refusing 5000 tokens of a 4096-token window, with the input
# window each states: Anthropic's second shape reserves the request's max_tokens; OpenAI's code alone states none.
STATED_WINDOWS = {
    "anthropic": 4096,
    "anthropic-max-tokens": 4096 - 1000,
    "anthropic-bytes": None,
    "openai": 4096,
    "openai-input-limit": 4096,
    "openai-code": None,
    "vllm": 4096,
    "sglang": 4096,
    "llama.cpp": 4096,
}


@pytest.mark.parametrize("shape", sorted(REFUSALS))
def test_every_servers_refusal_for_size_is_heard_with_the_window_it_states(shape: str) -> None:
    body = json.dumps(REFUSALS[shape](5000, 4096, {"max_tokens": 1000}))
    refusal = too_long(400, body)
    assert refusal is not None and refusal.window == STATED_WINDOWS[shape]
    error = status_failure(400, body, kind="openai-compat", address="http://x/v1", credential=None, instance="w")
    assert error.too_long and error.window == STATED_WINDOWS[shape]
    if STATED_WINDOWS[shape]:
        assert f"which holds {STATED_WINDOWS[shape]:,} tokens by the server's own account" in str(error)
    assert too_long(429, body) is None and too_long(500, body) is None


@pytest.mark.parametrize(
    ("error", "window", "prompt"),
    [
        # llama.cpp before its message carried figures: the error object's own fields still do.
        ({"code": 400, "message": "the request exceeds the available context size, try increasing it",
          "type": "exceed_context_size_error", "n_prompt_tokens": 4476, "n_ctx": 4096}, 4096, 4476),
        ({"code": 400, "message": "the request exceeds the available context size, try increasing it",
          "type": "invalid_request_error"}, None, None),
        # SGLang's refusal of input plus the completion; vLLM's engine; vLLM's older words.
        ({"object": "error", "message": "Requested token count exceeds the model's maximum context length of 8192 "
          "tokens. You requested a total of 9000 tokens: 7000 tokens from the input messages and 2000 tokens for "
          "the completion. Please reduce the number of tokens in the input messages or the completion to fit "
          "within the limit.", "type": "BadRequest", "param": None, "code": 400}, 6192, 7000),
        ({"message": "The decoder prompt (length 8825) is longer than the maximum model length of 8192.",
          "type": "BadRequestError", "code": 400}, 8192, 8825),
        ({"message": "This model's maximum context length is 32768 tokens. However, your request has 40000 input "
          "tokens. Please reduce the length of the input messages.", "type": "BadRequestError", "code": 400},
         32768, 40000),
    ],
)  # fmt: skip
def test_refusals_state_their_window_in_fields_or_words(error: dict, window: int | None, prompt: int | None) -> None:
    body = json.dumps({"error": error} if "object" not in error else error)
    assert too_long(400, body) == TooLong(window, prompt)


def test_an_error_event_says_the_status_it_stands_for_and_whether_it_refuses_the_size() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(ProviderError) as caught:
        MessageStream("https://api.anthropic.com/v1", "work").feed_line("data: " + json.dumps(overloaded))
    assert caught.value.status == 529 and not caught.value.too_long
    with pytest.raises(ProviderError) as caught:
        ChatStream("http://127.0.0.1:5000/v1", "local").feed_line(
            'error: {"code": 503, "message": "Loading model", "type": "unavailable_error"}'
        )
    assert caught.value.status == 503
    refusal = REFUSALS["llama.cpp"](5000, 4096, {})
    with pytest.raises(ProviderError) as caught:
        ChatStream("http://127.0.0.1:5000/v1", "local").feed_line("data: " + json.dumps(refusal))
    assert caught.value.status == 400 and caught.value.too_long and caught.value.window == 4096


@pytest.mark.parametrize(("error_type", "status"), [("overloaded_error", 529), ("rate_limit_error", 429)])
def test_an_error_event_before_any_content_is_retried_as_its_status(error_type: str, status: int) -> None:
    with FakeProvider(kind="anthropic", key=KEY) as fake:
        fake.script(stream_error="Overloaded", stream_error_type=error_type, cut_after=1)  # after message_start
        fake.script(text="made it")
        items, error = stream_all(provider_for(fake, retries=2))
        assert len(fake.calls) == 2
    assert error is None
    retrying = items[0]
    assert isinstance(retrying, Retrying) and (retrying.attempt, retrying.status) == (1, status)
    assert retry.INITIAL_WAIT * (1 - retry.JITTER) <= retrying.wait_seconds <= retry.INITIAL_WAIT
    assert isinstance(items[-1], Reply) and items[-1].text == "made it"


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("asked", ["0", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_a_retry_after_of_zero_or_past_waits_the_backoff(kind: str, asked: str) -> None:
    with FakeProvider(kind=kind, key=KEY) as fake:
        fake.fail(status=529 if kind == "anthropic" else 503, message="busy", headers={"retry-after": asked})
        fake.script(text="made it")
        items, error = stream_all(provider_for(fake, retries=1))
        assert error is None and len(fake.calls) == 2
        arrived = [request.at for request in fake.requests]
    retrying = items[0]
    assert isinstance(retrying, Retrying)
    assert retry.INITIAL_WAIT * (1 - retry.JITTER) <= retrying.wait_seconds <= retry.INITIAL_WAIT
    assert arrived[1] - arrived[0] >= retrying.wait_seconds


# --- sessions against servers that refuse ---------------------------------------------------------------


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
