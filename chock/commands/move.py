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


def _failed(host: str, request: Request, error: ProtocolError) -> MoveFailed:
    if error.code == ErrorCode.UNKNOWN_VERB:
        return MoveFailed(f"the daemon on {host} is too old to move sessions: upgrade Chock there")
    return MoveFailed(f"{host} did not {request.verb} session ({error.code}): {error.text}")


def _origin(client: ControlClient, host: str, session_id: str) -> tuple[str, str]:
    """The session's base commit and instance, from the first events of its log at the source."""
    base = instance = ""
    try:
        stream = client.stream(dp.ReadRequest(session_id, 0))
        try:
            for line in stream:
                event = expect(line, dp.EventLine).event
                if event.get("type") == "session.start":
                    instance = str(event.get("instance") or "")
                elif event.get("type") == "workspace.open":
                    base = str(event.get("base") or event.get("commit") or "")
                if base and instance:
                    break
        finally:
            stream.close()
    except ProtocolError as error:
        raise _failed(host, dp.ReadRequest(session_id, 0), error) from None
    if not base or not instance:
        raise MoveFailed(f"session {session_id}'s log on {host} names no base commit or instance: it cannot move")
    return base, instance


def _relay(source: ControlClient, source_host: str, target: ControlClient, target_host: str, session_id: str,
           part: str) -> int:  # fmt: skip
    """One part, from the source's `send` to the target's `receive`, chunk by chunk as it comes; its wire length."""
    request = mp.SendRequest(session_id, part)
    try:
        header, body = source.open_body(request)
    except ProtocolError as error:
        raise _failed(source_host, request, error) from None
    announced = expect(header, mp.PartHeader)
    receive = mp.ReceiveRequest(session_id, part, announced.body_length, announced.sha256)
    try:
        expect(target.call_with_body(receive, body), mp.Received)
    except ProtocolError as error:
        raise _failed(target_host, receive, error) from None
    finally:
        body.close()  # type: ignore[attr-defined]  # a generator
    return announced.body_length


def _relay_lanes(lanes: list[tuple[WarmClient, WarmClient]], source_host: str, target_host: str, session_id: str,
                 manifest: mp.Manifest) -> None:  # fmt: skip
    """Every part, each lane of `parts.LANES` on its own (source, target) clients, the lanes at once: the first
    in this thread, the others in threads of their own. The first failure cuts every lane's connections (so no part
    goes on being sent) and is raised once all lanes stopped; Ctrl-C here does the same."""
    import threading

    sizes = {part: parts.wire_length(part, length) for part, length, _ in manifest.parts}
    said = [" then ".join(f"its {part} ({sizes[part]:,} bytes)" for part in lane) for lane in parts.LANES]
    _step(f"sending {said[0]}" + "".join(f"; beside it, {lane}" for lane in said[1:]))
    failures: list[BaseException] = []

    def cut() -> None:
        for clients in lanes:
            for client in clients:
                client.cut()

    def run(lane: tuple[str, ...], source: WarmClient, target: WarmClient) -> None:
        try:
            for part in lane:
                _relay(source, source_host, target, target_host, session_id, part)
        except BaseException as error:
            failures.append(error)
            cut()

    others = [
        threading.Thread(target=run, args=(lane, *clients), name=f"relay-{lane[-1]}", daemon=True)
        for lane, clients in zip(parts.LANES[1:], lanes[1:], strict=True)
    ]
    for thread in others:
        thread.start()
    try:
        run(parts.LANES[0], *lanes[0])
        for thread in others:
            thread.join()
    except BaseException:  # Ctrl-C while the other lanes ran
        cut()
        for thread in others:
            thread.join()
        raise
    if failures:
        raise failures[0]


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
    lanes = [(WarmClient(source.client.address), WarmClient(to_address)) for _ in parts.LANES]
    try:
        if not _adopted_already(source, row, lanes[0], to_host, to):
            _move(source, session, to, to_host, to_address, lanes, project_there, instance, wait)
    finally:
        for clients in lanes:
            for client in clients:
                client.close()


def _adopted_already(found: Target, row: dict[str, object], clients: tuple[WarmClient, WarmClient], to_host: str,
                     to: str) -> bool:  # fmt: skip
    """Whether the session, handed over from the source to a host (a move whose answer was lost, or whose last step
    on the source was cut), is held by the target past that handover — its log there goes on past the source's and
    is no leftover handed over to it: then it went, and only the source's last step (`moved`) was left, done now."""
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
    if not (isinstance(mine, int) and isinstance(theirs, int) and theirs > mine):
        return False  # what a move cut before its adopt left there, or no copy of this one
    if there.get("status") == "handed-over" and there.get("end_to") == went:
        return False
    _step(f"{to_host} holds session {session_id} already (a move to {went} was adopted there); ending it {found.where}")
    _ask(source, found.host, mp.MovedRequest(session_id, went), mp.MovedOut)
    click.echo(shown(f"session {session_id} is on {to_host}: ended it {found.where}, where it is history now"))
    return True


def _move(
    found: Target, typed: str, to: str, to_host: str, to_address: Address,
    lanes: list[tuple[WarmClient, WarmClient]], project_there: str, instance: str | None, wait: int,
) -> None:  # fmt: skip
    """The move's steps, from `move-check` on (see the module); `lanes`, each a (source, target) pair of clients, the
    first for every verb but the parts of the other lanes; `typed`, the session as the person named it."""
    where, session_id = found.where, found.session_id
    source, target = lanes[0]
    base, own_instance = _origin(source, found.host, session_id)
    _step(f"asking {to_host} whether it takes session {session_id}")
    check = mp.MoveCheckRequest(session_id, base, instance or own_instance, project_there)
    named = _ask(target, to_host, check, mp.HostNamed)
    there = named.host
    _step(f"taking session {session_id} {where} (a running session hands over at its next turn boundary)")
    try:
        # What the target holds already (a session coming back) is left out: of the bundle, its `chock/<id>`; of
        # the log, what it keeps.
        reachable = _reachable_from(found.host, to_address)
        out = mp.MoveOutRequest(session_id, there, wait, reachable, named.tip, named.kept)
        manifest = _ask(source, found.host, out, mp.Manifest)
    except MoveFailed as error:
        raise MoveFailed(
            f"{error} — {to_host} holds nothing of it; if session {session_id} was taken {where}, it is handed over "
            f"to nobody there, and `chock run --continue {session_id}` there takes it back"
        ) from None
    except KeyboardInterrupt:
        raise _interrupted(
            f"stopped while the session was being taken {where}: {to_host} holds nothing of it; if it was "
            f"taken, it is handed over to nobody there, and `chock run --continue {session_id}` there takes it back"
        ) from None
    try:
        if (manifest.base, manifest.instance) != (base, own_instance):
            again = mp.MoveCheckRequest(session_id, manifest.base, instance or manifest.instance, project_there)
            _ask(target, to_host, again, mp.HostNamed)
        _relay_lanes(lanes, found.host, to_host, session_id, manifest)
    except BaseException as error:
        _drop(ControlClient(to_address), session_id)  # on a connection of its own: the lanes' may be cut
        left = (
            f"{to_host} holds nothing of it; session {session_id} is handed over to nobody {where}: "
            f"`chock run --continue {session_id}` there takes it back"
        )
        if isinstance(error, ChockError):
            raise MoveFailed(f"{error} — {left}") from None
        if isinstance(error, KeyboardInterrupt):
            raise _interrupted(f"stopped: {left}") from None
        _step(f"failed: {left}")
        raise
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


def _drop(target: ControlClient, session_id: str) -> None:
    """What the target received for this move, removed (a failure to is said, not raised: the move failed anyway)."""
    try:
        target.call(mp.MoveDropRequest(session_id))
    except ProtocolError as error:
        _step(f"could not drop what was received: {error.text}")
