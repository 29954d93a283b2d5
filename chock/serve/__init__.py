"""`chock serve`: a browser in front of `chock daemon`, and purely a client of it.

`app` runs it (listeners, readiness, idle exit) and builds the aiohttp application; `api` maps each HTTP
route onto one daemon verb; `feeds` shares one upstream `watch` per session among every browser watching it
(over `chock.control.async_client`, the control protocol on asyncio streams); `guard` decides who may ask
(peer uid on a unix socket, the Host header on TCP, same-origin JSON for changes:
docs/architecture.md#who-may-use-serve); `sites` binds or takes over the sockets and bounds each connection
(docs/architecture.md#serve); `headers` are the headers every response carries; `static/` is the page at `/`.

It never reads a log, takes a lock or resolves a session directory: every fact it shows came out of a
daemon verb.
"""
