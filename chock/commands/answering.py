"""An approval's answer at a terminal, as `chock approve` and `chock attach` take it (docs/architecture.md#approvals).

One line answers one request: `y` (yes, once), `n [MESSAGE]` (no, the message given to the model as the tool's
result, at most 4 KiB), `s [RULE]` (yes, and always in this session) or `p [RULE]` (yes, and always in this
project). The rule is the proposal the request's event carries (`propose`, never recomputed here) unless the
line gives another: that is how a person edits it. A plain yes or no travels in `answer`, which every host knows;
the rest in `answer-with`, and a host whose Chock is older refuses that verb: the person is then told so and
offered yes or no only.

What is shown comes from a log, the host's: untrusted, so every field goes through the safe printer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chock.terminal import as_lines, colour, safe, shown

# The most a "no" message carries, in UTF-8 bytes (the session and the daemon refuse more).
NOTE_MOST = 4096
# The most requests a log may claim to wait on at once: a session waits on a few; a log claiming more is cut.
MOST_PENDING = 256

SCOPE_OF = {"y": "once", "yes": "once", "s": "session", "p": "project"}


@dataclass(frozen=True)
class Choice:
    """What the person answered: yes or no; `once`, `session` or `project`; the rule saved; the no's message."""

    yes: bool
    scope: str = "once"
    rule: str = ""
    note: str = ""

    @property
    def plain(self) -> bool:
        """Whether `answer` carries it (every host knows that verb), rather than `answer-with`."""
        return self.scope == "once" and not self.note

    def said(self) -> str:
        """The answer in words, for the line that confirms it."""
        if self.scope != "once":
            return f"approved, and always in this {self.scope}: `{self.rule}`"
        return "approved" if self.yes else ("denied, with your message" if self.note else "denied")


def fold_pending(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The requests still waiting for a person, by id, oldest first: each one's `approval.request` event (at most
    MOST_PENDING + 1, so a log claiming more is seen to). A request a rule decided (`by_config`) waits for nobody;
    a new owner's start or the session's end ends every one."""
    pending: dict[str, dict[str, Any]] = {}
    for event in events:
        kind = event.get("type")
        if kind == "approval.request" and not event.get("by_config"):
            if len(pending) <= MOST_PENDING:
                pending[str(event.get("request_id", ""))] = event
        elif kind == "approval.answer":
            pending.pop(str(event.get("request_id", "")), None)
        elif kind in ("session.start", "session.adopt", "session.end"):
            pending.clear()
    return pending


def proposal(request: dict[str, Any]) -> str:
    """What "always" proposes for the request: its event's `propose`, else (an older session's event) the tool."""
    proposed = request.get("propose")
    if isinstance(proposed, str) and proposed.strip():
        return proposed
    tool = str(request.get("tool") or "")
    return f"tool:{tool}" if tool and tool != "shell" else ""


def question(request: dict[str, Any], *, more: bool) -> str:
    """The line that asks: the choices, with the proposal "always" would save (and why it is the whole command)."""
    if not more:
        return "Approve? y or n: "
    proposed = safe(proposal(request), styled=False, one_line=True)
    if not proposed:
        return "Approve? y, n [message], s RULE (always in this session), p RULE (always in this project): "
    why = str(request.get("propose_why") or "") if request.get("propose_whole") else ""
    why = safe(why, styled=False, one_line=True)
    note = f" ({why})" if why else ""
    return (
        f"Approve? y, n [message], s [rule] (always in this session), p [rule] (always in this project); "
        f"the rule proposed is `{proposed}`{note}: "
    )


def parse(line: str, request: dict[str, Any], *, more: bool) -> Choice | str:
    """The person's line as a Choice, or why it is none (a sentence that says what to type)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # bytes of standard input that were not UTF-8 (read as lone surrogates)
        return "that answer is not UTF-8 text; nothing was answered: type it again as text"
    word, _, rest = line.strip().partition(" ")
    word, rest = word.lower(), rest.strip()
    if word in ("n", "no"):
        if rest and not more:
            return "this host takes a plain no only: type n"
        size = len(rest.encode("utf-8"))
        if size > NOTE_MOST:
            return f"that message is {size:,} bytes; a no carries at most {NOTE_MOST:,}: say it shorter"
        return Choice(False, note=rest)
    if word not in SCOPE_OF or (word in ("y", "yes") and rest):
        return "type y, n, n MESSAGE, s, s RULE, p or p RULE" if more else "type y or n"
    scope = SCOPE_OF[word]
    if scope == "once":
        return Choice(True)
    if not more:
        return "this host takes yes or no only: type y or n"
    rule = rest or proposal(request)
    if not rule:
        return f"no rule is proposed for this request: give one, as `{word} RULE`"
    return Choice(True, scope=scope, rule=rule)


def shown_request(request: dict[str, Any]) -> str:
    """The request as the terminal shows it: its id and tool on a line, the command exactly as it will run, one
    line per line (docs/architecture.md#what-reaches-a-terminal)."""
    head = shown(f"{request.get('request_id', '')}  {request.get('tool', '')}:", one_line=True)
    return head + as_lines(str(request.get("summary", "")), styled=colour()).rstrip("\n")


def older_why(where: str) -> str:
    """Why only yes or no is offered: the host's (or the session's) Chock predates answers that carry more."""
    return (
        f'the Chock {where} is older and takes a plain yes or no only (no message, no "always"); '
        "update it there to get them"
    )
