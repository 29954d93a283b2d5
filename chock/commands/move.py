"""`chock move [NAME:]SESSION --to NAME`: a session, its log and its work, carried to another host, where it goes
on (docs/remote.md#moving-a-session, docs/protocol.md#moving-a-session).

This command only relays, between the two hosts' daemons: it asks the target whether it takes the session
(`move-check`), has the source take it and stage its parts (`move-out`), passes each part from the source's `send`
to the target's `receive` as it comes (never a part whole in memory), asks the target to adopt it (`move-in`, the
commit point), and then tells the source it moved (`moved`). Each step is said on standard error; the result on
standard output. Before `move-in` is asked, a failure or Ctrl-C leaves the target holding nothing (what it received
is dropped) and the source handed over to nobody, which `chock run --continue` there takes back.
"""

from __future__ import annotations

from pathlib import Path

import click

from chock.commands.base import command, options, pass_layout, project_root
from chock.commands.completion import session_ids
from chock.commands.shared_options import DAEMON_OPTIONS
from chock.control import daemon_protocol as dp
from chock.control import move_protocol as mp
from chock.control import parts
from chock.control.address import LOCAL, Address, host_address, named_hosts
from chock.control.client import ControlClient, R, WarmClient, expect
from chock.control.framing import ErrorCode, ProtocolError
from chock.control.message import Request
from chock.errors import EXIT_INTERRUPTED, ChockError, UsageError
from chock.paths import Layout
from chock.terminal import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from chock.commands.targets import Target

# A running session hands over at its next turn boundary, each of the exchange's two round trips bounded by this
# (as `chock detach --wait`).
DEFAULT_WAIT = 300


class MoveFailed(ChockError):
    pass


def _step(text: str) -> None:
    import sys

    click.echo(shown(text, sys.stderr, one_line=True), err=True)


def _interrupted(text: str) -> SystemExit:
    """Ctrl-C: what it left where, said; the exit status of an interrupted command."""
    _step(text)
    return SystemExit(EXIT_INTERRUPTED)


def _ask(client: ControlClient, host: str, request: Request, reply: type[R]) -> R:
    """One verb of a move, at `host`: its reply, or MoveFailed in the daemon's words (an older daemon's
    `unknown-verb` said as one that cannot move sessions)."""
    try:
        return expect(client.call(request), reply)
    except ProtocolError as error:
        raise _failed(host, request, error) from None


def _taking(client: ControlClient, host: str, request: mp.MoveOutRequest, relay: _Lanes) -> mp.Manifest:
    """`move-out` asked of the source: each part it says is staged handed to `relay` (sent at once), then what it
    staged in all (the reply's last line)."""
    try:
        taking = client.stream(request, idle_timeout=request.WAIT)
        try:
            relay.staged(expect(taking.header, mp.StagedPart))
            for line in taking:
                if isinstance(line, mp.Manifest):
                    return line
                relay.staged(expect(line, mp.StagedPart))
        finally:
            taking.close()
    except ProtocolError as error:
        raise _failed(host, request, error) from None
    raise MoveFailed(f"{host} did not say what it staged of the session: its reply ended before it")


def _failed(host: str, request: Request, error: ProtocolError) -> MoveFailed:
    if error.code == ErrorCode.UNKNOWN_VERB:
        return MoveFailed(f"the daemon on {host} is too old to move sessions: upgrade Chock there")
    return MoveFailed(f"{host} did not {request.verb} session ({error.code}): {error.text}")


# A log begins with its session.start, and its first workspace.open follows it at once: `_origin` reads no further
# than this for them, in events, bytes and time as a whole.
ORIGIN_EVENTS = 256
ORIGIN_BYTES = 8 * 1024 * 1024
ORIGIN_SECONDS = 60.0


def _origin(client: ControlClient, host: str, session_id: str) -> tuple[str, str]:
    """The session's base commit and instance, from the first events of its log at the source (at most
    ORIGIN_EVENTS of them, ORIGIN_BYTES, within ORIGIN_SECONDS)."""
    import time

    base = instance = ""
    events = size = 0
    started = time.monotonic()
    request = dp.ReadRequest(session_id, 0)
    try:
        stream = client.stream(request)
        try:
            for line in stream.within(ORIGIN_SECONDS):
                said = expect(line, dp.EventLine)
                event = said.event
                if event.get("type") == "session.start":
                    instance = str(event.get("instance") or "")
                elif event.get("type") == "workspace.open":
                    base = str(event.get("base") or event.get("commit") or "")
                if base and instance:
                    break
                events, size = events + 1, size + len(said.line.encode()) + 1
                if events >= ORIGIN_EVENTS or size >= ORIGIN_BYTES:
                    raise MoveFailed(
                        f"{host} sent {events:,} events ({size:,} bytes) of session {session_id}'s log with no "
                        f"session.start and workspace.open among them, and a log begins with those: it cannot move "
                        f"(no log Chock writes reads so; is the daemon there Chock's?). Nothing was changed"
                    )
        finally:
            stream.close()
    except ProtocolError as error:
        if time.monotonic() - started >= ORIGIN_SECONDS:
            raise MoveFailed(
                f"{host} did not send the first events of session {session_id}'s log (its session.start and "
                f"workspace.open) within {ORIGIN_SECONDS:g} s, so it cannot move now; nothing was changed. Try again "
                f"once {host} answers promptly"
            ) from None
        raise _failed(host, request, error) from None
    if not base or not instance:
        raise MoveFailed(f"session {session_id}'s log on {host} names no base commit or instance: it cannot move")
    return base, instance


def _relay(source: ControlClient, source_host: str, target: ControlClient, target_host: str, session_id: str,
           part: str, staged: tuple[int, str]) -> int:  # fmt: skip
    """One part, from the source's `send` to the target's `receive`, chunk by chunk as it comes; its wire length.
    `staged` is the part's (length, sha256) as `move-out` said it: a part `send` announces otherwise is refused."""
    request = mp.SendRequest(session_id, part)
    try:
        header, body = source.open_body(request)
    except ProtocolError as error:
        raise _failed(source_host, request, error) from None
    announced = expect(header, mp.PartHeader)
    if (announced.body_length, announced.sha256) != (parts.wire_length(part, staged[0]), staged[1]):
        body.close()  # type: ignore[attr-defined]  # a generator
        raise MoveFailed(
            f"{source_host} sends another {part} than the one it staged (another move of the session began there?); "
            "nothing of it was sent"
        )
    receive = mp.ReceiveRequest(session_id, part, announced.body_length, announced.sha256)
    try:
        expect(target.call_with_body(receive, body), mp.Received)
    except ProtocolError as error:
        raise _failed(target_host, receive, error) from None
    finally:
        body.close()  # type: ignore[attr-defined]  # a generator
    return announced.body_length


class _Lanes:
    """The parts on their way, each lane of `parts.LANES` on its own (source, target) clients and in a thread of its
    own, each part sent as soon as the source says it is staged (`staged`): the log and the bundle's pieces while the
    source still makes the rest. Once every part is staged (`listed`), each lane ends with the last of its parts. The
    first failure cuts every lane's connections (so no part goes on being sent); `finish` raises it once every lane
    stopped, and `stop` cuts them all (a failure elsewhere, Ctrl-C)."""

    def __init__(self, lanes: list[tuple[WarmClient, WarmClient]], source_host: str, target_host: str,
                 session_id: str) -> None:  # fmt: skip
        import queue
        import threading

        self._lanes = lanes
        self._hosts = source_host, target_host
        self._session_id = session_id
        self._failures: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._said: dict[str, tuple[int, str]] = {}  # each part's (length, sha256), as the source said it
        self._next: list[queue.SimpleQueue[str | None]] = [queue.SimpleQueue() for _ in lanes]  # None: the lane ends

    @property
    def began(self) -> bool:
        return bool(self._threads)

    def staged(self, part: mp.StagedPart) -> None:
        """A part staged: sent next in its lane (the first begins every lane)."""
        if part.part in self._said:
            raise MoveFailed(f"the source said twice that it staged the session's {part.part}")
        if not self._threads:
            self._begin()
        if part.part == "log":
            _step(f"sending its log ({parts.wire_length(part.part, part.length):,} bytes) while the rest is made")
        elif part.part == parts.piece(0):
            _step("sending its bundle piece by piece as git writes it")
        self._send(part.part, (part.length, part.sha256))

    def listed(self, manifest: mp.Manifest) -> None:
        """Every part staged, as `manifest` says: those not sent yet follow, then each lane ends."""
        rest, listed = [], {part: (length, sha) for part, length, sha in manifest.parts}
        if any(listed.get(part) != said for part, said in self._said.items()):
            raise MoveFailed("the source's manifest says other parts than the ones it said it staged")
        if not self._failures:  # else a lane failed, and `finish` raises it
            for part, (length, sha) in listed.items():
                if part not in self._said:
                    self._send(part, (length, sha))
                    rest.append(f"its {part} ({parts.wire_length(part, length):,} bytes)")
            pieces = [parts.wire_length(part, n) for part, n, _ in manifest.parts if parts.kind(part) == parts.BUNDLE]
            bundle = f"its bundle {sum(pieces):,} bytes in {len(pieces)} piece{'s' if len(pieces) > 1 else ''}"
            _step(f"every part staged, {bundle}: sending {' and '.join(rest)}")
        for lane in self._next:
            lane.put(None)

    def _send(self, part: str, said: tuple[int, str]) -> None:
        self._said[part] = said
        self._next[parts.lane(part)].put(part)

    def _begin(self) -> None:
        import threading

        for index, kinds in enumerate(parts.LANES):
            thread = threading.Thread(target=self._run, args=(index,), name=f"relay-{kinds[0]}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, index: int) -> None:
        source, target = self._lanes[index]
        try:
            while (part := self._next[index].get()) is not None:
                _relay(source, self._hosts[0], target, self._hosts[1], self._session_id, part, self._said[part])
        except BaseException as error:
            self._failures.append(error)
            self._cut()

    def _cut(self) -> None:
        for clients in self._lanes:
            for client in clients:
                client.cut()

    def finish(self) -> None:
        """Every lane to its end; the first failure raised once every lane stopped."""
        try:
            for thread in self._threads:
                thread.join()
        except BaseException:  # Ctrl-C while the lanes ran
            self.stop()
            raise
        if self._failures:
            raise self._failures[0]

    def stop(self) -> None:
        """Every lane cut, and waited for."""
        for lane in self._next:
            lane.put(None)
        self._cut()
        for thread in self._threads:
            thread.join()


def _reachable_from(source_host: str, target: Address) -> str:
    """The target's address as the source records it for `chock run --continue` to ask there: an `ssh://`
    address reaches it from anywhere its key works; a socket or TCP address only from this machine ("": none)."""
    return str(target) if target.ssh is not None or source_host == LOCAL else ""


def _target_project(project: str | None, target: str) -> str:
    if target == LOCAL:
        return str(Path(project).resolve()) if project else str(project_root(None))
    if not project:
        raise UsageError(
            f"--project is required when the target is another host: a directory on {target} holding a clone of the "
            "session's project"
        )
    if not project.startswith("/"):
        raise UsageError(f"--project {project!r} is a directory on {target}: give it as an absolute path")
    return project


@command()
@click.argument("session", metavar="[NAME:]SESSION", shell_complete=session_ids)
@click.option("--to", "to", required=True, metavar="NAME", help="The host it goes to: a connection's name, or local.")
@click.option("--project", "project", metavar="DIRECTORY", help="The project on that host (default there: here).")
@click.option("--instance", "instance", metavar="NAME", help="An instance of that host's to carry on with.")
@click.option(
    "--wait",
    "wait",
    type=click.IntRange(1, 86400),
    default=DEFAULT_WAIT,
    show_default=True,
    metavar="SECONDS",
    help="How long a running session's turn boundary is waited for, each round trip.",
)
@options(DAEMON_OPTIONS)
@pass_layout
def move(
    layout: Layout,
    session: str,
    to: str,
    project: str | None,
    instance: str | None,
    wait: int,
    daemon_address: tuple[str, ...],
    port: int | None,
) -> None:
    """Move a session to another host: its log, its branch with every edit, its scratchpad; it goes on there.

    The source is the host NAME: names (or --daemon), else this machine. A running session hands over at its next
    turn boundary; an ended one stays ended there (`chock say` continues it)."""
    from chock.commands.targets import target as find_target

    named = ":" in session or named_hosts(daemon_address, port=port) is not None
    source = find_target(
        layout, session if named else f"{LOCAL}:{session}", None, daemon_address, port, running=False,
        acting="chock move",
    )  # fmt: skip
    session_id = source.session_id
    row = (
        source.row
        if source.row is not None
        else _ask(source.client, source.host, dp.FindRequest(session_id), dp.ListRow).row
    )
    if row.get("status") == "moved":
        went = str(row.get("end_to") or "another host")
        raise MoveFailed(
            f"session {session_id} moved to {went} already; nothing was sent. Move it from there: "
            f"`chock move NAME:{session_id} --to …`, NAME the connection that reaches {went}; "
            f"`chock sessions remove {session_id}` removes the copy left here"
        )
    to_host, to_address = host_address(to, local=Address(path=str(layout.daemon_socket)))
    if to_address == source.client.address:
        raise UsageError(f"session {session_id} is {source.where} already: name another host with --to")
    project_there = _target_project(project, to_host)
    # Each verb's connection to either host is dialed while the one before it runs; each lane of parts has its own.
    verbs, *lanes = [(WarmClient(source.client.address), WarmClient(to_address)) for _ in range(1 + len(parts.LANES))]
    try:
        if not _adopted_already(source, row, verbs, to_host, to):
            _move(source, session, to, to_host, to_address, verbs, lanes, project_there, instance, wait)
    finally:
        for clients in (verbs, *lanes):
            for client in clients:
                client.close()


def _adopted_already(found: Target, row: dict[str, object], clients: tuple[WarmClient, WarmClient], to_host: str,
                     to: str) -> bool:  # fmt: skip
    """Whether the session, handed over from the source to a host (a move whose answer was lost, or whose last step
    on the source was cut), is held by the target past that handover — its log there goes on past the source's
    handover end and is no leftover handed over to it: then it went, and only the source's last step (`moved`) was
    left, done now."""
    source, target = clients
    went, session_id = str(row.get("end_to") or ""), found.session_id
    if row.get("status") != "handed-over" or not went:
        return False
    try:
        there = expect(target.call(dp.FindRequest(session_id)), dp.ListRow).row
    except ProtocolError as error:
        if error.code == ErrorCode.NOT_FOUND:
            return False
        raise _failed(to_host, dp.FindRequest(session_id), error) from None
    mine, theirs = row.get("last_event_id"), there.get("last_event_id")
    if not (isinstance(mine, int) and isinstance(theirs, int)):
        return False
    # The handover's own id: past it, a step here killed after its adopt left that one event (chock.log.row).
    handover = mine if row.get("end_reason") == "handover" else mine - 1
    if theirs <= handover:
        return False  # what a move cut before its adopt left there, or no copy of this one
    if there.get("status") == "handed-over" and there.get("end_to") == went:
        return False
    _step(f"{to_host} holds session {session_id} already (a move to {went} was adopted there); ending it {found.where}")
    _ask(source, found.host, mp.MovedRequest(session_id, went), mp.MovedOut)
    click.echo(shown(f"session {session_id} is on {to_host}: ended it {found.where}, where it is history now"))
    return True


def _move(
    found: Target, typed: str, to: str, to_host: str, to_address: Address,
    verbs: tuple[WarmClient, WarmClient], lanes: list[tuple[WarmClient, WarmClient]], project_there: str,
    instance: str | None, wait: int,
) -> None:  # fmt: skip
    """The move's steps, from `move-check` on (see the module); `verbs`, the (source, target) pair of clients for
    every verb but the parts, and `lanes`, one pair for each lane of parts; `typed`, the session as the person named
    it."""
    where, session_id = found.where, found.session_id
    source, target = verbs
    base, own_instance = _origin(source, found.host, session_id)
    _step(f"asking {to_host} whether it takes session {session_id}")
    check = mp.MoveCheckRequest(session_id, base, instance or own_instance, project_there)
    named = _ask(target, to_host, check, mp.HostNamed)
    there = named.host
    _step(f"taking session {session_id} {where} (a running session hands over at its next turn boundary)")
    relay = _Lanes(lanes, found.host, to_host, session_id)
    left = (
        f"{to_host} holds nothing of it; session {session_id} is handed over to nobody {where}: "
        f"`chock run --continue {session_id}` there takes it back"
    )
    try:
        # What the target holds already (a session coming back) is left out: of the bundle, its `chock/<id>`; of
        # the log, what it keeps.
        reachable = _reachable_from(found.host, to_address)
        out = mp.MoveOutRequest(session_id, there, wait, reachable, named.tip, named.kept)
        manifest = _taking(source, found.host, out, relay)
    except BaseException as error:
        taken = (
            f"{to_host} holds nothing of it; if session {session_id} was taken {where}, it is handed over to nobody "
            f"there, and `chock run --continue {session_id}` there takes it back"
        )
        stopped = f"stopped while the session was being taken {where}"
        raise _undone(error, relay, to_address, session_id, taken, stopped) from None
    try:
        if (manifest.base, manifest.instance) != (base, own_instance):
            again = mp.MoveCheckRequest(session_id, manifest.base, instance or manifest.instance, project_there)
            _ask(target, to_host, again, mp.HostNamed)
        relay.listed(manifest)
        relay.finish()
    except BaseException as error:
        raise _undone(error, relay, to_address, session_id, left, "stopped") from None
    _step(f"{to_host} adopts it")
    move_in = mp.MoveInRequest(session_id, project_there, manifest.host, manifest.was_running, instance or "")
    unknown = (
        f"if {to_host} did not adopt it, `chock run --continue {session_id}` {where} takes it back (it asks "
        f"{to_host} first); `chock sessions --daemon {to}` says whether {to_host} holds it"
    )
    target.ahead = False  # its last verb
    try:
        adopted = _ask(target, to_host, move_in, mp.MovedIn).adopted
    except MoveFailed as error:
        raise MoveFailed(f"{error} — {unknown}") from None
    except KeyboardInterrupt:
        raise _interrupted(f"stopped while {to_host} was adopting it: {unknown}") from None
    _step(f"ending it {where}")
    source.ahead = False
    try:
        _ask(source, found.host, mp.MovedRequest(session_id, there), mp.MovedOut)
    except MoveFailed as error:
        raise MoveFailed(
            f"session {session_id} moved to {to_host} (event {adopted} of its log there) and is {to_host}'s now, "
            f"but ending it {where} failed ({error}): `chock move {typed} --to {to}` again ends it {where}"
        ) from None
    goes_on = "it goes on there"
    if not manifest.was_running:
        goes_on = f"it is ended there: `chock say {to}:{session_id} MESSAGE` continues it"
    click.echo(shown(f"session {session_id} moved to {to_host} (event {adopted} of its log there): {goes_on}"))


def _undone(error: BaseException, relay: _Lanes, target: Address, session_id: str, left: str,
            stopped: str) -> BaseException:  # fmt: skip
    """What a failure before `move-in` raises, once every lane is stopped and what the target received is dropped:
    said with what it `left`; Ctrl-C as `stopped`."""
    if relay.began:
        relay.stop()
        _drop(ControlClient(target), session_id)  # on a connection of its own: the lanes' may be cut
    if isinstance(error, KeyboardInterrupt):
        return _interrupted(f"{stopped}: {left}")
    if isinstance(error, ChockError):
        return MoveFailed(f"{error} — {left}")
    _step(f"failed: {left}")
    return error


def _drop(target: ControlClient, session_id: str) -> None:
    """What the target received for this move, removed (a failure to is said, not raised: the move failed anyway)."""
    try:
        target.call(mp.MoveDropRequest(session_id))
    except ProtocolError as error:
        _step(f"could not drop what was received: {error.text}")
