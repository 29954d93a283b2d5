// `node --test` tests of the page's inbox (chock/serve/static/inbox.js) and its answers (answer.js) on the DOM of
// tests/node/dom.mjs: the fold of a session's events to the requests still open, the order over sessions and
// hosts, the keys, and what an older host is offered. Nothing newer than Node 18.
import assert from "node:assert/strict";
import test from "node:test";

import { exactly, older, proposal, send } from "../../chock/serve/static/answer.js";
import { age, fold, inbox, items, noticeWaiting, onKey } from "../../chock/serve/static/inbox.js";
import { page } from "../../chock/serve/static/state.js";
import { install } from "./dom.mjs";

const ask = (id, request_id, at, extra = {}) =>
  ({ id, type: "approval.request", request_id, tool: "shell", summary: `cmd ${request_id}`, at, ...extra });

test("a session's events fold to the requests still open: answered, decided by a rule, or ended ones are not", () => {
  const entry = { after: 0, pending: new Map() };
  fold(entry, [ask(1, "r1", "t1"), ask(2, "r2", "t2", { by_config: true }), ask(3, "r3", "t3"),
    { id: 4, type: "approval.answer", request_id: "r1" }]);
  assert.deepEqual([...entry.pending.keys()], ["r3"]);
  assert.equal(entry.after, 4);
  fold(entry, [ask(3, "r9", "t9")]); // taken already: never twice
  assert.deepEqual([...entry.pending.keys()], ["r3"]);
  fold(entry, [{ id: 5, type: "session.end" }]);
  assert.equal(entry.pending.size, 0);
});

function waitingRows() {
  return [ // newest first, as the list holds them
    { host: "build", id: "s2", status: "waiting", message: "two", project: "/p", last_event_id: 0 },
    { host: "local", id: "s1", status: "waiting", message: "one <b>x</b>", project: "/p", last_event_id: 0 },
  ];
}

function fresh() {
  const document = install();
  inbox.sessions.clear();
  Object.assign(inbox, { selected: "", chosen: false });
  inbox.announced.clear();
  older.clear();
  return document;
}

test("the inbox lists every host's open requests oldest first, as text, and the title counts them", () => {
  const document = fresh();
  noticeWaiting(waitingRows());
  fold(inbox.sessions.get("build/s2"), [ask(1, "r1", "2026-01-01T10:00:05Z")]);
  fold(inbox.sessions.get("local/s1"), [ask(1, "r1", "2026-01-01T10:00:01Z"), ask(2, "r2", "2026-01-01T10:00:09Z")]);
  noticeWaiting(waitingRows());
  assert.deepEqual(items().map((item) => item.key), ["local/s1/r1", "build/s2/r1", "local/s1/r2"]);
  const shown = document.getElementById("inbox-list").children;
  assert.equal(shown.length, 3);
  assert.equal(shown[0].querySelector(".task").textContent, "one <b>x</b>");
  assert.ok(!shown[0].html.includes("<b>"), "a task is text, never markup");
  assert.equal(shown[0].getAttribute("aria-selected"), "true");
  assert.equal(document.title, "(3 waiting) Chock");
  assert.match(document.getElementById("inbox-live").textContent, /^Approval waiting on /);
  noticeWaiting([]);
  assert.equal(document.title, "Chock");
  assert.equal(document.getElementById("inbox").hidden, true);
});

test("j and k move, and the oldest stays selected until the person moves", () => {
  fresh();
  noticeWaiting(waitingRows());
  fold(inbox.sessions.get("local/s1"), [ask(1, "r1", "a"), ask(2, "r2", "b")]);
  noticeWaiting(waitingRows());
  let prevented = 0;
  const key = (k, target = { tagName: "BODY" }) => onKey({ key: k, target, preventDefault: () => { prevented += 1; } });
  key("j");
  assert.equal(inbox.selected, "local/s1/r2");
  key("j");
  assert.equal(inbox.selected, "local/s1/r2", "the last stays the last");
  key("k");
  assert.equal(inbox.selected, "local/s1/r1");
  key("j", { tagName: "TEXTAREA" }); // typing in a box is typing, not a key of the inbox
  assert.equal(inbox.selected, "local/s1/r1");
  assert.equal(prevented, 3);
  const opened = [];
  page.openSession = (host, id) => opened.push(id);
  key("Enter", { tagName: "SUMMARY" }); // Enter on a tool call's summary opens it, not the inbox's session
  key("Enter", { tagName: "A" }); // nor on a link
  assert.deepEqual(opened, []);
  assert.equal(prevented, 3);
  key("Enter");
  assert.deepEqual(opened, ["s1"]);
});

test("a plain answer goes as `answer`; a message or always as `answer-with`; an older host is offered yes/no only", async () => {
  fresh();
  const calls = [];
  const row = { host: "old", id: "s1", project: "/p" };
  const call = async (path, { body }) => {
    calls.push([path, body]);
    if (path.endsWith("/answer-with")) throw Object.assign(new Error("unknown verb"), { code: "unknown-verb" });
    return { answered: true };
  };
  await send(row, { request_id: "r1" }, { answer: "yes" }, call);
  assert.deepEqual(calls[0], ["/api/hosts/old/sessions/s1/answer", { project: "/p", request_id: "r1", answer: "yes" }]);
  await assert.rejects(send(row, { request_id: "r1" }, { answer: "no", note: "why" }, call), /older: it takes yes or no only/);
  assert.equal(calls[1][0], "/api/hosts/old/sessions/s1/answer-with");
  assert.deepEqual(calls[1][1], { project: "/p", request_id: "r1", answer: "no", scope: "once", rule: "", note: "why" });
  await assert.rejects(send(row, { request_id: "r1" }, { answer: "yes", scope: "project", rule: "ls" }, call), /older/);
  assert.equal(calls.length, 2, "once refused, the host is not asked for more again");
  await assert.rejects(send({ ...row, host: "new" }, { request_id: "r1" }, { answer: "no", note: "é".repeat(2049) }, call),
    /4098 bytes; a "no" carries at most 4096/);
});

test("always proposes what the event carries, never recomputed; how long a request has waited", () => {
  assert.equal(proposal({ propose: "git diff", tool: "shell" }), "git diff");
  assert.equal(proposal({ tool: "write_file" }), "tool:write_file");
  assert.equal(proposal({ tool: "shell", summary: "git diff" }), "");
  const now = Date.parse("2026-01-01T10:00:00Z");
  assert.equal(age("2026-01-01T09:59:58Z", now), "2 s");
  assert.equal(age("2026-01-01T09:55:00Z", now), "5 min");
  assert.equal(age("2026-01-01T07:50:00Z", now), "2 h 10 min");
  assert.equal(age("not a time", now), "");
});

test("a waiting session is read from its tail, and whole only when the tail holds fewer requests than its row", async () => {
  fresh();
  const asked = [];
  const saved = inbox.read;
  inbox.read = async (row, after) => {
    asked.push([row.id, after]);
    return { events: after ? [{ id: 4990, type: "tool.call" }] : [ask(7, "r1", "t"), { id: 5000, type: "usage" }] };
  };
  try {
    noticeWaiting([{ host: "local", id: "s1", status: "waiting", pending_approvals: 1, last_event_id: 5000 }]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.deepEqual(asked, [["s1", 4000], ["s1", 0]]);
    assert.deepEqual(items().map((item) => item.key), ["local/s1/r1"]);
    noticeWaiting([{ host: "local", id: "s1", status: "waiting", pending_approvals: 1, last_event_id: 5000 }]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(asked.length, 2, "nothing new: nothing read");
  } finally {
    inbox.read = saved;
  }
});

test("a command is shown exactly: what a browser would hide or reorder is shown as its escape", () => {
  install();
  const nodes = exactly("ls \u202e#\x1b]0;x\x07 done\nnext\tline");
  const text = nodes.map((node) => (typeof node === "string" ? node : node.textContent)).join("");
  assert.equal(text, "ls \\u202e#\\u001b]0;x\\u0007 done\nnext\tline");
  assert.equal(nodes.filter((node) => typeof node !== "string").length, 3);
  assert.deepEqual(exactly("plain"), ["plain"]);
});
