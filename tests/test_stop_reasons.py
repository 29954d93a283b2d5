"""Why the model stopped is heard (docs/log.md#stop-reasons): a refused answer and an answer cut at a limit end
the session as an error that says so and what to do next, never as a completed task; a paused turn is sent again
until the model finishes it. Sessions run in-process (tests/fakes/loop.py) against loopback servers speaking each
wire (tests/fakes/providers.py), and once as `chock run` to see what the person sees and what a continue sends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from chock.errors import EXIT_COMPLETED, EXIT_FAILED
from chock.providers.registry import make_provider
from chock.session.stops import MOST_PAUSES
from chock.transcript.entries import entry
from tests.fakes.loop import SESSION_ID, Loop, build
from tests.fakes.providers import ANTHROPIC, FakeProvider
from tests.test_agent import of_type, remote, run


def play(loop_of: Any) -> None:
    asyncio.run(loop_of())


def session(tmp_path, fake: FakeProvider) -> Loop:
    kind = "anthropic" if fake.kind == ANTHROPIC else "openai-compat"
    return build(
        tmp_path,
        [],
        provider=lambda clock: make_provider(kind, fake.address, "m", None, instance="demo", sleep=clock.sleep),
    )


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages API messages without their prompt cache's marks (which move as the conversation grows)."""
    return [
        {
            **message,
            "content": [{k: v for k, v in block.items() if k != "cache_control"} for block in message["content"]],
        }
        for message in messages
    ]


def end_of(loop: Loop) -> dict[str, Any]:
    (end,) = loop.of("session.end")
    return end


@pytest.mark.parametrize(
    ("wire", "stop_reason", "words"),
    [
        ("anthropic", "refusal", "the model refused to answer"),
        ("openai", "content_filter", "the provider's content filter withheld the answer"),
    ],
)
def test_a_refused_answer_ends_the_session_as_an_error_that_says_to_rephrase(tmp_path, wire, stop_reason, words):
    async def scenario() -> None:
        with FakeProvider(kind=wire, key=None) as fake:
            fake.script(text="I can", stop_reason=stop_reason)
            loop = session(tmp_path, fake)
            assert await loop.start() == EXIT_FAILED
            assert len(fake.calls) == 1
        (message,) = loop.of("assistant.message")
        assert message["text"] == "I can" and message["stop_reason"] == stop_reason
        end = end_of(loop)
        assert (end["reason"], end["exit_code"]) == ("error", EXIT_FAILED)
        assert end["error"].startswith(f"instance 'demo': {words} (stop reason `{stop_reason}`)")
        assert "rephrase the request or tell the model more" in end["error"]
        assert f'`chock run --continue {SESSION_ID} "…"`' in end["error"]
        assert not loop.of("workspace.close") and loop.worktree.directory.is_dir()  # the work is kept

    play(scenario)


@pytest.mark.parametrize(
    ("wire", "stop_reason", "limit"),
    [
        ("anthropic", "max_tokens", "the model's output limit"),
        ("anthropic", "model_context_window_exceeded", "the model's context window"),
        ("openai", "length", "the model's output limit"),
    ],
)
def test_an_answer_cut_at_a_limit_ends_the_session_saying_so_and_how_to_go_on(tmp_path, wire, stop_reason, limit):
    listing = {"id": "c1", "name": "list_files", "args": {}}

    async def scenario() -> None:
        with FakeProvider(kind=wire, key=None) as fake:
            # A tool call that came whole before the limit runs; an answer with none to run is cut.
            fake.script(text="Looking.", tool_calls=[listing], stop_reason=stop_reason)
            fake.script(text="The first half of the answer, cut mid sen", stop_reason=stop_reason)
            loop = session(tmp_path, fake)
            assert await loop.start() == EXIT_FAILED
        assert [e["name"] for e in loop.of("tool.result")] == ["list_files"]
        message = loop.of("assistant.message")[-1]
        assert message["text"] == "The first half of the answer, cut mid sen"  # kept in the conversation
        assert message["stop_reason"] == stop_reason
        end = end_of(loop)
        assert end["reason"] == "error"
        assert end["error"] == (
            f"instance 'demo': the answer was cut at {limit} (stop reason `{stop_reason}`); "
            f'`chock run --continue {SESSION_ID} "go on"` asks the model to go on from there'
        )

    play(scenario)


def test_a_paused_turn_is_sent_again_and_the_model_finishes_it(tmp_path):
    async def scenario() -> None:
        with FakeProvider(kind="anthropic", key=None) as fake:
            fake.script(text="Searching the docs.", stop_reason="pause_turn")
            fake.script(text=" Found it: the answer is 42.")
            loop = session(tmp_path, fake)
            assert await loop.start() == EXIT_COMPLETED
            calls = fake.calls
        assert len(calls) == 2
        # The second request is the first with the paused answer at its end, for the model to go on from.
        assert plain(calls[1]["messages"]) == [
            *plain(calls[0]["messages"]),
            {"role": "assistant", "content": [{"type": "text", "text": "Searching the docs."}]},
        ]
        assert [(e["text"], e["stop_reason"]) for e in loop.of("assistant.message")] == [
            ("Searching the docs.", "pause_turn"),
            (" Found it: the answer is 42.", "end_turn"),
        ]
        assert loop.types().count("turn.end") == 1  # one turn, in two calls
        assert end_of(loop)["reason"] == "completed"

    play(scenario)


def test_a_model_that_keeps_pausing_ends_the_session_after_a_bounded_number_of_calls(tmp_path):
    async def scenario() -> None:
        with FakeProvider(kind="anthropic", key=None) as fake:
            for n in range(MOST_PAUSES + 3):
                fake.script(text=f"step {n}. ", stop_reason="pause_turn")
            loop = session(tmp_path, fake)
            assert await loop.start() == EXIT_FAILED
            assert len(fake.calls) == MOST_PAUSES + 1
        end = end_of(loop)
        assert end["reason"] == "error"
        assert end["error"].startswith(
            f"instance 'demo': the model paused its turn {MOST_PAUSES + 1} times in a row (stop reason `pause_turn`)"
        )
        assert f"chock run --continue {SESSION_ID}" in end["error"]

    play(scenario)


def test_chock_run_shows_a_refusal_and_a_continue_sends_the_rephrased_task_without_the_refused_answer(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="Sure, here is how to", stop_reason="refusal")
        fake.script(text="Here is the safe way.")
        remote(home, fake)
        result = run(home, project, "tell me how")
        assert result.returncode == 1
        session_id = home.only_session()
        again = run(home, project, "--continue", session_id, "tell me the safe way")
        assert again.returncode == 0, again.stdout + again.stderr
        continued = fake.calls[1]
    shown = result.stdout + result.stderr
    assert "session ended: error: instance 'remote': the model refused to answer (stop reason `refusal`)" in shown
    assert f'chock run --continue {session_id} "…"' in shown
    assert "Sure, here is how to" not in json.dumps(continued)  # a refused turn is not sent again
    assert [block["text"] for block in continued["messages"][-1]["content"]] == ["tell me how", "tell me the safe way"]
    events = home.events(session_id)
    assert [e.get("stop_reason") for e in of_type(events, "assistant.message")] == ["refusal", "end_turn"]
    assert events[-1]["reason"] == "completed"
    # A transcript (`chock export`, the page's) says why the refused answer stopped.
    shown = entry(of_type(events, "assistant.message")[0])
    assert shown is not None and ("stop reason", "refusal") in shown.facts


def test_a_session_that_ended_between_a_pause_and_its_call_makes_that_call_when_continued(home, project):
    with FakeProvider(kind="anthropic", key=None) as fake:
        fake.script(text="Half way.", stop_reason="pause_turn")
        fake.fail(status=401, message="invalid x-api-key")  # the call that goes on: refused, never retried
        fake.script(text=" All the way.")
        remote(home, fake)
        assert run(home, project, "go all the way").returncode == 1
        session_id = home.only_session()
        again = run(home, project, "--continue", session_id)  # nothing new to say
        assert again.returncode == 0, again.stdout + again.stderr
        assert len(fake.calls) == 3 and fake.calls[2]["messages"][-1]["role"] == "assistant"
    texts = [e["text"] for e in of_type(home.events(session_id), "assistant.message")]
    assert texts == ["Half way.", " All the way."]


def test_a_subagent_whose_answer_stopped_short_says_so_to_its_session(tmp_path):
    """A subagent's refused or cut answer comes back to the session's model saying why (a refused text is not
    passed on, a cut one is); a paused turn is sent again, and its answer is the result."""
    from chock.session.subagent_process import research

    def answered(entries: list[dict[str, Any]]) -> str:
        request = {"kind": "replay", "entries": entries, "workspace": str(tmp_path), "task": "look around"}
        return str(asyncio.run(research(request))["result"])

    assert answered([{"text": "I will not", "stop_reason": "refusal"}]) == (
        "[the subagent's answer stopped short: stop reason `refusal`]"
    )
    assert answered([{"text": "The greeting is in", "stop_reason": "max_tokens"}]) == (
        "[the subagent's answer stopped short: stop reason `max_tokens`]\nThe greeting is in"
    )
    assert answered([{"text": "Looking", "stop_reason": "pause_turn"}, {"text": "Found it."}]) == "Found it."
