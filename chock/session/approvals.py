"""The approval requests a session is waiting on: the first answer wins (docs/architecture.md#approvals).

An answer may come from the terminal's prompt, from `chock approve` or the daemon's `answer` over approval.sock,
or from a policy in config: whichever comes first is the answer, and every later one for the same request is
refused (`not-pending`), so an approval can never be given twice or taken back. No I/O and no event loop:
the session loop opens a request, waits until `answered` says so, and logs what `take` returns.
"""

from __future__ import annotations

from collections.abc import Callable


class Pending:
    """One request waiting for an answer, as `pending` lists it."""

    __slots__ = ("request_id", "summary", "tool")

    def __init__(self, request_id: str, tool: str, summary: str) -> None:
        self.request_id = request_id
        self.tool = tool
        self.summary = summary


class Answer:
    """The first answer to a request: `answer` yes or no, `via` who gave it, `scope` how long it holds (`once`,
    `session`, `project`), `rule` the rule it saves (normalised), `note` what a no tells the model."""

    __slots__ = ("answer", "note", "rule", "scope", "via")

    def __init__(self, answer: str, via: str, scope: str = "once", rule: str = "", note: str = "") -> None:
        self.answer = answer
        self.via = via
        self.scope = scope
        self.rule = rule
        self.note = note


def _same(rule: str) -> str:
    return rule


class Approvals:
    """Open requests by id, each answered at most once; `on_answer(request_id)` is called when one is.
    `check_rule` normalises the rule an answer saves, or raises ValueError saying what is wrong with it."""

    def __init__(
        self, on_answer: Callable[[str], None] = lambda request_id: None, check_rule: Callable[[str], str] = _same
    ) -> None:
        self._open: dict[str, Pending] = {}
        self._answers: dict[str, Answer] = {}
        self._on_answer = on_answer
        self._check_rule = check_rule

    def open(self, request_id: str, tool: str, summary: str) -> None:
        if request_id in self._open or request_id in self._answers:
            raise ValueError(f"approval request {request_id} was opened already")
        self._open[request_id] = Pending(request_id, tool, summary)

    def answer(
        self, request_id: str, answer: str, via: str, *, scope: str = "once", rule: str = "", note: str = ""
    ) -> bool:
        """Record `answer` ("yes" or "no") from `via`; False when the id is not waiting (or was answered). An
        answer past `once` saves `rule`, which must pass `check_rule` (its ValueError is raised, nothing taken)."""
        if request_id not in self._open or request_id in self._answers:
            return False
        if scope != "once":
            rule = self._check_rule(rule)
        self._answers[request_id] = Answer(answer, via, scope, rule, note)
        self._on_answer(request_id)
        return True

    def answered(self, request_id: str) -> bool:
        return request_id in self._answers

    def take(self, request_id: str) -> Answer:
        """The answer, closing the request; only once `answered(request_id)`."""
        self._open.pop(request_id, None)
        return self._answers.pop(request_id)

    def withdraw(self, request_id: str) -> None:
        """Close a request without an answer (the session is stopping): later answers are refused."""
        self._open.pop(request_id, None)
        self._answers.pop(request_id, None)

    def pending(self) -> list[Pending]:
        """Requests still waiting, oldest first."""
        return [item for request_id, item in self._open.items() if request_id not in self._answers]
