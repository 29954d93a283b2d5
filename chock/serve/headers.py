"""The headers every response of serve carries — the page, its files, the API, a stream, a refusal, and the 400
aiohttp's own parser sends for a request it cannot read (docs/architecture.md#serve)."""

from __future__ import annotations

from aiohttp import web

# Nothing external may load or be connected to: the page shows what an agent wrote, and a prompt-injected agent
# must not make the browser fetch `https://evil/?d=…` (the page builds its DOM from text and never an image from
# a model's words; this is the second wall). No other site may frame the page (an Approve button under someone
# else's page is a clickjacking target), and the browser resolves no host name a link names before it is
# followed.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-DNS-Prefetch-Control": "off",
    "Referrer-Policy": "no-referrer",
}


def secure(response: web.StreamResponse) -> None:
    """`SECURITY_HEADERS` on a response about to be sent; nothing is kept unless the response says so."""
    response.headers.update(SECURITY_HEADERS)
    response.headers.setdefault("Cache-Control", "no-store")
