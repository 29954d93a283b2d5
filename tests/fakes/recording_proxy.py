"""A loopback HTTP proxy that records every request it forwards: put between a client and a real server, it shows
what the client sent on the wire (headers included) while the server answers for real.

    with RecordingProxy("127.0.0.1", upstream_port) as proxy:
        ...  # point the client at proxy.url("/mcp")
        assert any(r.headers.get("authorization") == "Bearer tok" for r in proxy.requests)

A response is passed on as it arrives, so a server-sent event stream (`text/event-stream`) reaches the client event
by event; the proxy closes each connection after its response (`Connection: close`), so no length is needed.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection", "upgrade"}


@dataclass(frozen=True)
class Seen:
    """One request as the proxy received it; header names lower case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class RecordingProxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def url(self, path: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self.requests)

    def __enter__(self) -> RecordingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {key.lower(): value for key, value in self.headers.items()}
                with proxy._lock:
                    proxy.requests.append(Seen(self.command, self.path, headers, body))
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=300)
                sent = {key: value for key, value in headers.items() if key not in HOP_BY_HOP}
                upstream.request(self.command, self.path, body=body or None, headers=sent)
                answer = upstream.getresponse()
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    while chunk := answer.read1(65536):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (ConnectionError, OSError):
                    pass
                finally:
                    upstream.close()

            do_GET = do_POST = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
