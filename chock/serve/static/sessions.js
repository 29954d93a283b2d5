// The project and its sessions: the list (polled for its live status), starting a session, and which session
// is open, kept in the address bar so a reload keeps it.
import { api, paths } from "./api.js";
import { $, el } from "./dom.js";
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

export function setProject(project, { keepSession = false } = {}) {
  project = project.trim();
  if (!project) return;
  if (project !== state.project) {
    state.rows.clear();
    $("sessions").replaceChildren();
  }
  state.project = project;
  $("project").value = project;
  rememberProject(project);
  $("start-form").hidden = false;
  $("sessions-empty").textContent = "Loading…";
  if (!keepSession) closeSession();
  writeHash();
  refreshList();
  clearInterval(state.listTimer);
  state.listTimer = setInterval(refreshList, LIST_EVERY_MS);
}

export async function refreshList() {
  if (!state.project || state.listInFlight) return;
  state.listInFlight = true;
  const project = state.project;
  const note = $("sessions-note");
  try {
    const data = await api(paths.sessions(project));
    if (project !== state.project) return;
    if (note.classList.contains("bad")) { // the trouble is over; a note of what was done stays
      note.textContent = "";
      note.className = "note";
    }
    renderList(data.sessions || []);
  } catch (error) {
    note.textContent = error.message;
    note.className = "note bad";
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

export function renderList(rows) {
  const list = $("sessions");
  const newest = [...rows].reverse(); // the daemon sends oldest first
  state.rows = new Map(newest.map((row) => [row.id, row]));
  $("sessions-empty").textContent = newest.length ? "" : "No sessions in this project yet.";
  $("sessions-empty").hidden = newest.length > 0;
  list.replaceChildren(...newest.map((row) => {
    const button = el("button", { type: "button", "data-session": row.id, "data-status": row.status || "",
      "data-end-reason": row.end_reason || "" },
      el("span", { class: "msg", text: row.message || "(no message)" }),
      el("span", { class: "sub" },
        el("span", { class: statusClass(row), text: statusText(row) }),
        el("span", { text: when(row.started_at) }),
        el("span", { class: "mono", text: row.id })));
    button.setAttribute("aria-current", String(row.id === state.sessionId));
    button.addEventListener("click", () => openSession(row.id));
    return el("li", {}, button);
  }));
  if (state.sessionId && state.rows.has(state.sessionId)) page.view.row(state.rows.get(state.sessionId));
  noticeWaiting(newest);
}

export async function startSession(event) {
  event.preventDefault();
  const message = $("message").value.trim();
  if (!message || !state.project) return;
  const button = $("start-button");
  const status = $("start-status");
  button.disabled = true;
  status.className = "note";
  status.textContent = "Starting…";
  try {
    const data = await api(paths.sessions(), { body: { project: state.project, message } });
    $("message").value = "";
    status.textContent = "";
    await refreshList();
    openSession(data.id);
  } catch (error) {
    status.textContent = error.message;
    status.className = "note bad";
  } finally {
    button.disabled = false;
  }
}

export function openSession(id) {
  const view = page.view;
  if (view.id === id && !view.closed) {
    if (view.finished) view.reopen(); // ended, or nothing newer: serve says so again at once
    return;
  }
  view.close();
  state.sessionId = id;
  $("session-pane").hidden = false;
  $("main").classList.add("viewing");
  page.view = new SessionView(id);
  page.view.open();
  for (const button of document.querySelectorAll("#sessions button[data-session]")) {
    button.setAttribute("aria-current", String(button.dataset.session === id));
  }
  writeHash();
}

export function closeSession() {
  page.view.close();
  page.view = NO_VIEW;
  steering.reset();
  state.sessionId = null;
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
  if (state.sessionId) params.set("session", state.sessionId);
  const hash = params.toString();
  if (location.hash.slice(1) !== hash) history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
}

export function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  return { project: params.get("project"), session: params.get("session") };
}

