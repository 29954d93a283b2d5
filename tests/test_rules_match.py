"""Rules and decisions (docs/approvals.md#matching): precedence, the default, shell words and their boundaries,
`tool:` and `mcp:` patterns, what a pattern may be and what a person is told when it may not, and the rule an
"always" answer proposes."""

from __future__ import annotations

import pytest

from chock.rules import Rule, RuleSet, Verdict, check_pattern, propose


def rules(*specs: tuple[Verdict, str]) -> RuleSet:
    return RuleSet(
        Rule(verdict, check_pattern(pattern), f"config.zon line {n}", f"c{n}")
        for n, (verdict, pattern) in enumerate(specs)
    )


def verdict(ruleset: RuleSet, command: str, default: Verdict = "ask") -> Verdict:
    return ruleset.decide("shell", command, default).verdict


# -- precedence ------------------------------------------------------------------------------------------------


def test_deny_beats_ask_beats_allow() -> None:
    assert (
        verdict(rules(("allow", "git"), ("ask", "git push"), ("deny", "git push --force")), "git push --force")
        == "deny"
    )
    assert verdict(rules(("allow", "git"), ("ask", "git push")), "git push origin") == "ask"
    assert verdict(rules(("allow", "git push"), ("ask", "git")), "git push") == "ask"
    assert verdict(rules(("deny", "git"), ("allow", "git push")), "git push") == "deny"
    assert verdict(rules(("allow", "git")), "git push") == "allow"


def test_any_matching_rule_beats_the_default() -> None:
    assert verdict(rules(("allow", "pytest")), "pytest -x", default="deny") == "allow"
    assert verdict(rules(("ask", "pytest")), "pytest -x", default="allow") == "ask"
    assert verdict(rules(("deny", "pytest")), "pytest -x", default="allow") == "deny"
    assert verdict(rules(("allow", "pytest")), "ls", default="deny") == "deny"
    assert verdict(rules(), "ls", default="allow") == "allow"


def test_the_strictest_simple_command_wins() -> None:
    set_ = rules(("allow", "pytest"), ("allow", "git diff"), ("deny", "git push"))
    assert verdict(set_, "pytest && git diff") == "allow"
    assert verdict(set_, "pytest; curl x | sh") == "ask"
    assert verdict(set_, "pytest; curl x | sh", default="allow") == "allow"
    assert verdict(set_, "pytest; git push") == "deny"
    assert verdict(set_, "git diff | git push", default="allow") == "deny"
    assert verdict(set_, "if pytest; then git push; fi") == "deny"


def test_an_unsure_parse_asks_and_a_deny_still_wins() -> None:
    set_ = rules(("allow", "pytest"), ("deny", "git push"))
    assert verdict(set_, "[[ -f x ]] && pytest", default="allow") == "ask"
    assert verdict(set_, "pytest |& cat", default="allow") == "ask"
    assert verdict(set_, "pytest &> log", default="deny") == "deny"
    assert verdict(set_, "pytest; git push |& cat") == "deny"
    assert verdict(set_, "[[ -f x ]] && git push origin") == "deny"


def test_the_decision_names_the_rules_that_decided_and_where_they_came_from() -> None:
    set_ = rules(("allow", "pytest"), ("allow", "git diff"), ("deny", "git push"))
    denied = set_.decide("shell", "pytest; git push origin", "ask")
    assert [rule.pattern for rule in denied.rules] == ["git push"]
    assert denied.reason == "denied by rule `git push` (config.zon line 2)"
    allowed = set_.decide("shell", "pytest -x && git diff --stat", "ask")
    assert [rule.id for rule in allowed.rules] == ["c0", "c1"]
    assert "`pytest` (config.zon line 0)" in allowed.reason and "`git diff` (config.zon line 1)" in allowed.reason
    asked = set_.decide("shell", "pytest; curl x", "ask")
    assert asked.rules == () and "`curl x`" in asked.reason and "default is ask" in asked.reason
    smuggled = set_.decide("shell", "pytest $(id)", "ask")
    assert smuggled.rules == ()


def test_a_reason_stays_one_short_line_however_many_rules_decided() -> None:
    set_ = rules(*(("allow", f"tool{n}") for n in range(100)))
    decision = set_.decide("shell", "; ".join(f"tool{n} x" for n in range(100)), "ask")
    assert decision.verdict == "allow" and len(decision.rules) == 100
    assert decision.reason.endswith("and 97 more") and len(decision.reason) < 200


# -- shell words -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "command", "matches"),
    [
        ("pytest", "pytest", True),
        ("pytest", "pytest -x a.py", True),
        ("pytest", "pytest-watch", False),
        ("pytest", "pytest.sh", False),
        ("pytest", "py.test", False),
        ("pytest", "./pytest", False),
        ("pytest", "/usr/bin/pytest", False),
        ("pytest", "'pytest' -x", True),
        ("pytest", "pytest > out.txt 2>&1", True),
        ("git diff", "git diff", True),
        ("git diff", "git diff HEAD~1 -- a.py", True),
        ("git diff", "git difftool", False),
        ("git diff", "git", False),
        ("git diff", "git log diff", False),
        ("git diff", "git 'diff'", True),
        ("git diff", "git di\\ff", True),
        ("npm run test", "npm run test -- --watch", True),
        ("npm run test", "npm run test:unit", False),
        ("npm run test", "npm run", False),
        ("grep 'a b'", "grep 'a b' file", True),
        ("grep 'a b'", "grep a b file", False),
        ("/usr/bin/make", "/usr/bin/make all", True),
        ("/usr/bin/make", "make all", False),
    ],
)
def test_an_allow_rule_matches_whole_leading_words(rule: str, command: str, matches: bool) -> None:
    assert verdict(rules(("allow", rule)), command) == ("allow" if matches else "ask")


@pytest.mark.parametrize(
    "command",
    [
        "env git push",
        "sudo git push origin",
        "/usr/bin/git push",
        "nice -n 5 git push",
        "timeout 5 git push",
        "bash -c 'git push'",
        "sh -c 'cd x && git push'",
        "eval git push",
        "echo $(git push)",
        "echo `git push`",
        "x=$(git push)",
        "ls | xargs git push",
        "find . -exec git push ;",
        "git() { :; }; git push",
        "PATH=. git push",
        "[[ -n x ]] && git push",
        "git -C . push",  # git's own options before its subcommand
        "git --no-pager push origin",
        "git -C sub --git-dir .git --work-tree=. push",
        "git -c user.name=x push",
        "sudo git -C . push",
        "env sh -c 'git push'",  # a shell a program runs
        "nohup sh -c 'git push'",
        "timeout 5 bash -c 'git push'",
        "sh -c -- 'git push'",  # the code is the first operand, past every option
        "sh -c -e 'git push'",
        "sh -o errexit -c 'git push'",
        "bash -O extglob -c 'git push'",
        "bash --rcfile /dev/null -c 'git push'",
        "2\\\n>/dev/null git push",  # `2\<newline>>` is `2>` to sh: the reader is unsure
        "cat <<\\\n-EOF\nEOF\ngit push\n-EOF",  # `<<\<newline>-` is `<<-`
    ],
)
def test_a_deny_rule_looks_through_what_runs_its_arguments(command: str) -> None:
    assert verdict(rules(("allow", "echo"), ("allow", "ls"), ("deny", "git push")), command, "allow") == "deny"


def test_a_deny_rule_does_not_match_its_words_as_a_literal_argument() -> None:
    assert verdict(rules(("allow", "echo"), ("deny", "git push")), "echo git push") == "allow"
    assert verdict(rules(("allow", "grep"), ("deny", "git push")), "grep -r 'git push' .") == "allow"


def test_a_tool_rule_never_matches_a_shell_command() -> None:
    set_ = rules(("allow", "tool:write_file"), ("allow", "mcp:srv/*"))
    assert verdict(set_, "tool:write_file x") == "ask"
    assert verdict(set_, "mcp:srv/x") == "ask"
    assert set_.decide("shell", None, "ask").verdict == "ask"


# -- tools and MCP tools ---------------------------------------------------------------------------------------


def test_tool_rules() -> None:
    set_ = rules(("allow", "tool:write_file"), ("deny", "tool:edit_file"))
    assert set_.decide("write_file", None, "ask").verdict == "allow"
    assert set_.decide("edit_file", None, "allow").verdict == "deny"
    assert set_.decide("read_file", None, "allow").verdict == "allow"
    assert set_.decide("read_file", None, "ask").reason == "no rule names tool:read_file: the default is ask"
    assert set_.decide("write_file", None, "ask").reason == "allowed by rule `tool:write_file` (config.zon line 0)"


def test_mcp_rules_by_tool_and_by_server() -> None:
    set_ = rules(("allow", "mcp:docs/*"), ("deny", "mcp:docs/delete"), ("ask", "mcp:git/push"))
    assert set_.decide("mcp:docs/search", None, "ask").verdict == "allow"
    assert set_.decide("mcp:docs/delete", None, "ask").verdict == "deny"
    assert set_.decide("mcp:git/push", None, "allow").verdict == "ask"
    assert set_.decide("mcp:git/log", None, "ask").verdict == "ask"
    assert set_.decide("mcp:docsx/search", None, "deny").verdict == "deny"
    assert set_.decide("mcp:docs/a/b", None, "ask").verdict == "allow"
    assert set_.decide("mcp:docs/search", None, "ask").rules[0].pattern == "mcp:docs/*"


# -- patterns --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("git diff", "git diff"),
        ("  git   diff  ", "git diff"),
        ("git 'diff'", "git diff"),
        ('grep "a b"', "grep 'a b'"),
        ("tool:write_file", "tool:write_file"),
        ("mcp:srv/tool", "mcp:srv/tool"),
        ("mcp:srv/*", "mcp:srv/*"),
        ("sudo", "sudo"),
        ("./run.sh test", "./run.sh test"),
        ("grep 'a;b|c'", "grep 'a;b|c'"),
        ("grep '$x' \\(", "grep '$x' '('"),
    ],
)
def test_check_pattern_normalises(text: str, pattern: str) -> None:
    assert check_pattern(text) == pattern
    assert check_pattern(pattern) == pattern


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "pattern is empty: write the command's leading words"),
        ("   ", "pattern is empty"),
        ("git log:*", "write `git log`"),
        ("git log *", "write `git log`"),
        ("Bash(git log:*)", "holds `(`"),
        ("git push; rm x", "holds `;`"),
        ("git push && x", "holds `&`"),
        ("pytest | tee", "holds `|`"),
        ("pytest > out", "holds a redirection"),
        ("pytest $(x)", "holds `$`"),
        ("pytest `x`", "holds a backquote"),
        ("pytest\nls", "holds a newline"),
        ("PATH=. pytest", "assignment"),
        ("*.py", "glob"),
        ("~/bin/x", "tilde"),
        ("git #push", "comment"),
        ("pytest 'a", "never closed"),
        ("[[ x", "`[[`"),
        ("tool:", "write `tool:<name>`"),
        ("tool:a b", "write `tool:<name>`"),
        ("tool:shell", ".approvals.shell"),
        ("mcp:srv", "write `mcp:<server>/<tool>` or `mcp:<server>/*`"),
        ("mcp:/x", "mcp:<server>/<tool>"),
        ("mcp:srv/", "mcp:<server>/<tool>"),
        ("mcp:srv/a*", "mcp:<server>/<tool>"),
    ],
)
def test_check_pattern_refuses_with_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        check_pattern(text)
    assert message in str(refused.value)


# -- the "always" proposal -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "pattern", "whole", "why"),
    [
        ("pytest", "pytest", False, ""),
        ("pytest -x tests/test_a.py", "pytest", False, ""),
        ("pytest -x tests/test_a.py -k b", "pytest", False, ""),
        ("pytest tests/test_a.py", "pytest", False, ""),
        ("git diff", "git diff", False, ""),
        ("git diff --stat", "git diff", False, ""),
        ("git diff a.py", "git diff", False, ""),
        ("git commit -m 'fix it'", "git commit", False, ""),
        ("git remote add origin x", "git remote add", False, ""),
        ("npm run test", "npm run test", False, ""),
        ("npm run test -- --watch", "npm run test", False, ""),
        ("cargo build --release", "cargo build", False, ""),
        ("make CC=gcc all", "make", False, ""),
        ("ls", "ls", False, ""),
        ("ls -la", "ls", False, ""),
        ("grep foo src/", "grep foo", False, ""),
        ("pytest > out.txt 2>&1", "pytest", False, ""),
        ("./run.sh test", "./run.sh test", True, "named by a path"),
        ("/usr/local/bin/tool x", "/usr/local/bin/tool x", True, "named by a path"),
        ("python x.py --fast", "python x.py --fast", True, "runs whatever code"),
        ("python3 -m pytest", "python3 -m pytest", True, "runs whatever code"),
        ("node build.js", "node build.js", True, "runs whatever code"),
        ("bash scripts/test", "bash scripts/test", True, "runs whatever code"),
        ("python x.py 'a;b' '$(x)' '`y`'", "python x.py 'a;b' '$(x)' '`y`'", True, "runs whatever code"),
        ("npx prettier --check .", "npx prettier --check .", True, "`npx` runs whatever"),
        ("uv run pytest -x", "uv run pytest -x", True, "`uv run` runs whatever"),
        ("docker run --rm img", "docker run --rm img", True, "`docker` runs whatever"),
        ("pytest; curl x", "pytest", False, "other 1 command"),
        ("cd tests && pytest", "cd", False, "other 1 command"),
        ("pytest $(id)", "pytest", False, "never matches this command"),
        ("PATH=. pytest", "pytest", False, "never matches"),
        ("$X -x", "", False, "no rule can be proposed"),
        ("", "", False, "no rule can be proposed"),
        ("[[ x ]]", "", False, "no rule can be proposed"),
    ],
)
def test_propose(command: str, pattern: str, whole: bool, why: str) -> None:
    proposal = propose(command)
    assert (proposal.pattern, proposal.whole) == (pattern, whole), proposal
    assert why in proposal.why
    if not why:
        assert proposal.why == ""
    if pattern:
        assert check_pattern(pattern) == pattern
