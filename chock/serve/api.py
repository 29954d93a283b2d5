"""The HTTP API of SPEC §8: each route one thin mapping onto one daemon verb.

    GET  /api/sessions?project=P                      list    -> {"project": P, "sessions": [row, …]}
    POST /api/sessions {project, message}             start   -> 201 {"id": …}
    GET  /api/sessions/<id>/events?after=N            read    -> {"events": [event, …]}
    GET  /api/sessions/<id>/watch?project=P&after=N   watch   -> text/event-stream (one upstream per session)
    POST /api/sessions/<id>/answer {project, request_id, answer}
                                                      answer  -> {"answered": true}
    GET  /api/health                                  the greeting -> {"ok": true, "daemon": …, "protocol": 1}

The watch stream, in order: `retry: 1500`; `event: row` with the session's row as of the moment serve's
upstream watch began; then one message per event, `id: N` and `data: <the event>` (the browser sends the
last N back as `Last-Event-ID` when it reconnects, and that wins over `?after=`); a `: keep-alive` comment
every HEARTBEAT seconds of quiet; and, once the session is over, `event: end` before serve closes the
stream, so a browser stops reconnecting. A stream that closes without `end` (serve stopping, the daemon
going away, a browser too slow to keep up) is one to resume.

A refusal from the daemon becomes an HTTP status with the daemon's own words (`ERROR_STATUS`); a daemon
that cannot be reached, or that speaks another protocol number, is 502 Bad Gateway naming the address or
both numbers. Events travel as the log's own JSON, byte for byte, in both the JSON and the SSE routes.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from chock.control import protocol as p
from chock.control.client import ControlError
from chock.paths import SESSION_ID_RE
from chock.platform import journal
from chock.serve.fanout import Hub, Subscriber, sse_event, sse_message
from chock.serve.upstream import Daemon, DaemonUnreachable

# SPEC §8: "a `:` comment heartbeat every 15 s" keeps proxies (nginx's proxy_read_timeout is 60 s) and
# idle-connection reapers from closing a quiet stream while a model thinks, and tells a browser the
# connection is alive.
HEARTBEAT = 15.0

# The browser's EventSource waits this long before reconnecting (SSE `retry:`, milliseconds): long enough
# not to hammer a serve that is restarting, short enough that a person watching does not notice.
RETRY_MS = 1500

# One write() per this many bytes while a subscriber catches up from the daemon, instead of one per event.
_CATCH_UP_WRITE = 256 * 1024

_NUMBER_RE = re.compile(r"[0-9]{1,19}")

# SPEC §6 error codes as HTTP statuses. `unreachable` from the daemon itself means a *session* socket did not
# answer (the session is not running there): a conflict with the session's state, not a gateway failure.
# The codes that mean the daemon and serve cannot understand each other are 502, like no daemon at all.
ERROR_STATUS = {
    p.ErrorCode.NOT_FOUND: 404,
    p.ErrorCode.BAD_REQUEST: 400,
    p.ErrorCode.FORBIDDEN: 403,
    p.ErrorCode.REFUSED: 422,
    p.ErrorCode.NOT_PENDING: 409,
    p.ErrorCode.UNREACHABLE: 409,
    p.ErrorCode.TOO_LARGE: 413,
    p.ErrorCode.PROTOCOL: 502,
    p.ErrorCode.GREETING: 502,
    p.ErrorCode.UNKNOWN_VERB: 502,
    p.ErrorCode.INTERNAL: 502,
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
    daemon: Daemon
    hub: Hub
    activity: Activity


STATE: web.AppKey[State] = web.AppKey("chock", State) if hasattr(web, "AppKey") else "chock"  # type: ignore[assignment]


def error_response(error: ControlError) -> web.Response:
    if isinstance(error, DaemonUnreachable):
        status = 502
    else:
        status = ERROR_STATUS.get(error.code, 502)
    return web.json_response({"error": str(error.code), "message": error.text}, status=status)


def _refuse(status: int, text: str, code: str = "bad-request") -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 404: web.HTTPNotFound}[status]
    return cls(text=json.dumps({"error": code, "message": text}), content_type="application/json")


@web.middleware
async def control_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A daemon's refusal (or its absence) as the HTTP status that says it, with the daemon's text."""
    state = request.app[STATE]
    state.activity.begin()
    try:
        return await handler(request)
    except ControlError as error:
        if isinstance(error, DaemonUnreachable):
            journal.record("error", where="a request to the daemon", error=str(error.code))
        return error_response(error)
    finally:
        state.activity.end()


# --------------------------------------------------------------------------------------------------------
# Fields


def _session_id(request: web.Request) -> str:
    # SPEC §3: "Every id taken from a client is validated against that pattern before it touches a path";
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
    if not _NUMBER_RE.fullmatch(value) or int(value) > p.MAX_EVENT_ID:
        raise _refuse(400, f"{name} must be a whole number from 0 (got {value[:40]!r})")
    return int(value)


def _after(request: web.Request, *, resume: bool = False) -> int:
    """The last event id the client has. SPEC §8: "`Last-Event-ID` takes precedence over `?after=`"."""
    if resume:
        last = request.headers.get("Last-Event-ID")
        if last is not None and last.strip():
            return _number("Last-Event-ID", last.strip())
    return _number("after", request.query.get("after", "0") or "0")


async def _body(request: web.Request, *names: str) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise _refuse(400, "the request body is not JSON") from None
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
    rows = await request.app[STATE].daemon.list(project)
    return web.json_response({"project": project, "sessions": rows})


async def start_session(request: web.Request) -> web.Response:
    body = await _body(request, "project", "message")
    session_id = await request.app[STATE].daemon.start(body["project"], body["message"])
    return web.json_response({"id": session_id}, status=201)


async def session_events(request: web.Request) -> web.Response:
    session_id = _session_id(request)
    after = _after(request)
    events = await request.app[STATE].daemon.read(session_id, after)
    lines = [event.line.encode("utf-8") async for event in events]
    # The log's own JSON, unchanged, inside the envelope.
    return web.Response(body=b'{"events": [' + b", ".join(lines) + b"]}", content_type="application/json")


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
    await request.app[STATE].daemon.answer(body["project"], session_id, body["request_id"], yes)
    return web.json_response({"answered": True, "answer": "yes" if yes else "no"})


async def health(request: web.Request) -> web.Response:
    daemon = request.app[STATE].daemon
    try:
        number = await daemon.ping()
    except ControlError as error:
        response = error_response(error)
        body = {"ok": False, "daemon": str(daemon.address), "error": str(error.code), "message": error.text}
        return web.json_response(body, status=response.status)
    return web.json_response({"ok": True, "daemon": str(daemon.address), "protocol": number})


async def watch(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: `id:` is the event id, `data:` the event; `event: row` first, `event: end` last.

    The upstream is the session's shared feed; this response only writes what it is handed, never an event
    whose id is not above the last one it wrote (the module docstring of `fanout` says why that is enough).
    """
    state = request.app[STATE]
    session_id = _session_id(request)
    project = _project_query(request)
    after = _after(request, resume=True)
    feed = await state.hub.feed(project, session_id, after)
    subscriber, snapshot, needs_read = feed.subscribe(after)
    try:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache, no-transform",
                "X-Accel-Buffering": "no",  # nginx: pass each event on as it comes
                "X-Content-Type-Options": "nosniff",
            }
        )
        await response.prepare(request)
        await response.write(b"retry: %d\n\n" % RETRY_MS + sse_message("row", feed.row))
        sent = after
        if needs_read:
            sent = await _catch_up(response, state.daemon, session_id, after)
        data, sent, whole = _after_sent(snapshot, sent)
        if data:
            await response.write(data)
        if whole:
            await _follow(response, subscriber, sent)
    except ConnectionResetError:
        pass  # the browser went away: nothing to tell anyone
    except ControlError:
        # A catch-up read failed halfway: end the stream here, without `end`, so the browser comes back
        # from the last event it has rather than skip the ones the read did not deliver.
        pass
    finally:
        feed.unsubscribe(subscriber)
    return response


async def _catch_up(response: web.StreamResponse, daemon: Daemon, session_id: str, after: int) -> int:
    """Events after `after` from the daemon's `read`, for a subscriber the feed's buffer does not reach."""
    sent = after
    batch: list[bytes] = []
    size = 0
    try:
        events = await daemon.read(session_id, after)
        async for event in events:
            if event.id <= sent:
                continue
            sent = event.id
            chunk = sse_event(event)
            batch.append(chunk)
            size += len(chunk)
            if size >= _CATCH_UP_WRITE:
                await response.write(b"".join(batch))
                batch, size = [], 0
    finally:
        if batch:
            await response.write(b"".join(batch))
    return sent


def _after_sent(items: list[tuple[int, bytes]], sent: int) -> tuple[bytes, int, bool]:
    """The events of `items` above `sent`, joined; the new last id; and False when they would leave a hole
    (which the fan-out's design rules out): the stream then ends without `end`, and the browser resumes
    from the last event it has, so a hole is never shown as if nothing were missing."""
    chunks = []
    for number, chunk in items:
        if number <= sent:
            continue
        if number != sent + 1:
            return b"".join(chunks), sent, False
        chunks.append(chunk)
        sent = number
    return b"".join(chunks), sent, True


async def _follow(response: web.StreamResponse, subscriber: Subscriber, sent: int) -> None:
    while True:
        data, sent, whole = _after_sent(subscriber.take(), sent)
        if data:
            await response.write(data)
        if not whole:
            return
        if subscriber.overflowed:
            return  # closed without `end`: the browser resumes from its Last-Event-ID
        if subscriber.final is not None:
            if subscriber.pending:
                continue  # arrived while the write above waited; the feed has ended, so nothing follows
            if subscriber.final:
                await response.write(sse_message("end", {"last_event_id": sent}))
            return
        try:
            await asyncio.wait_for(subscriber.wake.wait(), HEARTBEAT)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/health", health)
    app.router.add_get("/api/sessions", list_sessions)
    app.router.add_post("/api/sessions", start_session)
    app.router.add_get("/api/sessions/{id}/events", session_events)
    app.router.add_get("/api/sessions/{id}/watch", watch)
    app.router.add_post("/api/sessions/{id}/answer", answer)
