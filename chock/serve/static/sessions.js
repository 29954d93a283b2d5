// The session list — every host's sessions in one, newest first, with each one's host and a filter by host —
// polled for its live status; the project a session is started in and the host it is opened on; and which
// session is open, kept in the address bar so a reload keeps it.
import { api, paths } from "./api.js";
import { $, el } from "./dom.js";
import { filterRows, loadInstances, mergeRows, rowKey } from "./hosts.js";
import { noticeWaiting } from "./inbox.js";
import { SessionView, statusClass, statusText } from "./session.js";
import { page, state } from "./state.js";
import { steering } from "./steering.js";

const LIST_EVERY_MS = 3000; // the session list's live status
const RECENT_PROJECTS = 8;
const NO_VIEW = page.view;

export function recentProjects() {
  try { return JSON.parse(localStorage.getItem("chock.projects") || "[]"); } catch { return []; }
}

export function rememberProject(project) {
  localStorage.setItem("chock.project", project);
  const recent = [project, ...recentProjects().filter((p) => p !== project)].slice(0, RECENT_PROJECTS);
  localStorage.setItem("chock.projects", JSON.stringify(recent));
  showRecent();
}

export function showRecent() {
  $("recent-projects").replaceChildren(...recentProjects().map((p) => el("option", { value: p })));
}

/** Open `project` on `host` (the one chosen, else the first serve names): Start starts sessions there. */
export function setProject(project, { host = $("project-host").value, keepSession = false } = {}) {
  project = project.trim();
  if (!project) return;
  state.project = project;
  state.projectHost = host || state.hosts[0]?.name || "local";
  $("project").value = project;
  rememberProject(project);
  $("start-form").hidden = false;
  $("start-host").textContent = state.projectHost;
  loadInstances(state.projectHost);
  if (!keepSession) closeSession();
  writeHash();
  refreshList();
}

/** Poll the list from now on (every host's `sessions`). */
export function followList() {
  clearInterval(state.listTimer);
  state.listTimer = setInterval(refreshList, LIST_EVERY_MS);
  refreshList();
}

/** One host's rows, newest first: its `sessions`, or from an older host (no `sessions`) the opened project's. */
async function hostRows(host) {
  try {
    return (await api(paths.all(host))).sessions || [];
  } catch (error) {
    if (error.code !== "unknown-verb" || !state.project) throw error;
    return [...((await api(paths.sessions(host, state.project))).sessions || [])].reverse(); // list: oldest first
  }
}

export async function refreshList() {
  if (state.listInFlight) return;
  state.listInFlight = true;
  const note = $("sessions-note");
  const names = state.hosts.map((host) => host.name);
  try {
    const answers = await Promise.allSettled(names.map(hostRows));
    const failed = [];
    answers.forEach((answer, index) => {
      if (answer.status === "fulfilled") state.hostRows.set(names[index], answer.value);
      else failed.push(`${names[index]}: ${answer.reason.message}`);
    });
    // A host that does not answer keeps the rows it last sent; the note says why they are not live. Once the
    // trouble is over the note goes; a note of what was done stays.
    if (failed.length) {
      note.textContent = failed.join(" · ");
      note.className = "note bad";
    } else if (note.classList.contains("bad")) {
      note.textContent = "";
      note.className = "note";
    }
    renderList(mergeRows(names.filter((name) => state.hostRows.has(name)).map((name) => [name, state.hostRows.get(name)])));
  } finally {
    state.listInFlight = false;
  }
}

/** An ISO time in the reader's locale, or the text as it is when it is not one. */
export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

function isOpen(row) {
  return Boolean(state.session) && state.session.host === row.host && state.session.id === row.id;
}

/** `rows`: every host's, merged newest first (`mergeRows`); those of the filter's host are shown. */
export function renderList(rows) {
  state.rows = new Map(rows.map((row) => [rowKey(row.host, row.id), row]));
  const shown = filterRows(rows, state.hostFilter);
  $("sessions-empty").textContent = shown.length ? "" : "No sessions yet.";
  $("sessions-empty").hidden = shown.length > 0;
  $("sessions").replaceChildren(...shown.map((row) => {
    const button = el("button", { type: "button", "data-session": row.id, "data-host": row.host,
      "data-status": row.status || "", "data-end-reason": row.end_reason || "" },
      el("span", { class: "msg", text: row.message || "(no message)" }),
      el("span", { class: "sub" },
        el("span", { class: "host", text: row.host }),
        el("span", { class: statusClass(row), text: statusText(row) }),
        el("span", { text: when(row.started_at) }),
        el("span", { class: "mono", text: row.project || "" }),
        el("span", { class: "mono", text: row.id })));
    button.setAttribute("aria-current", String(isOpen(row)));
    button.addEventListener("click", () => openSession(row.host, row.id));
    return el("li", {}, button);
  }));
  const open = state.session && state.rows.get(rowKey(state.session.host, state.session.id));
  if (open) page.view.row(open);
  noticeWaiting(rows);
}

export async function startSession(event) {
  event.preventDefault();
  const message = $("message").value.trim();
  if (!message || !state.project) return;
  const host = state.projectHost;
  const instance = $("start-instance").value;
  const button = $("start-button");
  const status = $("start-status");
  button.disabled = true;
  status.className = "note";
  status.textContent = "Starting…";
  try {
    const body = instance ? { project: state.project, instance, message } : { project: state.project, message };
    const data = await api(paths.start(host, instance), { body });
    $("message").value = "";
    status.textContent = "";
    await refreshList();
    openSession(host, data.id, state.project);
  } catch (error) {
    status.textContent = error.message;
    status.className = "note bad";
  } finally {
    button.disabled = false;
  }
}

/** Open a session of `host`: its project is the list's row's (or `project`, for one the list has not shown). */
export function openSession(host, id, project) {
  const view = page.view;
  if (view.host === host && view.id === id && !view.closed) {
    if (view.finished) view.reopen(); // ended, or nothing newer: serve says so again at once
    return;
  }
  const row = state.rows.get(rowKey(host, id));
  project = row?.project || project || (host === state.projectHost ? state.project : "");
  view.close();
  state.session = { host, id, project };
  $("session-pane").hidden = false;
  $("main").classList.add("viewing");
  page.view = new SessionView(host, id, project);
  page.view.open();
  for (const button of document.querySelectorAll("#sessions button[data-session]")) {
    button.setAttribute("aria-current", String(button.dataset.session === id && button.dataset.host === host));
  }
  writeHash();
}

export function closeSession() {
  page.view.close();
  page.view = NO_VIEW;
  steering.reset();
  state.session = null;
  $("session-pane").hidden = true;
  $("main").classList.remove("viewing");
  for (const button of document.querySelectorAll("#sessions button[data-session]")) {
    button.setAttribute("aria-current", "false");
  }
  writeHash();
}

export function writeHash() {
  const params = new URLSearchParams();
  if (state.project) params.set("project", state.project);
  if (state.session) params.set("host", state.session.host);
  if (state.session) params.set("session", state.session.id);
  const hash = params.toString();
  if (location.hash.slice(1) !== hash) history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
}

export function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  return { project: params.get("project"), host: params.get("host"), session: params.get("session") };
}
