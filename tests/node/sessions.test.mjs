// `node --test` tests of the page's session list and its inbox of waiting sessions (chock/serve/static/
// sessions.js, session.js, inbox.js) on the DOM of tests/node/dom.mjs. Nothing newer than Node 18.
import assert from "node:assert/strict";
import test from "node:test";

import { noticeWaiting } from "../../chock/serve/static/inbox.js";
import { statusClass, statusText } from "../../chock/serve/static/session.js";
import { readHash, renderList } from "../../chock/serve/static/sessions.js";
import { debug, page, state } from "../../chock/serve/static/state.js";
import { install } from "./dom.mjs";

// Notifications as a browser that was granted them makes them: each one kept, its click callable.
class Notification {
  static permission = "granted";
  static made = [];
  constructor(title, options) { Object.assign(this, { title, ...options }); Notification.made.push(this); }
  close() {}
}

function fresh({ inFront = true } = {}) {
  const document = install();
  document.focused = inFront;
  globalThis.Notification = Notification;
  Notification.made = [];
  globalThis.focus = () => {};
  return document;
}

const ROWS = [ // oldest first, each of its host (the list shows them merged newest first: mergeRows)
  { host: "local", id: "s1", status: "ended", end_reason: "completed", message: "first", started_at: "2025-01-01T10:00:00Z" },
  { host: "local", id: "s2", status: "waiting", pending_approvals: 2, message: "second" },
  { host: "build", id: "s3", status: "abandoned", free: true, interrupted_by: "reboot", message: "" },
  { host: "local", id: "s4", status: "ended", end_reason: "error", message: "fourth" },
  { host: "local", id: "s5", status: "waiting", message: "fifth" },
];

test("a session's status in words, in the list and in its own view", () => {
  assert.deepEqual(ROWS.map((row) => statusText(row)),
    ["ended · completed", "waiting (2)", "interrupted by reboot", "ended · error", "waiting"]);
  assert.equal(statusText(ROWS[2], true), "interrupted by reboot — chock run --on build --continue s3");
  assert.equal(statusText({ ...ROWS[2], host: "local" }, true), "interrupted by reboot — chock run --continue s3");
  assert.equal(statusText({}), "unknown");
  assert.equal(statusText({ status: "moved", end_reason: "moved", end_to: "build" }), "moved → build");
  assert.equal(statusClass({ status: "moved", end_reason: "moved" }), "badge moved");
  assert.deepEqual(ROWS.map(statusClass),
    ["badge ended", "badge waiting", "badge abandoned", "badge ended failed", "badge waiting"]);
});

test("the list shows the newest session first, the open one marked", () => {
  const document = fresh();
  state.session = { host: "local", id: "s4" };
  state.hostFilter = "";
  renderList([...ROWS].reverse());
  const buttons = document.getElementById("sessions").querySelectorAll("button[data-session]");
  assert.deepEqual(buttons.map((b) => b.getAttribute("data-session")), ["s5", "s4", "s3", "s2", "s1"]);
  assert.deepEqual(buttons.map((b) => b.getAttribute("data-end-reason")), ["", "error", "", "", "completed"]);
  assert.equal(buttons[2].querySelector("span.msg").textContent, "(no message)");
  assert.equal(document.getElementById("sessions-empty").hidden, true);
  assert.deepEqual(buttons.map((b) => b.getAttribute("aria-current")), ["false", "true", "false", "false", "false"]);
  assert.deepEqual(buttons.map((b) => b.getAttribute("data-host")), ["local", "local", "build", "local", "local"]);
  assert.equal(buttons[2].querySelector("span.host").textContent, "build");
  state.hostFilter = "build";
  renderList([...ROWS].reverse());
  const shown = document.getElementById("sessions").querySelectorAll("button[data-session]");
  assert.deepEqual(shown.map((b) => b.getAttribute("data-session")), ["s3"]);
  state.hostFilter = "";
  renderList([]);
  assert.equal(document.getElementById("sessions-empty").textContent, "No sessions yet.");
});

test("the tab's title counts the waiting approvals, and each is told of once while the page is behind", () => {
  const document = fresh({ inFront: false });
  noticeWaiting(ROWS);
  assert.equal(document.title, "(3 waiting) Chock", "s2 waits on two, s5 on one");
  assert.deepEqual(Notification.made.map((note) => note.tag),
    ["chock-approval-local/s2", "chock-approval-local/s5"]);
  noticeWaiting(ROWS);
  assert.equal(Notification.made.length, 2, "told once while it waits");
  noticeWaiting(ROWS.filter((row) => row.id !== "s2"));
  assert.equal(document.title, "(1 waiting) Chock");
  noticeWaiting(ROWS);
  assert.deepEqual(Notification.made.map((note) => note.tag).slice(2), ["chock-approval-local/s2"], "it waits again");
  let opened = null;
  page.openSession = (host, id) => { opened = [host, id]; };
  Notification.made[1].onclick();
  assert.deepEqual(opened, ["local", "s5"]);
  assert.deepEqual(debug.notified.slice(-3), ["local/s2", "local/s5", "local/s2"]);
  noticeWaiting([]);
  assert.equal(document.title, "Chock");
});

test("a page in front is not notified", () => {
  fresh({ inFront: true });
  noticeWaiting(ROWS);
  assert.equal(Notification.made.length, 0);
});

test("the address bar names the project and the session", () => {
  fresh();
  globalThis.location = { hash: "#project=%2Fsrc%2Fp&host=build&session=s2" };
  assert.deepEqual(readHash(), { project: "/src/p", host: "build", session: "s2" });
});
