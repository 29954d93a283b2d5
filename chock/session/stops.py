"""Why the model stopped, and what a session does about it (docs/log.md#stop-reasons): an answer the provider
refused, or one a limit cut with no tool call to run, is no answer, and ends the session with an error that
says which, in the provider's own word, and what to do next; a turn the model paused is sent again."""

from __future__ import annotations

from chock.errors import ChockError
from chock.log.events import CUT_STOPS, PAUSED_STOP, REFUSED_STOPS
from chock.providers import Reply

# How many times in a row a paused turn (`pause_turn`) is sent again before the session ends with an error: a model
# that keeps pausing is making no way (docs/log.md#stop-reasons).
MOST_PAUSES = 5


class AnswerStopped(ChockError):
    """The model's answer stopped short of being one (docs/log.md#stop-reasons): the provider refused it, a limit
    cut it, or the model paused its turn more than MOST_PAUSES times in a row. The session ends with reason
    `error`, its work kept, and says which, in the provider's word, and what to do next."""

    def __init__(self, instance: str, session_id: str, stop_reason: str, *, pauses: int = 0) -> None:
        who = f"instance '{instance}': " if instance else ""
        word = f"(stop reason `{stop_reason}`)"
        go_on = f'`chock run --continue {session_id} "go on"` asks the model to go on from there'
        if stop_reason in REFUSED_STOPS:
            what = REFUSALS.get(stop_reason, "the answer was refused")
            text = (
                f"{who}{what} {word}, and the refused answer is left out of the conversation; rephrase the request "
                f'or tell the model more: `chock run --continue {session_id} "…"`'
            )
        elif pauses:
            text = f"{who}the model paused its turn {pauses} times in a row {word}; {go_on}"
        else:
            text = f"{who}the answer was cut at {CUT_STOPS.get(stop_reason, 'a limit')} {word}; {go_on}"
        super().__init__(text)


# A refusal in words, by the stop reason that says it.
REFUSALS = {
    "refusal": "the model refused to answer",
    "content_filter": "the provider's content filter withheld the answer",
}


def paused(reply: Reply, pauses: int, instance: str, session_id: str) -> bool:
    """Whether the turn's call is sent again: the model paused it (its `pauses`-th pause in a row so far), and had
    paused it no more than MOST_PAUSES times. An answer that is none raises AnswerStopped."""
    stop_reason = reply.stop_reason or ""
    if stop_reason in REFUSED_STOPS or (stop_reason in CUT_STOPS and not reply.tool_calls):
        raise AnswerStopped(instance, session_id, stop_reason)
    if stop_reason != PAUSED_STOP or reply.tool_calls:
        return False
    if pauses + 1 > MOST_PAUSES:
        raise AnswerStopped(instance, session_id, stop_reason, pauses=pauses + 1)
    return True
