"""The rule an "always" answer proposes for a shell command (docs/approvals.md#matching): the program and the
words after it up to the first option, path, or word holding `/`, `.` or `=`, at most three words (`git diff`,
`pytest`, `npm run test`); a program named by a path, an interpreter or a runner, with its whole command line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from chock.rules.programs import INTERPRETERS, SHELLS, program
from chock.rules.shell_syntax import join_words, simple_commands

MAX_WORDS = 3
# Commands that name no program (a loop's header, a definition, an assignment alone): never proposed.
_NOT_PROGRAMS = ("a for loop", "a function definition", "an assignment as a command of its own")
# A word the proposal may take after the program: a subcommand's name, not an argument.
_SUBCOMMAND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_:@+-]*")
_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
# Programs that run whatever they are given (a package, an image, a script): the whole line is proposed.
RUNNERS = {
    "npx", "pnpx", "bunx", "uvx", "pipx", "docker", "podman", "nix", "nix-shell", "ssh", "java", "jshell",
    "pwsh", "powershell",
}  # fmt: skip
# Subcommands that turn a tool into a runner: `uv run X` runs X.
_RUNNING_SUBCOMMANDS = {
    ("uv", "run"), ("uv", "tool"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run"),
    ("conda", "run"), ("bundle", "exec"), ("npm", "exec"), ("pnpm", "exec"), ("pnpm", "dlx"), ("yarn", "dlx"),
    ("cargo", "run"), ("go", "run"), ("dotnet", "run"),
}  # fmt: skip


# Builtins whose arguments are directories: the program alone is proposed.
_DIRECTORY_BUILTINS = {"cd", "pushd", "popd"}


@dataclass(frozen=True, slots=True)
class Proposal:
    """The proposed pattern ("" when none can be), whether it is the whole command line, and why (shown with the
    proposal; "" for the usual leading words)."""

    pattern: str
    whole: bool
    why: str


def propose(command: str) -> Proposal:
    """The "always" rule proposed for the shell text `command`."""
    parsed = simple_commands(command)
    commands = [c for c in parsed.commands if c.words and not c.nested and not c.why.startswith(_NOT_PROGRAMS)]
    if not commands or commands[0].why.startswith("the program word"):
        why = parsed.unsure or (commands[0].why if commands else "the command runs no program")
        return Proposal("", False, f"no rule can be proposed: {why}")
    first = commands[0]
    words = first.words
    notes: list[str] = []
    if not first.literal:
        notes.append(f"an allow rule never matches this command ({first.why}), only later ones without it")
    if parsed.unsure:
        notes.append(f"this command asks whatever the rules say ({parsed.unsure})")
    if len(commands) > 1:
        notes.append(
            f"the rule covers `{words[0]}` only; each of the other {len(commands) - 1} command(s) needs its own"
        )
    name = program(words[0])
    if "/" in words[0]:
        whole = f"`{words[0]}` is named by a path, so the rule is its whole command line"
    elif name in SHELLS or name in INTERPRETERS or _PYTHON.fullmatch(name):
        whole = f"`{name}` runs whatever code it is given, so the rule is its whole command line"
    elif name in RUNNERS or (name, words[1] if len(words) > 1 else "") in _RUNNING_SUBCOMMANDS:
        runner = name if name in RUNNERS else shlex.join(words[:2])
        whole = f"`{runner}` runs whatever it is given, so the rule is its whole command line"
    else:
        whole = ""
    if whole:
        return Proposal(join_words(words), True, "; ".join([whole, *notes]))
    taken = [words[0]]
    for word in words[1:MAX_WORDS] if name not in _DIRECTORY_BUILTINS else ():
        if not _SUBCOMMAND.fullmatch(word) or word.startswith("-"):
            break
        taken.append(word)
    return Proposal(join_words(tuple(taken)), False, "; ".join(notes))
