"""Where a session's rules come from, and the one file Chock writes them to (docs/approvals.md#where-rules-live).

Three kinds, all read at every approval, so a rule saved or removed anywhere holds for the next call:

    config     `.approvals.rules` of config.zon (a person's file: read, never written), ids `c<N>`
    project    `<state dir>/rules/<project>.json` on the host that runs the sessions, ids `p<8 hex>`: written
               only by a session that took an "always in this project" answer, and by `chock rules remove
               --here` (the child the daemon runs for `rule-remove`), each under the file's flock; never in the
               repository the agent writes, never by the daemon or serve
    session    folded from the session's own log (`approval.answer {scope: session}`), ids `s<8 hex>`: they hold
               across continues and handovers, as the log does

The project file is keyed as the state directory keys projects (`chock.paths.path_name` of the real path), and
is written whole (chock.credentials.files.write_private): a reader sees the old rules or the new, never a torn
file. What it holds is not trusted more than the config: each pattern is checked again as it is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from chock.config import ConfigRule
from chock.errors import ChockError, Refused
from chock.paths import Layout, ensure_dir, path_name
from chock.platform.flock import lock_within

TYPE_CHECKING = False
if TYPE_CHECKING:
    from chock.rules.rule import Rule

# How long a writer waits for another writer of the same project's rules (each holds the lock for one small
# read and write).
LOCK_WAIT = 10.0
LOCK_POLL = 0.02
# A project keeps at most this many rules: past it an "always" is refused, saying so (the file stays small).
MOST_PROJECT_RULES = 1000
FORMAT = 1


class RuleRefused(Refused):
    """A rule that cannot be saved or removed, with what to do instead."""


def rule_id(kind: str, *parts: str) -> str:
    """A short, stable id: `kind` (`p` project, `s` session) and 8 hex of the parts' digest."""
    import hashlib  # at the first rule made, not at a session's start

    return kind + hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:8]


# The project's file ---------------------------------------------------------------------------------------


def project_rules_path(layout: Layout, project: str | os.PathLike[str]) -> Path:
    return layout.state / "rules" / (path_name(os.path.realpath(project)) + ".json")


def project_rules(layout: Layout, project: str | os.PathLike[str]) -> list[Rule]:
    """The project's rules, in the order they were saved; none when it has no file. A file that is not one
    this writes is refused naming it (a rule silently dropped would be a question silently skipped, or not)."""
    path = project_rules_path(layout, project)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as error:
        raise ChockError(f"{path}: cannot read the project's rules: {error.strerror or error}") from None
    return _parse(text, path)


def _parse(text: str, path: Path) -> list[Rule]:
    from chock.rules.rule import Rule, check_pattern

    try:
        data = json.loads(text)
        entries = data["rules"]
        rules = []
        for entry in entries:
            pattern = check_pattern(str(entry["pattern"]))
            rules.append(Rule("allow", pattern, str(entry["origin"]), rule_id("p", pattern)))
        return rules
    except (ValueError, KeyError, TypeError) as error:
        raise ChockError(
            f"{path} is not a rules file Chock can read ({error}); move it away to start the project's rules afresh"
        ) from None


def _dump(rules: list[Rule]) -> str:
    entries = [{"pattern": rule.pattern, "origin": rule.origin} for rule in rules]
    return json.dumps({"format": FORMAT, "rules": entries}, ensure_ascii=False, indent=1) + "\n"


class _Locked:
    """The project's rules file held under its flock (a `.lock` beside it) while it is read and written."""

    def __init__(self, layout: Layout, project: str | os.PathLike[str]) -> None:
        self.path = project_rules_path(layout, project)
        self._fd = -1

    def __enter__(self) -> list[Rule]:
        ensure_dir(self.path.parent)
        lock = self.path.with_name(self.path.name + ".lock")
        self._fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not lock_within(self._fd, LOCK_WAIT, LOCK_POLL):
            os.close(self._fd)
            raise RuleRefused(f"{self.path} stayed locked by another writer for {LOCK_WAIT:g} s; try again")
        try:
            return _parse(self.path.read_text(encoding="utf-8"), self.path)
        except FileNotFoundError:
            return []
        except BaseException:
            os.close(self._fd)  # __exit__ is not called for an __enter__ that raised
            raise

    def write(self, rules: list[Rule]) -> None:
        from chock.credentials.files import write_private

        write_private(self.path, _dump(rules))

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing the descriptor lets the flock go


def save_project_rule(layout: Layout, project: str | os.PathLike[str], pattern: str, origin: str) -> Rule:
    """Add an allow rule to the project (a pattern it holds already is kept as it was); returns the rule."""
    from chock.rules.rule import Rule, check_pattern

    pattern = check_pattern(pattern)
    locked = _Locked(layout, project)
    with locked as rules:
        held = next((rule for rule in rules if rule.pattern == pattern), None)
        if held is not None:
            return held
        if len(rules) >= MOST_PROJECT_RULES:
            raise RuleRefused(
                f"the project holds {MOST_PROJECT_RULES} rules already; remove some (`chock rules remove ID`)"
            )
        rule = Rule("allow", pattern, origin, rule_id("p", pattern))
        locked.write([*rules, rule])
        return rule


def remove_project_rule(layout: Layout, project: str | os.PathLike[str], wanted: str) -> Rule | None:
    """Take the project rule `wanted` out of its file; None when the project has none by that id."""
    locked = _Locked(layout, project)
    with locked as rules:
        kept = [rule for rule in rules if rule.id != wanted]
        if len(kept) == len(rules):
            return None
        locked.write(kept)
        return next(rule for rule in rules if rule.id == wanted)


# The session's own, from its fold ------------------------------------------------------------------------


def session_rules(session_id: str, saved: list[dict[str, str]]) -> list[Rule]:
    """The rules a session's log saved (`SessionState.session_rules`), each once, oldest first."""
    from chock.rules.rule import Rule, check_pattern

    rules: dict[str, Rule] = {}
    for entry in saved:
        try:
            pattern = check_pattern(entry["pattern"])
        except ValueError:
            continue  # a log is the agent's neighbour's writing: a pattern that is no rule matches nothing
        rules.setdefault(pattern, Rule("allow", pattern, entry["origin"], rule_id("s", session_id, pattern)))
    return list(rules.values())


def config_rules(given: Iterable[ConfigRule]) -> list[Rule]:
    """config.zon's rules (`chock.config.ConfigRule`) as rules."""
    given = tuple(given)
    if not given:
        return []  # chock.rules is imported at a session's first decision, not at a start with no config rules
    from chock.rules.rule import Rule

    return [Rule(rule.verdict, rule.pattern, rule.origin, rule.id) for rule in given]  # type: ignore[arg-type]


def logged_session_rules(layout: Layout, session_id: str) -> list[Rule]:
    """A session's rules read from its log (the daemon's `rules`, which holds no fold of the conversation)."""
    from chock.log.fold import saved_rule
    from chock.log.reader import read_events

    saved = []
    for event in read_events(layout.log_path(session_id)):
        entry = saved_rule(session_id, event)
        if entry is not None:
            saved.append(entry)
    return session_rules(session_id, saved)


def rules_in_force(layout: Layout, project: str, running: list[str]) -> list[Rule]:
    """Every rule the project's sessions on this host decide by: config.zon's, the project's, then those of each
    session in `running` (the ids of its sessions that run now)."""
    from chock.config import load_config

    found = config_rules(load_config(layout.config).approvals_rules) + project_rules(layout, project)
    for session_id in running:
        found += logged_session_rules(layout, session_id)
    return found


def remove_rule_here(layout: Layout, project: str, wanted: str, running: list[str]) -> Rule:
    """Remove the project rule `wanted` from this host's file; a rule of another kind is refused, saying where it
    lives and what to do instead (docs/approvals.md#scopes)."""
    for rule in rules_in_force(layout, project, running):
        if rule.id != wanted:
            continue
        if wanted.startswith("c"):
            raise RuleRefused(
                f"rule {wanted} ({rule.verdict} `{rule.pattern}`) is in {rule.origin}: that is your file, which Chock "
                "never writes; remove the line there"
            )
        if wanted.startswith("s"):
            raise RuleRefused(
                f"rule {wanted} (`{rule.pattern}`) belongs to a running session ({rule.origin}): a session's rules are "
                "part of its log and hold until it ends; stop the session (`chock stop`) to be asked again"
            )
    removed = remove_project_rule(layout, project, wanted)
    if removed is None:
        raise RuleRefused(f"project {project} has no rule {wanted} on this host; `chock rules` lists them")
    return removed
