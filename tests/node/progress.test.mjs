// `node --test` tests of the page's progress (chock/serve/static/progress.js) in a SessionView on the DOM of
// tests/node/dom.mjs: what the session does now and for how long, the running call's time, the session's time.
// Nothing newer than Node 18.
import assert from "node:assert/strict";
import test from "node:test";

import { activity, clock } from "../../chock/serve/static/progress.js";
import { SessionView } from "../../chock/serve/static/session.js";
import { page } from "../../chock/serve/static/state.js";
import { install } from "./dom.mjs";

const at = (seconds) => new Date(Date.UTC(2025, 0, 1, 10, 0, seconds)).toISOString();
const now = (seconds) => Date.parse(at(seconds));

function fresh() {
  const document = install();
  page.refreshList = async () => {};
  return { document, view: new SessionView("local", "s1", "/p") };
}

const said = (document) => {
  const line = document.getElementById("session-activity");
  return line.hidden ? null : line.textContent;
};

test("the line says what the session does and for how long, from the events' times", () => {
  const { document, view } = fresh();
  let id = 0;
  const take = (seconds, event) => view.take({ id: (id += 1), at: at(seconds), ...event });
  take(0, { type: "session.start", message: "fix it" });
  take(0, { type: "user.message", text: "fix it" });
  view.progress.tick(now(4));
  assert.equal(said(document), "thinking 4 s");
  assert.equal(document.getElementById("session-elapsed").textContent, "running 4 s");
  take(5, { type: "tool.call", call_id: "c1", name: "bash", args: { command: "make" } });
  view.progress.tick(now(17));
  assert.equal(said(document), "running bash 12 s");
  const tool = view.tools.get("c1");
  assert.equal(tool.stateNode.textContent, "running… 12 s");
  take(20, { type: "tool.result", call_id: "c1", output: "ok" });
  assert.match(tool.stateNode.textContent, /^done/); // the result's own words stay
  view.progress.tick(now(21));
  assert.equal(said(document), "thinking 1 s");
  take(22, { type: "tool.call", call_id: "c2", name: "shell", args: { command: "rm x" } });
  take(22, { type: "approval.request", request_id: "r1", call_id: "c2", tool: "shell", summary: "rm x" });
  view.progress.tick(now(85));
  assert.equal(said(document), "waiting for approval 1 min 3 s");
  take(90, { type: "approval.answer", request_id: "r1", answer: "yes", via: "socket" });
  view.progress.tick(now(92));
  assert.equal(said(document), "running the approved call 2 s");
  take(95, { type: "session.end", reason: "completed", exit_code: 0 });
  view.progress.tick(now(300));
  assert.equal(said(document), null);
  assert.equal(document.getElementById("session-elapsed").textContent, "ran 1 min 35 s");
});

test("a clock behind the log's says 0, and an event that says nothing new changes nothing", () => {
  assert.equal(clock(59999), "59 s");
  assert.equal(clock(3_723_000), "62 min 3 s");
  assert.equal(activity({ type: "usage" }), undefined);
  assert.equal(activity({ type: "approval.request", by_config: true }), undefined);
  assert.equal(activity({ type: "session.end" }), null);
  assert.deepEqual(activity({ type: "assistant.message", text: "done", tool_calls: [] }), { label: "finishing" });
  const paused = { type: "assistant.message", text: "half way", tool_calls: [], stop_reason: "pause_turn" };
  assert.deepEqual(activity(paused), { label: "thinking" }); // sent again at once
  const { document, view } = fresh();
  view.take({ id: 1, at: at(30), type: "session.start" });
  view.progress.tick(now(10));
  assert.equal(said(document), "thinking 0 s");
});
