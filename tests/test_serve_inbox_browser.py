"""The page's inbox in a real Chromium (docs/architecture.md#approvals): every approval waiting, across sessions, in one
list at the top, oldest first, answered from the keyboard alone; the tab's title counts them down to none. A real
serve in front of a real daemon running `replay` sessions whose shell calls ask (tests/fakes/serve.py).
"""

from __future__ import annotations

import pytest

from chock.control import daemon_protocol as dp
from tests.fakes.projects import make_project
from tests.fakes.serve import running_stack
from tests.fakes.sessions import wait_for_end, wait_for_event
from tests.fakes.wait import wait_until

pytestmark = pytest.mark.browser

STEPS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "echo asked-once"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def answers(home, session_id: str) -> list[dict]:
    return [e for e in home.events(session_id) if e["type"] == "approval.answer"]


def test_three_sessions_waiting_are_answered_in_order_from_the_keyboard_alone(home, project, daemons, chromium):
    with running_stack(home, project, daemons, STEPS) as stack:
        serve = stack.start_serve()
        page = chromium.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{serve.port}/")
        assert page.is_hidden("#inbox")

        sessions = []
        for task in ("first <b>task</b>", "second task", "third task"):  # each asks before the next starts
            sessions.append(stack.client.call(dp.StartRequest(stack.project, task)).session_id)
            wait_for_event(home, sessions[-1], "approval.request")
        page.wait_for_selector("#inbox-list li >> nth=2", timeout=30000)
        wait_until(lambda: page.title() == "(3 waiting) Chock", 15, "the title to count three")
        items = page.locator("#inbox-list li")
        assert [items.nth(i).get_attribute("data-session") for i in range(3)] == sessions  # oldest first
        assert items.nth(0).locator(".command").text_content() == "echo asked-once"
        assert items.nth(0).locator(".task").text_content() == "first <b>task</b>"  # text, never markup
        assert items.nth(0).locator(".age").text_content().startswith("waiting ")
        assert [items.nth(i).get_attribute("aria-selected") for i in range(3)] == ["true", "false", "false"]
        assert "Approval waiting on local" in page.text_content("#inbox-live")

        # j and k move; Enter opens the selected one's session, whose call shows as waiting, not running.
        page.keyboard.press("j")
        assert items.nth(1).get_attribute("aria-selected") == "true"
        page.keyboard.press("k")
        page.keyboard.press("Enter")
        page.wait_for_selector("#timeline details.tool[data-call-id='c1'][data-state='waiting']")
        assert page.text_content("#session-id") == sessions[0]
        assert page.text_content("details.tool[data-call-id='c1'] .state") == "waiting for approval"

        # y: the first, yes once.
        page.locator("body").focus()
        page.keyboard.press("y")
        wait_until(lambda: page.title() == "(2 waiting) Chock", 15, "the title to count two")
        # n, a message, Enter: the second, no, and the model is told why.
        page.keyboard.press("n")
        page.wait_for_selector("#inbox-list li textarea.message")
        page.keyboard.type("not this one: read the README first")
        page.keyboard.press("Enter")
        wait_until(lambda: page.title() == "(1 waiting) Chock", 15, "the title to count one")
        # a: the proposal the request's event carries, edited, Enter: the third, always in the session.
        page.keyboard.press("a")
        rule = page.wait_for_selector("#inbox-list li input.rule")
        proposed = next(e for e in home.events(sessions[2]) if e["type"] == "approval.request")["propose"]
        assert proposed and rule.input_value() == proposed
        page.keyboard.press("Control+A")
        page.keyboard.type("echo")
        page.keyboard.press("Enter")
        wait_until(lambda: page.title() == "Chock", 15, "the title without a count")
        page.wait_for_selector("#inbox", state="hidden")

        for session_id in sessions:
            wait_for_end(home, session_id, "completed")
        first, second, third = (answers(home, session_id) for session_id in sessions)
        assert [(e["answer"], e.get("scope", "once")) for e in first] == [("yes", "once")]
        assert [(e["answer"], e["note"]) for e in second] == [("no", "not this one: read the README first")]
        assert [(e["answer"], e["scope"], e["rule"]) for e in third] == [("yes", "session", "echo")]
        result = next(e for e in home.events(sessions[1]) if e["type"] == "tool.result")
        assert "not this one: read the README first" in result["output"]
        assert errors == []


def test_a_key_held_down_answers_one_approval_not_the_next(home, project, daemons, chromium):
    """A `y` held a little long repeats: the repeats must not answer the approval that moves up under it, which
    the person has not read."""
    with running_stack(home, project, daemons, STEPS) as stack:
        serve = stack.start_serve()
        page = chromium.new_page(viewport={"width": 1100, "height": 900})
        page.goto(f"http://127.0.0.1:{serve.port}/")
        sessions = []
        for task in ("first task", "second task"):
            sessions.append(stack.client.call(dp.StartRequest(stack.project, task)).session_id)
            wait_for_event(home, sessions[-1], "approval.request")
        page.wait_for_selector("#inbox-list li >> nth=1", timeout=30000)  # both read, not only counted
        page.locator("body").focus()
        page.keyboard.down("y")
        wait_until(lambda: page.title() == "(1 waiting) Chock", 15, "the title to count one")
        page.keyboard.down("y")  # the same key, still down: a repeat
        item = page.locator("#inbox-list li").nth(0)
        assert item.get_attribute("data-session") == sessions[1]
        assert item.locator(".note").text_content() == ""  # nothing sent for it
        page.keyboard.up("y")
        page.keyboard.press("n")
        page.wait_for_selector("#inbox-list li textarea.message")
        page.keyboard.press("Enter")
        for session_id in sessions:
            wait_for_end(home, session_id, "completed")
        assert [e["answer"] for e in answers(home, sessions[1])] == ["no"]


LS = [
    {"text": "", "tool_calls": [{"call_id": "c1", "name": "shell", "args": {"command": "ls -a"}}]},
    {"text": "Done.", "tool_calls": []},
]  # fmt: skip


def test_always_in_this_project_answered_on_the_page_holds_for_the_projects_next_session_until_removed(
    home, project, daemons, chromium, tmp_path
):
    with running_stack(home, project, daemons, LS) as stack:
        serve = stack.start_serve()
        page = chromium.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{serve.port}/")

        def start(where) -> str:
            return stack.client.call(dp.StartRequest(where, "list the files")).session_id

        def asked(session_id: str) -> None:
            page.wait_for_selector(f"#inbox-list li[data-session='{session_id}']", timeout=30000)

        first = start(stack.project)
        asked(first)
        page.keyboard.press("A")  # always, in this project
        rule = page.wait_for_selector("#inbox-list li input.rule")
        assert rule.input_value() == "ls"  # the proposal of `ls -a`, from the request's event
        assert page.locator("#inbox-list li select.scope").input_value() == "project"
        page.keyboard.press("Enter")
        wait_for_end(home, first, "completed")
        (saved,) = answers(home, first)
        assert (saved["answer"], saved["scope"], saved["rule"]) == ("yes", "project", "ls")

        second = start(stack.project)  # nobody is asked: the project's rule decides
        wait_for_end(home, second, "completed")
        (decided,) = answers(home, second)
        assert (decided["via"], decided["rule"]) == ("rule", "ls")

        other = make_project(tmp_path / "other")
        elsewhere = start(other)  # another project's session is asked, on the page
        asked(elsewhere)
        page.keyboard.press("y")
        wait_for_end(home, elsewhere, "completed")
        assert [e["via"] for e in answers(home, elsewhere)] == ["socket"]

        listed = home.chock("rules", "--daemon", stack.daemon.address, "--project", str(stack.project))
        (line,) = listed.stdout.splitlines()
        removed = home.chock("rules", "remove", line.split()[0], "--daemon", stack.daemon.address,
                             "--project", str(stack.project))  # fmt: skip
        assert removed.returncode == 0, removed.stderr
        third = start(stack.project)  # asked again: answered this time from the session's own view
        asked(third)
        page.click(f"#inbox-list li[data-session='{third}']")
        page.keyboard.press("Enter")
        page.click("#timeline .approval button.more")
        page.fill("#timeline .approval textarea.message", "not again")
        page.keyboard.press("Enter")
        page.wait_for_selector("#timeline .approval .answered:has-text('the model was told: not again')")
        wait_for_end(home, third, "completed")
        assert [(e["answer"], e["via"], e["note"]) for e in answers(home, third)] == [("no", "socket", "not again")]
        wait_until(lambda: page.title() == "Chock", 15, "the title without a count")
        assert errors == []
