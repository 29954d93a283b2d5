"""How a session decides a tool call, and asks a person at its terminal (docs/approvals.md).

Every call is decided by the rules in force — config.zon's, the project's (read again at every call, so a rule
saved or removed by any session of the project holds at once) and the session's own (folded from its log) —
through `chock.rules.rule.RuleSet`. A call no rule matches gets the default: `.approvals.shell` for a shell
command, `allow` for a built-in tool that does not ask. `--yes` turns an ask into a yes
and never a deny. Rules decide whether a call runs; they never change the sandbox it runs in.

The terminal prompt offers yes once, no (with a message for the model after `n `), always in this session and
always in this project, showing the proposal the `approval.request` event carries; the person may edit the rule
before it is saved.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from chock.log.fold import SessionState
from chock.session.approvals import Answer
from chock.session.tools.tool import ToolRefused
from chock.terminal import as_lines, colour, drop_typed_ahead, safe
from chock.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from chock.paths import Layout
    from chock.rules.rule import Decision, Rule, RuleSet

# chock.rules (the shell reader and the rules) and the daemon's protocol are imported at a session's first
# decision, not at its start (docs/architecture.md#start-up).


class Rules:
    """What a session decides its calls by, apart from its log: config.zon's rules, and where the project's live
    (None: a session with no project rules, as a test builds one)."""

    __slots__ = ("_last", "config", "layout", "project")

    def __init__(self, config: tuple[Rule, ...] = (), layout: Layout | None = None, project: str = "") -> None:
        self.config = config
        self.layout = layout
        self.project = project
        # The last RuleSet built, by what it was built from: the project file's identity and the session's rules.
        self._last: dict[object, RuleSet] = {}

    def in_force(self, state: SessionState) -> RuleSet:
        """Config's, the project's as its file says now, then the session's own. The project's file is looked at
        every call; it is read and the rules compiled again only when it or the session's rules changed (the
        file is only ever replaced whole, so a new one is a new inode)."""
        from chock.rules.rule import RuleSet
        from chock.session.rule_sources import project_rules, project_rules_path, session_rules

        identity: tuple[int, ...] | None = ()
        if self.layout is not None:
            try:
                found = os.stat(project_rules_path(self.layout, self.project))
                identity = (found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
            except FileNotFoundError:
                identity = ()
            except OSError:
                identity = None  # read it, and let the read say what is wrong
        key = (identity, tuple(tuple(sorted(saved.items())) for saved in state.session_rules))
        if identity is not None and key in self._last:
            return self._last[key]
        rules = list(self.config)
        if self.layout is not None:
            rules += project_rules(self.layout, self.project)
        rules += session_rules(state.id, state.session_rules)
        built = RuleSet(rules)
        self._last.clear()
        self._last[key] = built
        return built


def command_of(name: str, args: dict[str, Any]) -> str | None:
    """The shell command text of a call, for a shell call only."""
    return str(args.get("command", "")) if name == "shell" else None


def decide(rules: Rules, state: SessionState, name: str, args: dict[str, Any], default: str) -> Decision:
    return rules.in_force(state).decide(name, command_of(name, args), default)  # type: ignore[arg-type]


def mcp_rule_name(server: str, tool: str) -> str:
    """What rules call an MCP tool's call: `mcp:<server>/<tool>` (its own name on its server)."""
    return f"mcp:{server}/{tool}"


def proposal(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The `propose*` fields of `approval.request`: the rule "always" would save. `name` is a built-in tool's, or an
    MCP tool's rule name (`mcp_rule_name`): a tool name no pattern can hold proposes its server's `mcp:<server>/*`."""
    from chock.rules.rule import check_pattern

    if name.startswith("mcp:"):
        try:
            return {"propose": check_pattern(name)}
        except ValueError:
            return {"propose": name.partition("/")[0] + "/*", "propose_why": "its name cannot be written in a rule"}
    command = command_of(name, args)
    if command is None:
        return {"propose": f"tool:{name}"}
    from chock.rules.proposal import propose

    made = propose(command)
    fields: dict[str, Any] = {"propose": made.pattern}
    if made.whole:
        fields["propose_whole"] = True
    if made.why:
        fields["propose_why"] = made.why
    return fields


def allow_hint(name: str) -> str:
    """For a refused MCP call nobody could be asked about: the rule that would let it run unasked ("" otherwise)."""
    if not name.startswith("mcp:"):
        return ""
    pattern = proposal(name, {})["propose"]
    return f'; the rule `.{{ .allow = "{pattern}" }}` in .approvals.rules of config.zon lets it run without asking'


def refuse_unless_yes(taken: Answer, name: str, timeout: float | None) -> None:
    """Raise ToolRefused, saying why for the model, unless the person's answer was yes (`name`: the call's rule
    name, `timeout`: the `.approvals.timeout` a `via: timeout` answer ran out)."""
    if taken.answer == "yes":
        return
    if taken.via == "timeout":
        raise ToolRefused(
            f"nobody answered within {_duration(timeout or 0)} (the person's .approvals.timeout), so this call "
            f"did not run{allow_hint(name)}; carry on without it, or ask again later"
        )
    if taken.note:
        raise ToolRefused(f"the person declined this call, and said: {taken.note}")
    raise ToolRefused("the person declined this command")


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class TerminalAnswer(Value):
    __slots__ = ("answer", "note", "rule", "scope")

    def __init__(self, answer: str, scope: str = "once", rule: str = "", note: str = "") -> None:
        self.answer = answer  # yes | no
        self.scope = scope
        self.rule = rule
        self.note = note


def question(tool: str, summary: str, propose: str, why: str) -> str:
    """The terminal's approval prompt: the command exactly as it will run, one line per line, every character
    a terminal would act on shown escaped (docs/architecture.md#what-reaches-a-terminal), then the choices."""
    styled = colour(sys.stderr)
    command = as_lines(summary, styled=styled)
    ask = "? [y/N] " if command.endswith("\n") else " ? [y/N] "
    choices = ""
    if propose:
        shown = safe(propose, styled=styled, one_line=True)
        because = f" ({safe(why, styled=styled, one_line=True)})" if why else ""
        choices = (
            f"y yes once · n no (`n <why>` tells the model why) · s always in this session · p always in this "
            f"project, saving the rule `{shown}`{because}\n"
        )
    return f"{choices}Allow {safe(tool, styled=styled, one_line=True)}:{command}{ask}"


async def read_line() -> str | None:
    """One line typed at the terminal, without blocking the loop; None when stdin closed."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[bytes] = loop.create_future()
    fd = sys.stdin.fileno()

    def readable() -> None:
        if not line.done():
            line.set_result(os.read(fd, 8192))

    loop.add_reader(fd, readable)
    try:
        data = await line
    finally:
        loop.remove_reader(fd)
    return data.decode("utf-8", "replace") if data else None


async def terminal_answer(question_: str, propose: str) -> TerminalAnswer | None:
    """Ask at the terminal: `y`, `n` or `n <message>`, `s` or `p` (then the rule, Enter keeping the proposal);
    anything else is no. None when stdin closed. What was typed before the question is dropped first: keys typed
    ahead are not an answer to a question the person has not seen."""
    drop_typed_ahead(sys.stdin.fileno())
    sys.stderr.write(question_)
    sys.stderr.flush()
    typed = await read_line()
    if typed is None:
        return None
    word, _, rest = typed.strip().partition(" ")
    word = word.lower()
    if word in ("y", "yes"):
        return TerminalAnswer("yes")
    if word in ("s", "p") and propose:
        scope = "session" if word == "s" else "project"
        styled = colour(sys.stderr)
        while True:
            sys.stderr.write(
                f"rule to save for the {scope} (Enter keeps `{safe(propose, styled=styled, one_line=True)}`): "
            )
            sys.stderr.flush()
            edited = await read_line()
            if edited is None:
                return None
            from chock.rules.rule import check_pattern

            try:
                return TerminalAnswer("yes", scope, check_pattern(edited.strip() or propose))
            except ValueError as refusal:
                sys.stderr.write(f"not saved: {safe(str(refusal), styled=styled, one_line=True)}\n")
    from chock.control.daemon_protocol import NOTE_LIMIT

    note = rest.strip() if word in ("n", "no") else ""
    data = note.encode("utf-8")
    if len(data) > NOTE_LIMIT:
        note = data[:NOTE_LIMIT].decode("utf-8", "ignore")
    return TerminalAnswer("no", note=note)
