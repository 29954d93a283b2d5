"""A finished session's whole work on the page, in Debian's Chromium: the diff against the session's base across
a continue, "no changes" for a session that changed nothing, and Remove of a stopped session that keeps its
workspace. Real components: a real daemon, a real `chock serve`, real `chock run` children in bubblewrap, a
replay instance, and real git."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.projects import git, git_value
from tests.fakes.serve import running_stack
from tests.fakes.sessions import replay_config, wait_for_end, wait_for_event, write
from tests.fakes.wait import wait_until
from tests.test_serve_steering import open_page

pytestmark = pytest.mark.browser

DONE = {"text": "Done.", "tool_calls": []}


def test_the_page_shows_the_whole_diff_against_the_base_across_a_continue(home, project, daemons, chromium):
    entries: list[dict[str, Any]] = [
        {"text": "", "tool_calls": [write("notes.txt", "one\n")]},
        DONE,
        {"text": "", "tool_calls": [write("more.txt", "<b>two</b>\n")]},
        DONE,
    ]
    with running_stack(home, project, daemons, entries) as stack:
        serve = stack.start_serve()
        base = git_value(project, "rev-parse", "HEAD")
        session_id = serve.post("/api/sessions", {"project": str(project), "message": "notes"}).json["id"]
        wait_for_end(home, session_id)
        (project / "person.txt").write_text("mine\n")  # the person moves on: the session's base does not
        git(project, "add", "person.txt")
        git(project, "commit", "-q", "-m", "mine")
        continued = home.chock("run", "--continue", session_id, "--yes", "more", cwd=project)
        assert continued.returncode == 0, continued.stderr

        page = open_page(chromium, stack, serve.port, session_id)
        page.wait_for_selector("#timeline [data-type='session.end'] >> nth=1", timeout=60000)
        work = page.locator("#timeline .work[data-type='workspace.close']").last
        branch = f"chock/{session_id}"
        assert work.get_attribute("data-branch") == branch
        assert work.locator("ul.files li .path").all_text_contents() == ["more.txt", "notes.txt"]
        assert work.locator("ul.files li .counts").all_text_contents() == ["+1 −0", "+1 −0"]
        shown = work.locator("details.whole-diff pre.diff").text_content()
        assert "+<b>two</b>" in shown and "+one" in shown and "person.txt" not in shown
        assert work.locator("details.whole-diff b").count() == 0  # the agent's text is text
        assert work.locator("details.whole-diff").get_attribute("open") is not None
        assert page.locator("#timeline details.whole-diff[open]").count() == 1  # the first finish's is closed
        assert work.locator("pre.commands").text_content() == f"git diff {base} {branch}\ngit merge {branch}"
        assert git(project, "diff", base, branch) == stack.read(session_id)[-2]["diff"]
        assert page.errors == []


def test_a_session_that_changed_nothing_shows_no_changes_and_makes_no_branch(home, project, daemons, chromium):
    with running_stack(home, project, daemons, [DONE]) as stack:
        serve = stack.start_serve()
        session_id = serve.post("/api/sessions", {"project": str(project), "message": "look"}).json["id"]
        wait_for_end(home, session_id)
        page = open_page(chromium, stack, serve.port, session_id)
        work = page.wait_for_selector("#timeline .work.none[data-type='workspace.close']")
        assert work.text_content() == "No changesThe work equals the session's base, so no branch was made."
        assert page.locator("#timeline pre.commands").count() == 0
        assert git_value(project, "branch", "--list", f"chock/{session_id}") == ""
        assert page.errors == []


def test_remove_on_the_page_removes_a_stopped_session_with_its_kept_workspace(home, project, daemons, chromium):
    entries: list[dict[str, Any]] = [
        {"text": "", "tool_calls": [
            write("kept.txt", "work in progress\n"),
            {"call_id": "s1", "name": "shell", "args": {"command": "sleep 60"}},
        ]},
        DONE,
    ]  # fmt: skip
    with running_stack(home, project, daemons, entries) as stack:
        replay_config(home, entries, shell="allow")
        serve = stack.start_serve()
        session_id = serve.post("/api/sessions", {"project": str(project), "message": "work"}).json["id"]
        wait_for_event(home, session_id, "tool.call", lambda e: e.get("call_id") == "s1")
        stopped = serve.post(f"/api/sessions/{session_id}/stop", {"project": str(project)})
        assert stopped.status == 200, stopped.body
        workspace = home.layout.workspace_dir(session_id)
        assert (workspace / "kept.txt").exists()

        page = open_page(chromium, stack, serve.port, session_id)
        page.on("console", lambda m: print("CONSOLE", m.text))
        button = page.wait_for_selector("#remove-button:visible")
        armed = f"Commit its workspace to chock/{session_id}, then remove both?"
        # A row the daemon made while the stopped session's process was still exiting says it keeps nothing yet; one
        # that arrives late changes the button back (a changed question disarms it), so it is armed once it holds.
        for _ in range(5):
            wait_until(lambda: button.text_content() == "Remove with its workspace", 30, "the row to say it is kept")
            button.click()
            if button.text_content() == armed:
                break
        assert button.text_content() == armed
        button.click()
        page.wait_for_selector(f"#sessions button[data-session='{session_id}']", state="detached", timeout=60000)
        note = page.text_content("#sessions-note")
        assert f"removed {session_id} and its workspace" in note and "--with-workspace" not in note
        assert not home.layout.session_dir(session_id).exists()
        assert not workspace.exists()
        assert git_value(project, "show", f"chock/{session_id}:kept.txt") == "work in progress"
        assert page.errors == []
