"""A moving session's bundle as its source makes it (chock/session/move_bundle.py, docs/remote.md#moving-a-session):
with real git, in a real repository. A piece is made small here (64 KiB) so that files "larger than a piece" stay
small; the wire's own piece size is tests/test_move_wire.py's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chock.control import parts
from chock.errors import Refused
from chock.session import move_bundle
from chock.session.hostgit import Repo
from tests.fakes.projects import git, git_value, make_project
from tests.fakes.wait import wait_until

PIECE = 64 * 1024


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(parts, "PIECE", PIECE)
    return make_project(tmp_path / "project")


def _repo(project: Path) -> Repo:
    return Repo(git_dir=project / ".git", common_dir=project / ".git", work_tree=project)


def _kept_streams(monkeypatch) -> list[subprocess.Popen[bytes]]:
    """Every git `Repo.stream` starts from now on, kept to be looked at."""
    started: list[subprocess.Popen[bytes]] = []
    stream = Repo.stream

    def kept(self: Repo, *args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        started.append(stream(self, *args, **kwargs))  # type: ignore[arg-type]
        return started[-1]

    monkeypatch.setattr(Repo, "stream", kept)
    return started


def _commit(project: Path, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        (project / name).write_bytes(data)
    git(project, "add", *files)
    git(project, "commit", "-q", "-m", "work")
    return git_value(project, "rev-parse", "HEAD")


def _bundle(project: Path, base: str, tmp_path: Path) -> tuple[bytes, list[dict]]:
    said: list[dict] = []
    with move_bundle.Pieces(tmp_path / "bundle", said.append, "20261206-114500-a1b2c3") as pieces:
        move_bundle.stream(_repo(project), "HEAD", [base], pieces)
    return (tmp_path / "bundle").read_bytes(), said


def _unbundles(bundle: bytes, base_project: Path, tip: str, tmp_path: Path) -> None:
    """The bundle's objects, fetched into a clone at the base, give the tip whole."""
    (tmp_path / "got.bundle").write_bytes(bundle)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(base_project), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "fetch", "-q", str(tmp_path / "got.bundle"), "+HEAD:refs/heads/got"],
                   check=True)  # fmt: skip
    assert git_value(clone, "rev-parse", "refs/heads/got") == tip
    subprocess.run(["git", "-C", str(clone), "fsck", "--strict", "--no-dangling"], check=True, capture_output=True)


@pytest.mark.parametrize("case", ["new", "edited"])
def test_the_bundle_is_said_piece_by_piece_and_carries_the_branch_whole(project, tmp_path, case):
    """Every piece but the last exactly a piece long, the last shorter, in order, covering the bundle; a large file
    the base holds, edited a little, travels as its change (git's deltas are kept), a new one whole."""
    large = os.urandom(8 * PIECE)
    if case == "edited":
        _commit(project, {"data.bin": large})
    base = git_value(project, "rev-parse", "HEAD")
    tip = _commit(project, {"data.bin": large[:1000] + b"an edit" + large[1000:], "small.txt": b"small\n"})
    bundle, said = _bundle(project, base, tmp_path)
    assert [piece["part"] for piece in said] == [parts.piece(n) for n in range(len(said))]
    assert all(piece["length"] == PIECE for piece in said[:-1]) and said[-1]["length"] < PIECE
    assert sum(piece["length"] for piece in said) == len(bundle)
    assert (len(said) == 1 and len(bundle) < PIECE) if case == "edited" else len(said) >= 8
    base_clone = tmp_path / "base"
    subprocess.run(["git", "clone", "-q", str(project), str(base_clone)], check=True)
    git(base_clone, "reset", "-q", "--hard", base)
    _unbundles(bundle, base_clone, tip, tmp_path)


@pytest.mark.parametrize("work", ["random", "text", "text-stored-loose", "random-packed", "random-head"])
def test_a_bundle_of_work_that_hardly_compresses_is_written_stored_and_any_other_compressed(project, tmp_path, work):
    """New random bytes (with a little text beside them) would cost git's zlib time for nothing: the bundle carries
    every object stored, the text too, so it is at least as large as the work. Text is compressed as git compresses
    it — also when the project writes its loose objects uncompressed (`core.looseCompression 0`: how git holds an
    object says nothing of whether it compresses), and beside random bytes git packed already (it copies those as
    they are, so they cost it nothing), and a file whose start is random and whose rest compresses (as a tar
    beginning with a .gz member). Either way the branch arrives whole."""
    text = b"".join(b"line %d of a file that compresses well\n" % n for n in range(30_000))
    base = git_value(project, "rev-parse", "HEAD")
    if work == "text-stored-loose":
        git(project, "config", "core.looseCompression", "0")
    packed = os.urandom(16 * PIECE) if work == "random-packed" else b""
    if packed:
        _commit(project, {"packed.bin": packed})
        git(project, "gc", "-q")
    files = {
        "random": {"notes.txt": text[:20_000], "data.bin": os.urandom(16 * PIECE)},
        "random-packed": {"notes.txt": text[:20_000]},
        "random-head": {"data.tar": os.urandom(PIECE) + bytes(16 * PIECE)},
    }.get(work, {"a.txt": text})
    tip = _commit(project, files)
    bundle, _ = _bundle(project, base, tmp_path)
    work_bytes = len(packed) + sum(len(data) for data in files.values())
    if work == "random":
        assert len(bundle) > work_bytes, "every object stored, the text among them"
    elif packed:
        assert len(bundle) < work_bytes - 10_000, "the text compressed beside the random bytes git packed"
    else:
        assert len(bundle) < work_bytes // 4, "text compressed at git's own level"
    base_clone = tmp_path / "base"
    subprocess.run(["git", "clone", "-q", "--no-local", str(project), str(base_clone)], check=True)
    git(base_clone, "reset", "-q", "--hard", base)
    _unbundles(bundle, base_clone, tip, tmp_path)


def test_objects_git_cannot_list_leave_the_bundle_at_gits_own_level_and_no_git_behind(project, monkeypatch):
    """A revision git refuses: the probe says nothing (the bundle's own making says why), having waited for both
    its gits — none is left running or unreaped."""
    _commit(project, {"data.bin": os.urandom(16 * PIECE)})
    assert move_bundle.compression(_repo(project), ["HEAD", "^HEAD~1"]) == ("pack.compression=0",)
    started = _kept_streams(monkeypatch)
    assert move_bundle.compression(_repo(project), ["refs/heads/none", "^HEAD~1"]) == ()
    assert len(started) == 2 and all(git.returncode is not None for git in started)


def test_a_bundle_past_its_bound_is_refused_as_git_writes_it_and_git_stops_at_once(project, tmp_path, monkeypatch):
    """Past the bound the source refuses, having written and said no byte past it, and git is killed — not waited
    for to the end of its pack — and its pack-objects gone too."""
    base = git_value(project, "rev-parse", "HEAD")
    _commit(project, {"big.bin": os.urandom(40 * PIECE)})
    monkeypatch.setattr(move_bundle, "LIMIT", PIECE + 1000)
    started = _kept_streams(monkeypatch)
    said: list[dict] = []
    with pytest.raises(Refused) as caught, move_bundle.Pieces(tmp_path / "bundle", said.append, "x") as pieces:
        move_bundle.stream(_repo(project), "HEAD", [base], pieces)
    assert "makes a bundle of more than" in str(caught.value)
    assert (tmp_path / "bundle").stat().st_size <= PIECE + 1000 and sum(piece["length"] for piece in said) <= PIECE
    bundling = [git.returncode for git in started if "bundle" in git.args]  # type: ignore[operator]
    assert bundling == [-9]  # killed at once, not left to write the rest

    def gits_in_project() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.readlink(f"/proc/{pid}/cwd") == str(project):
                    found.append(pid)
            except OSError:
                continue
        return found

    wait_until(lambda: not gits_in_project(), 10, "git's pack-objects to stop")
