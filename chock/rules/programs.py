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
    "mapfile": "`mapfile` sets variables later commands see",
    "readarray": "`readarray` sets variables later commands see",
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
# Options that make a program start another one named in the arguments, as written or in any spelling the
# program takes (`_given`: `--to-comm=…`, `-xI…`).
_RUNS_A_PROGRAM = {
    "fd": ("-x", "--exec", "-X", "--exec-batch"),
    "fdfind": ("-x", "--exec", "-X", "--exec-batch"),
    "rg": ("--pre",),
    "tar": ("-I", "--use-compress-program", "--to-command", "--checkpoint-action", "--info-script", "-F"),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "git": ("--upload-pack", "--receive-pack", "--exec"),
    "sort": ("--compress-program",),
    "zip": ("-TT", "--unzip-command"),
    "man": ("-P", "--pager", "-H", "--html"),
    "ssh": ("-o", "-F"),  # ProxyCommand, LocalCommand, … run here, network or not
    "scp": ("-o", "-F", "-S"),
    "sftp": ("-o", "-F", "-S", "-D"),
    "vim": ("-c", "--cmd", "-S"),
    "vi": ("-c", "--cmd", "-S"),
    "nvim": ("-c", "--cmd", "-S", "-l"),
    "ex": ("-c", "--cmd", "-S"),
    "emacs": ("--eval", "-l", "--load", "-f", "--funcall", "--script", "-x"),
}
# Programs whose arguments are a program (or name a file that is one) that can start others, as awk's are.
_ARGUMENTS_ARE_A_PROGRAM = {"awk", "gawk", "mawk", "nawk", "sqlite3", "dc"}
# git's subcommands whose own options, or words, start a program.
_GIT_RUNS_A_PROGRAM = {
    "clone": ("-u",),
    "grep": ("-O", "--open-files-in-pager"),
    "difftool": ("-x", "--extcmd"),
    "rebase": ("-x", "--exec"),
    "bisect": ("run",),
    "submodule": ("foreach",),
}
# A sed script of `s`, `y` and commands that only print, delete or move text: no `e` (runs a command), no `w`,
# `r` or `W` (reads or writes a file), cut at `;` and newlines (a `;` inside a regex makes a piece that is no
# such command, so the script is taken for one that may hold anything).
_SED_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/I?)"
_SED_PLAIN = re.compile(
    rf"\s*(?:{_SED_ADDRESS}(?:\s*,\s*(?:{_SED_ADDRESS}|[+~]\d+))?)?\s*!?\s*"
    r"(?:[sy]([^\s\\\n;])(?:(?!\1)[^\\\n]|\\.)*\1(?:(?!\1)[^\\\n]|\\.)*\1[gpiIm0-9]*|[pdqQ=nNgGhHxDPlz{}]?)\s*"
)


def program(word: str) -> str:
    """The program's name: the last part of a path."""
    return word.rpartition("/")[2] or word


def command_why(words: tuple[str, ...]) -> str:
    """Why an allow rule can never match the literal command `words` ("" when it can)."""
    name = program(words[0])
    args = words[1:]
    if words[0] in BUILTINS:
        return BUILTINS[words[0]]
    if words[0] == "printf" and any(_given(word, "-v") for word in args[:1]):
        return "`printf -v` sets variables later commands see (bash's `printf -v PATH …`)"
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
    if name in _ARGUMENTS_ARE_A_PROGRAM:
        return f"`{name}` runs its arguments as a program that can start others"
    if name in ("vim", "vi", "nvim", "ex") and any(word.startswith("+") for word in args):
        return f"`{name} +COMMAND` runs an editor command, which can start programs"
    options = INTERPRETERS.get(name)
    if options and any(_given(word, option) for word in args for option in options if option.startswith("-")):
        return f"`{name} {options[0]}` runs code given on the command line"
    if name == "deno" and args[:1] == ("eval",):
        return "`deno eval` runs code given on the command line"
    if name == "tar" and args and not args[0].startswith("-"):
        args = ("-" + args[0], *args[1:])  # `tar xIf PROG …`: the first word is a cluster of options
    for option in _RUNS_A_PROGRAM.get(name, ()):
        if any(_given(word, option) for word in args):
            return f"`{name} {option}` runs a program"
    if name == "git":
        at = subcommand_at(words)
        sub = words[at] if at < len(words) else ""
        for option in _GIT_RUNS_A_PROGRAM.get(sub, ()):
            if any(_given(word, option) if option.startswith("-") else word == option for word in words[at + 1 :]):
                return f"`git {sub} {option}` runs a program"
    if name == "sed" and not _plain_sed(args):
        return "`sed` runs a script that may start a program (its `e` command) or read and write files"
    return ""


def _given(word: str, option: str) -> bool:
    """Whether `word` gives `option` in a spelling its program takes: as written, with `=VALUE`, a long option
    cut short (`--to-comm` for `--to-command`, as GNU's and git's parsers take any unambiguous start), a
    one-letter one in a cluster of them or with its value attached (`-xI…`, `-Iprog`)."""
    if option.startswith("--"):
        name = word.partition("=")[0]
        return len(name) > 2 and name.startswith("--") and option.startswith(name)
    if len(option) == 2:
        return _short_option(word, option[1])
    return word == option or word.startswith(option + "=") or word.partition("=")[0] == "-" + option


def _plain_sed(args: tuple[str, ...]) -> bool:
    """Whether sed's scripts (`-e`/`--expression` values, else its first operand) only edit text (_SED_PLAIN);
    `--sandbox` among its options makes any script so. A script read from a file (`-f`) is not seen, so it is
    not plain. Short options are read as GNU's parser reads a cluster: `-ne SCRIPT`, `-nes/a/b/`, `-i.bak`."""
    scripts: list[str] = []
    operands: list[str] = []
    sandboxed = False
    words = iter(args)
    for word in words:
        if word == "--":
            operands += words
            break
        if word.startswith("--"):
            if _given(word, "--expression"):
                scripts.append(word.partition("=")[2] if "=" in word else next(words, ""))
            elif _given(word, "--file"):
                return False
            elif _given(word, "--line-length") and "=" not in word:
                next(words, None)
            sandboxed = sandboxed or word == "--sandbox"
        elif word.startswith("-") and len(word) > 1:
            for n, letter in enumerate(word[1:], 2):
                if letter == "f":
                    return False
                if letter in "el":  # the rest of the cluster is the value, or else the next word
                    value = word[n:] or next(words, "")
                    if letter == "e":
                        scripts.append(value)
                    break
                if letter == "i":  # the rest is the backup suffix
                    break
        else:
            operands.append(word)
    if sandboxed:
        return True
    if not scripts and operands:
        scripts.append(operands[0])
    return all(all(_SED_PLAIN.fullmatch(piece) for piece in script.replace("\n", ";").split(";")) for script in scripts)


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
        return _command_string(words[1:])
    return None


# A shell's options that take the next word: `-o NAME`, bash's `-O NAME`, `--rcfile FILE`, `--init-file FILE`.
_SHELL_VALUED = ("--rcfile", "--init-file")


def _command_string(args: tuple[str, ...]) -> str | None:
    """A shell's `-c` code: its first operand once its options (`-c` among them, anywhere: `sh -ec`, `sh -c -e`,
    `sh -c -- CODE`, `bash -O extglob -c CODE`) are past; None without `-c`."""
    told = False
    words = iter(args)
    for word in words:
        if word == "--":
            return next(words, None) if told else None
        if word.startswith("--"):
            if word in _SHELL_VALUED:
                next(words, None)
            continue
        if len(word) > 1 and word[0] in "-+":
            told = told or (word[0] == "-" and _short_option(word, "c"))
            if word[-1] in "oO":
                next(words, None)
            continue
        return word if told else None
    return None
