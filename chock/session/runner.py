"""The agent loop of one session, on one thread (docs/architecture.md#chock-run).

Everything the session waits for — a model response chunk, a tool process, an approval, a background
command, a subagent — is awaited on one asyncio loop, and the session's sockets are served by that same
loop, so they answer while work goes on and the process never grows a second thread (the tool path forks).
The loop builds none of its collaborators: its provider, tool runner, clock, socket server and host git are
given (chock.session.ports), so tests/test_loop.py builds it in-process.

Every fact goes to the log first: `emit` appends an event, folds it into the live state and renders it.
The conversation a model sees is therefore always the fold of the log, exactly what a later owner rebuilds.
The log is written ahead: it is synced before each effect outside the process that its lines authorise — a
tool starting, a commit to the branch, a reply or an exit that reports a logged fact — and at every turn
boundary (docs/log.md#durability).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from chock.config import Budget, Price
from chock.control.session_protocol import Released
from chock.errors import EXIT_COMPLETED, EXIT_FAILED, EXIT_HANDED_OVER, EXIT_INTERRUPTED, ChockError
from chock.log.events import Event, cut, listed
from chock.log.fold import SessionState
from chock.log.writer import LogWriteFailed, SessionLog
from chock.providers import Provider, ProviderError, Reply, ToolCall
from chock.session import asking, calls, compaction, holding, instructions, mcp_wiring, parking, reaper, stops, tools
from chock.session.approvals import Answer, Approvals
from chock.session.handover import CONFIRMED, READY, Handover
from chock.session.ports import Ports, ToolRunner, no_mcp_servers, wait_set
from chock.session.scopes import CancelledByStop, Nursery, StopScope
from chock.session.steering import Steering
from chock.session.tools.tool import Result, ToolRefused
from chock.session.workspace import Worktree
from chock.value import Value


class HandedOver(Exception):
    """The lock has changed hands; this process must exit 8 and touch nothing more."""


class OverBudget(ChockError):
    """The session has spent past its `.budget`: it ends (`session.end {reason: "budget"}`, exit 1), and a
    `--continue` carries it on once the budget is raised."""

    def __init__(self, session_id: str, budget: Budget, spent: float) -> None:
        super().__init__(
            f"this session has spent {spent:.4f} {budget.currency}, past its budget of {budget} (.budget in "
            f"config.zon); raise the budget, then `chock run --continue {session_id}` carries it on"
        )


class Settings(Value):
    __slots__ = (
        "approval_timeout", "branch", "budget", "context_window", "instance", "interactive", "price", "project",
        "rules", "scratchpad", "session_id", "shell_policy", "subagent_blocks", "subagent_spec", "summarizer",
        "workspace", "worktree"
    )  # fmt: skip

    def __init__(
        self, session_id: str, project: Path, workspace: Path, worktree: Worktree, branch: str, shell_policy: str,
        interactive: bool, scratchpad: Path, subagent_spec: dict[str, Any],
        subagent_blocks: list[list[dict[str, Any]]], price: Price | None = None, context_window: int | None = None,
        summarizer: Provider | None = None, rules: asking.Rules | None = None,
        approval_timeout: float | None = None, budget: Budget | None = None, instance: str = ""
    ) -> None:  # fmt: skip
        self.session_id = session_id
        self.project = project
        self.workspace = workspace
        self.worktree = worktree  # as recorded when it was made: finishing starts from this
        self.branch = branch
        self.shell_policy = shell_policy  # ask | allow | deny
        self.interactive = interactive  # a person at this terminal can answer approval prompts
        self.scratchpad = scratchpad
        self.subagent_spec = subagent_spec  # what a subagent child needs to reach the same instance
        self.subagent_blocks = subagent_blocks  # replay entries per subagent (replay kind only)
        self.price = price  # the instance's, when config.zon gives one: usage events then carry a cost
        self.context_window = context_window  # tokens; None: the conversation is never compacted
        self.summarizer = summarizer  # what writes a compaction's summary, when not the session's provider
        self.rules = asking.Rules() if rules is None else rules  # config.zon's rules and where the project's live
        # `.approvals.timeout` in seconds; None: a question waits for its answer
        self.approval_timeout = approval_timeout
        self.budget = budget  # what the whole session may spend, in its price's currency; None: no bound
        self.instance = instance  # the instance's name, as its errors name it ("" for none)


class Session:
    """One session's loop, given its ports (chock.session.ports): it builds none of its collaborators."""

    def __init__(
        self, log: SessionLog, state: SessionState, settings: Settings, ports: Ports,
        render: Callable[[Event], None]
    ) -> None:  # fmt: skip
        self.log = log
        self.state = state
        self.provider: Provider = ports.provider
        self.settings = settings
        self.ports = ports
        self._render = render
        self._wake = asyncio.Event()  # background work ended, or the handover changed
        self._work = Nursery(on_done=self._wake.set)  # background commands and subagents by handle
        self._stop_scope = StopScope()  # a stop cancels the turns and the commit, never the rest of the end
        self._answered = asyncio.Event()  # an approval request was answered
        self.approvals = Approvals(on_answer=lambda request_id: self._answered.set(), check_rule=_check_pattern)
        self.handover = Handover(clock=ports.clock.now)
        self.steering = Steering(on_say=self._wake.set, on_stop=self._stop_scope.stop)
        self.sockets = ports.serve(self.approvals, self.handover, self.steering, self._wake.set)
        # A renderer that shows an MCP call's progress (the terminal view) has `tool_progress`; it is never logged.
        shown = getattr(render, "tool_progress", None)
        self.mcp = mcp_wiring.McpTable(ports.mcp(self.emit, self._elicit), shown or _not_shown)
        self._calling: ToolCall | None = None  # the loop's call in flight: an elicitation asks about it

    # The log ------------------------------------------------------------------------------------------

    def emit(self, type: str, **fields: Any) -> Event:
        event = self.log.append(type, **fields)
        self.state.apply(event)
        self._render(event)
        return event

    # Running ------------------------------------------------------------------------------------------

    async def run(self, *, call_model_first: bool, unparked: parking.Unparked | None = None) -> int:
        """Run turns until the task is done; log how it ended and return the exit code.

        A stop (over handover.sock, or a signal) cancels the loop wherever it waits — a model stream, a tool, an
        approval, the commit — until the log says where the work went; from there on, and once any other end has
        begun, nothing cancels the end being logged. Leaving the work's nursery kills the background commands and
        subagents and waits until they are gone (each kills its process, a command its whole sandbox).

        A session rebuilt after parking (`unparked`) takes in first what came while it was parked, then carries
        its turn on from the call that waited (docs/architecture.md#parking)."""
        if unparked is not None:
            for item in unparked.pending:
                self.approvals.open(item["request_id"], item["tool"], item["summary"])
            for text in unparked.said:
                self.steering.say(text)
            if unparked.stop:
                self.steering.stop(unparked.stop)
        await self.sockets.start()
        git, worktree = self.ports.git, self.settings.worktree
        try:
            async with self._work:
                async with self._stop_scope:
                    try:
                        await self._turns(call_model_first, unparked)
                    finally:  # however the turns end (a stop cancels the call in flight: notifications/cancelled)
                        await self.mcp.stop()
                    self.steering.close()  # the session completes: nothing said from here on could be taken in
                    self.log.sync()  # the turns' lines, before the commit they lead to
                    # Finishing walks and hashes what the agent left, however much: off the loop (a stop stops it).
                    done = await git.commit(worktree, _commit_message(self.state))
                    # No branch when the work equals the base ("no changes"); else the branch, with its whole diff.
                    self.emit(
                        "workspace.close",
                        branch=done.branch,
                        commit=done.commit if done.branch else None,
                        **listed("skipped", done.skipped),
                        **done.whole,
                    )
                    self.log.sync()  # before the worktree goes (docs/log.md#durability)
                # The log says the work is on the branch: the worktree goes, whatever is asked now.
                await git.remove(worktree)
            self.emit("session.end", reason="completed", exit_code=EXIT_COMPLETED)
            return EXIT_COMPLETED
        except HandedOver:
            await self.sockets.tell_asker(Released())
            return EXIT_HANDED_OVER
        except LogWriteFailed as failed:
            # The end still fits in the log's reserve; if even it cannot be written, the next owner repairs the
            # log. Either way the failure is said once, as its own sentence, by whoever runs this session.
            with contextlib.suppress(LogWriteFailed):
                self._end_abnormally("error", EXIT_FAILED, error=str(failed))
            raise
        except OverBudget as over:
            self._end_abnormally("budget", EXIT_FAILED, error=str(over))
            return EXIT_FAILED
        except CancelledByStop:
            self._end_abnormally("interrupted", EXIT_INTERRUPTED, via=self.steering.stop_via or "signal")
            return EXIT_INTERRUPTED
        except ChockError as error:
            self._end_abnormally("error", error.exit_code or EXIT_FAILED, error=str(error))
            return error.exit_code or EXIT_FAILED
        finally:
            reaper.kill_orphaned_sandboxes()  # any sandbox the session adopted
            with contextlib.suppress(LogWriteFailed):  # `ended <reason>` reports the end: it is synced first
                self.log.sync()
            await self.sockets.close(ended=self.state.end_reason or "ended")
            self.log.release()

    def _end_abnormally(self, reason: str, code: int, **fields: str) -> None:
        """End the session another way than completed, once its work is gone: that work is logged as killed,
        what was said to it is logged so the next owner sends it, then `session.end`. After a failed log write
        only the end fits in the log's reserve, so nothing else is tried (what was said since the last turn is
        lost)."""
        reaper.kill_orphaned_sandboxes()
        if self.log.failed is None:
            self._log_killed_work()
            self._take_in_messages()
        self.steering.close()
        self.emit("session.end", reason=reason, exit_code=code, **fields)

    def _log_killed_work(self) -> None:
        """An end for each background command and subagent that had none."""
        why = "the session was stopped before it finished"
        for handle, work in list(self.state.background.items()):
            self.emit("background.end", handle=handle, kind="shell", command=work["command"], exit_code=None,
                      output=f"killed: {why}")  # fmt: skip
        for handle in list(self.state.subagents):
            self.emit("subagent.end", handle=handle, result=f"killed: {why}")

    def _take_in_messages(self) -> bool:
        """Log each message said to the session since the last turn boundary (once, in order); True if any."""
        messages = self.steering.take()
        for text in messages:
            self.emit("user.message", text=text, via="socket")
        return bool(messages)

    async def _turns(self, call_model_first: bool, unparked: parking.Unparked | None = None) -> None:
        await self.mcp.start()  # in parallel, each bounded; the sockets answer meanwhile
        call_model = call_model_first
        if unparked is not None:  # the rest of the turn it parked in: the waiting call, then the reply's others
            waiting = unparked.pending[0]
            for open_call in self.state.open_tool_calls:
                parked = waiting["request_id"] if open_call["call_id"] == waiting["call_id"] else None
                await self._tool(ToolCall(open_call["call_id"], open_call["name"], open_call["args"]), parked=parked)
            self.emit("turn.end")
            call_model = True
        while True:
            await self.turn_boundary()
            if self._take_in_messages():
                call_model = True
            if call_model:
                reply = await self._model_call()
                for call in reply.tool_calls:
                    await self._tool(call)
                self.emit("turn.end")
                if reply.tool_calls:
                    continue
            call_model = False
            if self.steering.queued:
                continue  # said while the model answered: a new turn, never a completion
            if not self._work:
                return
            # The model is done but background work is not: wait for it (or for a message), then let the model
            # read the notes. Waiting here is a turn boundary too, so a handover ask is answered (`busy`).
            while self._work and not self.steering.queued:
                self._wake.clear()
                await self.turn_boundary()
                if self._work and not self.steering.queued:
                    await self._wake.wait()
            call_model = True

    async def turn_boundary(self) -> None:
        """Between turns: the only place a handover ask is answered (docs/architecture.md#detach). A session past
        its budget (a subagent's calls, or a continue before the budget was raised) ends here."""
        self.log.sync()
        self._check_budget()
        for server, names in self.mcp.take_changes():  # a server's new list holds from here on
            self.emit("mcp.tools", server=server, names=names)
        handover = self.handover
        if not handover.open:
            return
        said = handover.at_boundary(len(self.state.background), len(self.state.subagents))
        if said is not None:
            await self.sockets.tell_asker(said)
        if handover.state != READY:
            return
        asker = handover.asker
        while not handover.settle():
            self._wake.clear()
            await wait_set(self._wake, handover.seconds_left(), self.ports.clock)
        if handover.state != CONFIRMED:
            # Dropped: the asker went away or never confirmed. Nothing about the session changes.
            self.sockets.dismiss_asker(asker)
            return
        self._take_in_messages()  # the next owner sends them
        self.steering.close()
        await self.mcp.stop()  # the next owner starts its own (their in-memory state does not move)
        self.emit("session.end", reason="handover", exit_code=EXIT_HANDED_OVER)
        self.log.release()
        handover.released()
        raise HandedOver  # the asker is told outside the stop scope: the lock has changed hands, a stop does nothing

    # The model ----------------------------------------------------------------------------------------

    async def _model_call(self) -> Reply:
        """The model's answer for this turn, logged. One the provider refused, or cut at a limit with no tool call
        to run, ends the session (`AnswerStopped`); a paused turn is sent again, the paused message already in
        the conversation, up to MOST_PAUSES times in a row (docs/log.md#stop-reasons)."""
        pauses = 0
        while True:
            reply = await self._one_call()
            if not stops.paused(reply, pauses, self.settings.instance, self.settings.session_id):
                return reply
            pauses += 1

    async def _one_call(self) -> Reply:
        tool_specs, system = self._tool_specs(), self._system_prompt()
        settings = self.settings
        summarizer = settings.summarizer or self.provider
        window = compaction.session_window(settings.context_window, self.state)
        request = compaction.CallSetup(summarizer, tool_specs, system, window, settings.price)
        await compaction.compact_if_needed(self.state, request, self.emit)
        self._check_budget()
        try:
            reply = await calls.call(
                self.provider, self.state.conversation, tool_specs, system, self.emit, price=settings.price
            )
        except ProviderError as error:
            if not error.too_long:
                raise
            # The estimate fell short (or the window is not known): the provider's refusal says so instead, and
            # the window it teaches is logged with the compaction. A second refusal ends the session.
            await compaction.compact_if_needed(self.state, request, self.emit, refused=error)
            self._check_budget()
            reply = await calls.call(
                self.provider, self.state.conversation, tool_specs, system, self.emit, price=settings.price
            )
        stopped = {"stop_reason": reply.stop_reason} if reply.stop_reason else {}
        self.emit(
            "assistant.message", text=reply.text, tool_calls=[call.as_dict() for call in reply.tool_calls], **stopped
        )
        calls.record_usage(self.emit, reply.usage, settings.price)
        self._check_budget()
        return reply

    def _check_budget(self) -> None:
        """After each call: the session's whole spend (every span's priced `usage` events, compactions and
        subagents included, folded from the log) past its budget ends it."""
        budget, spent = self.settings.budget, self.state.cost or 0.0
        if budget is not None and spent > budget.amount:
            raise OverBudget(self.settings.session_id, budget, spent)

    def record_usage(self, usage: dict[str, int], purpose: str) -> None:
        """Log a call made for the session elsewhere (a subagent's), priced as the session's own calls are."""
        calls.record_usage(self.emit, usage, self.settings.price, purpose)

    def _system_prompt(self) -> str:
        return instructions.system_prompt(tools.SYSTEM_PROMPT, self.state.instructions)

    def _tool_specs(self) -> list[dict[str, Any]]:
        """The built-in tools, then the MCP servers' in their stable order (the prompt cache holds)."""
        return tools.specs(self.mcp.table)

    # Tools: the loop dispatches through chock.session.tools, and the session is their Context -------------

    async def _tool(self, call: ToolCall, *, parked: str | None = None) -> None:
        """Run one call of the model's reply; `parked`: the request it waited on when its session parked (its
        `tool.call` and `approval.request` are logged already)."""
        served = self.mcp.served(call.name)  # {server, tool} for an MCP tool's call
        if parked is None:
            self.emit("tool.call", call_id=call.call_id, name=call.name, args=call.args, **served)
        self._calling = call
        try:
            result = await tools.dispatch(
                self.mcp.table,
                self,
                call.name,
                call.args,
                approve=lambda asks: self._approve(call, asks, parked),
                ready=self.log.sync,
            )
        finally:
            self._calling = None
        output, cut_fields = cut(result.output)
        diff = {"diff": result.diff} if result.diff else {}  # bounded by the tool (chock.session.tools.diff)
        self.emit(
            "tool.result",
            call_id=call.call_id,
            name=call.name,
            output=output,
            is_error=result.is_error,
            **cut_fields,
            **diff,
            **({"server": served["server"]} if served else {}),
        )

    @property
    def workspace(self) -> Path:
        return self.settings.workspace

    @property
    def runner(self) -> ToolRunner:
        return self.ports.tools

    @property
    def scratchpad(self) -> Path:
        return self.settings.scratchpad

    def handle(self, prefix: str) -> str:
        return f"{prefix}-{self.log.last_id + 1}"

    def track(self, handle: str, work: Coroutine[Any, Any, None]) -> None:
        self._work.start(handle, work)

    def subagent_spec(self) -> dict[str, Any]:
        spec = dict(self.settings.subagent_spec)
        if spec.get("kind") == "replay":  # the replay's subagent blocks are dealt out in the order subagents start
            ordinal = self.state.subagent_results + len(self.state.subagents)
            blocks = self.settings.subagent_blocks
            spec["entries"] = blocks[ordinal] if ordinal < len(blocks) else []
        # The tool rules in force as it starts: a subagent decides its own calls by them (it asks nobody).
        in_force = self.settings.rules.in_force(self.state).rules
        spec["rules"] = [[r.verdict, r.pattern, r.origin, r.id] for r in in_force if r.pattern.startswith("tool:")]
        spec["mcp_tools"] = self.mcp.specs()  # its calls of them come back to relay()
        return spec

    async def relay(self, name: str, args: dict[str, Any]) -> Result:
        """A subagent's call of an MCP tool, decided by the rules in force now as `mcp:<server>/<tool>` (default
        ask, which --yes answers yes): nobody is asked, so only a call a rule or --yes allows runs. Nothing is
        logged, as a subagent's other calls are not (its result is)."""
        served = self.mcp.served(name)
        if not served:
            return Result(f"there is no MCP tool named {name!r} in this session", is_error=True)
        key = asking.mcp_rule_name(served["server"], served["tool"])
        decision = asking.decide(self.settings.rules, self.state, key, args, "ask")
        verdict = "allow" if decision.verdict == "ask" and self.state.approve_all else decision.verdict
        if verdict == "deny":
            return Result(f"this call did not run: {decision.reason}", is_error=True)
        if verdict == "ask":
            return Result(
                f"this call needs a person's approval ({decision.reason}), and a subagent cannot ask one"
                f"{asking.allow_hint(key)}",
                is_error=True,
            )

        async def decided(asks: bool) -> None:
            return None

        return await tools.dispatch(self.mcp.table, self, name, args, approve=decided, ready=self.log.sync)

    # Approvals ----------------------------------------------------------------------------------------

    async def _approve(self, call: ToolCall, asks: bool, parked: str | None = None) -> None:
        """Decide the call by the rules in force (chock.session.asking); a call no rule matches of a tool that does
        not ask runs with nothing logged. An MCP tool's call is decided as `mcp:<server>/<tool>`, and asks when no
        rule decides it (a server's readOnlyHint changes nothing). Returns when it may run; raises ToolRefused,
        naming why, when not. A call whose session parked as it waited (`parked`, its request) is not decided
        again: its question was asked, and it waits for that answer."""
        settings, state = self.settings, self.state
        served = self.mcp.served(call.name)
        key = asking.mcp_rule_name(served["server"], served["tool"]) if served else call.name
        if parked is not None:
            taken = await self._ask(parked, call.name, "", call.call_id, {}, logged=True)
            asking.refuse_unless_yes(taken, key, settings.approval_timeout)
            return
        default = "ask" if served else settings.shell_policy if asks else "allow"  # --yes answers an ask, never a deny
        decision = asking.decide(settings.rules, state, key, call.args, default)
        if not decision.rules and not asks:
            return
        request_id = f"r{self.log.last_id + 1}"
        summary = self.mcp.summary(call.name, call.args)
        verdict, ruled = decision.verdict, decision.rules[0] if decision.rules else None
        if verdict == "ask" and state.approve_all:  # --yes answers yes where a person would be asked
            verdict, ruled = "allow", None
        if verdict != "ask":  # decided by a rule, by .approvals.shell or by --yes: the log still says who decided
            named = {"rule": ruled.pattern} if ruled is not None else {}
            self.emit("approval.request", request_id=request_id, tool=call.name, summary=summary,
                      call_id=call.call_id, by_config=True, **named)  # fmt: skip
            answer = "yes" if verdict == "allow" else "no"
            if ruled is not None:
                scope = RULE_SCOPES.get(ruled.id[:1], "config")
                self.emit("approval.answer", request_id=request_id, answer=answer, via="rule", scope=scope, **named)
            else:
                self.emit("approval.answer", request_id=request_id, answer=answer, via="config")
            if verdict == "deny" and ruled is not None:
                raise ToolRefused(f"this call did not run: {decision.reason}. Do without it, or ask the person")
            if verdict == "deny":
                raise ToolRefused('shell commands are denied by this person\'s config (.approvals.shell = "deny")')
            return
        taken = await self._ask(request_id, call.name, summary, call.call_id, asking.proposal(key, call.args))
        asking.refuse_unless_yes(taken, key, settings.approval_timeout)

    async def _ask(
        self, request_id: str, tool: str, summary: str, call_id: str, proposal: dict[str, Any], *,
        timeout: float | None = None, logged: bool = False,
    ) -> Answer:  # fmt: skip
        """Wait for a person's answer (or the deadline of `.approvals.timeout`, or `timeout` when shorter), log it,
        and save the rule an "always" answer gives; the answer taken. `logged`: the request is open and logged
        already (a rebuilt session's, which asks nothing at a terminal). With nothing else in flight and nobody
        to ask in process, the session parks after PARK_SECONDS (chock.session.parking)."""
        if not logged:
            self.approvals.open(request_id, tool, summary)
            self.emit("approval.request", request_id=request_id, tool=tool, summary=summary, call_id=call_id,
                      **proposal)  # fmt: skip
        prompt = None
        if self.settings.interactive:
            question = asking.question(tool, summary, proposal.get("propose", ""), proposal.get("propose_why", ""))
            prompt = asyncio.ensure_future(asking.terminal_answer(question, proposal.get("propose", "")))

            def answered_at_terminal(task: asyncio.Task[asking.TerminalAnswer | None]) -> None:
                given = None if task.cancelled() else task.result()
                if given is not None:
                    self.approvals.answer(request_id, given.answer, "terminal", scope=given.scope, rule=given.rule,
                                          note=given.note)  # fmt: skip

            prompt.add_done_callback(answered_at_terminal)
        holding.shed()  # a person may take hours: hold as little as the wait needs
        configured, clock = self.settings.approval_timeout, self.ports.clock
        timeout = configured if timeout is None else min(timeout, configured or timeout)
        began = clock.now()
        try:
            while not self.approvals.answered(request_id):
                self._answered.clear()
                if timeout is None and self._may_park():
                    await wait_set(self._answered, parking.PARK_SECONDS, clock)
                    if not self.approvals.answered(request_id) and self._may_park():
                        await self._park(request_id, call_id)  # returns only if it did not park
                elif timeout is None:
                    await self._answered.wait()
                elif clock.now() - began >= timeout:
                    self.approvals.answer(request_id, "no", "timeout")
                else:
                    await wait_set(self._answered, timeout - (clock.now() - began), clock)
            taken = self.approvals.take(request_id)
        finally:
            self.approvals.withdraw(request_id)
            if prompt is not None:
                prompt.cancel()
        saves = {"scope": taken.scope, "rule": taken.rule} if taken.scope != "once" else {}
        noted = {"note": taken.note} if taken.note else {}
        answered = self.emit("approval.answer", request_id=request_id, answer=taken.answer, via=taken.via, **saves,
                             **noted)  # fmt: skip
        self.log.sync()  # before `ok answered` (and the command it authorises, and the rule it saves)
        if taken.scope == "project":
            self._save_project_rule(taken.rule, request_id, str(answered.get("at", "")))
        self.sockets.answer_logged(request_id)
        return taken

    def _may_park(self) -> bool:
        """Whether nothing but the one waiting request is in flight, and nobody could be asked in this process: no
        terminal, no `.approvals.timeout` to keep, no background work or subagent, no MCP server, no handover ask,
        no client connected, nothing said and not stopped (docs/architecture.md#parking). In doubt, it is not."""
        settings, state, steering = self.settings, self.state, self.steering
        return (
            self.ports.parks and parking.allowed() and not settings.interactive
            and settings.approval_timeout is None and not self._work and not state.background
            and not state.subagents and self.ports.mcp is no_mcp_servers and not self.handover.open
            and self.sockets.idle() and not steering.queued and steering.stop_via is None
            and self.log.failed is None and len(self.approvals.pending()) == 1
        )  # fmt: skip

    async def _park(self, request_id: str, call_id: str) -> None:
        """Sync the log, then exec the waiter for the one request open; returns if the exec failed, or if a stop
        or anything else came meanwhile. SIGTERM and SIGINT are blocked from here: one that came before was only
        noted by the loop, and would be lost across the exec were the loop not let to take it in first."""
        signal.pthread_sigmask(signal.SIG_BLOCK, parking.parked.STOPPING)
        try:
            for _ in range(3):  # a signal's wakeup is read in one pass of the loop, and handled in the next
                await asyncio.sleep(0)
            if self.approvals.answered(request_id) or not self._may_park():
                return
            self.log.sync()
            waiting = self.approvals.pending()[0]
            pending = {"request_id": waiting.request_id, "tool": waiting.tool, "summary": waiting.summary,
                       "call_id": call_id}  # fmt: skip
            as_json = bool(getattr(self._render, "as_json", False))
            with contextlib.suppress(OSError):
                parking.park(self.settings.session_id, self.log.fileno(), self.sockets.listening(), [pending],
                             as_json)  # fmt: skip
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, parking.parked.STOPPING)

    async def _elicit(self, server: str, message: str, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        """A server's elicitation, asked of the person as an approval question naming the server and showing its
        message: a yes accepts with the schema's defaults, a no declines. Declined at once when nobody can be
        asked: no call of this session's own loop is in flight (a subagent's relayed call asks nobody)."""
        call = self._calling
        if call is None or not self.mcp.served(call.name):
            return "decline", None
        request_id = f"r{self.log.last_id + 1}"
        summary = mcp_wiring.elicitation_summary(server, message, schema)
        try:
            taken = await self._ask(
                request_id, call.name, summary, call.call_id, {}, timeout=mcp_wiring.ELICITATION_SECONDS
            )
        except asyncio.CancelledError:  # the server withdrew it, or its call or the session ended: closed in the log
            if not self.state.ended and self.log.failed is None:
                self.emit("approval.answer", request_id=request_id, answer="no", via="withdrawn")
            raise
        if taken.answer != "yes":
            return "decline", None
        return "accept", mcp_wiring.defaults(schema)

    def _save_project_rule(self, pattern: str, request_id: str, at: str) -> None:
        """Save an "always in this project" rule in the project's file on this host; a failure is said at the
        terminal (the answer stands, once)."""
        from chock.session.rule_sources import save_project_rule

        rules = self.settings.rules
        if rules.layout is None:
            return
        origin = f"session {self.settings.session_id}, answer {request_id}, {at[:16].replace('T', ' ')} UTC"
        try:
            save_project_rule(rules.layout, rules.project, pattern, origin)
        except (ChockError, OSError, ValueError) as error:
            from chock.terminal import shown

            said = f"the rule `{pattern}` was not saved for the project: {error}"  # the pattern is the agent's words
            sys.stderr.write(shown(said, sys.stderr, one_line=True) + "\n")


def _not_shown(name: str, progress: float, total: float | None, message: str) -> None:
    return None


# Where a rule that decided a call lives, by its id's first letter (docs/log.md: approval.answer's `scope`).
RULE_SCOPES = {"c": "config", "p": "project", "s": "session"}


def _commit_message(state: SessionState) -> str:
    first = (state.message.strip().splitlines() or ["(no message)"])[0][:72]
    return f"chock: {first}\n\nSession {state.id}."


def _check_pattern(rule: str) -> str:
    """chock.rules.rule.check_pattern, imported at the first answer that saves a rule, not at a session's start."""
    from chock.rules.rule import check_pattern

    return check_pattern(rule)
