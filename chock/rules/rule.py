"""Rules and how a call is decided by them (docs/approvals.md#matching).

A rule names a shell command by its leading words (`git diff`), a built-in tool as `tool:<name>`, or an MCP tool
as `mcp:<server>/<tool>` or `mcp:<server>/*`. Among the rules that match a call deny beats ask beats allow, and
any matching rule beats the default; a shell text is decided command by command and the strictest wins.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from chock.rules.programs import command_why, inner_starts, program, shell_code, subcommand_at
from chock.rules.shell_syntax import MAX_DEPTH, SimpleCommand, join_words, simple_commands, simple_commands_at_depth

Verdict = Literal["allow", "ask", "deny"]
VERDICTS: tuple[Verdict, ...] = ("allow", "ask", "deny")
_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_FORBIDDEN = {
    ";": "`;`", "&": "`&`", "|": "`|`", "<": "a redirection", ">": "a redirection", "(": "`(`", ")": "`)`",
    "`": "a backquote", "$": "`$`", "\n": "a newline",
}  # fmt: skip
# Quoted text, where the characters a pattern may not hold are plain characters.
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\$`]|\\.)*\"|\\[^\n]")
_SHAPE = "write the command's leading words (`git diff`), `tool:<name>` or `mcp:<server>/<tool>`"
# Where a text the reader is unsure of is cut into words for deny and ask rules (best effort).
_CRUDE_SPLIT = re.compile(r"[\s;&|()<>{}`$\"'\\]+")
# How many rules a reason names (a text of many commands may be decided by many).
_NAMED = 3
# How deep `sh -c 'sh -c …'` is followed for deny and ask rules.
_INNER_SHELLS = 3


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: its verdict, its pattern (as `check_pattern` returns it), where it came from (a line a person
    reads) and its short stable id (`c3`, `p<hash8>`, `s<hash8>`)."""

    verdict: Verdict
    pattern: str
    origin: str
    id: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What a call gets, the rules that decided it (empty when the default or an unsure parse did) and one line
    naming them."""

    verdict: Verdict
    rules: tuple[Rule, ...]
    reason: str


def check_pattern(text: str) -> str:
    """The pattern `text` normalised (`git  "diff"` is `git diff`), or ValueError saying what to write instead."""
    pattern = text.strip()
    if not pattern:
        raise ValueError(f"a rule's pattern is empty: {_SHAPE}")
    if pattern.startswith("tool:"):
        name = pattern[5:]
        if not _NAME.fullmatch(name):
            raise ValueError(f"`{pattern}` names no tool: write `tool:<name>`, e.g. `tool:write_file`")
        if name == "shell":
            raise ValueError(
                "`tool:shell` is not a rule: shell commands are named by their words (`git diff`), and "
                ".approvals.shell is what every other command gets"
            )
        return pattern
    if pattern.startswith("mcp:"):
        server, slash, tool = pattern[4:].partition("/")
        if not slash or not _NAME.fullmatch(server) or not (tool == "*" or _NAME.fullmatch(tool)):
            raise ValueError(f"`{pattern}` names no MCP tool: write `mcp:<server>/<tool>` or `mcp:<server>/*`")
        return pattern
    for char in _QUOTED.sub("_", pattern):
        if char in _FORBIDDEN:
            name = _FORBIDDEN[char]
            raise ValueError(
                f"`{pattern}` holds {name}: a shell rule is a command's leading words only, and matches that "
                "command followed by anything (a rule per command; no operators, redirections or expansions)"
            )
    if re.search(r"(^|\s)#", pattern):
        raise ValueError(f"`{pattern}` holds a comment (`#`): {_SHAPE}")
    if pattern.endswith((":*", " *", "*")):
        raise ValueError(
            f"`{pattern}` ends in `*`: a shell rule is leading words and already matches anything after them; "
            f"write `{pattern.rstrip(':* ')}`"
        )
    parsed = simple_commands(pattern)
    if parsed.unsure:
        raise ValueError(f"`{pattern}` is not a plain command: {parsed.unsure}")
    if len(parsed.commands) != 1 or not parsed.commands[0].words:
        raise ValueError(f"`{pattern}` is not one command's words: {_SHAPE}")
    command = parsed.commands[0]
    if command.why and command.why != command_why(command.words):  # `sudo` is a fine word for a deny rule
        raise ValueError(f"`{pattern}` is not literal words ({command.why}): {_SHAPE}")
    return join_words(command.words)


class RuleSet:
    """Rules compiled once: shell rules indexed by program, tool rules by name, so a decision looks only at the
    rules that could match."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        shell: dict[str, list[tuple[tuple[str, ...], Rule]]] = {}
        tools: dict[str, list[Rule]] = {}
        compiled_of = _compiled
        for rule in self.rules:
            compiled = compiled_of(rule.pattern)
            if compiled is None:
                tools.setdefault(rule.pattern, []).append(rule)
                continue
            key, words = compiled
            found = shell.get(key)
            if found is None:
                shell[key] = [(words, rule)]
            else:
                found.append((words, rule))
        self._shell, self._tools = shell, tools

    def decide(self, tool: str, command: str | None, default: Verdict) -> Decision:
        """What the call of `tool` (with `command`, the shell text, for "shell") gets."""
        if tool != "shell":
            keys = [f"tool:{tool}"] if not tool.startswith("mcp:") else [tool, tool.partition("/")[0] + "/*"]
            matched = [rule for key in keys for rule in self._tools.get(key, ())]
            if not matched:
                return Decision(default, (), f"no rule names {_tool_name(tool)}: the default is {default}")
            verdict = max((rule.verdict for rule in matched), key=_STRICTNESS.__getitem__)
            chosen = tuple(rule for rule in matched if rule.verdict == verdict)
            return Decision(verdict, chosen, _by(verdict, chosen))
        return self._decide_shell(command or "", default)

    def _decide_shell(self, text: str, default: Verdict) -> Decision:
        parsed = simple_commands(text)
        verdicts: list[_Part] = [self._command(command, default) for command in parsed.commands]
        if parsed.unsure and self._shell:  # best effort: the commands past where the reader stopped
            words = tuple(word for word in _CRUDE_SPLIT.split(text) if word)
            strict = self._strict(SimpleCommand(words, False, parsed.unsure), _INNER_SHELLS) if words else []
            if strict:
                verdict = max((rule.verdict for rule in strict), key=_STRICTNESS.__getitem__)
                verdicts.append(_Part(verdict, tuple(rule for rule in strict if rule.verdict == verdict)))
        if parsed.unsure:
            unsure = max("ask", default, key=_STRICTNESS.__getitem__)
            why = f"dash and bash may read this command differently ({parsed.unsure})"
            verdicts.append(_Part(unsure, (), f"{'asks' if unsure == 'ask' else 'denied by the default'}: {why}"))
        if not verdicts:
            verdicts.append(_Part(default, (), f"the command runs nothing: the default is {default}"))
        verdict = max((part.verdict for part in verdicts), key=_STRICTNESS.__getitem__)
        deciding = [part for part in verdicts if part.verdict == verdict]
        chosen = tuple(dict.fromkeys(rule for part in deciding for rule in part.rules))
        if chosen:
            reason = _by(verdict, chosen)
            if any(not part.rules for part in deciding):
                reason += "; " + next(part.reason for part in deciding if not part.rules)
            return Decision(verdict, chosen, reason)
        return Decision(verdict, (), deciding[0].reason)

    def _command(self, command: SimpleCommand, default: Verdict) -> _Part:
        strict = self._strict(command, 0)
        if strict:
            verdict = max((rule.verdict for rule in strict), key=_STRICTNESS.__getitem__)
            return _Part(verdict, tuple(rule for rule in strict if rule.verdict == verdict), "")
        shown = _shown(command)
        if not command.literal:
            return _Part(default, (), f"no allow rule can match `{shown}` ({command.why}): the default is {default}")
        words = command.words
        allowed = tuple(
            rule
            for rule_words, rule in self._shell.get(program(words[0]), ())
            if rule.verdict == "allow" and _starts(words, rule_words, exact=True)
        )
        if allowed:
            return _Part("allow", allowed, "")
        return _Part(default, (), f"no rule matches `{shown}`: the default is {default}")

    def _strict(self, command: SimpleCommand, depth: int) -> list[Rule]:
        """The deny and ask rules matching `command`, looking through programs that run their arguments."""
        if not command.words or not self._shell:
            return []
        words = command.words
        starts = [0, *inner_starts(words)] if not command.literal else [0]
        matched = [
            rule
            for start in starts
            for rule_words, rule in self._shell.get(program(words[start]), ())
            if rule.verdict != "allow" and _starts(words[start:], rule_words, exact=False)
        ]
        if command.literal or depth >= _INNER_SHELLS:
            return matched
        for start in starts:  # `sh -c CODE`, and one a program runs (`env sh -c CODE`, `nohup sh -c CODE`)
            code = shell_code(words[start:])
            if code is not None:
                for inner in simple_commands_at_depth(code, MAX_DEPTH - 8).commands:
                    matched += self._strict(inner, depth + 1)
        return matched


@dataclass(frozen=True, slots=True)
class _Part:
    verdict: Verdict
    rules: tuple[Rule, ...]
    reason: str = field(default="")


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> tuple[str, tuple[str, ...]] | None:
    """A shell pattern's program and words, None for a tool's (a session builds its RuleSet at every decision:
    each pattern is split once)."""
    if pattern.startswith(("tool:", "mcp:")):
        return None
    words = tuple(shlex.split(pattern))
    if not words:
        raise ValueError(f"a rule's pattern is empty: {_SHAPE}")
    return program(words[0]), words


def _starts(words: tuple[str, ...], rule_words: tuple[str, ...], exact: bool) -> bool:
    """Whether `words` start with the rule's words; the program by its exact word for an allow rule, by its
    name for the others, which also look past the program's own options (`/usr/bin/git -C x push` is still
    `git push` to a deny rule)."""
    if len(words) < len(rule_words):
        return False
    if exact:
        return words[0] == rule_words[0] and words[1 : len(rule_words)] == rule_words[1:]
    if program(words[0]) != program(rule_words[0]):
        return False
    rest = rule_words[1:]
    if words[1 : len(rule_words)] == rest:
        return True
    at = subcommand_at(words)
    return at > 1 and words[at : at + len(rest)] == rest


def _by(verdict: Verdict, rules: tuple[Rule, ...]) -> str:
    done = {"allow": "allowed", "ask": "asks", "deny": "denied"}[verdict]
    named = ", ".join(f"`{rule.pattern}` ({rule.origin})" for rule in rules[:_NAMED])
    more = f" and {len(rules) - _NAMED} more" if len(rules) > _NAMED else ""
    return f"{done} by rule{'s' if len(rules) > 1 else ''} {named}{more}"


def _shown(command: SimpleCommand) -> str:
    text = " ".join(command.words) if command.words else "(a redirection alone)"
    return text if len(text) <= 80 else text[:77] + "..."


def _tool_name(tool: str) -> str:
    return tool if tool.startswith("mcp:") else f"tool:{tool}"
