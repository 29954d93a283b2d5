"""`chock export --format html` of a session full of hostile text, opened in a real Chromium (Debian's, driven by
playwright): no script runs and nothing is requested but the page itself — counted both by a playwright route
over every request and by the loopback server that serves the page and records every hit — while the hostile
text is there to read, as text.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.test_catalog import write_session

pytestmark = pytest.mark.browser


class Recorder(ThreadingHTTPServer):
    """A loopback HTTP server that records the path of every request and serves `page` at /transcript.html."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.page = b""
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        body = self.server.page if self.path == "/transcript.html" else b"window.__ran = 'fetched';"
        self.send_response(200)
        self.send_header(
            "Content-Type", "text/html; charset=utf-8" if self.path.endswith(".html") else "text/javascript"
        )
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def hostile(base: str) -> list[str]:
    """Text that runs a script, loads something, or leaves its element, if a page let it."""
    return [
        "<script>window.__ran = 'script'</script>",
        f'<script src="{base}/script.js"></script>',
        f'<img src="{base}/image.png" onerror="window.__ran = \'onerror\'">',
        "<svg onload=\"window.__ran = 'svg'\"></svg>",
        f'</pre></section><iframe src="{base}/frame.html"></iframe>',
        f'<link rel="stylesheet" href="{base}/style.css"><link rel="prefetch" href="{base}/prefetch">',
        f'<meta http-equiv="refresh" content="0;url={base}/refresh">',
        f"<style>@import url({base}/import.css); body {{ background: url({base}/background.png) }}</style>",
        f'<div style="background-image: url({base}/inline.png)">styled</div>',
        f'<object data="{base}/object"></object><embed src="{base}/embed"><video src="{base}/video.mp4" autoplay>',
        '" onmouseover="window.__ran = \'attribute\'" x="',
        f"![remote]({base}/markdown.png) [link]({base}/link)",
    ]


def test_html_with_hostile_text_runs_no_script_and_requests_nothing(home, project, daemons, chromium):
    daemons.start(socket_path=home.layout.daemon_socket)
    server = Recorder()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        texts = hostile(server.base)
        body: list[dict] = [{"type": "user.message", "text": text} for text in texts]
        body += [
            {"type": "tool.call", "call_id": "c1", "name": texts[0], "args": {"command": texts[2]}},
            {"type": "tool.result", "call_id": "c1", "name": texts[10], "output": texts[6], "diff": texts[4]},
            {"type": "approval.request", "request_id": "r1", "tool": texts[3], "summary": texts[7], "call_id": "c1"},
            {"type": "future.thing", texts[1]: texts[5]},
            {"type": "session.end", "reason": "completed", "exit_code": 0, "error": texts[8]},
        ]
        session = write_session(home.layout, 1, project, body)
        out = project / "transcript.html"
        done = home.chock("export", session, "--format", "html", "-o", str(out), cwd=project)
        assert done.returncode == 0, done.stderr
        server.page = out.read_bytes()
        html = server.page.decode()
        assert html.split("<head>\n", 1)[1].startswith(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        )

        page = chromium.new_page()
        requested: list[str] = []
        page.route("**/*", lambda route: (requested.append(route.request.url), route.continue_()))
        page.goto(f"{server.base}/transcript.html")
        page.wait_for_load_state("networkidle")
        shown = page.inner_text("body")
        ran = page.evaluate("window.__ran === undefined ? null : String(window.__ran)")
        still_there = page.url
        page.close()
    finally:
        server.shutdown()
        server.server_close()

    assert ran is None
    assert requested == [f"{server.base}/transcript.html"] and server.hits == ["/transcript.html"], server.hits
    assert still_there == f"{server.base}/transcript.html"  # no refresh took it anywhere
    for text in texts:
        assert text in shown, text  # every hostile text is on the page, as text
