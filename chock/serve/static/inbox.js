// One inbox at the top of the page: every approval waiting, across sessions and hosts, oldest first, each with its
// command, its session's task and how long it has waited; answered from the keyboard (`y`, `n`, `a`/`A`, `j`/`k`,
// `Enter`). It is built from the list's rows (a row that waits) and a `read` of each such session, folded here
// to the requests still open and read on from the last event taken, so a log is read once. The tab's title
// counts them; an ARIA live region announces each new one; one that arrives while the page is behind is a
// notification (permission asked once, after a click, never on load). Everything shown is text, never HTML.
import { api, paths } from "./api.js";
import { answerForm, exactly, older, olderWhy, send } from "./answer.js";
import { $, el } from "./dom.js";
import { rowKey } from "./hosts.js";
import { debug, page } from "./state.js";

const MOST_SESSIONS = 64;  // sessions the inbox reads at most (the oldest waiting ones first)
const MOST_PENDING = 256;  // requests a session may hold open; a log claiming more is cut there
const READS_AT_ONCE = 3;   // logs read at the same moment (serve writes at most 8 replies at once)
const TAIL = 1000;        // a session is first read from this many events before its last: a request waits near
                          // the end; only when the tail holds fewer than the row says is the whole log read
const AGE_EVERY_MS = 5000;

export const inbox = {
  sessions: new Map(), // rowKey -> {row, after, pending: Map(request id -> event), reading, read, whole}
  selected: "",        // the selected item's key: the oldest, until the person moves (`chosen`)
  chosen: false,
  told: new Set(),     // sessions told of by a notification while they wait
  announced: new Set(),
  reads: 0,
  timer: null,
  read: (row, after) => api(`${paths.verb(row.host, row.id, "events")}?after=${after}`),
};

/** Take a session's events in: an approval that asks a person is open until its answer; a new owner's start
 * or the session's end closes every one. Events at or before `entry.after` were taken already. */
export function fold(entry, events) {
  for (const e of events) {
    if (!Number.isInteger(e.id) || e.id <= entry.after) continue;
    entry.after = e.id;
    if (e.type === "approval.request" && !e.by_config) {
      if (entry.pending.size < MOST_PENDING) entry.pending.set(String(e.request_id), e);
    } else if (e.type === "approval.answer") {
      entry.pending.delete(String(e.request_id));
    } else if (e.type === "session.start" || e.type === "session.adopt" || e.type === "session.end") {
      entry.pending.clear();
    }
  }
}

/** Every open request of the sessions that wait, oldest first: [{key, row, event}]. */
export function items() {
  const all = [];
  for (const entry of inbox.sessions.values()) {
    if (entry.row.status !== "waiting") continue;
    for (const event of entry.pending.values()) {
      all.push({ key: `${rowKey(entry.row.host, entry.row.id)}/${event.request_id}`, row: entry.row, event });
    }
  }
  return all.sort((a, b) => String(a.event.at || "").localeCompare(String(b.event.at || ""))
    || a.row.host.localeCompare(b.row.host) || a.row.id.localeCompare(b.row.id) || a.event.id - b.event.id);
}

/** How many approvals wait: those read, and for a session not read yet, what its row says. */
export function waitingCount() {
  let count = 0;
  for (const entry of inbox.sessions.values()) {
    if (entry.row.status !== "waiting") continue;
    count += entry.read ? entry.pending.size : Math.max(1, Number(entry.row.pending_approvals) || 0);
  }
  return count;
}

/** Whether the person sees the page now: visible, and the window focused. */
export function inFront() {
  return document.visibilityState === "visible" && document.hasFocus();
}

/** The list's rows, every host's: the inbox follows the waiting ones, the title counts their approvals, and each
 * session is told of once while it waits. */
export function noticeWaiting(rows) {
  const now = rows.filter((row) => row.status === "waiting").slice(-MOST_SESSIONS);
  const keys = new Set(now.map((row) => rowKey(row.host, row.id)));
  for (const key of inbox.told) if (!keys.has(key)) inbox.told.delete(key); // it may wait again later
  const known = new Map(rows.map((row) => [rowKey(row.host, row.id), row]));
  for (const [key, entry] of inbox.sessions) {
    if (known.has(key)) entry.row = known.get(key);
    else inbox.sessions.delete(key);
  }
  for (const row of now) {
    const key = rowKey(row.host, row.id);
    if (!inbox.sessions.has(key)) {
      const after = Math.max(0, (Number(row.last_event_id) || 0) - TAIL);
      inbox.sessions.set(key, { row, after, pending: new Map(), reading: false, read: false, whole: after === 0 });
    }
  }
  readOn();
  render();
  for (const row of now) tellWaiting(row);
}

/** Read on each waiting session whose row has events the inbox has not taken, a few at a time. */
function readOn() {
  for (const entry of inbox.sessions.values()) {
    if (inbox.reads >= READS_AT_ONCE) return;
    const { row } = entry;
    if (row.status !== "waiting" || entry.reading || !(Number(row.last_event_id) > entry.after)) continue;
    entry.reading = true;
    inbox.reads += 1;
    inbox.read(row, entry.after)
      .then((data) => {
        fold(entry, (data && data.events) || []);
        entry.read = true;
        if (!entry.whole && entry.pending.size < (Number(entry.row.pending_approvals) || 0)) {
          Object.assign(entry, { after: 0, whole: true, read: false }); // an older request: the whole log
          entry.pending.clear();
        }
      })
      .catch(() => {}) // the list's note says when a host does not answer; the next poll reads again
      .finally(() => {
        entry.reading = false;
        inbox.reads -= 1;
        render();
        readOn();
      });
  }
}

/** "3 s", "4 min", "2 h 5 min": how long since the ISO time `at`. */
export function age(at, now = Date.now()) {
  const ms = now - new Date(at).getTime();
  if (!Number.isFinite(ms)) return "";
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** The inbox as it is now: one node per waiting request, kept across renders (a form being typed in stays). */
export function render() {
  const list = $("inbox-list");
  const all = items();
  const nodes = new Map(Array.from(list.children, (node) => [node.dataset.key, node]));
  const made = all.map((item) => nodes.get(item.key) || itemNode(item));
  for (const [index, item] of all.entries()) {
    made[index].querySelector(".age").textContent = `waiting ${age(item.event.at)}`;
    if (!inbox.announced.has(item.key)) {
      inbox.announced.add(item.key);
      $("inbox-live").textContent = `Approval waiting on ${item.row.host}: ${item.event.tool || "tool"} for “${item.row.message || item.row.id}”`;
    }
  }
  place(list, made);
  if (!all.some((item) => item.key === inbox.selected)) inbox.chosen = false;
  if (!inbox.chosen) inbox.selected = all[0]?.key || "";
  for (const node of made) node.setAttribute("aria-selected", String(node.dataset.key === inbox.selected));
  $("inbox").hidden = all.length === 0;
  $("inbox-count").textContent = all.length ? String(all.length) : "";
  const count = Math.max(waitingCount(), all.length);
  document.title = count ? `(${count} waiting) Chock` : "Chock";
  debug.inbox = all.map((item) => item.key);
}

/** Make `list`'s children `nodes`, in order, moving only those out of place: a node taken out and put back
 * loses the focus, and a form being typed in must keep it. */
function place(list, nodes) {
  const keep = new Set(nodes);
  for (const child of Array.from(list.children)) if (!keep.has(child)) child.remove();
  nodes.forEach((node, index) => {
    const here = list.children[index];
    if (here === node) return;
    if (here) here.before(node);
    else list.append(node);
  });
}

function itemNode(item) {
  const { row, event } = item;
  const node = el("li", { class: "inbox-item", "data-key": item.key, "data-host": row.host, "data-session": row.id,
    "data-request-id": String(event.request_id), tabIndex: -1 },
    el("div", { class: "what" }, el("span", { class: "tool", text: event.tool || "tool" }),
      el("code", { class: "command" }, ...exactly(String(event.summary || "")))),
    el("div", { class: "sub" }, el("span", { class: "host", text: row.host }),
      el("span", { class: "task", text: row.message || row.id }), el("span", { class: "age" })),
    el("div", { class: "form" }),
    el("p", { class: "note" }));
  node.setAttribute("role", "option");
  node.querySelector(".note").setAttribute("role", "status");
  node.addEventListener("click", (e) => {
    if (e.target?.closest?.(".form")) return;
    Object.assign(inbox, { selected: item.key, chosen: true });
    render();
  });
  return node;
}

function selectedItem() {
  return items().find((item) => item.key === inbox.selected) || null;
}

function nodeOf(item) {
  return item ? Array.from($("inbox-list").children).find((node) => node.dataset.key === item.key) || null : null;
}

/** Send an answer for `item`; the item goes once the session logged it. */
async function answer(item, choice) {
  const node = nodeOf(item);
  const note = node?.querySelector(".note");
  if (note) note.textContent = "sending…";
  try {
    await send(item.row, item.event, choice);
    const at = Math.max(0, items().findIndex((each) => each.key === item.key));
    inbox.sessions.get(rowKey(item.row.host, item.row.id))?.pending.delete(String(item.event.request_id));
    const next = items();
    Object.assign(inbox, { selected: next[Math.min(at, next.length - 1)]?.key || "", chosen: at > 0 });
    $("inbox-live").textContent = `${choice.answer === "yes" ? "Approved" : "Denied"}: ${item.event.summary || item.event.tool}`;
    render();
    page.refreshList();
  } catch (error) {
    if (note) note.textContent = error.message;
    node?.classList.add("bad");
  }
}

/** The form under an item: a "no" with its message, or "always" with the proposal to edit and its scope. */
function openForm(item, kind, scope = "session") {
  const node = nodeOf(item);
  if (!node) return;
  const holder = node.querySelector(".form");
  if (older.has(item.row.host)) {
    node.querySelector(".note").textContent = `${olderWhy(item.row.host)}: press y or n`;
    if (kind === "no") answer(item, { answer: "no" });
    return;
  }
  const close = () => { holder.replaceChildren(); node.focus?.(); };
  const form = answerForm(item.event, kind, scope, (choice) => { answer(item, choice); close(); }, close);
  holder.replaceChildren(form);
  form.querySelector(".text").focus();
}

// Elements that take keys of their own (typing, Enter to follow or to open): the inbox's keys are theirs there.
const ACTIVE = ["INPUT", "TEXTAREA", "SELECT", "BUTTON", "A", "SUMMARY"];

/** The inbox's keys, while nothing editable or active has the focus: j/k move, y yes, n no (with a message), a always in
 * this session, A always in this project (each rule editable first), Enter opens the session. Only j and k repeat
 * when held down. */
export function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
  const target = event.target;
  if (target && (ACTIVE.includes(target.tagName) || target.isContentEditable)) return;
  const all = items();
  if (!all.length) return;
  const index = Math.max(0, all.findIndex((item) => item.key === inbox.selected));
  const item = all[index];
  const move = { j: 1, k: -1 }[event.key];
  if (event.repeat && !move) return; // a key held down answers one approval, never the one that moves up under it
  if (move) {
    Object.assign(inbox, { selected: all[Math.min(all.length - 1, Math.max(0, index + move))].key, chosen: true });
    render();
    nodeOf(selectedItem())?.scrollIntoView?.({ block: "nearest" });
  } else if (event.key === "y") answer(item, { answer: "yes" });
  else if (event.key === "n") openForm(item, "no");
  else if (event.key === "a" || event.key === "A") openForm(item, "always", event.key === "A" ? "project" : "session");
  else if (event.key === "Enter") page.openSession(item.row.host, item.row.id);
  else return;
  event.preventDefault();
}

/** Listen for the inbox's keys, and keep its ages current. */
export function wireInbox() {
  document.addEventListener("keydown", onKey);
  clearInterval(inbox.timer);
  inbox.timer = setInterval(render, AGE_EVERY_MS);
}

export function tellWaiting(row) {
  const key = rowKey(row.host, row.id);
  if (inbox.told.has(key) || inFront()) return;
  inbox.told.add(key);
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  const note = new Notification("Chock: a session waits for your approval", {
    body: `${row.host}: ${row.message || row.id}`,
    tag: `chock-approval-${key}`,
  });
  note.onclick = () => {
    window.focus();
    page.openSession(row.host, row.id);
    note.close();
  };
  debug.notified.push(key);
}

/** Ask for permission to notify, once per browser (on a first click: never on load). */
export function askToNotifyOnce() {
  if (!("Notification" in window) || Notification.permission !== "default") return;
  if (localStorage.getItem("chock.notifications-asked")) return;
  localStorage.setItem("chock.notifications-asked", "1");
  Notification.requestPermission().catch(() => {});
}
