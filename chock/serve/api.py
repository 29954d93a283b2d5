"""serve's HTTP API: each route one thin mapping onto one daemon verb.

    GET  /api/sessions?project=P                      list    -> {"project": P, "sessions": [row, …]}
    POST /api/sessions {project, message}             start   -> 201 {"id": …}
    GET  /api/sessions/<id>/events?after=N            read    -> {"events": [event, …]} (streamed)
    GET  /api/sessions/<id>/watch?project=P&after=N   watch   -> text/event-stream (one upstream per session)
    POST /api/sessions/<id>/answer {project, request_id, answer}
                                                      answer  -> {"answered": true}
    POST /api/sessions/<id>/stop {project}            stop    -> {"stopped": true} once its log holds its end
    POST /api/sessions/<id>/messages {project, message}
                                                      say     -> 201 {"id": …, "how": "queued" | "continued"}
    POST /api/sessions/<id>/remove {project}          remove  -> {"removed": true}
    GET  /api/health                                  the greeting -> {"ok": true, "daemon": …, "protocol": 1}

The watch stream, in order: `retry: 1500`; `event: row` with the session's row as of the moment serve's
upstream watch began; then one message per event, `id: N` and `data: <the event>` (the browser sends the
last N back as `Last-Event-ID` when it reconnects, and that wins over `?after=`); a `: keep-alive` comment
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
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from chock.control import daemon_protocol as dp
from chock.control.async_client import AsyncControlClient
from chock.control.client import expect
from chock.control.framing import LINE_SECONDS, MAX_EVENT_ID, ErrorCode, ProtocolError, Unreachable
from chock.paths import SESSION_ID_RE
from chock.platform import journal
from chock.serve import feeds
from chock.serve.feeds import Feeds, Stream, TooManyStreams, sse_event, sse_message

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
class State:
    daemon: AsyncControlClient
    feeds: Feeds
    activity: Activity
    reads: int = 0  # `events` replies being written


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
    if not SESSION_ID_RE.fullmatch(value):
        raise _refuse(400, f"{value!r} is not a session id (expected the form 20261201-073450-a1b2c3)")
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
    """The last event id the client has: `Last-Event-ID` (a browser resuming) wins over `?after=`."""
    if resume:
        last = request.headers.get("Last-Event-ID")
        if last is not None and last.strip():
            return _number("Last-Event-ID", last.strip())
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
# Routes


async def list_sessions(request: web.Request) -> web.Response:
    project = _project_query(request)
    stream = await request.app[STATE].daemon.stream(dp.ListRequest(project))
    rows = [expect(line, dp.ListRow).row async for line in stream]
    return web.json_response({"project": project, "sessions": rows})


async def start_session(request: web.Request) -> web.Response:
    body = await _body(request, "project", "message")
    started = await request.app[STATE].daemon.call(dp.StartRequest(body["project"], body["message"]))
    # The browser gets the id alone: nothing serve says names a path.
    return web.json_response({"id": expect(started, dp.Started).session_id}, status=201)


async def session_events(request: web.Request) -> web.StreamResponse:
    """The events after `after`, as the daemon's `read` delivers them: never held whole (see above)."""
    state = request.app[STATE]
    session_id = _session_id(request)
    after = _after(request)
    if state.reads >= READS:
        raise _busy(f"serve is writing {READS} event replies, the most it writes at once; try again shortly")
    state.reads += 1
    try:
        # A refusal is raised here, before any byte of the reply.
        events = await state.daemon.stream(dp.ReadRequest(session_id, after))
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


async def answer(request: web.Request) -> web.Response:
    session_id = _session_id(request)
    body = await _body(request, "project", "request_id")
    reply = body.get("answer")
    if reply in ("yes", True):
        yes = True
    elif reply in ("no", False):
        yes = False
    else:
        raise _refuse(400, 'the answer must be "yes" or "no"')
    await request.app[STATE].daemon.call(dp.AnswerRequest(body["project"], session_id, body["request_id"], yes))
    return web.json_response({"answered": True, "answer": "yes" if yes else "no"})


async def stop(request: web.Request) -> web.Response:
    session_id = _session_id(request)
    body = await _body(request, "project")
    expect(await request.app[STATE].daemon.call(dp.StopRequest(body["project"], session_id)), dp.Stopped)
    return web.json_response({"stopped": True})


async def say(request: web.Request) -> web.Response:
    """A message for the session: queued for a running one, or the daemon carries an ended one on with it."""
    session_id = _session_id(request)
    body = await _body(request, "project", "message")
    said = await request.app[STATE].daemon.call(dp.SayRequest(body["project"], session_id, body["message"]))
    said = expect(said, dp.Said)
    return web.json_response({"id": said.session_id, "how": said.how}, status=201)


async def remove(request: web.Request) -> web.Response:
    session_id = _session_id(request)
    body = await _body(request, "project")
    expect(await request.app[STATE].daemon.call(dp.RemoveRequest(body["project"], session_id)), dp.Removed)
    return web.json_response({"removed": True})


async def health(request: web.Request) -> web.Response:
    daemon = request.app[STATE].daemon
    try:
        number = await daemon.ping()
    except ProtocolError as error:
        response = error_response(error)
        body = {"ok": False, "daemon": str(daemon.address), "error": str(error.code), "message": error.text}
        return web.json_response(body, status=response.status)
    return web.json_response({"ok": True, "daemon": str(daemon.address), "protocol": number})


async def watch(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: `id:` is the event id, `data:` the event; `event: row` first, `event: end` last.

    The upstream is the session's shared feed; this response writes what its subscriber is owed, which is
    never an event it wrote already (the module docstring of `chock.log.fanout` says why that is enough).
    """
    state = request.app[STATE]
    session_id = _session_id(request)
    project = _project_query(request)
    after = _after(request, resume=True)
    try:
        stream = await state.feeds.join(project, session_id, after, lambda: _cut(request))
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
                stream.subscriber.backfilled(await _catch_up(response, stream, state.daemon, session_id, after))
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


async def _catch_up(
    response: web.StreamResponse, stream: Stream, daemon: AsyncControlClient, session_id: str, after: int
) -> int:
    """Events after `after` from the daemon's `read`, for a stream the feed's memory does not reach; the
    last id written."""
    sent = after

    async def messages() -> AsyncIterator[bytes]:
        nonlocal sent
        async for line in await daemon.stream(dp.ReadRequest(session_id, after)):
            event = expect(line, dp.EventLine)
            if event.id > sent:
                sent = event.id
                yield sse_event(event)

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


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/health", health)
    app.router.add_get("/api/sessions", list_sessions)
    app.router.add_post("/api/sessions", start_session)
    app.router.add_get("/api/sessions/{id}/events", session_events)
    app.router.add_get("/api/sessions/{id}/watch", watch)
    app.router.add_post("/api/sessions/{id}/answer", answer)
    app.router.add_post("/api/sessions/{id}/stop", stop)
    app.router.add_post("/api/sessions/{id}/messages", say)
    app.router.add_post("/api/sessions/{id}/remove", remove)
