"""`chock serve`: the aiohttp application and its life — listen, say READY, serve, idle out, stop.

`run()` is what `chock serve` calls; `make_app()` builds the application (routes, static page, the guard)
for a daemon address and the Host rule, and is what tests and the benchmark may start in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from aiohttp import web, web_runner, web_server

from chock.control.address import LOCAL, Address
from chock.control.async_client import AsyncControlClient
from chock.errors import UsageError
from chock.paths import Layout
from chock.platform import journal, manager
from chock.platform.listening import Listener
from chock.serve import api, headers, sites
from chock.serve.guard import HostRule, make_guard
from chock.serve.sites import BoundedSite

STATIC_DIR = Path(__file__).parent / "static"

# A browser request carries a message at most (the daemon bounds a `start` or `say` line at 256 KiB);
# twice that leaves room for JSON escaping, and anything more is refused before it is read.
MAX_BODY = 512 * 1024

# How long a stopping serve lets ordinary requests finish (a `start` may wait for a child to take its
# lock). SSE streams are ended before this, so they never hold a stop up.
SHUTDOWN_TIMEOUT = 5.0

# The page and its files are checked again on each load (a new chock brings a new page); nothing else is kept.
_STATIC_HEADERS = {"Cache-Control": "no-cache"}


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers=_STATIC_HEADERS)


# The page's files by suffix, each with its type named here rather than guessed from the machine's mime.types: a
# browser runs an ES module only when it comes as JavaScript (and X-Content-Type-Options is nosniff). Nothing
# else in static/ is served (its package.json is there for node, which runs the page's tests).
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


async def _static(request: web.Request) -> web.FileResponse:
    name = request.match_info["name"]
    path = STATIC_DIR / name
    kind = _STATIC_TYPES.get(path.suffix)
    if "/" in name or name.startswith(".") or kind is None or not path.is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={**_STATIC_HEADERS, "Content-Type": kind})


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    """`SECURITY_HEADERS` on every response of the application (aiohttp's on_response_prepare: a route's, a
    middleware's or an HTTP error's); the parser's own 400s get them in `chock.serve.sites`."""
    headers.secure(response)


def make_app(daemons: AsyncControlClient | Mapping[str, AsyncControlClient], rule: HostRule) -> web.Application:
    """The application for `daemons` by host name (one daemon alone is `local`), the first the one `/api/…`
    stands for unless `local` is among them."""
    if isinstance(daemons, AsyncControlClient):
        daemons = {api.LOCAL: daemons}
    app = web.Application(middlewares=[make_guard(rule), api.control_errors], client_max_size=MAX_BODY)
    app.on_response_prepare.append(_secure)
    hosts = {name: api.Host.of(name, daemon) for name, daemon in daemons.items()}
    state = app[api.STATE] = api.State(hosts, api.Activity())
    api.add_routes(app)
    app.router.add_get("/", _index)
    app.router.add_get("/static/{name}", _static)

    async def close_feeds(app: web.Application) -> None:
        # Every SSE stream ends (without `end`) when its feed does, so the browsers reconnect to whatever
        # serves next, and no stream holds the stop up.
        await state.close()

    app.on_shutdown.append(close_feeds)
    return app


def _takes(function: object, name: str) -> bool:
    return name in inspect.signature(function).parameters  # type: ignore[arg-type]


class _RunnerOptions(TypedDict, total=False):
    access_log: None
    keepalive_timeout: float
    handler_cancellation: bool
    shutdown_timeout: float


def _runner(app: web.Application) -> web.AppRunner:
    """An AppRunner on aiohttp 3.8 (Debian 12) as on later ones: a handler is cancelled when its client goes
    away (3.8 always did; 3.9 made it an option), and a stop waits SHUTDOWN_TIMEOUT, not 60 s (3.8 takes
    that bound on each site instead, below)."""
    kwargs: _RunnerOptions = {"access_log": None, "keepalive_timeout": sites.KEEPALIVE_SECONDS}
    if _takes(web_server.Server.__init__, "handler_cancellation"):
        kwargs["handler_cancellation"] = True
    if _takes(web_runner.BaseRunner.__init__, "shutdown_timeout"):
        kwargs["shutdown_timeout"] = SHUTDOWN_TIMEOUT
    return web.AppRunner(app, **kwargs)


def _site(runner: web.AppRunner, listener: Listener) -> web.SockSite:
    if not _takes(web_runner.BaseRunner.__init__, "shutdown_timeout"):
        return BoundedSite(runner, listener.sock, shutdown_timeout=SHUTDOWN_TIMEOUT)
    return BoundedSite(runner, listener.sock)


async def _watchdog(interval: float) -> None:
    """`WATCHDOG=1` when WATCHDOG_USEC is set, at half the interval as sd_watchdog_enabled(3) asks. It runs on
    the event loop, so a loop that is stuck stops sending it, which is what the watchdog is for."""
    while True:
        manager.notify("WATCHDOG=1")
        await asyncio.sleep(interval / 2)


def run(
    layout: Layout,
    *,
    daemon: tuple[str, ...],
    socket_path: Path | None,
    host: str | None,
    port: int | None,
    allow_hosts: list[str],
    idle_exit: float | None,
) -> int:
    """`chock serve`: returns the exit code (0 on a stop or an idle exit)."""
    sites.check_options(socket_path, host, port)
    if idle_exit is not None and idle_exit <= 0:
        raise UsageError(f"--idle-exit {idle_exit:g}: give a number of seconds above 0")
    # The hosts named (--daemon, else $CHOCK_DAEMON, else config.zon's .serve.daemons), else the state-dir socket.
    named = _hosts(layout, daemon)
    try:
        rule = HostRule.of([host] if host else [], allow_hosts)
    except ValueError as error:
        raise UsageError(str(error)) from None
    bound = sites.activated()
    if bound is None:
        if host is not None:
            bound = [sites.bind_tcp(host, port)]
        else:
            bound = [sites.bind_unix(socket_path or layout.serve_socket)]
    try:
        daemons = {name: AsyncControlClient(address) for name, address in named}
        hosts = ", ".join(f"{name} ({address})" if name == api.LOCAL else name for name, address in named)
        return asyncio.run(_serve(make_app(daemons, rule), bound, idle_exit, hosts, layout.serve_status_text))
    finally:
        for listener in bound:
            listener.remove()


def _hosts(layout: Layout, daemon: tuple[str, ...]) -> list[tuple[str, Address]]:
    """serve's hosts by name (chock.serve.hosts.serve_hosts); config.zon is read only when a name needs it, so
    an address typed directly works as it did before whatever the file holds."""
    from chock.config import load_config
    from chock.control.address import CONNECTION_NAME, ENVIRONMENT
    from chock.serve.hosts import serve_hosts

    words = daemon or ((os.environ[ENVIRONMENT],) if os.environ.get(ENVIRONMENT) else ())
    configured: tuple[str, ...] = ()
    connections: Mapping[str, Address] = {}
    if not words or any(CONNECTION_NAME.fullmatch(word) and word != LOCAL for word in words):
        config = load_config(layout.config)
        configured, connections = config.serve_daemons, config.connections
    local = Address(path=str(layout.daemon_socket))
    return serve_hosts(daemon, configured=configured, connections=connections, local=local)


async def _serve(
    app: web.Application, bound: list[Listener], idle_exit: float | None, daemon: str, status_path: str
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, _stop_on, stop, signal.Signals(signum).name)
    runner = _runner(app)
    await runner.setup()
    started: str | None = None
    try:
        for listener in bound:
            await _site(runner, listener).start()
        urls = [listener.url() for listener in bound]
        for url in urls:
            print(f"listening on {url}", flush=True)
        journal.record("listening", addresses=", ".join(urls))
        started = _write_status(status_path, "serving", urls)
        manager.notify("READY=1", f"STATUS=serving {', '.join(urls)} for {daemon}")
        tasks = []
        if idle_exit:
            tasks.append(loop.create_task(_idle_watch(app, idle_exit, stop)))
        interval = manager.watchdog_interval()
        if interval:
            tasks.append(loop.create_task(_watchdog(interval)))
        await stop.wait()
        for task in tasks:
            task.cancel()
    finally:
        manager.notify("STOPPING=1")
        if started is not None:
            _write_status(status_path, "stopped", [], started)
        await app[api.STATE].close()  # SSE streams end first, so nothing waits on them
        await runner.cleanup()
    return 0


def _write_status(path: str, state: str, listeners: list[str], started_at: str | None = None) -> str:
    """`serve-status.json`: this serve's pid, state and listeners (unix socket paths, `http://host:port/`),
    which `chock doctor` checks wherever serve listens. Returns when it started."""
    import json

    from chock.log.events import timestamp
    from chock.paths import ensure_dir, replace_file

    with contextlib.suppress(OSError):
        ensure_dir(os.path.dirname(path))  # a serve on TCP alone may be the first to use the state dir
    now = timestamp()
    record = {"pid": os.getpid(), "state": state, "started_at": started_at or now, "updated_at": now}
    replace_file(path, (json.dumps({**record, "listeners": listeners}, indent=2) + "\n").encode())
    return started_at or now


def _stop_on(stop: asyncio.Event, reason: str) -> None:
    journal.record("stop", reason=reason)
    stop.set()


async def _idle_watch(app: web.Application, idle_exit: float, stop: asyncio.Event) -> None:
    """`--idle-exit`: no request and no SSE stream for that long, and serve exits 0; its socket unit starts it
    again on the next request (docs/architecture.md#running-as-a-service)."""
    activity = app[api.STATE].activity
    step = min(1.0, idle_exit / 4)
    while True:
        await asyncio.sleep(step)
        if activity.active == 0 and time.monotonic() - activity.last >= idle_exit:
            _stop_on(stop, f"idle for {idle_exit:g} s")
            return
