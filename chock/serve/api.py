"""serve's HTTP API: each route a row of `ROUTES` (method, path, the daemon verb's request type, the shape that
serves it, what its JSON says, its guards), served by one function per shape.

Every row is served below `/api/hosts/<name>` for each daemon serve is a client of (chock/serve/hosts.py), and
for the first of them (`local` when it is one) below `/api` too:

    GET  /api/hosts                                   -> [{"name": N, "state": "reachable", "protocol": 1}
                                                          | {"name": N, "state": "unreachable", "reason": …}, …]
    GET  /api/sessions?project=P                      list    -> {"project": P, "sessions": [row, …]}
    GET  /api/sessions/all                            sessions -> {"sessions": [row, …]} (every project, newest first)
    GET  /api/instances                               instances -> {"instances": [{name, kind, default}, …]}
    POST /api/sessions {project, message}             start   -> 201 {"id": …}
    POST /api/sessions/start-with {project, instance, message}
                                                      start-with -> 201 {"id": …}
    GET  /api/sessions/<id>/events?after=N            read    -> {"events": [event, …]} (streamed)
    GET  /api/sessions/<id>/watch?project=P&after=N   watch   -> text/event-stream (one upstream per session)
    POST /api/sessions/<id>/answer {project, request_id, answer}
                                                      answer  -> {"answered": true}
    POST /api/sessions/<id>/answer-with {project, request_id, answer, scope?, rule?, note?}
                                                      answer-with -> {"answered": true, "scope": …}
    POST /api/sessions/<id>/stop {project}            stop    -> {"stopped": true} once its log holds its end
    POST /api/sessions/<id>/messages {project, message}
                                                      say     -> 201 {"id": …, "how": "queued" | "continued"}
    POST /api/sessions/<id>/remove {project}          remove  -> {"removed": true}
    POST /api/sessions/<id>/remove-with-workspace {project}   remove-with-workspace -> {"removed": true, …}
    GET  /api/health                                  the greeting -> {"ok": true, "daemon": …, "protocol": 1}

A verb with no route is in `NOT_ROUTED`, with the reason (docs/protocol.md#adding-a-verb).

The watch stream, in order: `retry: 1500`; `event: row` with the session's row as of the moment serve's
upstream watch began; then one message per event, `id: <host>/<session id>/<N>` and `data: <the event>` (the
browser sends that id back as `Last-Event-ID` when it reconnects, and its N wins over `?after=`; a bare N is
taken too, and one naming another host or session is refused); a `: keep-alive` comment
every `feeds.HEARTBEAT` seconds of quiet; and, once the session is over, `event: end` before serve closes
the stream, so a browser stops reconnecting. A stream that closes without `end` (serve stopping, the daemon
going away, a browser too slow to keep up) is one to resume.

The events route never holds a log whole: the JSON envelope is written around the daemon's `read` as its
lines arrive, as fast as the client takes them. A failure once it has begun cuts the connection, so the
client sees a reply cut short, never a shorter log that looks whole.

Past a cap (event streams per session and in all, sessions watched, `events` replies at once) a request is
503 with a `Retry-After`, and says which cap and what to do.

A refusal from the daemon becomes an HTTP status with the daemon's own words (`ERROR_STATUS`); a daemon
that cannot be reached, or that speaks another protocol number, is 502 Bad Gateway naming the address or
both numbers, and so is one too old to know a verb (it says to update the daemon). Events travel as the log's
own JSON, byte for byte, in both the JSON and the SSE routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from chock.control import daemon_protocol as dp
from chock.control.address import LOCAL
from chock.control.async_client import AsyncControlClient
from chock.control.client import expect
from chock.control.framing import LINE_SECONDS, MAX_EVENT_ID, ErrorCode, ProtocolError, Unreachable, show
from chock.control.message import ReplyLine, Request
from chock.control.rows import well_typed
from chock.paths import is_session_id
from chock.platform import journal
from chock.serve import feeds
from chock.serve.feeds import Feeds, Stream, TooManyStreams, sse_event, sse_message
from chock.serve.hosts import Probes

# A request's body (a task message at most, MAX_BODY in app.py) arrives within this long, or is refused: the
# same whole-line bound as every other request line Chock reads (docs/protocol.md#bounds).
BODY_SECONDS = LINE_SECONDS

# The browser's EventSource waits this long before reconnecting (SSE `retry:`, milliseconds): long enough
# not to hammer a serve that is restarting, short enough that a person watching does not notice.
RETRY_MS = 1500

# One write() per this many bytes while a reply or a stream catches up from the daemon's `read`, instead of
# one per event; each write waits for the client to take it, so this is what serve holds per reply.
_CATCH_UP_WRITE = 256 * 1024

# `events` replies at once. Each holds a daemon connection and a few hundred KiB while its client reads;
# a page asks for one when it opens a session.
READS = 8

# How long a client refused at a cap is asked to wait before it tries again (`Retry-After`, seconds).
RETRY_AFTER = 5

# A listing (`list`, `sessions`) read whole from a host, at most: each line is waited for as the client waits
# for any (30 s), and a host that sends a row every 29 s is still bounded as a whole.
LISTING_SECONDS = 60.0

_NUMBER_RE = re.compile(r"[0-9]{1,19}")

# The daemon's error codes as HTTP statuses. `unreachable` from the daemon itself means a *session* socket did not
# answer (the session is not running there): a conflict with the session's state, not a gateway failure.
# The codes that mean the daemon and serve cannot understand each other are 502, like no daemon at all.
ERROR_STATUS = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.REFUSED: 422,
    ErrorCode.NOT_PENDING: 409,
    ErrorCode.UNREACHABLE: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.PROTOCOL: 502,
    ErrorCode.GREETING: 502,
    ErrorCode.UNKNOWN_VERB: 502,
    ErrorCode.BUSY: 409,
    ErrorCode.INTERNAL: 502,
}


@dataclass
class Activity:
    """What `--idle-exit` counts: requests in flight (an SSE stream is one for its whole life)."""

    active: int = 0
    last: float = field(default_factory=time.monotonic)

    def begin(self) -> None:
        self.active += 1

    def end(self) -> None:
        self.active -= 1
        self.last = time.monotonic()


@dataclass
class Host:
    """A daemon serve is a client of, by the name its routes give it (`/api/hosts/<name>/…`), with the feeds
    of its sessions."""

    name: str
    daemon: AsyncControlClient
    feeds: Feeds

    @classmethod
    def of(cls, name: str, daemon: AsyncControlClient) -> Host:
        return cls(name, daemon, Feeds(daemon, name))


@dataclass
class State:
    hosts: dict[str, Host]  # by name, the first the one `/api/…` stands for
    activity: Activity
    reads: int = 0  # `events` replies being written
    probes: Probes = field(default_factory=Probes)

    @property
    def default(self) -> str:
        """The host `/api/…` stands for: `local` when serve has it, else the first named."""
        return LOCAL if LOCAL in self.hosts else next(iter(self.hosts))

    async def close(self) -> None:
        """End every SSE stream (without `end`): its browser reconnects to whatever serves next."""
        self.probes.close()
        for host in self.hosts.values():
            await host.feeds.close()


STATE: web.AppKey[State] = web.AppKey("chock", State) if hasattr(web, "AppKey") else "chock"  # type: ignore[assignment]


def error_response(error: ProtocolError) -> web.Response:
    if isinstance(error, Unreachable):
        status = 502
    else:
        status = ERROR_STATUS.get(error.code, 502)
    return web.json_response({"error": str(error.code), "message": error.text}, status=status)


def _refuse(status: int, text: str, code: str = "bad-request") -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 404: web.HTTPNotFound}[status]
    return cls(text=json.dumps({"error": code, "message": text}), content_type="application/json")


def _busy(text: str) -> web.HTTPException:
    return web.HTTPServiceUnavailable(
        text=json.dumps({"error": "busy", "message": text}),
        content_type="application/json",
        headers={"Retry-After": str(RETRY_AFTER)},
    )


@web.middleware
async def control_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A daemon's refusal (or its absence) as the HTTP status that says it, with the daemon's text."""
    state = request.app[STATE]
    state.activity.begin()
    try:
        return await handler(request)
    except ProtocolError as error:
        if isinstance(error, Unreachable):
            journal.record("error", where="a request to the daemon", error=str(error.code))
        return error_response(error)
    finally:
        state.activity.end()


# --------------------------------------------------------------------------------------------------------
# Fields


def _session_id(request: web.Request) -> str:
    # Every id taken from a client is checked against the session id pattern before it touches a path;
    # serve touches none, but the daemon is told nothing it would refuse.
    value = request.match_info["id"]
    if not is_session_id(value):
        raise _refuse(400, f"{show(value)} is not a session id (expected the form 20261201-073450-a1b2c3)")
    return value


def _project_query(request: web.Request) -> str:
    project = request.query.get("project", "")
    if not project:
        raise _refuse(400, "name the project directory: ?project=/path/to/project")
    return project


def _number(name: str, value: str) -> int:
    if not _NUMBER_RE.fullmatch(value) or int(value) > MAX_EVENT_ID:
        raise _refuse(400, f"{name} must be a whole number from 0 (got {value[:40]!r})")
    return int(value)


def _after(request: web.Request, *, resume: bool = False) -> int:
    """The last event id the client has: `Last-Event-ID` (a browser resuming: `<host>/<session id>/<N>` as
    the stream's ids are, or N) wins over `?after=`."""
    if resume:
        last = (request.headers.get("Last-Event-ID") or "").strip()
        if last:
            stream, _, number = last.rpartition("/")
            mine = f"{_host(request).name}/{request.match_info.get('id', '')}"
            if stream and stream != mine:
                raise _refuse(400, f"Last-Event-ID {last[:80]!r} is an id of another stream than {mine}'s")
            return _number("Last-Event-ID", number)
    return _number("after", request.query.get("after", "0") or "0")


async def _body(request: web.Request, *names: str) -> dict[str, Any]:
    """The request's JSON object, read whole within BODY_SECONDS (a body trickled slower is refused)."""
    try:
        async with asyncio.timeout(BODY_SECONDS):
            data = await request.read()
    except TimeoutError:
        raise _refuse(400, f"the request body did not arrive within {BODY_SECONDS:g} s") from None
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise _refuse(400, "the request body is not JSON") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise _refuse(400, "the request body nests deeper than serve reads; send a flat JSON object") from None
    if not isinstance(body, dict):
        raise _refuse(400, "the request body must be a JSON object")
    for name in names:
        if not isinstance(body.get(name), str) or not body[name]:
            raise _refuse(400, f"the request body needs {name!r} (a non-empty string)")
    return body


# --------------------------------------------------------------------------------------------------------
# Shapes: one function per kind of route, the verb and its fields being the route's row (ROUTES, below)

_BODY_TEXT = (
    "project",
    "instance",
    "message",
    "request_id",
)  # request fields a POST body gives, each a non-empty string
_BODY_OPTIONAL = {"scope": "once", "rule": "", "note": ""}  # ones it may leave out (`answer-with`'s), and their default


async def _verb_request(request: web.Request, route: Route) -> Request:
    """The route's daemon request, its fields in the verb's own order (`ATTRS`): the session id from the path,
    the last event id from the query (or, on a stream a browser resumes, `Last-Event-ID`), the answer and the
    texts from a POST's JSON body, the project from the body or, on a GET, the query. The request's constructor
    checks each field as the daemon would, so nothing the daemon would refuse is sent."""
    names = route.request.ATTRS
    values: dict[str, object] = {}
    if "session_id" in names:
        values["session_id"] = _session_id(request)
    if "after" in names:
        values["after"] = _after(request, resume=route.shape is _events_stream)
    if request.method == "POST":
        body = await _body(request, *[name for name in names if name in _BODY_TEXT])
        values.update({name: body[name] for name in names if name in _BODY_TEXT})
        for name in (name for name in names if name in _BODY_OPTIONAL):
            value = body.get(name, _BODY_OPTIONAL[name])
            if not isinstance(value, str):
                raise _refuse(400, f"the request body's {name!r} must be a string")
            values[name] = value
        if "yes" in names:
            values["yes"] = _yes(body.get("answer"))
    elif "project" in names:
        values["project"] = _project_query(request)
    return route.request(*[values[name] for name in names])


def _yes(answer: object) -> bool:
    if answer == "yes" or answer is True:  # not `in`: 1 == True, and a number is no answer
        return True
    if answer == "no" or answer is False:
        return False
    raise _refuse(400, 'the answer must be "yes" or "no"')


async def _one(request: web.Request, route: Route, host: Host) -> web.StreamResponse:
    """A verb answered by one line, as the JSON the route's row makes of the request and its reply."""
    verb = await _verb_request(request, route)
    reply = await host.daemon.call(verb)
    assert route.answer is not None, "a one-line route's row says what it answers"
    return web.json_response(route.answer(verb, reply), status=route.status)


async def _collected(request: web.Request, route: Route, host: Host) -> web.StreamResponse:
    """A streamed verb that ends by itself (`list`), read whole: its lines as the JSON the route's row makes."""
    verb = await _verb_request(request, route)
    lines: list[ReplyLine] = []
    try:
        async with asyncio.timeout(LISTING_SECONDS):
            stream = await host.daemon.stream(verb)
            try:
                async for line in stream:
                    if len(lines) == route.most:
                        break  # a host says more than any listing keeps: the rest is left out
                    lines.append(line)
            finally:
                stream.close()
    except TimeoutError:
        raise Unreachable(
            f"{host.name} did not finish answering `{verb.verb}` within {LISTING_SECONDS:g} s; try again"
        ) from None
    assert route.answer is not None, "a collected route's row says what it answers"
    return web.json_response(route.answer(verb, lines), status=route.status)


async def _events(request: web.Request, route: Route, host: Host) -> web.StreamResponse:
    """The events after `after`, as the daemon's `read` delivers them: never held whole (see above)."""
    # A refusal is raised here, before any byte of the reply.
    events = await host.daemon.stream(await _verb_request(request, route))
    response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
    await response.prepare(request)

    async def envelope() -> AsyncIterator[bytes]:
        yield b'{"events": ['
        separator = b""
        async for line in events:
            yield separator
            yield expect(line, dp.EventLine).line.encode("utf-8")  # the log's own JSON, inside the envelope
            separator = b", "
        yield b"]}"

    try:
        await _write_all(envelope(), lambda data: _write(response, data))
        await response.write_eof()
    except (ProtocolError, ConnectionError, TimeoutError):
        _cut(request)
    return response


@contextlib.contextmanager
def _read_slot(state: State) -> Iterator[None]:
    """One of the READS `events` replies written at once, or 503."""
    if state.reads >= READS:
        raise _busy(f"serve is writing {READS} event replies, the most it writes at once; try again shortly")
    state.reads += 1
    try:
        yield
    finally:
        state.reads -= 1


async def _write_all(pieces: AsyncIterator[bytes], write: Callable[[bytes], Awaitable[None]]) -> None:
    """Write the pieces in writes of about _CATCH_UP_WRITE bytes rather than one each."""
    batch: list[bytes] = []
    size = 0
    async for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= _CATCH_UP_WRITE:
            await write(b"".join(batch))
            batch, size = [], 0
    if batch:
        await write(b"".join(batch))


async def _write(response: web.StreamResponse, data: bytes) -> None:
    """One write, waiting for the client to take it; one that takes nothing for `feeds.WRITE_STALL` is a
    TimeoutError."""
    async with asyncio.timeout(feeds.WRITE_STALL):
        await response.write(data)


def _cut(request: web.Request) -> None:
    """End the connection without ending the reply, so the client sees it cut short."""
    if request.transport is not None:
        request.transport.abort()


async def health(request: web.Request) -> web.Response:
    """The greeting of the host's daemon: whether it answers, and its protocol number."""
    daemon = _host(request).daemon
    try:
        number = await daemon.ping()
    except ProtocolError as error:
        response = error_response(error)
        body = {"ok": False, "daemon": str(daemon.address), "error": str(error.code), "message": error.text}
        return web.json_response(body, status=response.status)
    return web.json_response({"ok": True, "daemon": str(daemon.address), "protocol": number})


async def hosts(request: web.Request) -> web.Response:
    """The daemons serve is a client of, by name (the `<name>` of `/api/hosts/<name>/…`), each with its state:
    its protocol number, or why it does not answer (chock/serve/hosts.py: greeted at most once per PROBE_TTL)."""
    state = request.app[STATE]
    found = await asyncio.gather(*(state.probes.state(host.name, host.daemon) for host in state.hosts.values()))
    return web.json_response([each.json() for each in found])


async def _events_stream(request: web.Request, route: Route, host: Host) -> web.StreamResponse:
    """Server-Sent Events: `id:` is the event id, `data:` the event; `event: row` first, `event: end` last.

    The upstream is the session's shared feed; this response writes what its subscriber is owed, which is
    never an event it wrote already (the module docstring of `chock.log.fanout` says why that is enough).
    """
    verb = await _verb_request(request, route)
    assert isinstance(verb, dp.WatchRequest), "the stream's row is a watch"
    session_id, after = verb.session_id, verb.after
    try:
        stream = await host.feeds.join(verb.project, session_id, after, lambda: _cut(request))
    except TooManyStreams as error:
        raise _busy(error.text) from None
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache, no-transform",
            "X-Accel-Buffering": "no",  # nginx: pass each event on as it comes
            "X-Content-Type-Options": "nosniff",
        }
    )
    try:
        try:
            await response.prepare(request)
            await _send(response, stream, b"retry: %d\n\n" % RETRY_MS + sse_message("row", stream.feed.row))
            if stream.backfill:
                stream.subscriber.backfilled(await _catch_up(response, stream, host, session_id, after))
            await _follow(response, stream)
        except ProtocolError:
            # A catch-up read failed halfway: end the stream here, without `end`, so the browser comes back
            # from the last event it has rather than skip the ones the read did not deliver.
            pass
        stream.writing()
        await response.write_eof()
    except (ConnectionResetError, TimeoutError):
        _cut(request)  # the browser went away, or stopped reading: nothing to tell anyone
    finally:
        stream.close()
    return response


async def _catch_up(response: web.StreamResponse, stream: Stream, host: Host, session_id: str, after: int) -> int:
    """Events after `after` from the daemon's `read`, for a stream the feed's memory does not reach; the
    last id written."""
    sent = after

    async def messages() -> AsyncIterator[bytes]:
        nonlocal sent
        async for line in await host.daemon.stream(dp.ReadRequest(session_id, after)):
            event = expect(line, dp.EventLine)
            if event.id > sent:
                sent = event.id
                yield sse_event(event, stream.feed.tag)

    await _write_all(messages(), lambda data: _send(response, stream, data))
    return sent


async def _follow(response: web.StreamResponse, stream: Stream) -> None:
    """What the subscriber is owed, one write per wake; `end` once the session is over."""
    subscriber = stream.subscriber
    while True:
        data = subscriber.take()
        if data:
            await _send(response, stream, data)
        if subscriber.cut:
            return  # closed without `end`: the browser resumes from its Last-Event-ID
        if subscriber.done:
            if subscriber.final:
                await _send(response, stream, sse_message("end", {"last_event_id": subscriber.sent}))
            return
        await stream.wait()
        if stream.heartbeat_due:
            await _send(response, stream, b": keep-alive\n\n")


async def _send(response: web.StreamResponse, stream: Stream, data: bytes) -> None:
    """One write, watched by the stream's timer (a client that stalls is cut)."""
    stream.writing()
    await response.write(data)
    stream.wrote()


# --------------------------------------------------------------------------------------------------------
# The routes

Shape = Callable[[web.Request, "Route", Host], Awaitable[web.StreamResponse]]
Guard = Callable[[State], AbstractContextManager[None]]


@dataclass(frozen=True)
class Route:
    """One route: its method, its path below a host, the daemon verb it sends (its request type), the shape
    that serves it, what a JSON reply says (from the request and the reply), the status of a success, and the
    guards it passes before the verb is sent (a cap: 503 past it)."""

    method: str
    path: str
    request: type[Request]
    shape: Shape
    answer: Callable[[Any, Any], dict[str, Any]] | None = None
    status: int = 200
    guards: tuple[Guard, ...] = ()
    most: int | None = None  # a collected route keeps at most this many lines


def _rows(lines: list[ReplyLine]) -> list[dict[str, Any]]:
    """A listing's rows as the page takes them (`rows.well_typed`): a row with no session id is left out."""
    typed = (well_typed(expect(line, dp.ListRow).row) for line in lines)
    return [row for row in typed if row is not None]


# Every route below `/api/hosts/<name>`, and for the local host below `/api` too.
ROUTES = (
    Route("GET", "/sessions", dp.ListRequest, _collected,
          lambda verb, lines: {"project": verb.project, "sessions": _rows(lines)}, most=dp.MAX_SESSIONS),
    Route("GET", "/sessions/all", dp.SessionsRequest, _collected,
          lambda verb, lines: {"sessions": _rows(lines)}, most=dp.MAX_SESSIONS),
    Route("GET", "/instances", dp.InstancesRequest, _collected,
          lambda verb, lines: {"instances": [_instance(expect(line, dp.InstanceRow)) for line in lines]},
          most=dp.MAX_SESSIONS),
    Route("POST", "/sessions", dp.StartRequest, _one,
          lambda verb, started: {"id": started.session_id}, status=201),  # the id alone: serve names no path
    Route("POST", "/sessions/start-with", dp.StartWithRequest, _one,
          lambda verb, started: {"id": started.session_id}, status=201),
    Route("GET", "/sessions/{id}/events", dp.ReadRequest, _events, guards=(_read_slot,)),
    Route("GET", "/sessions/{id}/watch", dp.WatchRequest, _events_stream),
    Route("POST", "/sessions/{id}/answer", dp.AnswerRequest, _one,
          lambda verb, _: {"answered": True, "answer": "yes" if verb.yes else "no"}),
    Route("POST", "/sessions/{id}/answer-with", dp.AnswerWithRequest, _one,
          lambda verb, _: {"answered": True, "answer": "yes" if verb.yes else "no", "scope": verb.scope}),
    Route("POST", "/sessions/{id}/stop", dp.StopRequest, _one, lambda verb, _: {"stopped": True}),
    Route("POST", "/sessions/{id}/messages", dp.SayRequest, _one,
          lambda verb, said: {"id": said.session_id, "how": said.how}, status=201),
    Route("POST", "/sessions/{id}/remove", dp.RemoveRequest, _one, lambda verb, _: {"removed": True}),
    Route("POST", "/sessions/{id}/remove-with-workspace", dp.RemoveWithWorkspaceRequest, _one,
          lambda verb, _: {"removed": True, "workspace": True}),
)  # fmt: skip

# The daemon's verbs serve offers no route for, and why (tests/test_front_tables.py: every verb is in one table).
NOT_ROUTED = {
    "adopt": "a handover is asked by the terminal that holds the session (`chock detach`); a browser holds none",
    "find": "every route names its project, from the list the page holds; `find` serves a client that has an "
    "id alone (`chock run --on ADDR --continue ID`)",
    "rules": "rules are listed and removed at the command line (`chock rules`); the page does not show them yet",
    "rule-remove": "rules are listed and removed at the command line (`chock rules remove`)",
    **dict.fromkeys(
        ("move-check", "move-out", "send", "receive", "move-in", "moved", "move-drop"),
        "a move relays a session between two hosts' daemons, step by step, from the command line (`chock move`)",
    ),
}


def _instance(row: dp.InstanceRow) -> dict[str, Any]:
    return {"name": row.name, "kind": row.kind, "default": row.default}


def _host(request: web.Request) -> Host:
    state = request.app[STATE]
    name = request.match_info.get("host", state.default)
    host = state.hosts.get(name)
    if host is None:
        raise _refuse(404, f"serve knows no host {name[:80]!r}; GET /api/hosts lists those it knows", "not-found")
    return host


def _handler(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The route's handler: its host, its guards, then its shape."""

    async def handle(request: web.Request) -> web.StreamResponse:
        host = _host(request)
        with contextlib.ExitStack() as guards:
            for guard in route.guards:
                guards.enter_context(guard(request.app[STATE]))
            return await route.shape(request, route, host)

    return handle


def add_routes(app: web.Application) -> None:
    """ROUTES below every host's prefix and the local host's alias, and the two routes that send no verb."""
    app.router.add_get("/api/hosts", hosts)
    for prefix in ("/api/hosts/{host}", "/api"):
        app.router.add_get(prefix + "/health", health)
        for route in ROUTES:
            app.router.add_route(route.method, prefix + route.path, _handler(route))
