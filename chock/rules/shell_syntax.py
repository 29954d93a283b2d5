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
from dataclasses import dataclass

from chock.rules.programs import command_why

MAX_DEPTH = 32

# Ordinary characters: anything that neither ends a word nor starts quoting or an expansion.
_PLAIN = re.compile(r"[^ \t\n;&|()<>\\'\"`$]+")
_PLAIN_IN_BRACE = re.compile(r"[^\\'\"`$}]+")
_PLAIN_IN_DQUOTE = re.compile(r"[^\"\\`$]+")
_BLANKS = re.compile(r"[ \t]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_BASH_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\+=|\[)")
_BRACE_EXPANSION = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")
_BRACED_PARAMETER = re.compile(r"(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!0-]|-)(:[-=?+]|[-=?+]|%%|%|##|#|)")
_SPECIAL_PARAMETER = "@*#?-$!0123456789"
_SEPARATORS = " \t\n;&|()<>"
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
class Command:
    """One simple command: its words after quote removal with redirections removed (words[0] the program), and
    whether an allow rule can ever match it (`why` says why not)."""

    words: tuple[str, ...]
    literal: bool = True
    why: str = ""
    redirected: bool = False  # it had redirections (dropped from `words`)
    nested: bool = False  # it runs inside a command substitution of another command


@dataclass(frozen=True, slots=True)
class Parsed:
    """Every simple command of a text in order; `unsure` says why dash and bash may read it differently (or dash
    may refuse it), and then the whole text asks."""

    commands: tuple[Command, ...]
    unsure: str = ""


class _Unsure(Exception):
    """The reader stops: the text is not one it can be sure of."""


@dataclass(slots=True)
class _Word:
    text: str  # after quote removal; an expansion keeps its source text
    why: str  # "" when the word is a literal
    quoted: bool
    plain_start: str  # the unquoted characters the word starts with (an assignment's or a reserved word's)


@dataclass(slots=True)
class _HereDoc:
    delimiter: str
    strip_tabs: bool
    quoted: bool


def simple_commands(text: str) -> Parsed:
    """The simple commands of `text` as dash reads it: pipelines, lists, subshells, groups, compound commands and
    command substitutions flattened, each substitution's commands before the command holding it."""
    reader = _Reader(text)
    first = _precheck(text)
    if first:
        return Parsed((), first)
    try:
        reader.run()
    except _Unsure as error:
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


class _Reader:
    def __init__(self, text: str, nested: bool = False) -> None:
        self.nested = nested  # inside a command substitution
        self.s = text
        self.n = len(text)
        self.commands: list[Command] = []
        self.heredocs: list[_HereDoc] = []

    def run(self) -> None:
        end = self.list_(0, 0, None)
        if end < self.n:  # a `)` with no `(`
            raise _Unsure("a `)` closes nothing: sh refuses the command")

    # -- lists and compound commands -------------------------------------------------------------------------

    def list_(self, i: int, depth: int, closer: str | None) -> int:
        """Commands from `i` to the end, or to the `)` (closer ")") or `;;`/`esac` (closer "case") that ends
        them: the index after it."""
        if depth > MAX_DEPTH:
            raise _Unsure(f"the command nests deeper than {MAX_DEPTH} levels")
        s, n = self.s, self.n
        opened: list[str] = []
        while True:
            i = self.skip_blanks(i)
            if i >= n:
                if closer is not None:
                    raise _Unsure("a `(`, `$(` or `case` is never closed: sh refuses the command")
                if opened:
                    raise _Unsure(f"a compound command is never closed (no `{opened[-1]}`): sh refuses the command")
                if self.heredocs:
                    raise _Unsure("a here-document has no body: sh refuses the command")
                return i
            c = s[i]
            if c == "\n":
                i = self.heredoc_bodies(i + 1)
                continue
            if c in ";&|":
                op = self.operator(i)
                if closer == "case" and op in (";;", ";&", ";;&"):
                    if op != ";;":
                        raise _Unsure(f"bash reads `{op}` as a case fall-through, dash refuses it")
                    if opened:
                        raise _Unsure(f"a compound command is never closed (no `{opened[-1]}`)")
                    return i + 2
                raise _Unsure(f"`{op}` where a command should be: sh refuses the command")
            if c == ")":
                if closer == ")" and not opened:
                    return i + 1
                raise _Unsure("a `)` closes nothing here: sh refuses the command")
            if c == "(":
                if s.startswith("((", i):
                    raise _Unsure("bash reads `((` as arithmetic, dash as two subshells")
                i = self.list_(i + 1, depth + 1, ")")
                i = self.after_compound(i, depth)
                continue
            word_start = i
            word, j = self.word(i, depth)
            keyword = word.plain_start if not word.quoted and word.plain_start == word.text else ""
            if keyword in _BASH_WORDS:
                raise _Unsure(_BASH_WORDS[keyword])
            if keyword in _OPENERS:
                opened.append(_OPENERS[keyword])
                i = j
                continue
            if keyword in _MIDDLES or keyword == "!":
                i = j
                continue
            if keyword in _CLOSERS:
                if not opened or opened[-1] != keyword:
                    raise _Unsure(f"`{keyword}` closes nothing: sh refuses the command")
                opened.pop()
                i = self.after_compound(j, depth)
                continue
            if keyword == "esac":
                if closer == "case" and not opened:
                    return word_start
                raise _Unsure("`esac` closes nothing: sh refuses the command")
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
                    raise _Unsure("a compound command's redirection holds an expansion or a here-document")
                continue
            return self.end_of_command(i)

    def for_(self, i: int, depth: int) -> int:
        i = self.skip_blanks(i)
        match = _NAME.match(self.s, i)
        if not match:
            raise _Unsure("`for` without a variable name: sh refuses the command")
        name, i = match.group(), match.end()
        i = self.skip_blanks(i)
        items: list[str] = []
        i = self.skip_blanks_newlines(i)
        if self.s.startswith("in", i) and (i + 2 >= self.n or self.s[i + 2] in " \t\n;"):
            i += 2
            while True:
                i = self.skip_blanks(i)
                if i >= self.n or self.s[i] in ";\n":
                    break
                if self.s[i] in _SEPARATORS:
                    raise _Unsure("an operator in a `for` list: sh refuses the command")
                word, i = self.word(i, depth)
                items.append(word.text)
        if i < self.n and self.s[i] == ";":
            i += 1
        i = self.skip_blanks_newlines(i)
        if not (self.s.startswith("do", i) and (i + 2 >= self.n or self.s[i + 2] in " \t\n;")):
            raise _Unsure("`for` without `do`: sh refuses the command")
        self.commands.append(
            Command(("for", name, *items), False, f"a for loop assigns the variable {name}", nested=self.nested)
        )
        return i + 2

    def case_(self, i: int, depth: int) -> int:
        i = self.skip_blanks(i)
        if i >= self.n or self.s[i] in _SEPARATORS:
            raise _Unsure("`case` without a word: sh refuses the command")
        _, i = self.word(i, depth)
        i = self.skip_blanks_newlines(i)
        if not (self.s.startswith("in", i) and (i + 2 >= self.n or self.s[i + 2] in " \t\n")):
            raise _Unsure("`case` without `in`: sh refuses the command")
        i += 2
        while True:
            i = self.skip_blanks_newlines(i)
            if i >= self.n:
                raise _Unsure("`case` without `esac`: sh refuses the command")
            if self.s.startswith("esac", i) and (i + 4 >= self.n or self.s[i + 4] in _SEPARATORS):
                return i + 4
            if self.s[i] == "(":
                i += 1
            while True:  # patterns: words separated by `|`, ended by `)`
                i = self.skip_blanks(i)
                if i >= self.n or self.s[i] in "\n;&<>(":
                    raise _Unsure("a case pattern without `)`: sh refuses the command")
                if self.s[i] != "|" and self.s[i] != ")":
                    _, i = self.word(i, depth)
                    i = self.skip_blanks(i)
                if i < self.n and self.s[i] == "|":
                    i += 1
                    continue
                if i < self.n and self.s[i] == ")":
                    i += 1
                    break
                raise _Unsure("a case pattern without `)`: sh refuses the command")
            i = self.list_(i, depth + 1, "case")

    # -- simple commands -------------------------------------------------------------------------------------

    def simple(self, i: int, first: _Word, j: int, depth: int) -> int:
        """The simple command starting at `i` with its first word `first` (ending at `j`)."""
        s = self.s
        words: list[_Word] = []
        why = ""
        redirected = False
        word: _Word | None = None
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
                    raise _Unsure("bash reads `" + words[-1].text[-1] + "(…)` as an extended glob, dash refuses it")
                if len(words) == 1 and not redirected:
                    close = self.skip_blanks(i + 1)
                    if close < self.n and s[close] == ")":
                        self.commands.append(
                            Command((words[0].text,), False, "a function definition", nested=self.nested)
                        )
                        return close + 1
                raise _Unsure("a `(` inside a command: sh refuses the command")
            if c in _SEPARATORS:
                break
            word, i = self.word(i, depth)
        self.emit(words, why, redirected)
        return self.end_of_command(i)

    def emit(self, words: list[_Word], why: str, redirected: bool) -> None:
        assigned = 0
        for word in words:
            if _ASSIGNMENT.match(word.plain_start):
                assigned += 1
                continue
            if _BASH_ASSIGNMENT.match(word.plain_start) and assigned == 0:
                raise _Unsure(f"bash reads `{word.text}` as an assignment, dash as a command")
            break
        texts = tuple(word.text for word in words[assigned:])
        if assigned and not texts:
            why = why or "an assignment as a command of its own changes what later commands run"
            texts = tuple(word.text for word in words)
        elif assigned:
            why = why or "an assignment before the command changes what it runs"
        if not texts:
            self.commands.append(Command((), False, why or "a redirection alone", redirected, self.nested))
            return
        if not why:
            for n, word in enumerate(words[assigned:]):
                if word.why:
                    why = ("the program word holds " if n == 0 else "a word holds ") + word.why
                    break
        if not why:
            why = command_why(texts)
        self.commands.append(Command(texts, not why, why, redirected, self.nested))

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
                raise _Unsure(f"bash reads `{op}` as a redirection of both outputs, dash as `{op[0]}` and `{op[1:]}`")
            if op in (";;", ";&", ";;&"):
                return i  # the case reader takes it
            after = self.skip_blanks(i + len(op))
            if op in ("&&", "||", "|") and (after >= self.n or self.s[after] in ";&|)"):
                raise _Unsure(f"`{op}` with no command after it: sh refuses the command")
            return i + len(op)
        if c == "(":
            raise _Unsure("a `(` after a command: sh refuses the command")
        return i

    def operator(self, i: int) -> str:
        s = self.s
        for op in (";;&", ";;", ";&", "&&", "||", "|&", "&>>", "&>"):
            if s.startswith(op, i):
                return op
        if s.startswith("\\\n", i + 1):
            raise _Unsure("a line continuation inside an operator")
        return s[i]

    def io_number(self, i: int) -> bool:
        j = i
        while j < self.n and self.s[j].isdigit() and self.s[j].isascii():
            j += 1
        return j > i and j < self.n and self.s[j] in "<>"

    def redirection(self, i: int, depth: int) -> tuple[str, int, bool]:
        """The redirection at `i`: (what its target holds that is not a literal, the index after it, whether it is
        a here-document)."""
        s = self.s
        while s[i].isdigit():
            i += 1
        if s.startswith("<<<", i):
            raise _Unsure("bash reads `<<<` as a here-string, dash refuses it")
        if s.startswith(("<(", ">("), i):
            raise _Unsure(f"bash reads `{s[i]}(…)` as a process substitution, dash refuses it")
        for op in ("<<-", "<<", ">>", "<&", ">&", "<>", ">|", "<", ">"):
            if s.startswith(op, i):
                break
        i = self.skip_blanks(i + len(op))
        if i >= self.n or s[i] in _SEPARATORS:
            raise _Unsure(f"`{op}` without a target: sh refuses the command")
        target, i = self.word(i, depth)
        if op in ("<<", "<<-"):
            if target.why and "$" in target.text:
                raise _Unsure("a here-document's delimiter holds an expansion")
            self.heredocs.append(_HereDoc(target.text, op == "<<-", target.quoted))
            return "", i, True
        if op in ("<&", ">&") and not (target.text == "-" or target.text.isdigit()) and not target.why:
            raise _Unsure(f"bash reads `{op}{target.text}` as a redirection to a file, dash refuses it")
        return target.why, i, False

    def heredoc_bodies(self, i: int) -> int:
        """Past the bodies of the here-documents started on the line that ends just before `i`."""
        s = self.s
        for doc in self.heredocs:
            while True:
                if i >= self.n:
                    raise _Unsure(f"the here-document is never ended by `{doc.delimiter}`")
                end = s.find("\n", i)
                end = self.n if end < 0 else end
                line = s[i:end]
                while not doc.quoted and _continued(line) and end < self.n:  # `\` newline joins lines
                    nxt = s.find("\n", end + 1)
                    nxt = self.n if nxt < 0 else nxt
                    line = line[:-1] + s[end + 1 : nxt]
                    end = nxt
                i = end + 1
                if (line.lstrip("\t") if doc.strip_tabs else line) == doc.delimiter:
                    break
        self.heredocs.clear()
        return min(i, self.n)

    # -- words -----------------------------------------------------------------------------------------------

    def word(self, i: int, depth: int, in_brace: bool = False) -> tuple[_Word, int]:
        """The word at `i` (in `${…}` when `in_brace`, where only an unquoted `}` ends it)."""
        s, n = self.s, self.n
        start = i
        text: list[str] = []
        plain: list[str] = []
        plain_start = ""
        why = ""
        quoted = False
        pattern = _PLAIN_IN_BRACE if in_brace else _PLAIN
        while i < n:
            match = pattern.match(s, i)
            if match:
                part = match.group()
                if i == start:
                    plain_start = part
                text.append(part)
                plain.append(part)
                i = match.end()
                continue
            c = s[i]
            if c == "\\":
                if s.startswith("\n", i + 1):
                    i += 2
                    continue
                quoted = True
                text.append(s[i + 1 : i + 2] or "\\")
                i += 2
            elif c == "'":
                end = s.find("'", i + 1)
                if end < 0:
                    raise _Unsure("a `'` is never closed: sh refuses the command")
                quoted = True
                text.append(s[i + 1 : end])
                i = end + 1
            elif c == '"':
                i, inner = self.double_quoted(i + 1, depth)
                quoted = True
                text.append(inner[0])
                why = why or inner[1]
            elif c == "`" or c == "$":
                i, part, part_why = self.dollar_or_backquote(i, depth)
                text.append(part)
                why = why or part_why
            elif in_brace and c == "}":
                break
            else:
                break
        joined = "".join(plain)
        if not why:
            if plain_start.startswith("~"):
                why = "a tilde expansion `~`"
            elif "*" in joined or "?" in joined or ("[" in joined and "]" in joined[joined.index("[") :]):
                why = "a glob pattern"
        if "{" in joined and _BRACE_EXPANSION.search(joined):
            raise _Unsure("bash reads `{…,…}` as a brace expansion, dash as a word")
        if plain_start.startswith("{") and i < n and s[i] in "<>" and re.fullmatch(r"\{[A-Za-z_]\w*\}", "".join(text)):
            raise _Unsure("bash reads `{name}>` as a file descriptor variable, dash as a word")
        if (
            not in_brace
            and _ASSIGNMENT.fullmatch(plain_start)
            and plain_start == "".join(text)
            and i < n
            and s[i] == "("
        ):
            raise _Unsure("bash reads `name=(…)` as an array, dash refuses it")
        return _Word("".join(text), why, quoted, plain_start), i

    def double_quoted(self, i: int, depth: int) -> tuple[int, tuple[str, str]]:
        s, n = self.s, self.n
        text: list[str] = []
        why = ""
        while True:
            if i >= n:
                raise _Unsure('a `"` is never closed: sh refuses the command')
            match = _PLAIN_IN_DQUOTE.match(s, i)
            if match:
                text.append(match.group())
                i = match.end()
                continue
            c = s[i]
            if c == '"':
                return i + 1, ("".join(text), why)
            if c == "\\":
                nxt = s[i + 1 : i + 2]
                if nxt == "\n":
                    i += 2
                elif nxt in ("$", "`", '"', "\\"):
                    text.append(nxt)
                    i += 2
                else:
                    text.append("\\")
                    i += 1
                continue
            i, part, part_why = self.dollar_or_backquote(i, depth, in_quotes=True)
            text.append(part)
            why = why or part_why

    def dollar_or_backquote(self, i: int, depth: int, in_quotes: bool = False) -> tuple[int, str, str]:
        """The expansion at `i` (`$…` or a backquote): (the index after it, its source text, why it is not a
        literal — "" for a `$` that starts nothing)."""
        s = self.s
        if s[i] == "`":
            return self.backquoted(i, depth)
        nxt = s[i + 1 : i + 2]
        if nxt == "(":
            if s.startswith("((", i + 1):
                return self.arithmetic(i)
            nested, self.nested = self.nested, True
            end = self.list_(i + 2, depth + 1, ")")
            self.nested = nested
            return end, s[i:end], "a command substitution `$(…)`"
        if nxt == "{":
            return self.braced(i, depth)
        if (nxt == "'" or nxt == '"') and not in_quotes:
            raise _Unsure(f"bash reads `${nxt}…{nxt}` as a quoted string, dash as `$` and a quote")
        if nxt and nxt in _SPECIAL_PARAMETER:
            return i + 2, s[i : i + 2], f"a parameter expansion `{s[i : i + 2]}`"
        match = _NAME.match(s, i + 1)
        if match:
            return match.end(), s[i : match.end()], f"a parameter expansion `{s[i : match.end()]}`"
        return i + 1, "$", ""

    def backquoted(self, i: int, depth: int) -> tuple[int, str, str]:
        s = self.s
        j = i + 1
        inner: list[str] = []
        while True:
            k = j
            while k < self.n and s[k] not in "`\\":
                k += 1
            inner.append(s[j:k])
            if k >= self.n:
                raise _Unsure("a backquote is never closed: sh refuses the command")
            if s[k] == "`":
                break
            nxt = s[k + 1 : k + 2]
            inner.append(nxt if nxt in ("$", "`", "\\") else s[k : k + 2])
            j = k + 2
        if depth + 1 > MAX_DEPTH:
            raise _Unsure(f"the command nests deeper than {MAX_DEPTH} levels")
        nested = simple_commands_at_depth("".join(inner), depth + 1, nested=True)
        self.commands.extend(nested.commands)
        if nested.unsure:
            raise _Unsure(nested.unsure)
        return k + 1, s[i : k + 1], "a command substitution in backquotes"

    def arithmetic(self, i: int) -> tuple[int, str, str]:
        s = self.s
        level = 0
        j = i + 1
        while j < self.n:
            c = s[j]
            if c == "(":
                level += 1
            elif c == ")":
                level -= 1
                if level == 1 and not s.startswith(")", j + 1):
                    raise _Unsure("`$((` that is not arithmetic: bash and dash read it differently")
                if level == 0:
                    body = s[i + 3 : j - 1]
                    if "$(" in body or "`" in body or "[" in body:
                        raise _Unsure("an arithmetic expansion holding a command or a subscript")
                    return j + 1, s[i : j + 1], "an arithmetic expansion `$((…))`"
            j += 1
        raise _Unsure("a `$((` is never closed: sh refuses the command")

    def braced(self, i: int, depth: int) -> tuple[int, str, str]:
        s = self.s
        match = _BRACED_PARAMETER.match(s, i + 2)
        if not match or (match.group(1) and match.group(3)):
            raise _Unsure("bash reads this `${…}` form, dash refuses it")
        j = match.end()
        if match.group(3):
            if depth + 1 > MAX_DEPTH:
                raise _Unsure(f"the command nests deeper than {MAX_DEPTH} levels")
            _, j = self.word(j, depth + 1, in_brace=True)
        if j >= self.n or s[j] != "}":
            raise _Unsure("bash reads this `${…}` form, dash refuses it")
        return j + 1, s[i : j + 1], f"a parameter expansion `{s[i : j + 1]}`"

    # -- blanks ----------------------------------------------------------------------------------------------

    def skip_blanks(self, i: int) -> int:
        """Past blanks, line continuations and a comment (up to, not past, its newline)."""
        s = self.s
        while i < self.n:
            c = s[i]
            if c == " " or c == "\t":
                i = _BLANKS.match(s, i).end()  # type: ignore[union-attr]
            elif c == "\\" and s.startswith("\n", i + 1):
                i += 2
            elif c == "#":
                end = s.find("\n", i)
                return self.n if end < 0 else end
            else:
                return i
        return i

    def skip_blanks_newlines(self, i: int) -> int:
        while True:
            i = self.skip_blanks(i)
            if i < self.n and self.s[i] == "\n":
                i = self.heredoc_bodies(i + 1)
                continue
            return i


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def simple_commands_at_depth(text: str, depth: int, nested: bool = False) -> Parsed:
    """`simple_commands` of a text nested `depth` levels deep (a backquoted command, a `sh -c` argument)."""
    reader = _Reader(text, nested)
    try:
        reader.list_(0, depth, None)
    except _Unsure as error:
        return Parsed(tuple(reader.commands), str(error))
    return Parsed(tuple(reader.commands), "")
