"""Words of a shell command as dash reads them (XCU 2.2 quoting, 2.3 token recognition, the expansions of 2.6
that a word may hold): the half of the reader that takes one word at a time, with its quotes, expansions and
command substitutions (docs/approvals.md#matching); chock/rules/shell_syntax.py is the grammar around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_DEPTH = 32

# Ordinary characters: anything that neither ends a word nor starts quoting or an expansion.
_PLAIN = re.compile(r"[^ \t\n;&|()<>\\'\"`$]+")
_PLAIN_IN_BRACE = re.compile(r"[^\\'\"`$}]+")
_PLAIN_IN_DQUOTE = re.compile(r"[^\"\\`$]+")
_BLANKS = re.compile(r"[ \t]+")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
BASH_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\+=|\[)")
_BRACE_EXPANSION = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")
_BRACED_PARAMETER = re.compile(r"(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!0-]|-)(:[-=?+]|[-=?+]|%%|%|##|#|)")
_SPECIAL_PARAMETER = "@*#?-$!0123456789"
SEPARATORS = " \t\n;&|()<>"
_ENDS_WORD = " \t\n;&|)<>"  # not `(`: a word just before one is an extended glob or a function's name
_SPECIAL_IN_PLAIN = re.compile(r"[*?\[{~]")


class Unsure(Exception):
    """The reader stops: the text is not one it can be sure of."""


@dataclass(slots=True)
class Word:
    text: str  # after quote removal; an expansion keeps its source text
    why: str  # "" when the word is a literal
    quoted: bool
    plain_start: str  # the unquoted characters the word starts with (an assignment's or a reserved word's)


class WordReader:
    """Reads words of `text`; the grammar (a subclass) reads the lists a command substitution holds."""

    def __init__(self, text: str, nested: bool = False) -> None:
        self.nested = nested  # inside a command substitution
        self.s = text
        self.n = len(text)

    def list_(self, i: int, depth: int, closer: str | None) -> int:
        """The commands from `i` to the `)` that ends them: the index after it (the grammar's)."""
        raise NotImplementedError

    def backquoted_commands(self, text: str, depth: int) -> None:
        """Read the commands of a backquoted command substitution's text (the grammar's)."""
        raise NotImplementedError

    def open_heredocs(self) -> int:
        """How many here-documents wait for their bodies (the grammar's)."""
        return 0

    def word(self, i: int, depth: int, in_brace: bool = False) -> tuple[Word, int]:
        """The word at `i` (in `${…}` when `in_brace`, where only an unquoted `}` ends it)."""
        s, n = self.s, self.n
        if not in_brace:  # the common word: ordinary characters only, nothing a glob or a brace could make of them
            match = _PLAIN.match(s, i)
            if match and (match.end() == n or s[match.end()] in _ENDS_WORD) and not _SPECIAL_IN_PLAIN.search(match[0]):
                return Word(match[0], "", False, match[0]), match.end()
        text: list[str] = []
        plain: list[str] = []
        plain_start = ""
        starting = True  # only unquoted characters and line continuations so far: `PA\<newline>TH=.` assigns
        why = ""
        quoted = False
        pattern = _PLAIN_IN_BRACE if in_brace else _PLAIN
        while i < n:
            match = pattern.match(s, i)
            if match:
                part = match.group()
                if starting:
                    plain_start += part
                text.append(part)
                plain.append(part)
                i = match.end()
                continue
            c = s[i]
            if c == "\\":
                if s.startswith("\n", i + 1):
                    i += 2
                    continue
                starting = False
                quoted = True
                text.append(s[i + 1 : i + 2] or "\\")
                i += 2
            elif c == "'":
                starting = False
                end = s.find("'", i + 1)
                if end < 0:
                    raise Unsure("a `'` is never closed: sh refuses the command")
                quoted = True
                text.append(s[i + 1 : end])
                i = end + 1
            elif c == '"':
                starting = False
                i, inner = self.double_quoted(i + 1, depth)
                quoted = True
                text.append(inner[0])
                why = why or inner[1]
            elif c == "`" or c == "$":
                starting = False
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
            raise Unsure("bash reads `{…,…}` as a brace expansion, dash as a word")
        if plain_start.startswith("{") and i < n and s[i] in "<>" and re.fullmatch(r"\{[A-Za-z_]\w*\}", "".join(text)):
            raise Unsure("bash reads `{name}>` as a file descriptor variable, dash as a word")
        if (
            not in_brace
            and ASSIGNMENT.fullmatch(plain_start)
            and plain_start == "".join(text)
            and i < n
            and s[i] == "("
        ):
            raise Unsure("bash reads `name=(…)` as an array, dash refuses it")
        return Word("".join(text), why, quoted, plain_start), i

    def double_quoted(self, i: int, depth: int) -> tuple[int, tuple[str, str]]:
        s, n = self.s, self.n
        text: list[str] = []
        why = ""
        while True:
            if i >= n:
                raise Unsure('a `"` is never closed: sh refuses the command')
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
            return self.backquoted(i, depth, in_quotes)
        nxt = s[i + 1 : i + 2]
        if nxt == "\\" and s.startswith("\n", i + 2):  # sh joins the lines first: `$\<newline>(…)` is `$(…)`
            raise Unsure("a line continuation right after `$`: what it expands is not what was shown")
        if nxt == "(":
            if s.startswith("((", i + 1):
                return self.arithmetic(i)
            nested, self.nested, open_before = self.nested, True, self.open_heredocs()
            end = self.list_(i + 2, depth + 1, ")")
            self.nested = nested
            if self.open_heredocs() > open_before:  # dash runs the lines after the `)` as commands
                raise Unsure("a here-document begun in `$(…)` has no body before the `)`: dash and bash differ")
            return end, s[i:end], "a command substitution `$(…)`"
        if nxt == "{":
            return self.braced(i, depth, in_quotes)
        if nxt == "[" and not in_quotes:
            raise Unsure("bash reads `$[…]` as arithmetic, dash as `$` and a glob")
        if (nxt == "'" or nxt == '"') and not in_quotes:
            raise Unsure(f"bash reads `${nxt}…{nxt}` as a quoted string, dash as `$` and a quote")
        if nxt and nxt in _SPECIAL_PARAMETER:
            return i + 2, s[i : i + 2], f"a parameter expansion `{s[i : i + 2]}`"
        match = NAME.match(s, i + 1)
        if match:
            return match.end(), s[i : match.end()], f"a parameter expansion `{s[i : match.end()]}`"
        return i + 1, "$", ""

    def backquoted(self, i: int, depth: int, in_quotes: bool = False) -> tuple[int, str, str]:
        """A backquoted command substitution at `i`: a `\\` before `$`, a backquote or `\\` is removed from the
        command's text, and within double quotes or a here-document before `"` too (as dash does)."""
        s = self.s
        escaped = ("$", "`", "\\", '"') if in_quotes else ("$", "`", "\\")
        j = i + 1
        inner: list[str] = []
        while True:
            k = j
            while k < self.n and s[k] not in "`\\":
                k += 1
            inner.append(s[j:k])
            if k >= self.n:
                raise Unsure("a backquote is never closed: sh refuses the command")
            if s[k] == "`":
                break
            nxt = s[k + 1 : k + 2]
            inner.append(nxt if nxt in escaped else s[k : k + 2])
            j = k + 2
        if depth + 1 > MAX_DEPTH:
            raise Unsure(f"the command nests deeper than {MAX_DEPTH} levels")
        self.backquoted_commands("".join(inner), depth + 1)
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
                    raise Unsure("`$((` that is not arithmetic: bash and dash read it differently")
                if level == 0:
                    body = s[i + 3 : j - 1]
                    if "$(" in body or "`" in body or "[" in body:
                        raise Unsure("an arithmetic expansion holding a command or a subscript")
                    return j + 1, s[i : j + 1], "an arithmetic expansion `$((…))`"
            j += 1
        raise Unsure("a `$((` is never closed: sh refuses the command")

    def braced(self, i: int, depth: int, in_quotes: bool = False) -> tuple[int, str, str]:
        """`${…}` at `i`; within double quotes or a here-document a `'` in it is a quote to some forms of sh and a
        plain character to others (`"${x:-'}"` ends at the first `}` in dash), so it is unsure."""
        s = self.s
        match = _BRACED_PARAMETER.match(s, i + 2)
        if not match or (match.group(1) and match.group(3)):
            raise Unsure("bash reads this `${…}` form, dash refuses it")
        j = match.end()
        if match.group(3):
            if depth + 1 > MAX_DEPTH:
                raise Unsure(f"the command nests deeper than {MAX_DEPTH} levels")
            _, j = self.word(j, depth + 1, in_brace=True)
        if j >= self.n or s[j] != "}":
            raise Unsure("bash reads this `${…}` form, dash refuses it")
        if in_quotes and "'" in s[i:j]:
            raise Unsure('a `\'` inside `"${…}"`: sh reads it as a quote in some forms and as a character in others')
        return j + 1, s[i : j + 1], f"a parameter expansion `{s[i : j + 1]}`"

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
