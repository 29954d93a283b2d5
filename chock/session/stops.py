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


def stopped_short(reply: Reply) -> bool:
    """Whether the answer is none: the provider refused it, or a limit cut it with no tool call to run."""
    stop_reason = reply.stop_reason or ""
    return stop_reason in REFUSED_STOPS or (stop_reason in CUT_STOPS and not reply.tool_calls)


def is_paused(reply: Reply) -> bool:
    """Whether the model paused its turn: the answer goes on when the conversation is sent again."""
    return reply.stop_reason == PAUSED_STOP and not reply.tool_calls


def paused(reply: Reply, pauses: int, instance: str, session_id: str) -> bool:
    """Whether the turn's call is sent again: the model paused it (its `pauses`-th pause in a row so far), and had
    paused it no more than MOST_PAUSES times. An answer that is none raises AnswerStopped."""
    if stopped_short(reply):
        raise AnswerStopped(instance, session_id, reply.stop_reason or "")
    if not is_paused(reply):
        return False
    if pauses + 1 > MOST_PAUSES:
        raise AnswerStopped(instance, session_id, PAUSED_STOP, pauses=pauses + 1)
    return True


def subagent_result(reply: Reply) -> str:
    """What a subagent whose answer stopped short (`stopped_short`) returns to its session's model: the stop
    reason in the provider's word, and the text a limit cut (a refused answer's text is not to be used again)."""
    stop_reason = reply.stop_reason or ""
    said = f"[the subagent's answer stopped short: stop reason `{stop_reason}`]"
    return said if stop_reason in REFUSED_STOPS or not reply.text else f"{said}\n{reply.text}"
