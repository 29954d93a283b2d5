"""`chock serve`: a browser in front of `chock daemon`, and purely a client of it (SPEC §8).

`app` runs it (listeners, readiness, idle exit) and builds the aiohttp application; `api` maps each HTTP
route onto one daemon verb; `fanout` shares one upstream `watch` per session among every browser watching
it (over `chock.control.async_client`, the control protocol on asyncio streams); `guard` decides
who may ask (peer uid on a unix socket, the Host header on TCP, same-origin JSON for changes);
`listeners` binds or takes over the sockets; `static/` is the page at `/`.

It never reads a log, takes a lock or resolves a session directory: every fact it shows came out of a
daemon verb.
"""
