"""The simple commands of a shell command line, read as POSIX sh (XCU 2.3 token recognition, 2.2 quoting, 2.10
grammar) as dash, Debian's /bin/sh, reads it (docs/approvals.md#matching).

The reader is pure and linear: runs of ordinary characters are taken by one regular expression, quotes by
`str.find`, and nesting (`$(…)`, backquotes, `(…)`, `${…}`) is bounded by MAX_DEPTH — deeper is `unsure`, never a
RecursionError. It never under-counts: text dash would run as a command is always one of `commands`; where it
cannot tell (a construct bash reads differently, a syntax error, a quote left open) it says so in `unsure`, and
then the whole command asks.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from chock.rules.programs import command_why
from chock.rules.shell_words import ASSIGNMENT, BASH_ASSIGNMENT, MAX_DEPTH, NAME, SEPARATORS, Unsure, Word, WordReader

_BODY_SPECIAL = re.compile(r"[\\$`]")
# Reserved words (XCU 2.4) and where they leave the reader: still at a command's start.
_OPENERS = {"if": "fi", "while": "done", "until": "done", "{": "}"}
_MIDDLES = {"then", "else", "elif", "do"}
_CLOSERS = {"fi", "done", "}"}
_BASH_WORDS = {
    "[[": "bash reads `[[` as a test, dash as a command named `[[`",
    "]]": "bash reads `]]` as the end of a test, dash as a word",
    "function": "bash reads `function` as a function definition, dash as a command",
    "select": "bash reads `select` as a loop, dash as a command",
    "coproc": "bash reads `coproc` as a coprocess, dash as a command",
}


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command: its words after quote removal with redirections removed (words[0] the program), and
    whether an allow rule can ever match it (`why` says why not)."""

    words: tuple[str, ...]
    literal: bool = True
    why: str = ""
    redirected: bool = False  # it had redirections (dropped from `words`)
    nested: bool = False  # it runs inside a command substitution of another command


# The contract's name for it (docs/approvals.md#matching); chock/commands/base.py has a click Command.
Command = SimpleCommand


@dataclass(frozen=True, slots=True)
class Parsed:
    """Every simple command of a text in order; `unsure` says why dash and bash may read it differently (or dash
    may refuse it), and then the whole text asks."""

    commands: tuple[SimpleCommand, ...]
    unsure: str = ""


@dataclass(slots=True)
class _HereDoc:
    delimiter: str
    strip_tabs: bool
    quoted: bool


def simple_commands(text: str) -> Parsed:
    """The simple commands of `text` as dash reads it: pipelines, lists, subshells, groups, compound commands and
    command substitutions flattened, each substitution's commands before the command holding it."""
    reader = _GrammarReader(text)
    first = _precheck(text)
    if first:
        return Parsed((), first)
    try:
        reader.run()
    except Unsure as error:
        return Parsed(tuple(reader.commands), str(error))
    return Parsed(tuple(reader.commands), "")


def _precheck(text: str) -> str:
    if "\x00" in text:
        return "the command holds a NUL byte, which no command line can carry"
    if "\r" in text:
        return "the command holds a carriage return (CRLF line ends): sh reads it as part of a word"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "the command is not valid UTF-8"
    return ""


class _GrammarReader(WordReader):
    def __init__(self, text: str, nested: bool = False) -> None:
        super().__init__(text, nested)
        self.commands: list[SimpleCommand] = []
        self.heredocs: list[_HereDoc] = []

    def open_heredocs(self) -> int:
        return len(self.heredocs)

    def backquoted_commands(self, text: str, depth: int) -> None:
        nested = simple_commands_at_depth(text, depth, nested=True)
        self.commands.extend(nested.commands)
        if nested.unsure:
            raise Unsure(nested.unsure)

    def run(self) -> None:
        end = self.list_(0, 0, None)
        if end < self.n:  # a `)` with no `(`
            raise Unsure("a `)` closes nothing: sh refuses the command")

    # -- lists and compound commands -------------------------------------------------------------------------

    def list_(self, i: int, depth: int, closer: str | None) -> int:
        """Commands from `i` to the end, or to the `)` (closer ")") or `;;`/`esac` (closer "case") that ends
        them: the index after it."""
        if depth > MAX_DEPTH:
            raise Unsure(f"the command nests deeper than {MAX_DEPTH} levels")
        s, n = self.s, self.n
        opened: list[str] = []
        while True:
            i = self.skip_blanks(i)
            if i >= n:
                if closer is not None:
                    raise Unsure("a `(`, `$(` or `case` is never closed: sh refuses the command")
                if opened:
                    raise Unsure(f"a compound command is never closed (no `{opened[-1]}`): sh refuses the command")
                if self.heredocs:
                    raise Unsure("a here-document has no body: sh refuses the command")
                return i
            c = s[i]
            if c == "\n":
                i = self.heredoc_bodies(i + 1, depth)
                continue
            if c in ";&|":
                op = self.operator(i)
                if closer == "case" and op in (";;", ";&", ";;&"):
                    if op != ";;":
                        raise Unsure(f"bash reads `{op}` as a case fall-through, dash refuses it")
                    if opened:
                        raise Unsure(f"a compound command is never closed (no `{opened[-1]}`)")
                    return i + 2
                raise Unsure(f"`{op}` where a command should be: sh refuses the command")
            if c == ")":
                if closer == ")" and not opened:
                    return i + 1
                raise Unsure("a `)` closes nothing here: sh refuses the command")
            if c == "(":
                if s.startswith("((", i):
                    raise Unsure("bash reads `((` as arithmetic, dash as two subshells")
                i = self.list_(i + 1, depth + 1, ")")
                i = self.after_compound(i, depth)
                continue
            word_start = i
            word, j = self.word(i, depth)
            keyword = word.plain_start if not word.quoted and word.plain_start == word.text else ""
            if keyword in _BASH_WORDS:
                raise Unsure(_BASH_WORDS[keyword])
            if keyword in _OPENERS:
                opened.append(_OPENERS[keyword])
                i = j
                continue
            if keyword in _MIDDLES or keyword == "!":
                i = j
                continue
            if keyword in _CLOSERS:
                if not opened or opened[-1] != keyword:
                    raise Unsure(f"`{keyword}` closes nothing: sh refuses the command")
                opened.pop()
                i = self.after_compound(j, depth)
                continue
            if keyword == "esac":
                if closer == "case" and not opened:
                    return word_start
                raise Unsure("`esac` closes nothing: sh refuses the command")
            if keyword == "for":
                i = self.for_(j, depth)
                opened.append("done")
                continue
            if keyword == "case":
                i = self.case_(j, depth)
                i = self.after_compound(i, depth)
                continue
            i = self.simple(word_start, word, j, depth)

    def after_compound(self, i: int, depth: int) -> int:
        """Redirections after a compound command's end, then the operator that ends it."""
        while True:
            i = self.skip_blanks(i)
            if (i < self.n and self.s[i] in "<>") or self.io_number(i):
                why, i, heredoc = self.redirection(i, depth)
                if why or heredoc:
                    raise Unsure("a compound command's redirection holds an expansion or a here-document")
                continue
            return self.end_of_command(i)

    def for_(self, i: int, depth: int) -> int:
        i = self.skip_blanks(i)
        match = NAME.match(self.s, i)
        if not match:
            raise Unsure("`for` without a variable name: sh refuses the command")
        name, i = match.group(), match.end()
        i = self.skip_blanks(i)
        items: list[str] = []
        i = self.skip_blanks_newlines(i, depth)
        if self.s.startswith("in", i) and (i + 2 >= self.n or self.s[i + 2] in " \t\n;"):
            i += 2
            while True:
                i = self.skip_blanks(i)
                if i >= self.n or self.s[i] in ";\n":
                    break
                if self.s[i] in SEPARATORS:
                    raise Unsure("an operator in a `for` list: sh refuses the command")
                word, i = self.word(i, depth)
                items.append(word.text)
        if i < self.n and self.s[i] == ";":
            i += 1
        i = self.skip_blanks_newlines(i, depth)
        if not (self.s.startswith("do", i) and (i + 2 >= self.n or self.s[i + 2] in " \t\n;")):
            raise Unsure("`for` without `do`: sh refuses the command")
        self.commands.append(
            SimpleCommand(("for", name, *items), False, f"a for loop assigns the variable {name}", nested=self.nested)
        )
        return i + 2

    def case_(self, i: int, depth: int) -> int:
        i = self.skip_blanks(i)
        if i >= self.n or self.s[i] in SEPARATORS:
            raise Unsure("`case` without a word: sh refuses the command")
        _, i = self.word(i, depth)
        i = self.skip_blanks_newlines(i, depth)
        if not (self.s.startswith("in", i) and (i + 2 >= self.n or self.s[i + 2] in " \t\n")):
            raise Unsure("`case` without `in`: sh refuses the command")
        i += 2
        while True:
            i = self.skip_blanks_newlines(i, depth)
            if i >= self.n:
                raise Unsure("`case` without `esac`: sh refuses the command")
            if self.s.startswith("esac", i) and (i + 4 >= self.n or self.s[i + 4] in SEPARATORS):
                return i + 4
            if self.s[i] == "(":
                i += 1
            while True:  # patterns: words separated by `|`, ended by `)`
                i = self.skip_blanks(i)
                if i >= self.n or self.s[i] in "\n;&<>(":
                    raise Unsure("a case pattern without `)`: sh refuses the command")
                if self.s[i] != "|" and self.s[i] != ")":
                    _, i = self.word(i, depth)
                    i = self.skip_blanks(i)
                if i < self.n and self.s[i] == "|":
                    i += 1
                    continue
                if i < self.n and self.s[i] == ")":
                    i += 1
                    break
                raise Unsure("a case pattern without `)`: sh refuses the command")
            i = self.list_(i, depth + 1, "case")

    # -- simple commands -------------------------------------------------------------------------------------

    def simple(self, i: int, first: Word, j: int, depth: int) -> int:
        """The simple command starting at `i` with its first word `first` (ending at `j`)."""
        s = self.s
        words: list[Word] = []
        why = ""
        redirected = False
        word: Word | None = None
        if not (self.io_number(i) or s[i] in "<>"):
            word, i = first, j
        while True:
            if word is not None:
                words.append(word)
                word = None
            i = self.skip_blanks(i)
            if i >= self.n:
                break
            c = s[i]
            if c in "<>" or self.io_number(i):
                target_why, i, heredoc = self.redirection(i, depth)
                redirected = True
                if heredoc:
                    why = why or "a here-document feeds the command text the reader does not check"
                elif target_why:
                    why = why or f"a redirection's target holds {target_why}"
                continue
            if c == "(":
                if words and words[-1].text[-1:] in ("?", "*", "+", "@", "!") and s[i - 1] not in " \t":
                    raise Unsure("bash reads `" + words[-1].text[-1] + "(…)` as an extended glob, dash refuses it")
                if len(words) == 1 and not redirected:
                    close = self.skip_blanks(i + 1)
                    if close < self.n and s[close] == ")":
                        self.commands.append(
                            SimpleCommand((words[0].text,), False, "a function definition", nested=self.nested)
                        )
                        return close + 1
                raise Unsure("a `(` inside a command: sh refuses the command")
            if c in SEPARATORS:
                break
            word, i = self.word(i, depth)
        self.emit(words, why, redirected)
        return self.end_of_command(i)

    def emit(self, words: list[Word], why: str, redirected: bool) -> None:
        assigned = 0
        for word in words:
            if ASSIGNMENT.match(word.plain_start):
                assigned += 1
                continue
            if BASH_ASSIGNMENT.match(word.plain_start) and assigned == 0:
                raise Unsure(f"bash reads `{word.text}` as an assignment, dash as a command")
            break
        texts = tuple(word.text for word in words[assigned:])
        if assigned and not texts:
            why = why or "an assignment as a command of its own changes what later commands run"
            texts = tuple(word.text for word in words)
        elif assigned:
            why = why or "an assignment before the command changes what it runs"
        if not texts:
            self.commands.append(SimpleCommand((), False, why or "a redirection alone", redirected, self.nested))
            return
        if not why:
            for n, word in enumerate(words[assigned:]):
                if word.why:
                    why = ("the program word holds " if n == 0 else "a word holds ") + word.why
                    break
        if not why:
            why = command_why(texts)
        self.commands.append(SimpleCommand(texts, not why, why, redirected, self.nested))

    def end_of_command(self, i: int) -> int:
        """After a command: the operator that ends it (and the index after it), at a command's start again."""
        i = self.skip_blanks(i)
        if i >= self.n:
            return i
        c = self.s[i]
        if c == "\n" or c == ")":
            return i
        if c in ";&|":
            op = self.operator(i)
            if op in ("|&", "&>", "&>>"):
                raise Unsure(f"bash reads `{op}` as a redirection of both outputs, dash as `{op[0]}` and `{op[1:]}`")
            if op in (";;", ";&", ";;&"):
                return i  # the case reader takes it
            after = self.skip_blanks(i + len(op))
            if op in ("&&", "||", "|") and (after >= self.n or self.s[after] in ";&|)"):
                raise Unsure(f"`{op}` with no command after it: sh refuses the command")
            return i + len(op)
        if c == "(":
            raise Unsure("a `(` after a command: sh refuses the command")
        return i

    def operator(self, i: int) -> str:
        s = self.s
        for op in (";;&", ";;", ";&", "&&", "||", "|&", "&>>", "&>"):
            if s.startswith(op, i):
                return op
        j = i + 1
        while s.startswith("\\\n", j):
            j += 2
        if j > i + 1 and s[i : i + 1] + s[j : j + 1] in (";;", ";&", "&&", "||", "|&", "&>"):
            raise Unsure("a line continuation inside an operator")
        return s[i]

    def io_number(self, i: int) -> bool:
        s = self.s
        j = i
        while j < self.n and s[j].isdigit() and s[j].isascii():
            j += 1
        if j == i:
            return False
        k, joined = j, False  # `2\<newline>>` is `2>` to sh
        while s.startswith("\\\n", k) or (joined and k < self.n and s[k].isdigit() and s[k].isascii()):
            joined, k = True, k + (2 if s[k] == "\\" else 1)
        if joined and k < self.n and s[k] in "<>":
            raise Unsure("a line continuation inside a redirection")
        return j < self.n and s[j] in "<>"

    def redirection(self, i: int, depth: int) -> tuple[str, int, bool]:
        """The redirection at `i`: (what its target holds that is not a literal, the index after it, whether it is
        a here-document)."""
        s = self.s
        while s[i].isdigit():
            i += 1
        if s.startswith("<<<", i):
            raise Unsure("bash reads `<<<` as a here-string, dash refuses it")
        if s.startswith(("<(", ">("), i):
            raise Unsure(f"bash reads `{s[i]}(…)` as a process substitution, dash refuses it")
        for op in ("<<-", "<<", ">>", "<&", ">&", "<>", ">|", "<", ">"):
            if s.startswith(op, i):
                break
        after = i + len(op)
        while s.startswith("\\\n", after):
            after += 2
        if after > i + len(op) and s[after : after + 1] in ("<", ">", "&", "|", "-"):  # `<<\<newline>-` is `<<-`
            raise Unsure("a line continuation inside a redirection")
        i = self.skip_blanks(i + len(op))
        if i >= self.n or s[i] in SEPARATORS:
            raise Unsure(f"`{op}` without a target: sh refuses the command")
        target, i = self.word(i, depth)
        if op in ("<<", "<<-"):
            if target.why and "$" in target.text:
                raise Unsure("a here-document's delimiter holds an expansion")
            self.heredocs.append(_HereDoc(target.text, op == "<<-", target.quoted))
            return "", i, True
        if op in ("<&", ">&") and not (target.text == "-" or target.text.isdigit()) and not target.why:
            raise Unsure(f"bash reads `{op}{target.text}` as a redirection to a file, dash refuses it")
        return target.why, i, False

    def heredoc_bodies(self, i: int, depth: int) -> int:
        """Past the bodies of the here-documents started on the line that ends just before `i`; the commands of
        the substitutions in an unquoted body are read too (for deny and ask rules)."""
        s = self.s
        for doc in self.heredocs:
            start = i
            while True:
                body_end = i
                if i >= self.n:
                    raise Unsure(f"the here-document is never ended by `{doc.delimiter}`")
                end = s.find("\n", i)
                end = self.n if end < 0 else end
                pieces = [s[i:end]]
                while not doc.quoted and _continued(pieces[-1]) and end < self.n:  # `\` newline joins lines
                    nxt = s.find("\n", end + 1)
                    nxt = self.n if nxt < 0 else nxt
                    pieces[-1] = pieces[-1][:-1]
                    pieces.append(s[end + 1 : nxt])
                    end = nxt
                line = "".join(pieces)
                i = end + 1
                if (line.lstrip("\t") if doc.strip_tabs else line) == doc.delimiter:
                    break
            if not doc.quoted:
                self.body_substitutions(s[start:body_end], depth)
        self.heredocs.clear()
        return min(i, self.n)

    def body_substitutions(self, body: str, depth: int) -> None:
        """The commands of the substitutions in an unquoted here-document's body."""
        if "$" not in body and "`" not in body:
            return
        reader = _GrammarReader(body, nested=True)
        j = 0
        while True:
            match = _BODY_SPECIAL.search(body, j)
            if match is None:
                break
            j = match.start()
            if body[j] == "\\":
                j += 2
                continue
            j = reader.dollar_or_backquote(j, depth + 1, in_quotes=True)[0]
        self.commands.extend(reader.commands)

    def skip_blanks_newlines(self, i: int, depth: int) -> int:
        while True:
            i = self.skip_blanks(i)
            if i < self.n and self.s[i] == "\n":
                i = self.heredoc_bodies(i + 1, depth)
                continue
            return i


_RESERVED = {
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "do",
    "done",
    "case",
    "esac",
    "while",
    "until",
    "for",
    "in",
    *_BASH_WORDS,
}


def join_words(words: tuple[str, ...]) -> str:
    """Words as sh text that reads back as the same words of one simple command: `shlex.join`, with a first word
    sh would read as a reserved word or an assignment quoted."""
    if not words or not (words[0] in _RESERVED or ASSIGNMENT.match(words[0])):
        return shlex.join(words)
    first = "'" + words[0].replace("'", "'\"'\"'") + "'"
    return " ".join([first, *(shlex.quote(word) for word in words[1:])])


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def simple_commands_at_depth(text: str, depth: int, nested: bool = False) -> Parsed:
    """`simple_commands` of a text nested `depth` levels deep (a backquoted command, a `sh -c` argument)."""
    reader = _GrammarReader(text, nested)
    try:
        reader.list_(0, depth, None)
    except Unsure as error:
        return Parsed(tuple(reader.commands), str(error))
    return Parsed(tuple(reader.commands), "")
