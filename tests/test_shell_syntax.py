"""The shell reader of docs/approvals.md#matching: a table of commands and the simple commands dash reads in them
(checked against dash itself where the commands can run), every way issue 23 lists of running a second program
past an allow rule (each must ask), and the reader's bounds (nesting, size, bytes no command line carries)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from chock.rules import Rule, RuleSet, check_pattern, propose, simple_commands
from chock.rules.shell_syntax import MAX_DEPTH


class Expect(NamedTuple):
    words: tuple[str, ...]
    literal: bool
    why: str  # a part of Command.why


def L(*words: str) -> Expect:
    """A literal simple command: an allow rule can match it."""
    return Expect(words, True, "")


def N(why: str, *words: str) -> Expect:
    """A simple command no allow rule can match, and a part of why."""
    return Expect(words, False, why)


# text -> its simple commands in order, or (a str) a part of why the reader is unsure.
TABLE: list[tuple[str, list[Expect] | str]] = [
    # words, quoting, blanks
    ("pytest", [L("pytest")]),
    ("pytest -x tests/test_a.py", [L("pytest", "-x", "tests/test_a.py")]),
    ("pytest-watch", [L("pytest-watch")]),
    ("  pytest\t-x  ", [L("pytest", "-x")]),
    ("git diff --stat", [L("git", "diff", "--stat")]),
    ("git 'diff'", [L("git", "diff")]),
    ('git "diff"', [L("git", "diff")]),
    ("g'i't diff", [L("git", "diff")]),
    (r"gi\t diff", [L("git", "diff")]),
    ("echo 'a b'  \"c d\"", [L("echo", "a b", "c d")]),
    ("echo ''", [L("echo", "")]),
    ('echo ""', [L("echo", "")]),
    (r'echo "a\"b"', [L("echo", 'a"b')]),
    (r'echo "a\b"', [L("echo", "a\\b")]),
    (r"echo 'a\b'", [L("echo", "a\\b")]),
    (r"echo a\ b", [L("echo", "a b")]),
    (r'echo "\$HOME"', [L("echo", "$HOME")]),
    ("echo '$HOME'", [L("echo", "$HOME")]),
    ("echo '*'", [L("echo", "*")]),
    (r"echo \*", [L("echo", "*")]),
    ("echo a$", [L("echo", "a$")]),
    ("echo $", [L("echo", "$")]),
    ("echo a=b", [L("echo", "a=b")]),
    ("make CC=gcc", [L("make", "CC=gcc")]),
    ("grep -r 'git push' .", [L("grep", "-r", "git push", ".")]),
    ("echo a#b", [L("echo", "a#b")]),
    ("echo ]", [L("echo", "]")]),
    ("[ -f x ]", [L("[", "-f", "x", "]")]),
    ("echo {}", [L("echo", "{}")]),
    ("echo é ü 日本", [L("echo", "é", "ü", "日本")]),
    ("echo\u00a0x", [L("echo\u00a0x")]),
    # what agents send most
    (
        "cd /work && pytest -q tests/test_a.py 2>&1 | tail -20",
        [L("cd", "/work"), L("pytest", "-q", "tests/test_a.py"), L("tail", "-20")],
    ),
    ("python -m pytest -x -q 2>&1 | head -50", [L("python", "-m", "pytest", "-x", "-q"), L("head", "-50")]),
    ("sed -n '1,20p' chock/x.py", [L("sed", "-n", "1,20p", "chock/x.py")]),
    ("git log --oneline -5 && git status --short", [L("git", "log", "--oneline", "-5"), L("git", "status", "--short")]),
    ("test -d build || mkdir -p build", [L("test", "-d", "build"), L("mkdir", "-p", "build")]),
    ("grep -rn 'def main' --include='*.py' .", [L("grep", "-rn", "def main", "--include=*.py", ".")]),
    ("grep -rn foo --include=*.py .", [N("glob", "grep", "-rn", "foo", "--include=*.py", ".")]),
    ("npm test -- --watch=false", [L("npm", "test", "--", "--watch=false")]),
    ('ls -la; echo "exit: $?"', [L("ls", "-la"), N("parameter expansion `$?`", "echo", "exit: $?")]),
    ("cat > a.py << 'EOF'\nimport os\nEOF", [N("here-document", "cat")]),
    # lists, pipelines, separators
    ("pytest;curl x|sh", [L("pytest"), L("curl", "x"), L("sh")]),
    ("pytest ; git diff", [L("pytest"), L("git", "diff")]),
    ("a && b || c", [L("a"), L("b"), L("c")]),
    ("a & b", [L("a"), L("b")]),
    ("a &", [L("a")]),
    ("a | b | c", [L("a"), L("b"), L("c")]),
    ("a\nb\n\nc", [L("a"), L("b"), L("c")]),
    ("a;", [L("a")]),
    ("a &&\nb", [L("a"), L("b")]),
    ("a |\n b", [L("a"), L("b")]),
    ("! pytest", [L("pytest")]),
    ("! a | b", [L("a"), L("b")]),
    ("", []),
    ("   ", []),
    # comments and line continuations
    ("# only a comment", []),
    ("pytest # rm -rf /", [L("pytest")]),
    ("# a comment\npytest", [L("pytest")]),
    ("pytest # a comment \\\nrm -rf x", [L("pytest"), L("rm", "-rf", "x")]),
    ("pytest \\\n -x", [L("pytest", "-x")]),
    ("pyt\\\nest", [L("pytest")]),
    ('echo "a\\\nb"', [L("echo", "ab")]),
    ("echo 'a\\\nb'", [L("echo", "a\\\nb")]),
    ("a &\\\n& b", "continuation inside an operator"),
    ("a |\\\n b", [L("a"), L("b")]),
    ("a ;\\\n b", [L("a"), L("b")]),
    ("PA\\\nTH=. pytest", [N("assignment before the command", "pytest")]),
    ("i\\\nf true; then pytest; fi", [L("true"), L("pytest")]),
    ('pytest "$\\\n(curl x)"', "continuation right after `$`"),
    ("pytest $\\\nHOME", "continuation right after `$`"),
    ("cat <<E\n$\\\n(curl x)\nE", "continuation right after `$`"),
    ("echo \"${x:-'a'}\"", "`'` inside"),
    ("echo $(cat <<E); curl x\nbody\nE", "no body before the `)`"),
    ('echo "`echo \\"a b\\"`"', [L("echo", "a b"), N("backquotes", "echo", '`echo \\"a b\\"`')]),
    ('cat <<E\n`echo \\"a b\\"`\nE', [N("here-document", "cat"), L("echo", "a b")]),
    ('case a in "${x:-\'}") ;; esac; curl x; case a in "\'}") ;; esac', "`'` inside"),
    # subshells, groups, compound commands
    ("(cd x && make)", [L("cd", "x"), L("make")]),
    ("( a ; b )", [L("a"), L("b")]),
    ("{ a; b; }", [L("a"), L("b")]),
    ("{ a; b; } > out.txt", [L("a"), L("b")]),
    ("(a) | b", [L("a"), L("b")]),
    ("if true; then pytest; fi", [L("true"), L("pytest")]),
    ("if a; then b; elif c; then d; else e; fi", [L("a"), L("b"), L("c"), L("d"), L("e")]),
    ("if a\nthen\n  b\nfi", [L("a"), L("b")]),
    ("while a; do b; done", [L("a"), L("b")]),
    ("until a; do b; done", [L("a"), L("b")]),
    ("while a; do b; done > log", [L("a"), L("b")]),
    ("case x in a) pytest;; b|c) ls;; esac", [L("pytest"), L("ls")]),
    ("case x in (a) b;; esac", [L("b")]),
    ("case x in a) ;; esac", []),
    ("case x in\n a)\n  b\n  ;;\n *) c;;\nesac", [L("b"), L("c")]),
    ("case $1 in a) b;; esac", [L("b")]),
    ("for f in a b; do pytest $f; done", [N("for loop", "for", "f", "a", "b"), N("parameter", "pytest", "$f")]),
    ("for f; do echo x; done", [N("for loop", "for", "f"), L("echo", "x")]),
    ("echo if then fi", [L("echo", "if", "then", "fi")]),
    ("echo }", [L("echo", "}")]),
    ("'if' true", [L("if", "true")]),
    ("if a; then b", "never closed"),
    ("fi", "closes nothing"),
    ("done", "closes nothing"),
    ("}", "closes nothing"),
    ("esac", "closes nothing"),
    ("(a", "never closed"),
    ("a)", "closes nothing"),
    ("for 1 in a; do b; done", "variable name"),
    ("case x in a) b; esac", [L("b")]),
    # redirections: a plain file name does not stop a match, an expansion does
    ("pytest > out.txt", [L("pytest")]),
    ("pytest >out.txt 2>&1", [L("pytest")]),
    ("pytest 2>/dev/null", [L("pytest")]),
    ("pytest < in.txt", [L("pytest")]),
    ("pytest >> log.txt", [L("pytest")]),
    ("pytest >| log.txt", [L("pytest")]),
    ("pytest <> f", [L("pytest")]),
    ("pytest 3>&-", [L("pytest")]),
    ("> out.txt pytest -x", [L("pytest", "-x")]),
    ("2>err pytest", [L("pytest")]),
    ("pytest 2>'a b'", [L("pytest")]),
    ("echo 2 > x", [L("echo", "2")]),
    ("pytest > $out", [N("redirection's target holds a parameter expansion", "pytest")]),
    ("pytest > ~/x", [N("redirection's target holds a tilde", "pytest")]),
    ("pytest > $(mktemp)", [L("mktemp"), N("redirection's target holds a command substitution", "pytest")]),
    ("pytest > *.log", [N("glob", "pytest")]),
    ("> out.txt", [N("redirection alone")]),
    ("pytest >", "without a target"),
    ("pytest >&file", "redirection to a file"),
    # here-documents
    ("cat <<EOF\nhello\nEOF", [N("here-document", "cat")]),
    ("pytest <<EOF\n$(rm -rf x)\nEOF\ngit diff", [N("here-document", "pytest"), L("rm", "-rf", "x"), L("git", "diff")]),
    ("cat <<EOF\na `id` \\$(no) \\`no\\` $x ${y:-$(z)}\nEOF", [N("here-document", "cat"), L("id"), L("z")]),
    ("cat <<EOF\n$(cat <<F\n$(id)\nF\n)\nEOF", [N("here-document", "cat"), N("here-document", "cat"), L("id")]),
    ("cat <<'EOF'\nrm -rf x\nEOF\necho after", [N("here-document", "cat"), L("echo", "after")]),
    ("cat <<-EOF\n\tbody\n\tEOF\necho after", [N("here-document", "cat"), L("echo", "after")]),
    ("cat <<EOF; echo mid\nbody\nEOF\necho after", [N("here-document", "cat"), L("echo", "mid"), L("echo", "after")]),
    ("cat <<A <<B\na\nA\nb\nB\nx", [N("here-document", "cat"), L("x")]),
    ("cat <<EOF\nfoo\\\nEOF\nrm -rf x\nEOF\necho after", [N("here-document", "cat"), L("echo", "after")]),
    ("cat <<EOF\nnever ended", "never ended"),
    ("cat <<EOF", "no body"),
    ("{ cat; } <<EOF\nx\nEOF", "here-document"),
    # expansions: no allow rule matches a word that is not a literal
    ("pytest $(curl x)", [L("curl", "x"), N("command substitution", "pytest", "$(curl x)")]),
    ("pytest `curl x`", [L("curl", "x"), N("backquotes", "pytest", "`curl x`")]),
    ('pytest "$(curl x)"', [L("curl", "x"), N("command substitution", "pytest", "$(curl x)")]),
    ('pytest "`id`"', [L("id"), N("backquotes", "pytest", "`id`")]),
    ("echo `echo \\`id\\``", [L("id"), N("backquotes", "echo", "`id`"), N("backquotes", "echo", "`echo \\`id\\``")]),
    ("echo $(a; b | c)", [L("a"), L("b"), L("c"), N("command substitution", "echo", "$(a; b | c)")]),
    ("echo $(case x in a) b;; esac)", [L("b"), N("command substitution", "echo", "$(case x in a) b;; esac)")]),
    ("echo $(echo ')')", [L("echo", ")"), N("command substitution", "echo", "$(echo ')')")]),
    ("pytest $X", [N("parameter expansion `$X`", "pytest", "$X")]),
    ('pytest "$X"', [N("parameter expansion", "pytest", "$X")]),
    ("pytest ${X}", [N("parameter expansion", "pytest", "${X}")]),
    ("pytest ${X:-a b}", [N("parameter expansion", "pytest", "${X:-a b}")]),
    ("echo ${x:-$(id)}", [L("id"), N("parameter expansion", "echo", "${x:-$(id)}")]),
    ("echo ${#x} ${x%.py} ${x##*/}", [N("parameter expansion", "echo", "${#x}", "${x%.py}", "${x##*/}")]),
    ("pytest $1 $@ $?", [N("parameter expansion", "pytest", "$1", "$@", "$?")]),
    ("$X -x", [N("program word holds a parameter expansion", "$X", "-x")]),
    ("$(echo rm) -rf x", [L("echo", "rm"), N("program word holds a command substitution", "$(echo rm)", "-rf", "x")]),
    ("echo $((1 + 2))", [N("arithmetic", "echo", "$((1 + 2))")]),
    ("echo $(( (1 + 2) * 3 ))", [N("arithmetic", "echo", "$(( (1 + 2) * 3 ))")]),
    ("ls *.py", [N("glob", "ls", "*.py")]),
    ("ls a?", [N("glob", "ls", "a?")]),
    ("ls [ab].py", [N("glob", "ls", "[ab].py")]),
    ("py* -x", [N("program word holds a glob", "py*", "-x")]),
    ("cat ~/.ssh/id_rsa", [N("tilde", "cat", "~/.ssh/id_rsa")]),
    ("echo 'a'$b", [N("parameter", "echo", "a$b")]),
    # assignments
    ("PATH=. pytest", [N("assignment before the command", "pytest")]),
    ("read PATH < path.txt", [N("`read` sets variables", "read", "PATH")]),
    ("getopts ab PATH", [N("`getopts` sets variables", "getopts", "ab", "PATH")]),
    ("A=1 B=2 pytest -x", [N("assignment before the command", "pytest", "-x")]),
    ('A="x y" pytest', [N("assignment before the command", "pytest")]),
    ("PATH=.", [N("assignment as a command of its own", "PATH=.")]),
    ("PATH=.; pytest", [N("assignment as a command of its own", "PATH=."), L("pytest")]),
    ("export PATH=.", [N("export", "export", "PATH=.")]),
    ("readonly X=1", [N("readonly", "readonly", "X=1")]),
    ("local X=1", [N("local", "local", "X=1")]),
    ("'A=1' pytest", [L("A=1", "pytest")]),
    # function definitions and builtins that run or define code
    ("pytest() { rm -rf x; }; pytest", [N("function definition", "pytest"), L("rm", "-rf", "x"), L("pytest")]),
    ("f () (a)", [N("function definition", "f"), L("a")]),
    ("alias pytest='rm -rf x'", [N("alias", "alias", "pytest=rm -rf x")]),
    ("unalias ls", [N("unalias", "unalias", "ls")]),
    ("exec pytest", [N("exec", "exec", "pytest")]),
    ("exec 3>log", [N("exec", "exec")]),
    ("command pytest", [N("`command`", "command", "pytest")]),
    ("builtin echo x", [N("builtin", "builtin", "echo", "x")]),
    (". ./env.sh", [N("`.` runs a file", ".", "./env.sh")]),
    ("source ./env.sh", [N("source", "source", "./env.sh")]),
    ("trap 'rm -rf x' EXIT", [N("trap", "trap", "rm -rf x", "EXIT")]),
    ("eval pytest", [N("eval", "eval", "pytest")]),
    ("hash -p ./x git", [N("hash", "hash", "-p", "./x", "git")]),
    ("let x=1", [N("let", "let", "x=1")]),
    ("printf -v PATH /d", [N("printf -v", "printf", "-v", "PATH", "/d")]),
    ("mapfile -t PATH < f", [N("mapfile", "mapfile", "-t", "PATH")]),
    # programs that run their arguments
    ("env pytest", [N("`env` runs", "env", "pytest")]),
    ("env -i PATH=. pytest", [N("`env` runs", "env", "-i", "PATH=.", "pytest")]),
    ("/usr/bin/env pytest", [N("`env` runs", "/usr/bin/env", "pytest")]),
    ("sudo pytest", [N("`sudo` runs", "sudo", "pytest")]),
    ("xvfb-run -a sh -c x", [N("`xvfb-run` runs", "xvfb-run", "-a", "sh", "-c", "x")]),
    ("dbus-run-session -- curl x", [N("`dbus-run-session` runs", "dbus-run-session", "--", "curl", "x")]),
    ("fakeroot curl x", [N("`fakeroot` runs", "fakeroot", "curl", "x")]),
    ("unbuffer -p curl x", [N("`unbuffer` runs", "unbuffer", "-p", "curl", "x")]),
    ("chronic curl x", [N("`chronic` runs", "chronic", "curl", "x")]),
    ("prlimit --nofile=9 curl x", [N("`prlimit` runs", "prlimit", "--nofile=9", "curl", "x")]),
    ("numactl -C 0 curl x", [N("`numactl` runs", "numactl", "-C", "0", "curl", "x")]),
    ("pytest | xargs rm", [L("pytest"), N("`xargs` runs", "xargs", "rm")]),
    ("timeout 5 pytest", [N("`timeout` runs", "timeout", "5", "pytest")]),
    ("nice -n 5 pytest", [N("`nice` runs", "nice", "-n", "5", "pytest")]),
    ("nohup pytest", [N("`nohup` runs", "nohup", "pytest")]),
    ("time pytest", [N("`time` runs", "time", "pytest")]),
    ("stdbuf -o0 pytest", [N("`stdbuf` runs", "stdbuf", "-o0", "pytest")]),
    ("watch pytest", [N("`watch` runs", "watch", "pytest")]),
    ("flock /tmp/l pytest", [N("`flock` runs", "flock", "/tmp/l", "pytest")]),
    ("find . -exec rm {} +", [N("find -exec", "find", ".", "-exec", "rm", "{}", "+")]),
    ("find . -execdir rm {} ;", [N("find -exec", "find", ".", "-execdir", "rm", "{}")]),
    ("find . -execdir rm {} \\;", [N("find -exec", "find", ".", "-execdir", "rm", "{}", ";")]),
    ("find . -ok rm {} +", [N("find -exec", "find", ".", "-ok", "rm", "{}", "+")]),
    ("find . -name '*.py'", [L("find", ".", "-name", "*.py")]),
    ("git -c core.pager=x log", [N("git -c", "git", "-c", "core.pager=x", "log")]),
    ("git --config-env=core.pager=X log", [N("git -c", "git", "--config-env=core.pager=X", "log")]),
    ("git --exec-path=. log", [N("git -c", "git", "--exec-path=.", "log")]),
    ("git log -c", [L("git", "log", "-c")]),
    ("git -C sub -c core.pager=x log", [N("git -c", "git", "-C", "sub", "-c", "core.pager=x", "log")]),
    ("git fetch --upload-pack=x", [N("--upload-pack", "git", "fetch", "--upload-pack=x")]),
    ("python3 -W ignore -c x", [N("-c", "python3", "-W", "ignore", "-c", "x")]),
    ("python3 -Wonce x.py", [L("python3", "-Wonce", "x.py")]),
    ("python3 -m pytest -c x", [L("python3", "-m", "pytest", "-c", "x")]),
    ("fd -e py -x rm", [N("fd -x", "fd", "-e", "py", "-x", "rm")]),
    ("rg --pre=./x foo", [N("rg --pre", "rg", "--pre=./x", "foo")]),
    ("tar -I ./x -xf a.tar", [N("tar -I", "tar", "-I", "./x", "-xf", "a.tar")]),
    ("rsync -e ./x a b:", [N("rsync -e", "rsync", "-e", "./x", "a", "b:")]),
    ("git -C sub status", [L("git", "-C", "sub", "status")]),
    ("python -c 'import os'", [N("python -c", "python", "-c", "import os")]),
    ("python3 -c x", [N("python3 -c", "python3", "-c", "x")]),
    ("python3.11 -Bc x", [N("-c", "python3.11", "-Bc", "x")]),
    ("python x.py -c", [L("python", "x.py", "-c")]),
    ("bash -c 'git push'", [N("bash -c", "bash", "-c", "git push")]),
    ("sh -ec x", [N("sh -c", "sh", "-ec", "x")]),
    ("dash -c x", [N("dash -c", "dash", "-c", "x")]),
    ("bash script.sh", [L("bash", "script.sh")]),
    ("perl -e 'system 1'", [N("perl -e", "perl", "-e", "system 1")]),
    ("ruby -e x", [N("ruby -e", "ruby", "-e", "x")]),
    ("node -e x", [N("node -e", "node", "-e", "x")]),
    ("node --eval x", [N("node -e", "node", "--eval", "x")]),
    ("php -r x", [N("php -r", "php", "-r", "x")]),
    ("awk '{print $1}' f", [N("awk", "awk", "{print $1}", "f")]),
    # every spelling a program takes of such an option: cut short, `=VALUE`, in a cluster, old-style tar
    ("tar -xf a.tar --to-comm=x", [N("tar --to-command", "tar", "-xf", "a.tar", "--to-comm=x")]),
    ("tar -xI x -f a.tar", [N("tar -I", "tar", "-xI", "x", "-f", "a.tar")]),
    ("tar xIf x a.tar", [N("tar -I", "tar", "xIf", "x", "a.tar")]),
    (
        "tar --checkpoint-act=exec=x -cf a.tar d",
        [N("--checkpoint-action", "tar", "--checkpoint-act=exec=x", "-cf", "a.tar", "d")],
    ),
    ("tar -xzf a.tgz", [L("tar", "-xzf", "a.tgz")]),
    ("tar --to-stdout -xf a.tar", [L("tar", "--to-stdout", "-xf", "a.tar")]),
    ("git ls-remote --upload-pa=x r", [N("--upload-pack", "git", "ls-remote", "--upload-pa=x", "r")]),
    ("git clone -u x r d", [N("git clone -u", "git", "clone", "-u", "x", "r", "d")]),
    ("git grep -Ox foo", [N("git grep -O", "git", "grep", "-Ox", "foo")]),
    ("git rebase --exec x main", [N("--exec` runs", "git", "rebase", "--exec", "x", "main")]),
    ("git bisect run x", [N("git bisect run", "git", "bisect", "run", "x")]),
    ("git push -u origin x", [L("git", "push", "-u", "origin", "x")]),
    ("git grep -n foo", [L("git", "grep", "-n", "foo")]),
    ("node --eval=x", [N("node -e", "node", "--eval=x")]),
    ("node --ev x", [N("node -e", "node", "--ev", "x")]),
    ("perl -ne x f", [N("perl -e", "perl", "-ne", "x", "f")]),
    ("sort --compress-program=sh f", [N("--compress-program", "sort", "--compress-program=sh", "f")]),
    ("sort -u f", [L("sort", "-u", "f")]),
    ("sed -n '1e x' f", [N("`e` command", "sed", "-n", "1e x", "f")]),
    ("sed 's/a/b/e' f", [N("`e` command", "sed", "s/a/b/e", "f")]),
    ("sed -e 's/a/b/' -e 'w out' f", [N("`e` command", "sed", "-e", "s/a/b/", "-e", "w out", "f")]),
    ("sed -f x.sed f", [N("`e` command", "sed", "-f", "x.sed", "f")]),
    ("sed -i 's/a;b/c/' f", [N("`e` command", "sed", "-i", "s/a;b/c/", "f")]),
    ("sed -i 's/foo/bar/g; s|x|y|' f", [L("sed", "-i", "s/foo/bar/g; s|x|y|", "f")]),
    ("sed -ne '/^#/d;1,5p' f", [L("sed", "-ne", "/^#/d;1,5p", "f")]),
    ("sed --sandbox '1e x' f", [L("sed", "--sandbox", "1e x", "f")]),
    ("sed '1e x' -- f --sandbox", [N("`e` command", "sed", "1e x", "--", "f", "--sandbox")]),  # a file after `--`
    ("sed '-nee x' f", [N("`e` command", "sed", "-nee x", "f")]),  # `-n`, then `-e` with `e x`
    ("sed -nes/a/b/p f", [L("sed", "-nes/a/b/p", "f")]),
    ("ssh -oProxyCommand=x h", [N("ssh -o", "ssh", "-oProxyCommand=x", "h")]),
    ("scp -S x a h:b", [N("scp -S", "scp", "-S", "x", "a", "h:b")]),
    ("vim -c '!x' f", [N("vim -c", "vim", "-c", "!x", "f")]),
    ("vim '+!x' f", [N("+COMMAND", "vim", "+!x", "f")]),
    ("vim f", [L("vim", "f")]),
    ("emacs --batch --eval x", [N("emacs --eval", "emacs", "--batch", "--eval", "x")]),
    ("sqlite3 db '.shell x'", [N("sqlite3", "sqlite3", "db", ".shell x")]),
    # where bash and dash read the text differently: unsure
    ("[[ -f x ]]", "[["),
    ("echo a 2\\\n>f", "a line continuation inside a redirection"),
    ("cat <<\\\n-EOF\nx\n-EOF", "a line continuation inside a redirection"),
    ("cat >\\\n>f", "a line continuation inside a redirection"),
    ("echo $'a\\nb'", "$'"),
    ('echo $"a"', '$"'),
    ("diff <(a) <(b)", "process substitution"),
    ("cat >(a)", "process substitution"),
    ("pytest &> log", "both outputs"),
    ("pytest &>> log", "both outputs"),
    ("pytest |& cat", "both outputs"),
    ("echo {a,b}", "brace expansion"),
    ("echo x{1..3}", "brace expansion"),
    ("cp a.{py,bak}", "brace expansion"),
    ("function f { a; }", "function"),
    ("((i++))", "(("),
    ("ls !(x)", "extended glob"),
    ("ls @(a|b)", "extended glob"),
    ("case x in a) b;& c) d;; esac", "fall-through"),
    ("case x in a) b;;& esac", "fall-through"),
    ("echo ${x//a/b}", "`${…}`"),
    ("echo ${x:0:2}", "`${…}`"),
    ("echo ${!x}", "`${…}`"),
    ("echo ${x^^}", "`${…}`"),
    ("a=(1 2)", "array"),
    ("a+=1", "assignment"),
    ("a[1]=x", "assignment"),
    ("select x in a; do b; done", "select"),
    ("coproc a", "coproc"),
    ("cat <<< x", "here-string"),
    ("exec {fd}>log", "file descriptor variable"),
    ("echo $((a)+(b))", "arithmetic"),
    ("echo $(($(id)))", "arithmetic"),
    ("echo $[1 + 2]", "`$[…]`"),
    # syntax dash refuses: unsure
    ("echo 'a", "never closed"),
    ('echo "a', "never closed"),
    ("echo `a", "never closed"),
    ("echo $(a", "never closed"),
    ("a |", "no command after"),
    ("a && ", "no command after"),
    ("; a", "where a command should be"),
    ("a ;; b", "where a command should be"),
    ("a (b)", "`(`"),
    # bytes no command line carries, CRLF, non-UTF-8
    ("pytest\x00rm", "NUL"),
    ("pytest\r\n", "carriage return"),
    ("pytest \udcff", "UTF-8"),
]


@pytest.mark.parametrize(("text", "expected"), TABLE, ids=[repr(text)[:60] for text, _ in TABLE])
def test_table(text: str, expected: list[Expect] | str) -> None:
    parsed = simple_commands(text)
    if isinstance(expected, str):
        assert expected in parsed.unsure, parsed
        return
    assert not parsed.unsure, parsed
    got = [(c.words, c.literal) for c in parsed.commands]
    assert got == [(e.words, e.literal) for e in expected], parsed
    for command, want in zip(parsed.commands, expected, strict=True):
        assert want.why in command.why, (command, want.why)
        assert command.literal == (command.why == "")


def test_the_table_covers_at_least_150_commands() -> None:
    assert len(TABLE) >= 150


# ---------------------------------------------------------------------------------------------------------------
# dash itself: where a row's commands all run, in order, they are what the table says.

RUNS = [
    text
    for text, expected in TABLE
    if not isinstance(expected, str)
    and expected
    and all(e.literal for e in expected)
    and not text.rstrip().endswith("&")
    and " & " not in text
    and not any(word in text for word in ("if", "while", "until", "case", "||", "!", "true", "cd", "echo", "["))
]


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PATH of programs that each append their name and arguments to $STUBLOG and exit 0."""
    root = tmp_path_factory.mktemp("stubs")
    names = {e.words[0] for text in RUNS for e in TABLE_BY_TEXT[text]}
    for name in names:
        stub = root / name
        stub.write_text('#!/bin/dash\nprintf \'%s\\037\' "${0##*/}" "$@" "$(printf \'\\036\')" >> "$STUBLOG"\n')
        stub.chmod(0o755)
    return root


TABLE_BY_TEXT = {text: expected for text, expected in TABLE if not isinstance(expected, str)}


@pytest.mark.parametrize("text", RUNS, ids=[repr(text)[:60] for text in RUNS])
def test_dash_runs_what_the_table_says(text: str, stubs: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    (tmp_path / "in.txt").write_text("")
    env = {"PATH": str(stubs), "STUBLOG": str(log), "HOME": str(tmp_path)}
    subprocess.run(["/usr/bin/dash", "-c", text], cwd=tmp_path, env=env, timeout=30, check=False)
    records = log.read_text().split("\x1e\x1f")[:-1] if log.exists() else []
    ran = sorted(tuple(record.split("\x1f")[:-1]) for record in records)
    assert ran == sorted(e.words for e in TABLE_BY_TEXT[text])


def test_dash_runs_through_the_comment_continuation_as_the_table_says() -> None:
    """The row the reader would get wrong if it joined `\\` newline before finding comments."""
    assert "pytest # a comment \\\nrm -rf x" in RUNS


# ---------------------------------------------------------------------------------------------------------------
# Smuggling: for every allow rule below, a command built to run a second program past it asks.

ALLOW = ["pytest", "git diff", "git log", "git status", "ls", "cat", "npm run test", "make", "grep", "find", "echo"]
SMUGGLE = [
    "{r} $(curl x)",
    "{r} `curl x`",
    '{r} "$(curl x)"',
    "{r}; sh -c x",
    "{r} && bash -c x",
    "{r} <<EOF\n$(curl x)\nEOF",
    "PATH=. {r}",
    "PATH=.; {r}",
    "export PATH=.; {r}",
    "read PATH < path.txt; {r}",
    "env {r}",
    "env PATH=. {r}",
    "{r} | xargs rm",
    "{r} | sh",
    "find . -exec {r} {{}} +",
    "find . -exec rm {{}} +",
    "git -c core.pager=x log",
    "git -c core.pager=x {r}",
    "python -c 'import os; os.system(\"x\")'; {r}",
    "bash -c '{r}'",
    "sh -c '{r}; curl x'",
    "exec {r}",
    ". ./evil; {r}",
    "source ./evil; {r}",
    "alias {r}='curl x'; {r}",
    "{r}() {{ curl x; }}; {r}",
    "eval {r}",
    "eval '{r}; curl x'",
    "trap 'curl x' EXIT; {r}",
    "command {r}",
    "builtin {r}",
    "timeout 5 {r}",
    "nice {r}",
    "nohup {r}",
    "time {r}",
    "stdbuf -o0 {r}",
    "watch {r}",
    "flock /tmp/l {r}",
    "sudo {r}",
    "$X {r}",
    "{r} $X",
    "{r} > $HOME/x",
    "{r} &> x",
    "{r} <(curl x)",
    "{r} $'\\x41'",
    "[[ -n x ]] && {r}",
    "{r} {{a,b}}",
    "{r}\r",
    "{r}\x00; curl x",
    "{r} 'unclosed",
    "for PATH in .; do {r}; done",
    "{r} ; $(curl x)",
    "{r} # \\\ncurl x",
    "{r} \\\n; curl x",
    '{r} "$\\\n(curl x)"',
    "{r} $\\\n(curl x)",
    'case a in "${{x:-\'}}") ;; esac; curl x; case a in "\'}}") ;; esac; {r}',
    "A\\\nB=1 {r}",
    'case "`echo \\"\'\\"; curl x; echo \\"\'\\"`" in a) ;; esac; {r}',
]


@pytest.mark.parametrize("rule", ALLOW)
@pytest.mark.parametrize("template", SMUGGLE)
def test_a_second_program_smuggled_past_an_allow_rule_asks(rule: str, template: str) -> None:
    rules = RuleSet([Rule("allow", pattern, "the test", f"c{n}") for n, pattern in enumerate(ALLOW)])
    text = template.format(r=rule)
    assert rules.decide("shell", text, "ask").verdict == "ask", text
    assert rules.decide("shell", text, "deny").verdict == "deny", text


@pytest.mark.parametrize("rule", ALLOW)
def test_each_allow_rule_does_allow_its_own_command(rule: str) -> None:
    """The smuggling test can fail: the same rules let the plain command through."""
    rules = RuleSet([Rule("allow", pattern, "the test", f"c{n}") for n, pattern in enumerate(ALLOW)])
    assert rules.decide("shell", f"{rule} -x 'a b' > out.txt", "deny").verdict == "allow"


# ---------------------------------------------------------------------------------------------------------------
# Bounds: nesting deeper than MAX_DEPTH is unsure (never a RecursionError), and the reader is linear.


@pytest.mark.parametrize(
    "text",
    [
        "echo " + "$(" * 10_000 + "x" + ")" * 10_000,
        "( " * 100_000 + "x" + ")" * 100_000,
        "echo " + "${x:-" * 10_000 + "}" * 10_000,
        "echo " + '"$(' * 10_000 + ")" * 10_000,
        "echo `" + "$(" * 100 + "x" + ")" * 100 + "`",
        "cat <<E0\n"
        + "".join(f"$(cat <<E{k}\n" for k in range(1, 3000))
        + "".join(f"E{k}\n)\n" for k in range(2999, 0, -1))
        + "E0",
    ],
    ids=[
        "command substitutions",
        "subshells",
        "parameter expansions",
        "quoted substitutions",
        "backquotes",
        "here-documents",
    ],
)
def test_deep_nesting_is_unsure_not_a_crash(text: str) -> None:
    parsed = simple_commands(text)
    assert "nests deeper" in parsed.unsure or "never closed" in parsed.unsure, parsed.unsure


def test_groups_and_compound_commands_nest_without_recursion() -> None:
    """Groups, ifs and loops are kept on a list, not the stack: any depth is read."""
    parsed = simple_commands("f() " + "{ if a; then " * 5_000 + "x; " + "fi; } " * 5_000)
    assert not parsed.unsure
    assert parsed.commands[-1].words == ("x",)
    assert len(parsed.commands) == 5_002


def test_nesting_up_to_the_limit_is_read() -> None:
    depth = MAX_DEPTH - 1
    parsed = simple_commands("echo " + "$(echo " * depth + "x" + ")" * depth)
    assert not parsed.unsure
    assert parsed.commands[0].words == ("echo", "x")
    assert len(parsed.commands) == depth + 1


def test_a_megabyte_command_is_read_whole() -> None:
    unit = "pytest -x 'tests/a b.py' && git diff --stat > out.txt; "
    text = unit * (1_048_576 // len(unit))
    parsed = simple_commands(text)
    assert not parsed.unsure
    assert len(parsed.commands) == 2 * (1_048_576 // len(unit))
    assert parsed.commands[-1].words == ("git", "diff", "--stat")


def test_the_reader_reads_no_files_and_starts_nothing(tmp_path: Path) -> None:
    """Pure: a command naming files and programs leaves the directory as it was."""
    before = sorted(os.listdir(tmp_path))
    simple_commands(f"touch {tmp_path}/x > {tmp_path}/y; $(touch {tmp_path}/z)")
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("text", [text for text, _ in TABLE], ids=[repr(text)[:60] for text, _ in TABLE])
def test_every_row_is_decided_and_its_proposal_is_a_pattern(text: str) -> None:
    """Whatever the text, a decision and a proposal come back, and a proposal is a pattern check_pattern takes."""
    rules = RuleSet([Rule("allow", "pytest", "the test", "c0"), Rule("deny", "rm", "the test", "c1")])
    for default in ("allow", "ask", "deny"):
        assert rules.decide("shell", text, default).reason
    proposal = propose(text)
    if proposal.pattern:
        assert check_pattern(proposal.pattern) == proposal.pattern
    else:
        assert proposal.why.startswith("no rule can be proposed")


# Pieces of shell text that dash runs as they are (no expansion changes a program's words) and that stub
# programs a, b and c can stand in for.
PIECES = [
    "a", "b", "c", "'x y'", '"q"', "\\;", "#c", ";", "&&", "|", "\n", "(", ")", "{", "}", "> f", "2>&1", " ",
    "\t", "x#y", "if", "then", "fi", "!", "'", '"', "\\", "\\\n", "a\\\nb", "\\\n#", "f()", "{ a; }", "case",
    "in", "esac", "x)", ";;", "while", "do", "done", "until", "for", "x", "else", "elif", "(a)", "{ b; }", "E\n",
    "<<E\nbody a\nE\n", "<<-E\n\tbody\n\tE\n", "<<'E'\n$(a)\nE\n", "<<E\n$(a)\nE\n", "<<E\n", '"a\\"b"',
]  # fmt: skip


def test_dash_never_runs_a_command_the_reader_did_not_find(tmp_path: Path) -> None:
    """Random texts from PIECES, run by dash with stub programs: every command it ran is one the reader found
    (it may find more: it never under-counts). A text the reader is unsure of is skipped (it asks anyway)."""
    import collections
    import random

    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("a", "b", "c"):
        (stubs / name).write_text(
            '#!/bin/dash\nprintf \'%s\\037\' "${0##*/}" "$@" "$(printf \'\\036\')" >> "$STUBLOG"\n'
        )
        (stubs / name).chmod(0o755)
    log = tmp_path / "log"
    work = tmp_path / "work"
    work.mkdir()
    rng = random.Random(23)
    checked = 0
    for _ in range(1500):
        text = " ".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
        parsed = simple_commands(text)
        if parsed.unsure:
            continue
        log.unlink(missing_ok=True)
        env = {"PATH": str(stubs), "STUBLOG": str(log)}
        subprocess.run(["/usr/bin/dash", "-c", text], cwd=work, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30, check=False)  # fmt: skip
        records = log.read_text().split("\x1e\x1f")[:-1] if log.exists() else []
        ran = collections.Counter(tuple(record.split("\x1f")[:-1]) for record in records)
        missed = ran - collections.Counter(command.words for command in parsed.commands)
        assert not missed, (text, missed, parsed)
        checked += 1
    assert checked > 300
