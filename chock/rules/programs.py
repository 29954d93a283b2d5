"""Which commands run something other than their own program: shell builtins that change how later words are
read, programs that run their arguments as a program, interpreters given code on the command line. An allow
rule never matches them (docs/approvals.md#matching); deny and ask rules look through them.
"""

from __future__ import annotations

import re

# Builtins that run, define or redirect what later commands are.
BUILTINS = {
    "eval": "`eval` runs its arguments as shell code",
    ".": "`.` runs a file as shell code",
    "source": "`source` runs a file as shell code",
    "exec": "`exec` replaces the shell with its arguments",
    "command": "`command` runs its arguments as a command, past functions",
    "builtin": "`builtin` runs its arguments as a builtin",
    "trap": "`trap` sets shell code to run later",
    "alias": "`alias` defines words that later commands expand to",
    "unalias": "`unalias` changes what later command words mean",
    "export": "`export` changes the environment of later commands",
    "readonly": "`readonly` sets variables later commands see",
    "local": "`local` sets variables later commands see",
    "declare": "`declare` sets variables later commands see",
    "typeset": "`typeset` sets variables later commands see",
    "hash": "`hash` changes which program a name runs",
    "enable": "`enable` loads builtins",
    "shopt": "`shopt` changes how bash reads later commands",
    "fc": "`fc` runs commands from the history",
    "let": "`let` sets variables later commands see",
    "read": "`read` sets variables later commands see (`read PATH < file`)",
    "getopts": "`getopts` sets variables later commands see",
}

# Programs that run (some of) their arguments as a program.
WRAPPERS = {
    "env", "sudo", "doas", "su", "runuser", "pkexec", "xargs", "parallel", "timeout", "nice", "ionice", "nohup",
    "time", "stdbuf", "watch", "flock", "setsid", "setpriv", "chroot", "unshare", "nsenter", "taskset", "chrt",
    "strace", "ltrace", "valgrind", "busybox", "script", "systemd-run", "bwrap", "firejail", "catchsegv",
    "xvfb-run", "dbus-run-session", "dbus-launch", "fakeroot", "faketime", "unbuffer", "nocache", "chronic",
    "prlimit", "numactl", "cgexec", "sg", "torsocks", "proxychains", "proxychains4", "entr", "systemd-inhibit",
    "ssh-agent", "gosu", "su-exec", "setarch", "linux32", "linux64", "caffeinate",
}  # fmt: skip

SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "tcsh", "csh", "yash", "posh"}

# Interpreters, and the options that give them code to run on the command line.
INTERPRETERS = {
    "perl": ("-e", "-E"),
    "ruby": ("-e",),
    "node": ("-e", "-p", "--eval", "--print"),
    "nodejs": ("-e", "-p", "--eval", "--print"),
    "deno": ("eval",),
    "bun": ("-e", "--eval", "-p", "--print"),
    "php": ("-r", "-B", "-R", "-E", "-F"),
    "lua": ("-e",),
    "luajit": ("-e",),
    "Rscript": ("-e",),
    "R": ("-e",),
    "osascript": ("-e",),
    "tclsh": (),
    "gdb": ("-ex", "-x", "--eval-command", "-batch"),
    "awk": (),
    "gawk": (),
    "mawk": (),
    "nawk": (),
}
_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
_FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
_GIT_CONFIG = ("-c", "--config-env", "--exec-path")
_GIT_TAKES_ARGUMENT = {"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--list-cmds"}
# Options that make a program start another one named in the arguments.
_RUNS_A_PROGRAM = {
    "fd": ("-x", "--exec", "-X", "--exec-batch"),
    "fdfind": ("-x", "--exec", "-X", "--exec-batch"),
    "rg": ("--pre",),
    "tar": ("-I", "--use-compress-program", "--to-command", "--checkpoint-action", "--info-script", "-F"),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "git": ("--upload-pack", "--receive-pack", "--exec"),
}


def program(word: str) -> str:
    """The program's name: the last part of a path."""
    return word.rpartition("/")[2] or word


def command_why(words: tuple[str, ...]) -> str:
    """Why an allow rule can never match the literal command `words` ("" when it can)."""
    name = program(words[0])
    args = words[1:]
    if words[0] in BUILTINS:
        return BUILTINS[words[0]]
    if name in WRAPPERS:
        return f"`{name}` runs its arguments as a program"
    if name == "find" and any(word in _FIND_EXEC for word in args):
        return "`find -exec` runs a program"
    if name == "git" and _git_config(args):
        return "`git -c` sets configuration that can run a program"
    if name in SHELLS and any(_short_option(word, "c") for word in args):
        return f"`{name} -c` runs its argument as shell code"
    if _PYTHON.fullmatch(name) and _python_code(args):
        return f"`{name} -c` runs code given on the command line"
    if name in ("awk", "gawk", "mawk", "nawk"):
        return f"`{name}` runs its first argument as a program that can start others"
    options = INTERPRETERS.get(name)
    if options and any(word in options or _short_option(word, options[0][1:]) for word in args if word[:1] == "-"):
        return f"`{name} {options[0]}` runs code given on the command line"
    if name == "deno" and args[:1] == ("eval",):
        return "`deno eval` runs code given on the command line"
    for option in _RUNS_A_PROGRAM.get(name, ()):
        if any(word == option or word.startswith(option + "=") for word in args):
            return f"`{name} {option}` runs a program"
    return ""


def _python_code(args: tuple[str, ...]) -> bool:
    """Whether python's own options (before a script or `-m`) hold `-c`; `-W` and `-X` take an argument."""
    skip = False
    for word in args:
        if skip:
            skip = False
            continue
        if not word.startswith("-") or word in ("-", "--") or word.startswith("--"):
            return False
        for n, letter in enumerate(word[1:], 1):
            if letter == "c":
                return True
            if letter == "m":
                return False
            if letter in "WX":
                skip = n == len(word) - 1
                break
    return False


def _short_option(word: str, letter: str) -> bool:
    """Whether `word` is a cluster of short options holding `letter` (`-c`, `-lc`, `-ec`)."""
    return len(letter) == 1 and word.startswith("-") and not word.startswith("--") and letter in word[1:]


def _git_config(args: tuple[str, ...]) -> bool:
    """Whether git's own options (before its subcommand) set configuration or where its programs are."""
    skip = False
    for word in args:
        if skip:
            skip = False
            continue
        if not word.startswith("-"):
            return False
        if word.startswith(_GIT_CONFIG):
            return True
        skip = word in _GIT_TAKES_ARGUMENT
    return False


def subcommand_at(words: tuple[str, ...]) -> int:
    """Where the subcommand of `words` is, past the program's own options: git's (`git -C x push` is `push`);
    1 for every other program."""
    if program(words[0]) != "git":
        return 1
    skip = False
    for n, word in enumerate(words[1:], 1):
        if skip:
            skip = False
            continue
        if not word.startswith("-"):
            return n
        skip = word in _GIT_TAKES_ARGUMENT or word in ("-c", "--config-env")
    return len(words)


def inner_starts(words: tuple[str, ...]) -> list[int]:
    """Best effort for deny and ask rules: where in `words` a command it runs may start — every later word that
    could name a program when the program runs its arguments (`env git push` holds `git push`)."""
    return [n for n in range(1, len(words)) if not words[n].startswith("-") and "=" not in words[n]]


def shell_code(words: tuple[str, ...]) -> str | None:
    """The shell code `words` runs as text (`sh -c CODE`, `eval CODE…`), or None."""
    name = program(words[0]) if words else ""
    if words and words[0] == "eval":
        return " ".join(words[1:])
    if name in SHELLS:
        for n, word in enumerate(words[1:], 1):
            if _short_option(word, "c") and n + 1 < len(words):
                return words[n + 1]
    return None
