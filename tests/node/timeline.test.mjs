// `node --test` tests of the page's timeline (chock/serve/static/timeline.js and session.js) on the DOM of
// tests/node/dom.mjs: what each event type shows, each event applied once and in id order, and a diff's lines.
// Nothing newer than Node 18.
import assert from "node:assert/strict";
import test from "node:test";

import { diffLineKind, diffLines } from "../../chock/serve/static/diff.js";
import { SessionView } from "../../chock/serve/static/session.js";
import { page } from "../../chock/serve/static/state.js";
import { RENDER, brief, durationText } from "../../chock/serve/static/timeline.js";
import { install } from "./dom.mjs";

const AT = "2025-01-01T10:00:00.000Z";
const LATER = "2025-01-01T10:00:02.500Z";

// A view of session s1 with a fresh page; `shown(view)` is the timeline's items as [type, text] pairs.
function fresh() {
  const document = install();
  const refreshed = [];
  page.refreshList = async () => { refreshed.push(true); };
  const view = new SessionView("s1");
  return { document, view, refreshed };
}

function feed(view, events) {
  events.forEach((event, n) => view.take({ id: n + 1, at: AT, ...event }));
}

const shown = (document) =>
  document.getElementById("timeline").children.map((item) => {
    const node = item.children[0];
    return [node.getAttribute("data-type"), node.textContent];
  });

test("each event type shows what it says", () => {
  const { document, view } = fresh();
  feed(view, [
    { type: "session.start", message: "fix the build", instance: "main", model: "m1", owner: "ann" },
    { type: "workspace.open", directory: "/w/s1", commit: "0123456789abcdef" },
    { type: "user.message", text: "fix the build" },
    { type: "assistant.delta", text: "Let me " },
    { type: "assistant.delta", text: "look" },
    { type: "assistant.message", text: "Let me **look**" },
    { type: "tool.call", call_id: "c1", name: "bash", args: { command: "make\nmake test" } },
    { type: "tool.result", call_id: "c1", output: "ok", at: LATER },
    { type: "user.message", text: "and the docs", via: "socket" },
    { type: "provider.retry", status: 529, wait_seconds: 1.23456 },
    { type: "provider.retry", status: null },
    { type: "compaction", tokens: 150000, window: 200000 },
    { type: "background.start", kind: "shell", handle: "b1", command: "npm run dev" },
    { type: "background.end", handle: "b1", exit_code: 0 },
    { type: "subagent.start", handle: "a1", task: "read the docs" },
    { type: "subagent.end", handle: "a1", result: "they say X" },
    { type: "session.adopt", via: "daemon", pid: 42 },
    { type: "workspace.close", branch: "chock/s1", commit: "fedcba9876543210" },
    { type: "turn.end" },
    { type: "session.end", reason: "error", exit_code: 1, error: "the model refused" },
  ]);
  assert.deepEqual(shown(document), [
    ["session.start", "started · instance main · model m1 · by ann"],
    ["workspace.open", "workspace /w/s1 at 0123456789"],
    ["user.message", "Taskfix the build"],
    ["assistant.delta", "ChockLet me look"],
    ["tool.call", "bashmakedone · 2.5 sArguments{\n  \"command\": \"make\\nmake test\"\n}Outputok"],
    ["user.message", "Follow-upand the docs"],
    ["provider.retry", "overloaded, retrying in 1.23 s"],
    ["provider.retry", "no connection, retrying in a moment"],
    ["compaction", "compacted the conversation (about 150,000 tokens of a 200,000-token window)"],
    ["background.start", "background shell b1 started: npm run dev"],
    ["background.end", "background b1 ended (exit 0)"],
    ["subagent.start", "subagent a1 started: read the docs"],
    ["subagent.end", "subagenta1donethey say X"],
    ["session.adopt", "taken over by the daemon (pid 42)"],
    ["workspace.close", "changes committed to chock/s1 (fedcba9876)"],
    ["session.end", "EndFailed · exit 1\nthe model refused"],
  ]);
  const answer = document.getElementById("timeline").querySelector("div.assistant");
  assert.equal(answer.querySelector(".text").html, '<div class="text markdown"><p>Let me <strong>look</strong></p></div>');
  assert.equal(answer.getAttribute("data-final-event-id"), "6");
  assert.ok(!answer.classList.contains("streaming"));
  const call = document.getElementById("timeline").querySelector("details.tool");
  assert.equal(call.getAttribute("data-duration-ms"), "2500");
  assert.equal(call.getAttribute("data-result-event-id"), "8");
  assert.equal(document.getElementById("session-task").textContent, "fix the build");
  assert.equal(view.status, "ended");
});

test("the usage line and the plan panel add up what the events say", () => {
  const { document, view } = fresh();
  feed(view, [
    { type: "usage", input_tokens: 1200, output_tokens: 30, cache_read_tokens: 1000, cost: 0.01 },
    { type: "usage", input_tokens: "x", output_tokens: 20, cost: 0.0025 },
    { type: "plan", steps: [{ step: "read", status: "done" }, { step: "fix", status: "in_progress" },
      { step: "test", status: "bogus" }, "not a step"] },
  ]);
  assert.equal(document.getElementById("session-usage").textContent,
    "1,200 in (1,000 cache read, 0 written) · 50 out tokens · cost 0.0125");
  assert.equal(document.getElementById("plan-steps").html,
    '<div><li class="done" title="done" data-status="done">read</li>'
    + '<li class="in_progress" title="in progress" data-status="in_progress">fix</li>'
    + '<li class="pending" title="pending" data-status="pending">test</li></div>');
  assert.equal(document.getElementById("plan").hidden, false);
  assert.deepEqual(shown(document), []);
});

test("the cost is shown in the span's currency against its budget, and a budget end says so", () => {
  const { document, view } = fresh();
  feed(view, [
    { type: "session.start", message: "task", currency: "EUR", budget: 2.5 },
    { type: "usage", input_tokens: 1000, output_tokens: 0, cost: 1 },
    { type: "usage", input_tokens: 1000, output_tokens: 0, cost: 2 },
    { type: "session.end", reason: "budget", exit_code: 1, error: "past its budget" },
  ]);
  assert.equal(document.getElementById("session-usage").textContent,
    "2,000 in · 0 out tokens · cost 3.0000 EUR of a budget of 2.50 EUR");
  const [end] = shown(document).filter(([type]) => type === "session.end");
  assert.match(end[1], /Stopped at its budget · exit 1/);
});

test("an approval card: its buttons, then the answer in their place", () => {
  const { document, view, refreshed } = fresh();
  feed(view, [
    { type: "approval.request", request_id: "r1", tool: "bash", summary: "rm -rf build" },
    { type: "approval.request", request_id: "r2", tool: "edit_file", summary: "edit x", by_config: true },
    { type: "approval.answer", request_id: "r1", answer: "yes", via: "browser" },
    { type: "approval.answer", request_id: "r9", answer: "no" },
    { type: "approval.request", request_id: "r3", tool: "shell", summary: "ls -a" },
    { type: "approval.answer", request_id: "r3", answer: "yes", via: "socket", scope: "project", rule: "ls" },
    { type: "approval.request", request_id: "r4", tool: "shell", summary: "rm x" },
    { type: "approval.answer", request_id: "r4", answer: "no", via: "socket", note: "not <b>that</b>" },
  ]);
  const cards = document.getElementById("timeline").querySelectorAll("div.approval");
  assert.deepEqual(cards.map((card) => card.getAttribute("data-request-id")), ["r1", "r2", "r3", "r4"]);
  assert.equal(cards[2].querySelector(".answered").textContent, "Approved (socket) · always in this project: ls");
  assert.equal(cards[3].querySelector(".answered").textContent, "Denied (socket) · the model was told: not <b>that</b>");
  assert.equal(cards[0].textContent, "Approval · bashrm -rf buildApproved (browser)");
  assert.ok(cards[0].classList.contains("done"));
  assert.equal(cards[0].getAttribute("data-answer"), "yes");
  assert.equal(cards[1].textContent, "Approval needed · edit_fileedit xApproveDenyDeny with a message…Always…");
  assert.equal(refreshed.length, 3, "a request the configuration answers does not make the list look again");
  assert.ok(shown(document).some(([type, text]) => type === "approval.answer" && text === "Denied"), "r9: no card");
});

test("an event is applied once, in id order; a gap asks again from the last one", () => {
  const { view } = fresh();
  let reopened = 0;
  view.reopen = () => { reopened += 1; };
  view.take({ id: 1, type: "turn.end" });
  view.take({ id: 1, type: "turn.end" });
  view.take({ id: 3, type: "turn.end" });
  view.take({ id: "x", type: "turn.end" });
  view.take({ id: 2, type: "no.such.type" });
  assert.equal(view.lastId, 2);
  assert.equal(reopened, 1);
});

test("an event of every type with no fields renders without failing", () => {
  const { view } = fresh();
  for (const [n, type] of Object.keys(RENDER).entries()) {
    assert.doesNotThrow(() => RENDER[type].call(view, { id: n + 1, type }), type);
  }
});

test("a tool call's arguments in a line, and a duration in words", () => {
  assert.equal(brief({ path: "a.py", content: "x" }), "a.py");
  assert.equal(brief({ n: "x".repeat(100) }), `{"n":"${"x".repeat(74)}…`);
  assert.equal(brief(null), "");
  assert.deepEqual([999, 2500, 12000, 125000].map(durationText), ["999 ms", "2.5 s", "12 s", "2 min 5 s"]);
});

test("a diff: each line's kind, the counts, and the lines under the call", () => {
  const diff = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n same\n-old\n+new\n+more\n\\ No newline at end of file\n";
  assert.deepEqual(diffLines(diff), {
    lines: ["--- a/x", "+++ b/x", "@@ -1,2 +1,2 @@", " same", "-old", "+new", "+more", "\\ No newline at end of file"],
    kinds: ["file", "file", "hunk", "same", "del", "add", "add", "note"],
    added: 2,
    deleted: 1,
  });
  assert.equal(diffLineKind(""), "note");
  const { document, view } = fresh();
  feed(view, [
    { type: "tool.call", call_id: "c1", name: "edit_file", args: { path: "x" } },
    { type: "tool.result", call_id: "c1", output: "edited", diff },
  ]);
  const call = document.getElementById("timeline").querySelector("details.tool");
  assert.ok(call.hasAttribute("data-diff"));
  assert.equal(call.querySelector("span.diffstat").textContent, "+2 −1");
  assert.deepEqual(call.querySelector("pre.diff").children.map((line) => line.className),
    ["line file", "line file", "line hunk", "line same", "line del", "line add", "line add", "line note"]);
});
