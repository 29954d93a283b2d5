// Sessions waiting for an approval: their count in the tab's title, and a notification for each one that
// starts waiting while the page is not in front. Permission is asked once, after a click, never on load.
import { rowKey } from "./hosts.js";
import { debug, page } from "./state.js";

const waiting = { told: new Set() };

/** Whether the person sees the page now: visible, and the window focused. */
export function inFront() {
  return document.visibilityState === "visible" && document.hasFocus();
}

/** The list's rows, every host's: the waiting ones counted in the title, each told of once while it waits. */
export function noticeWaiting(rows) {
  const now = rows.filter((row) => row.status === "waiting");
  const ids = new Set(now.map((row) => rowKey(row.host, row.id)));
  for (const id of waiting.told) if (!ids.has(id)) waiting.told.delete(id); // it may wait again later
  document.title = now.length ? `(${now.length} waiting) Chock` : "Chock";
  for (const row of now) tellWaiting(row);
}

export function tellWaiting(row) {
  const key = rowKey(row.host, row.id);
  if (waiting.told.has(key) || inFront()) return;
  waiting.told.add(key);
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
