// Chock's page: the sessions of every host serve is a client of, and one session's events as they stream. The entry module index.html
// loads; the rest are ES modules by concern, with no build step (each tested under node, tests/node/):
//   api.js       serve's API: paths, the JSON call, its errors
//   state.js     what the modules share, and the entry points one calls in another (`page`)
//   hosts.js     the hosts and their states, the list's merge and filter by host, Start's instances
//   sessions.js  the session list over every host, the project opened on a host, which session is open
//   session.js   one session's view: the event stream, each event applied once and in order
//   timeline.js  what each event type shows (`RENDER`)
//   progress.js  what the open session does now and for how long, and how long it has run
//   markdown.js  assistant text as Markdown, built from DOM nodes: nothing a model wrote is parsed as HTML
//   diff.js      a file change, line by line
//   steering.js  Stop, Remove and the message box of the open session
//   inbox.js     every approval waiting, on every host: the inbox, its keys, the tab's title, notifications
//   answer.js    an approval's answer: yes, no with a message, always (a rule), and what an older host takes
//   dom.js       `$` and `el`
// Everything shown comes from serve's API, which is a mapping of the daemon's verbs (docs/architecture.md#serve).
import { api, paths } from "./api.js";
import { $ } from "./dom.js";
import { askToNotifyOnce, wireInbox } from "./inbox.js";
import { refreshHosts } from "./hosts.js";
import {
  closeSession, followList, openSession, readHash, refreshList, setProject, showRecent, startSession,
} from "./sessions.js";
import { debug, page, state } from "./state.js";
import { steering } from "./steering.js";

const HEALTH_EVERY_MS = 10000;
const HOSTS_EVERY_MS = 3000; // serve greets each host at most every few seconds, however often this asks

async function health() {
  const node = $("health");
  try {
    const data = await api(paths.health());
    node.textContent = `daemon ${data.daemon} · protocol ${data.protocol}`;
    node.className = "health ok";
  } catch (error) {
    node.textContent = error.message;
    node.className = "health bad";
  }
}

async function boot() {
  window.chock = debug;
  Object.assign(page, { refreshList, openSession, closeSession });
  $("project-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setProject($("project").value);
  });
  $("project-host").addEventListener("change", () => {
    if (state.project) setProject(state.project, { keepSession: true });
  });
  $("host-filter").addEventListener("change", () => {
    state.hostFilter = $("host-filter").value;
    refreshList();
  });
  $("start-form").addEventListener("submit", startSession);
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("start-form").requestSubmit();
  });
  $("back").addEventListener("click", closeSession);
  steering.wire();
  wireInbox();
  document.addEventListener("click", askToNotifyOnce, { once: true });
  showRecent();
  await refreshHosts();
  setInterval(refreshHosts, HOSTS_EVERY_MS);
  const wanted = readHash();
  const host = wanted.host || state.hosts[0]?.name || "local";
  const project = wanted.project || localStorage.getItem("chock.project") || "";
  if (project) setProject(project, { host, keepSession: Boolean(wanted.session) });
  followList();
  if (wanted.session) openSession(host, wanted.session, project);
  health();
  setInterval(health, HEALTH_EVERY_MS);
  setInterval(() => page.view.progress?.tick(), 1000); // the open session's times
}

boot();
