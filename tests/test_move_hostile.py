"""Moving a session in, against a hostile source (docs/remote.md#moving-a-session): parts crafted to break the
target's checks are refused by `chock run --move-in`, and nothing outside the session's own directory and branch
changes. The parts are put where the target's daemon keeps them, as tests/test_move_children.py does."""

from __future__ import annotations

import hashlib
import subprocess

from tests.fakes.projects import git, git_value
from tests.test_move_children import (
    ONE_FILE,
    _move_in,
    _nothing_written,
    _relay,
    _sent,
    hosts,  # noqa: F401 - the fixture: two hosts, two clones
)


def test_a_bundle_with_a_corrupt_object_is_refused_and_leaves_no_branch(hosts):  # noqa: F811
    a, b, project_a, project_b = hosts
    session_id, said, _ = _sent(a, project_a)
    # A commit on chock/<id> whose author line git's fsck refuses (its email is not closed).
    tip = git_value(project_a, "rev-parse", f"chock/{session_id}")
    tree = git_value(project_a, "rev-parse", f"{tip}^{{tree}}")
    raw = f"tree {tree}\nparent {tip}\nauthor A <a@b 1 +0000\ncommitter A <a@b> 1 +0000\n\nbad\n"
    bad = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        cwd=project_a, input=raw.encode(), capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    git(project_a, "update-ref", f"refs/heads/chock/{session_id}", bad)
    bundle = a.layout.state / "moves" / session_id / "out" / "bundle"
    git(project_a, "bundle", "create", "-q", str(bundle), f"chock/{session_id}", f"^{said['base']}")
    said["parts"][1] = {"part": "bundle", "length": bundle.stat().st_size,
                        "sha256": hashlib.sha256(bundle.read_bytes()).hexdigest()}  # fmt: skip
    _relay(a, b, session_id, said)
    b.replay_instance(ONE_FILE)
    refused = _move_in(b, session_id, project_b, "hosta")
    assert refused.returncode == 3 and "fails git's object checks" in refused.stderr, refused.stderr
    _nothing_written(b, project_b, session_id)
    missing = subprocess.run(["git", "-C", str(project_b), "cat-file", "-e", bad], capture_output=True)
    assert missing.returncode != 0  # none of its objects got in
