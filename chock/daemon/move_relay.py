"""The daemon's part in moving a session between hosts (docs/protocol.md#moving-a-session): it relays, and writes
no log. On the source it runs `chock run --move-out` and `--moved` as children (as it runs `chock run`) and sends
the parts they staged; on the target it checks, receives the parts into `<state>/moves/<id>/in/`, and runs `chock
run --move-in`, which validates them, writes the log and carries the session on.

A part is received into a temporary file and renamed to its name only once its bytes match the sha256 announced,
so a part damaged on the way, or a connection cut in the middle of one, leaves nothing of it. The bundle's pieces
are joined as they come: each is written after the ones before it in `in/.bundle`, which is cut back to them when
the piece fails, and becomes `in/bundle` with the last piece.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from chock.control import move_protocol as mp
from chock.control import parts
from chock.control.connection import CLOSED, END_OF_BODY, Data
from chock.control.framing import ErrorCode, ProtocolError, size
from chock.daemon.children import Refusal
from chock.daemon.context import Daemon
from chock.daemon.reply import ClientGone, ReplyWriter
from chock.log.row import RowState

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    from chock.session.hostgit import Repo

READ_SIZE = 1024 * 1024

# Beside the staged parts: each part's size and sha256 as move-out's child said them.
DIGESTS = ".digests.json"

# One move's steps at this host take turns: each part's `receive` its own (the parts travel at once, each on a
# connection of its own; the bundle's pieces one turn, as they come one after the other), `move-in` and `move-drop`
# every part's (they wait for each `receive` under way); a step still waiting past this is told the session is busy.
TURN_SECONDS = 30.0

# Stands in for every character of a host name a log could not carry (chock.control.move_protocol.host_name).
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def own_host() -> str:
    """This machine's host name, as a log says where a session went or came from."""
    name = "".join(c if c in _HOST_CHARS else "-" for c in socket.gethostname()[:253]).lstrip("-")
    return name or "localhost"


@contextlib.contextmanager
def _turn(daemon: Daemon, session_id: str, names: tuple[str, ...] = parts.PARTS) -> Iterator[None]:
    """The turns of the move's steps `names` (parts, taken in one order), held together: a `receive` takes its
    part's, `move-in` and `move-drop` every part's; BUSY once they were waited for TURN_SECONDS."""
    deadline = time.monotonic() + TURN_SECONDS
    with contextlib.ExitStack() as held:
        for name in names:
            lock = daemon.steering(f"move {session_id} {name}")
            if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise ProtocolError(ErrorCode.BUSY, f"another step of moving session {session_id} is under way here")
            held.callback(lock.release)
        yield


# Making the directory parts are received into, and removing it once it is empty, take turns across the parts.
_DIRECTORY = threading.Lock()


def _project_of(daemon: Daemon, session_id: str) -> str:
    entry = daemon.catalog.entry(session_id)
    if entry is None or not entry.state.project:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"there is no session {session_id} here")
    return str(entry.state.project)


def _received(daemon: Daemon, session_id: str) -> str:
    return str(daemon.layout.move_dir(session_id) / "in")


def _drop(path: str) -> None:
    """Remove a move's staging directory, and the move's own once it is empty."""
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


# --------------------------------------------------------------------------------------------------------
# On the target


def move_check(daemon: Daemon, reply: ReplyWriter, request: mp.MoveCheckRequest) -> None:
    """`move-check` -> `ok <this host's name>[\\t<tip>[\\t<kept>]]` (`<tip>`: the commit the project's `chock/<id>`
    names, when it has one; `<kept>`: what a log sent must begin with, when this host keeps one), or the first
    reason this host would not take the session: an instance it does not have, a project that is not a git
    repository holding the base commit, or the id of a session it holds (and that did not move away from it)."""
    from chock.config import load_config
    from chock.errors import ChockError
    from chock.instances import listed
    from chock.session.kept_log import kept_of
    from chock.session.move_branch import branch_of, branch_tip

    try:
        names = [name for name, _, _ in listed(daemon.layout, load_config(daemon.layout.config))]
    except ChockError as refusal:
        raise Refusal(str(refusal)) from None
    if request.instance not in names:
        raise Refusal(
            f"this host has no instance named {request.instance} (it has {', '.join(names) or 'none'}): name one of "
            "its own with --instance"
        )
    repo = _check_base(request.project, request.base)
    entry = daemon.catalog.entry(request.session_id)
    if entry is not None and not _may_come(entry.state, daemon.catalog.alive(entry)):
        status = entry.state.status(daemon.catalog.alive(entry))
        raise Refusal(
            f"this host already holds session {request.session_id} ({status}), and it did not move away from here; "
            "nothing was changed"
        )
    # A session coming back: what its log here keeps is digested, so that the source sends only what follows it.
    kept = kept_of(daemon.layout.log_path(request.session_id)) if entry is not None else None
    tip = branch_tip(repo, branch_of(request.session_id))
    reply.answer(mp.HostNamed(own_host(), tip, kept.text() if kept is not None else ""))


def _may_come(state: RowState, alive: bool) -> bool:
    """Whether a session this host holds may be moved here again: it moved away from here, or its log ends with a
    handover and nobody holds it — a move to here cut before its adopt, or a move away from here whose target's
    answer was lost (the target's child takes it only when all of the log here begins the one sent)."""
    if state.ended and state.end_reason == "moved":
        return True
    return bool(state.moving_to) and not alive  # a step of a move away from here killed after its adopt, too


def _check_base(project: str, base: str) -> Repo:
    """`project` is a git repository (as the person's git finds it) holding commit `base` (returned), or Refusal
    naming it."""
    from pathlib import Path

    from chock.errors import ChockError
    from chock.session import hostgit

    try:
        found = hostgit.discover(Path(project))
    except ChockError as error:
        raise Refusal(str(error)) from None
    except (FileNotFoundError, NotADirectoryError, PermissionError) as error:
        raise Refusal(f"{project} cannot be a project here ({error.strerror or type(error).__name__})") from None
    if found.returncode != 0:
        raise Refusal(f"{project} is not a git repository here: give --project a clone of the session's project")
    top, git_dir, common = found.stdout.decode(errors="surrogateescape").splitlines()[:3]
    repo = hostgit.Repo(git_dir=Path(git_dir), common_dir=Path(common), work_tree=Path(top))
    if repo.run(["cat-file", "-e", f"{base}^{{commit}}"], check=False).returncode != 0:
        raise Refusal(
            f"{project} does not hold commit {base}, the session's base: fetch it there first (git fetch), or give "
            "--project a clone that has it"
        )
    return repo


def receive(daemon: Daemon, reply: ReplyWriter, request: mp.ReceiveRequest) -> None:
    """`receive`: exactly `<length>` bytes after the request, read under the connection's line deadlines, decoded
    and checked against the sha256 announced; kept as `moves/<id>/in/<part>` only when they match (a piece of the
    bundle, joined onto `in/.bundle`: `_receive_piece`)."""
    directory = _received(daemon, request.session_id)
    index = parts.piece_index(request.part)
    with _turn(daemon, request.session_id, (parts.kind(request.part),)):
        if index is not None:
            _receive_piece(reply, request, directory, index)
            reply.answer(mp.Received())
            return
        temporary = os.path.join(directory, f".{request.part}.{secrets.token_hex(8)}")
        with _DIRECTORY:  # not removed, empty, by another part's failure before this part's file is in it
            os.makedirs(directory, mode=0o700, exist_ok=True)
            out = open(temporary, "xb")  # noqa: SIM115 - closed below
        try:
            with out:
                decoder = parts.PartDecoder(request.part, request.sha256)
                for data in _body(reply):
                    out.write(decoder.feed(data))
                decoder.finish()
            os.replace(temporary, os.path.join(directory, request.part))
        except BaseException:
            _nothing_left(directory, temporary)
            raise
    reply.answer(mp.Received())


def _nothing_left(directory: str, path: str) -> None:
    """`path` removed, and the move's directories too when nothing else is in them: nothing of the move is left."""
    with _DIRECTORY:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(directory)  # nothing else received (or being received)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(directory))


def _receive_piece(reply: ReplyWriter, request: mp.ReceiveRequest, directory: str, index: int) -> None:
    """A piece of the bundle, written where it goes in `in/.bundle`: after exactly the `index` whole pieces before
    it (the first piece begins it anew), else `bad-request`. The last piece (the one shorter than the rest) makes
    it `in/bundle`. A piece whose bytes fail their check, or stop short, is cut off again: the file holds the pieces
    before it."""
    joining, joined = os.path.join(directory, "." + parts.BUNDLE), index * parts.PIECE
    try:
        with _DIRECTORY:
            if index == 0:
                os.makedirs(directory, mode=0o700, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, parts.BUNDLE))  # an earlier move's
            flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT | os.O_TRUNC if index == 0 else 0)
            fd = os.open(joining, flags, 0o600)
    except FileNotFoundError:  # no piece came before it, or its last did
        fd = -1
    held = os.fstat(fd).st_size if fd >= 0 else 0
    if fd < 0 or held != joined:
        if fd >= 0:
            os.close(fd)
        whole = os.path.exists(os.path.join(directory, parts.BUNDLE))
        holds = "all of it" if whole else f"{held // parts.PIECE} whole pieces"
        raise ProtocolError(
            ErrorCode.BAD_REQUEST,
            f"{request.part} of session {request.session_id} is out of order: the bundle here holds {holds}; send "
            "its pieces in order, from bundle.0",
        )
    most = parts.PART_BOUNDS[parts.BUNDLE]
    try:
        with open(fd, "wb") as out:
            out.seek(joined)
            decoder = parts.PartDecoder(request.part, request.sha256)
            for data in _body(reply):
                out.write(decoder.feed(data))
                if joined + decoder.size > most:
                    raise ProtocolError(ErrorCode.TOO_LARGE, f"a bundle may be at most {size(most)}")
            decoder.finish()
        if decoder.size < parts.PIECE:
            os.replace(joining, os.path.join(directory, parts.BUNDLE))
    except BaseException:
        if index == 0:
            _nothing_left(directory, joining)
        else:
            os.truncate(joining, joined)
        raise


def _body(reply: ReplyWriter) -> Iterator[bytes]:
    """The bytes after the request, as the connection gives them (its deadlines, its bounds); a peer that goes away
    or falls silent past a deadline is ClientGone (after it is told why)."""
    codec, sock = reply.codec, reply.sock
    bound = sock.gettimeout()  # the reply's own, once the bytes are in
    while True:
        event = codec.next_event()
        if isinstance(event, Data):
            yield event.data
            continue
        if event is END_OF_BODY:
            sock.settimeout(bound)
            return
        if event is CLOSED:
            raise ClientGone
        now = time.monotonic()
        deadline = codec.next_deadline()
        if deadline is not None and now >= deadline:
            told = codec.deadline_passed(now)
            with contextlib.suppress(OSError):
                sock.sendall(told or b"")
            raise ClientGone
        sock.settimeout(None if deadline is None else deadline - now)
        try:
            data = sock.recv(READ_SIZE)
        except TimeoutError:
            continue
        except OSError:
            data = b""
        codec.receive_data(data, time.monotonic())


def move_in(daemon: Daemon, reply: ReplyWriter, request: mp.MoveInRequest) -> None:
    """`move-in` -> `ok <adopt event id>`, once `chock run --move-in`'s `session.adopt` is logged; the parts received
    are removed whatever the child did (it has taken them, or refused them)."""
    directory = _received(daemon, request.session_id)
    with _turn(daemon, request.session_id):
        missing = [part for part in parts.PARTS if not os.path.isfile(os.path.join(directory, part))]
        if missing:
            raise Refusal(
                f"the {', '.join(missing)} of session {request.session_id} did not arrive here whole: move it again"
            )
        argv = ["--move-in", request.session_id, "--project", request.project, "--from", request.source]
        argv += ["--running"] if request.running else []
        argv += [f"--instance={request.instance}"] if request.instance else []
        try:
            adopted = daemon.children.move_in(request.session_id, request.project, argv, mp.MOVE_SECONDS - 30)
        finally:
            _drop(directory)
    reply.answer(mp.MovedIn(adopted))


def move_drop(daemon: Daemon, reply: ReplyWriter, request: mp.MoveDropRequest) -> None:
    """`move-drop` -> `ok dropped`: whatever was received for the session's move is removed."""
    with _turn(daemon, request.session_id):
        _drop(_received(daemon, request.session_id))
    reply.answer(mp.Dropped())


# --------------------------------------------------------------------------------------------------------
# On the source


def move_out(daemon: Daemon, reply: ReplyWriter, request: mp.MoveOutRequest) -> None:
    """`move-out` -> `ok <part>\\t<length>\\t<sha256>` for each part staged, then `ok <manifest JSON>`: `chock run
    --move-out` takes the session and stages its parts; each line it says as it stages the log and each piece of the
    bundle is said at once (the client sends that part while the rest is made), its last line of JSON, checked, with
    this host's name, last. Its refusal is `refused` in its own words."""
    project = _project_of(daemon, request.session_id)
    args = ["run", "--move-out", request.session_id, "--to", request.to, "--wait", str(request.wait)]
    if request.address:  # one argument, `=` joined: an address is never taken for an option
        args.append(f"--address={request.address}")
    if request.have:
        args.append(f"--have={request.have}")
    if request.kept:
        args.append(f"--kept={request.kept}")
    staged = daemon.layout.move_dir(request.session_id) / "out"
    announced: dict[str, tuple[int, str]] = {}  # each part staged, as the child said it

    def part_staged(line: bytes) -> None:
        """A line of the child's saying a part is staged (`{"staged": {"part": …, "length": N, "sha256": "…"}}`)."""
        try:
            value = json.loads(line)
            part = value.get("staged") if isinstance(value, dict) else None
            if not isinstance(part, dict):
                return
            header = mp.StagedPart(str(part.get("part")), part.get("length"), str(part.get("sha256")))  # type: ignore[arg-type]
        except (ValueError, RecursionError, ProtocolError):
            return
        announced[header.part] = (header.length, header.sha256)
        # What `send` announces without reading the part through again (a part changed since is caught by its target).
        _write_digests(staged, announced)
        reply.answer(header)

    doing = f"moving session {request.session_id} out"
    timeout = 2 * request.wait + mp.MOVE_SECONDS - 30
    code, last, out = daemon.children.run_chock(args, project, doing, timeout=timeout, on_line=part_staged)
    if code != 0:
        raise Refusal(last)
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
        manifest = mp.Manifest.from_value({**value, "host": own_host()} if isinstance(value, dict) else value)
    except (ValueError, ProtocolError) as error:
        said = f"chock run --move-out said no manifest this daemon reads: {error}"
        raise ProtocolError(ErrorCode.INTERNAL, said) from None
    if manifest.session_id != request.session_id:
        raise ProtocolError(ErrorCode.INTERNAL, "chock run --move-out staged another session's parts")
    listed = {part: (length, sha) for part, length, sha in manifest.parts}
    if not announced or any(listed.get(part) != digest for part, digest in announced.items()):
        raise ProtocolError(ErrorCode.INTERNAL, "chock run --move-out did not say its parts as it staged them")
    _write_digests(staged, listed)
    reply.answer(manifest)


def _write_digests(staged: os.PathLike[str], digests: dict[str, tuple[int, str]]) -> None:
    """Each part's size and sha256 kept beside the parts, for `send` (a file replaced whole: a `send` reading it as it
    is written finds the old one or the new one)."""
    path = os.path.join(staged, DIGESTS)
    temporary = f"{path}.{secrets.token_hex(4)}"
    try:
        with open(temporary, "w") as handle:
            json.dump({part: [size, sha] for part, (size, sha) in digests.items()}, handle)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def send(daemon: Daemon, reply: ReplyWriter, request: mp.SendRequest) -> None:
    """`send` -> `ok <length>\\t<sha256>`, then the part as it travels: the file `move-out` staged (its digest as
    move-out's child said it, else read through once for it), sent as the client takes it — the log by the kernel
    (sendfile), the others encoded in large batches; a piece of the bundle, the bytes of `out/bundle` it covers, once
    the child said it staged them. A file that changes under it cuts the reply short."""
    import hashlib

    index = parts.piece_index(request.part)
    staged = daemon.layout.move_dir(request.session_id) / "out"
    said = _said(staged, request.part)
    missing = ProtocolError(
        ErrorCode.NOT_FOUND,
        f"no {request.part} of session {request.session_id} is staged here: `move-out` stages it, and keeps what it "
        f"staged in {DIGESTS}",
    )
    if index is not None and said is None:
        raise missing
    try:
        handle = open(staged / parts.kind(request.part), "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise missing from None
    with handle:
        if index is not None and said is not None:
            length, digest = said
            handle.seek(index * parts.PIECE)
        else:
            length = os.fstat(handle.fileno()).st_size
            digest = said[1] if said is not None and said[0] == length else ""
            if not digest:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
                handle.seek(0)
        reply.answer(mp.PartHeader(parts.wire_length(request.part, length), digest))
        try:
            if parts.encoded(request.part):
                reply.stream(parts.encode_chunks(request.part, handle.read, length))
            elif length and reply.sock.sendfile(handle, 0, length) != length:  # the kernel's copy, file to socket
                raise OSError(f"the {request.part} shrank under its sender")
        except OSError:
            raise ClientGone from None  # the reply is cut short, never a part that looks whole


def _said(staged: os.PathLike[str], part: str) -> tuple[int, str] | None:
    """The part's size and sha256 as move-out's child said them, or None."""
    try:
        with open(os.path.join(staged, DIGESTS)) as handle:
            found = json.load(handle).get(part)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(found, list) and len(found) == 2 and type(found[0]) is int and isinstance(found[1], str):
        return found[0], found[1]
    return None


def moved(daemon: Daemon, reply: ReplyWriter, request: mp.MovedRequest) -> None:
    """`moved` -> `ok moved`, once `chock run --moved` logged the move's end; then the staged parts are removed."""
    project = _project_of(daemon, request.session_id)
    args = ["run", "--moved", request.session_id, "--to", request.to]
    code, said, _ = daemon.children.run_chock(args, project, f"ending session {request.session_id}'s move")
    if code != 0:
        raise Refusal(said)
    _drop(str(daemon.layout.move_dir(request.session_id) / "out"))
    reply.answer(mp.MovedOut())


VERBS: dict[str, Callable[[Daemon, ReplyWriter, Any], None]] = {
    "move-check": move_check,
    "move-out": move_out,
    "send": send,
    "receive": receive,
    "move-in": move_in,
    "moved": moved,
    "move-drop": move_drop,
}
