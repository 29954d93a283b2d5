"""The page at `/` in a real Chromium (Debian's /usr/bin/chromium, driven by playwright), against a real serve
over TCP in front of a real daemon running a `replay` session.

The browser is never downloaded: playwright launches the system's chromium by path. Assertions are on the
page's content (and on the ids of the events it applied), never on pixels; a screenshot is saved under the
test's tmp dir for a person to look at.
"""

from __future__ import annotations

import signal

import pytest

from tests.fakes.daemon import kill_sessions
from tests.fakes.serve import running_stack
from tests.fakes.wait import wait_until

# Three shell calls, each waiting for an approval: the first answered with the page's button, the second
# by the daemon while serve is down, the third with the button again after serve came back.
STEPS = [
    {"text": "Looking around the project first.", "tool_calls": [
        {"call_id": "c1", "name": "shell", "args": {"command": "echo step-one"}}]},
    {"text": "Now the second step.", "tool_calls": [
        {"call_id": "c2", "name": "shell", "args": {"command": "echo step-two"}}]},
    {"text": "And a third, after the restart.", "tool_calls": [
        {"call_id": "c3", "name": "shell", "args": {"command": "echo step-three"}}]},
    {"text": "All done: three steps ran, each one approved.", "tool_calls": []},
]  # fmt: skip

pytestmark = pytest.mark.browser


@pytest.fixture
def stack(home, project, daemons):  # type: ignore[no-untyped-def]
    with running_stack(home, project, daemons, STEPS) as running:
        yield running


def test_a_session_started_from_the_page_streams_is_approved_and_survives_a_serve_restart(stack, chromium, tmp_path):
    serve = stack.start_serve()
    port = serve.port
    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"http://127.0.0.1:{port}/")

    # Choose the project (remembered), start a session from the message box.
    page.fill("#project", str(stack.project))
    page.click("#project-form button[type=submit]")
    page.wait_for_selector("#start-form:not([hidden])")
    assert page.evaluate("localStorage.getItem('chock.project')") == str(stack.project)
    page.fill("#message", "run the three steps")
    page.click("#start-button")

    # It appears live: the task, the streamed text, the tool call with its arguments, the approval.
    page.wait_for_selector("#timeline [data-type='approval.request']")
    session_id = page.text_content("#session-id")
    assert page.text_content("#session-task") == "run the three steps"
    assert "Looking around the project first." in page.text_content("#timeline")
    tool = page.locator("details.tool[data-call-id='c1']")
    assert tool.locator(".name").text_content() == "shell"
    assert "echo step-one" in tool.locator(".args").text_content()
    page.wait_for_selector(f"#sessions button[data-session='{session_id}'] .badge.waiting", timeout=15000)

    # Approve with the button; the session goes on: the output of the call, then the next request.
    page.click("[data-request-id] button.approve")
    page.wait_for_selector("details.tool[data-call-id='c1'][data-result-event-id]")
    tool.locator("summary").click()
    assert tool.locator(".output").text_content().strip() == "step-one"
    page.wait_for_selector("details.tool[data-call-id='c2']")
    second = page.wait_for_selector("[data-type='approval.request'] >> nth=1")
    second_id = second.get_attribute("data-request-id")
    assert page.locator("[data-answer='yes']").count() == 1

    # serve goes away; the session goes on without it (answered through the daemon) ...
    assert serve.stop() == 0
    stack.client.answer(stack.project, session_id, second_id, True)
    wait_until(
        lambda: any(e["type"] == "approval.request" and e["request_id"] != second_id
                    and e["id"] > int(second.get_attribute("data-event-id")) for e in stack.read(session_id)),
        60, "the third approval request, logged while serve is down",
    )  # fmt: skip
    # A selector, not wait_for_function: playwright polls a function with eval, which the page's CSP refuses.
    page.wait_for_selector("#stream-state:has-text('reconnecting')")

    # ... and comes back on the same port: the page resumes by itself from the last event it had.
    serve = stack.start_serve("--host", "127.0.0.1", "--port", str(port))
    page.wait_for_selector("details.tool[data-call-id='c3']", timeout=30000)
    page.wait_for_selector("[data-type='approval.request'] >> nth=2")
    assert "step-two" in page.locator("details.tool[data-call-id='c2'] .output").text_content()
    page.click("[data-type='approval.request']:not(.done) button.approve")

    page.wait_for_selector("#timeline [data-type='session.end']", timeout=30000)
    timeline = page.text_content("#timeline")
    assert "All done: three steps ran, each one approved." in timeline
    assert "Completed" in timeline

    # Every event exactly once, in order, equal to the daemon's own read.
    events = list(stack.client.read(session_id, 0))
    assert page.evaluate("window.chock.seen") == [e["id"] for e in events]
    assert page.evaluate("window.chock.reconnects") >= 1
    assert page.locator("details.tool").count() == sum(e["type"] == "tool.call" for e in events)
    assert page.locator("[data-type='approval.request']").count() == 3
    assert page.locator("[data-answer='yes']").count() == 3
    finals = [e["text"] for e in events if e["type"] == "assistant.message" and e["text"]]
    shown = page.locator(".assistant .text").all_text_contents()
    assert shown == finals  # the streamed text was replaced by each final message, once each
    page.wait_for_selector(f"#sessions button[data-session='{session_id}'] .badge.ended", timeout=15000)
    page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
    assert (tmp_path / "serve.png").stat().st_size > 0

    # A phone-sized screen opened at the session's address: one column, the session, the way back.
    phone = chromium.new_page(viewport={"width": 390, "height": 844})
    phone.goto(f"http://127.0.0.1:{port}/#project={stack.project}&session={session_id}")
    phone.wait_for_selector("#timeline [data-type='session.end']")
    assert phone.is_hidden("#sessions-pane") and phone.is_visible("#back")
    assert phone.evaluate("window.chock.seen") == [e["id"] for e in events]
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone.screenshot(path=str(tmp_path / "serve-phone.png"), full_page=True)
    phone.click("#back")
    assert phone.is_visible(f"#sessions button[data-session='{session_id}']")
    assert errors == []
    assert serve.stop(signal.SIGTERM) == 0


PLANNED = [
    {"text": "Planning.", "tool_calls": [{"call_id": "p1", "name": "plan", "args": {"steps": [
        {"step": "Read the code", "status": "in_progress"}, {"step": "Write the fix", "status": "pending"}]}}]},
    {"text": "", "tool_calls": [{"call_id": "p2", "name": "plan", "args": {"steps": [
        {"step": "Read the code", "status": "done"}, {"step": "Write the fix", "status": "in_progress"}]}}]},
    {"text": "Planned and done.", "tool_calls": []},
]  # fmt: skip


def test_the_page_shows_the_plan_beside_the_timeline_and_the_cost(home, project, daemons, chromium):
    with running_stack(home, project, daemons, PLANNED) as stack:
        home.write_config(
            '.{ .instances = .{ .demo = .{ .kind = "replay=demo.jsonl", .price = .{ .input = 3, .output = 15 } } } }\n'
        )
        serve = stack.start_serve()
        session_id, _ = stack.client.start(stack.project, "plan it")
        page = chromium.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{serve.port}/#project={stack.project}&session={session_id}")
        page.wait_for_selector("#timeline [data-type='session.end']", timeout=30000)
        steps = page.locator("#plan-steps li")
        assert steps.all_text_contents() == ["Read the code", "Write the fix"]
        assert [steps.nth(i).get_attribute("data-status") for i in range(2)] == ["done", "in_progress"]
        plans = [e["id"] for e in stack.read(session_id) if e["type"] == "plan"]
        assert page.get_attribute("#plan", "data-event-id") == str(plans[-1])
        timeline, plan = page.locator("#timeline").bounding_box(), page.locator("#plan").bounding_box()
        assert plan["x"] >= timeline["x"] + timeline["width"]  # beside it, not under it
        assert "cost 0.0000" in page.text_content("#session-usage")  # a replay's calls cost nothing
        assert errors == []


def test_the_page_names_what_interrupted_a_session_and_the_command_that_takes_it(stack, chromium):
    """A session whose owner was killed is free (docs/log.md#ownership-the-lock): the list's badge says it was
    interrupted by a crash, and the session's own view names `chock run --continue ID`."""
    serve = stack.start_serve()
    session_id, _ = stack.client.start(stack.project, "wait, then be cut off")
    wait_until(lambda: any(e["type"] == "approval.request" for e in stack.read(session_id)), 30, "the question")
    kill_sessions(stack.home)
    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    page.goto(f"http://127.0.0.1:{serve.port}/#project={stack.project}&session={session_id}")
    badge = f"#sessions button[data-session='{session_id}'] .badge.abandoned"
    page.wait_for_selector(badge, timeout=15000)
    assert page.text_content(badge) == "interrupted by crash"
    page.wait_for_function(
        "id => document.getElementById('session-status').textContent.includes(id)", arg=session_id, timeout=15000
    )
    assert page.text_content("#session-status") == f"interrupted by crash — chock run --continue {session_id}"
