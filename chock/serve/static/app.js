// Chock's page: a project's sessions, and one session's events as they stream.
//
// Everything shown comes from serve's API, which is a mapping of the daemon's verbs (SPEC §8). A session
// is watched with EventSource on /api/sessions/<id>/watch: the browser reconnects by itself (after the
// network or serve goes away) and sends Last-Event-ID, and serve resumes right after it. This page also
// drops any event whose id it has already applied, so an event is shown exactly once whatever happens to
// the connection; a gap (which serve never leaves) makes it reconnect from the last id it has.
"use strict";

(() => {
  const LIST_EVERY_MS = 3000;   // the session list's live status
  const HEALTH_EVERY_MS = 10000;
  const REOPEN_MIN_MS = 1000;   // after a refused watch (serve up, daemon not): back off up to REOPEN_MAX_MS
  const REOPEN_MAX_MS = 15000;
  const RECENT_PROJECTS = 8;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  };

  // What tests (and a curious person at the console) can read: every event id applied, in order.
  const debug = { seen: [], reconnects: 0 };
  window.chock = debug;

  const state = {
    project: "",
    sessionId: null,
    rows: new Map(),
    listTimer: null,
    listInFlight: false,
  };

  // ---------------------------------------------------------------------------------------------------
  // API

  async function api(path, options = {}) {
    const init = { ...options, headers: { Accept: "application/json", ...(options.headers || {}) } };
    if (options.body !== undefined) {
      init.method = init.method || "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (!response.ok) {
      const message = (data && data.message) || text.trim() || `${response.status} ${response.statusText}`;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  const q = encodeURIComponent;

  // ---------------------------------------------------------------------------------------------------
  // Health

  async function health() {
    const node = $("health");
    try {
      const data = await api("/api/health");
      node.textContent = `daemon ${data.daemon} · protocol ${data.protocol}`;
      node.className = "health ok";
    } catch (error) {
      node.textContent = error.message;
      node.className = "health bad";
    }
  }

  // ---------------------------------------------------------------------------------------------------
  // The project and its sessions

  function recentProjects() {
    try { return JSON.parse(localStorage.getItem("chock.projects") || "[]"); } catch { return []; }
  }

  function rememberProject(project) {
    localStorage.setItem("chock.project", project);
    const recent = [project, ...recentProjects().filter((p) => p !== project)].slice(0, RECENT_PROJECTS);
    localStorage.setItem("chock.projects", JSON.stringify(recent));
    showRecent();
  }

  function showRecent() {
    $("recent-projects").replaceChildren(...recentProjects().map((p) => el("option", { value: p })));
  }

  function setProject(project, { keepSession = false } = {}) {
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

  async function refreshList() {
    if (!state.project || state.listInFlight) return;
    state.listInFlight = true;
    const project = state.project;
    const note = $("sessions-note");
    try {
      const data = await api(`/api/sessions?project=${q(project)}`);
      if (project !== state.project) return;
      note.textContent = "";
      note.className = "note";
      renderList(data.sessions || []);
    } catch (error) {
      note.textContent = error.message;
      note.className = "note bad";
    } finally {
      state.listInFlight = false;
    }
  }

  function statusClass(row) {
    const failed = row.status === "ended" && row.end_reason && row.end_reason !== "completed";
    return `badge ${row.status || ""}${failed ? " failed" : ""}`;
  }

  function statusText(row) {
    if (row.status === "waiting") return `waiting${row.pending_approvals ? ` (${row.pending_approvals})` : ""}`;
    if (row.status === "ended" && row.end_reason && row.end_reason !== "completed") return row.end_reason;
    return row.status || "unknown";
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
  }

  function renderList(rows) {
    const list = $("sessions");
    const newest = [...rows].reverse(); // the daemon sends oldest first
    state.rows = new Map(newest.map((row) => [row.id, row]));
    $("sessions-empty").textContent = newest.length ? "" : "No sessions in this project yet.";
    $("sessions-empty").hidden = newest.length > 0;
    list.replaceChildren(...newest.map((row) => {
      const button = el("button", { type: "button", "data-session": row.id },
        el("span", { class: "msg", text: row.message || "(no message)" }),
        el("span", { class: "sub" },
          el("span", { class: statusClass(row), text: statusText(row) }),
          el("span", { text: when(row.started_at) }),
          el("span", { class: "mono", text: row.id })));
      button.setAttribute("aria-current", String(row.id === state.sessionId));
      button.addEventListener("click", () => openSession(row.id));
      return el("li", {}, button);
    }));
    if (state.sessionId && state.rows.has(state.sessionId)) view.row(state.rows.get(state.sessionId));
  }

  async function startSession(event) {
    event.preventDefault();
    const message = $("message").value.trim();
    if (!message || !state.project) return;
    const button = $("start-button");
    const status = $("start-status");
    button.disabled = true;
    status.className = "note";
    status.textContent = "Starting…";
    try {
      const data = await api("/api/sessions", { body: { project: state.project, message } });
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

  // ---------------------------------------------------------------------------------------------------
  // One session: its timeline, built from events in id order

  class SessionView {
    constructor(id) {
      this.id = id;
      this.lastId = 0;
      this.tools = new Map();      // call_id -> {details, output, state}
      this.approvals = new Map();  // request_id -> card
      this.streaming = null;       // the assistant block that deltas go into
      this.usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, cost: null };
      this.ended = false;
      this.source = null;
      this.reopenDelay = REOPEN_MIN_MS;
      this.reopenTimer = null;
      this.timeline = $("timeline");
      this.timeline.replaceChildren();
      $("session-id").textContent = id;
      $("session-task").textContent = state.rows.get(id)?.message || "";
      $("session-usage").textContent = "";
      $("plan").hidden = true;
      $("plan-steps").replaceChildren();
      if (state.rows.has(id)) this.row(state.rows.get(id));
    }

    row(row) {
      // A session that went on after this page was told it ended (`chock run --continue`): follow it again.
      if (this.finished && Number(row.last_event_id) > this.lastId) {
        this.finished = false;
        this.reopen();
      }
      const badge = $("session-status");
      badge.className = statusClass(row);
      badge.textContent = statusText(row);
      if (row.message && !$("session-task").textContent) $("session-task").textContent = row.message;
    }

    streamState(text, bad = false) {
      const node = $("stream-state");
      node.textContent = text;
      node.className = `stream-state${bad ? " bad" : ""}`;
    }

    // The stream ------------------------------------------------------------------------------------

    open() {
      if (this.closed) return;
      const url = `/api/sessions/${q(this.id)}/watch?project=${q(state.project)}&after=${this.lastId}`;
      const source = new EventSource(url);
      this.source = source;
      this.streamState("connecting…");
      source.onopen = () => {
        this.reopenDelay = REOPEN_MIN_MS;
        this.streamState(this.ended ? "" : "live");
      };
      source.addEventListener("row", (message) => {
        // The row as of when serve's upstream watch began; the list's own poll is fresher where there is one.
        if (state.rows.has(this.id)) return;
        try { this.row(JSON.parse(message.data)); } catch { /* a row we cannot read changes nothing */ }
      });
      source.onmessage = (message) => {
        let event;
        try { event = JSON.parse(message.data); } catch { return; }
        this.take(event);
      };
      source.addEventListener("end", () => {
        source.close();
        this.finished = true;
        this.streamState("");
        refreshList();
      });
      source.onerror = () => {
        if (source !== this.source) return;
        if (source.readyState === EventSource.CLOSED) {
          // Refused outright (serve answered, but not with a stream): try again, more slowly each time.
          debug.reconnects += 1;
          this.streamState("reconnecting…", true);
          this.reopenTimer = setTimeout(() => this.open(), this.reopenDelay);
          this.reopenDelay = Math.min(this.reopenDelay * 2, REOPEN_MAX_MS);
        } else {
          debug.reconnects += 1;
          this.streamState("reconnecting…", true); // the browser retries by itself, with Last-Event-ID
        }
      };
    }

    reopen() {
      if (this.source) this.source.close();
      clearTimeout(this.reopenTimer);
      this.open();
    }

    close() {
      this.closed = true;
      clearTimeout(this.reopenTimer);
      if (this.source) this.source.close();
      this.source = null;
    }

    take(event) {
      const id = Number(event.id);
      if (!Number.isInteger(id) || id <= this.lastId) return; // already shown: never twice
      if (id !== this.lastId + 1) {
        // A hole: ask again from the last event this page has rather than show events out of order.
        this.reopen();
        return;
      }
      this.lastId = id;
      debug.seen.push(id);
      const render = RENDER[event.type];
      if (render) render.call(this, event);
      else this.info(event, event.type);
    }

    // Building blocks ------------------------------------------------------------------------------

    add(node, event) {
      node.setAttribute("data-event-id", String(event.id));
      node.setAttribute("data-type", event.type);
      const item = node.tagName === "LI" ? node : el("li", {}, node);
      this.timeline.append(item);
      if (nearBottom()) node.scrollIntoView({ block: "end" });
      return node;
    }

    info(event, text) {
      return this.add(el("div", { class: "info", text }), event);
    }

    endStreaming() {
      if (this.streaming) this.streaming.classList.remove("streaming");
      this.streaming = null;
    }
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 160;
  }

  function brief(args) {
    if (!args || typeof args !== "object") return "";
    for (const key of ["command", "path", "pattern", "task", "query"]) {
      if (typeof args[key] === "string") return args[key].split("\n")[0];
    }
    const text = JSON.stringify(args);
    return text.length > 80 ? `${text.slice(0, 80)}…` : text;
  }

  function pretty(value) {
    if (typeof value === "string") return value;
    try { return JSON.stringify(value, null, 2); } catch { return String(value); }
  }

  const RENDER = {
    "session.start"(e) {
      if (e.message) $("session-task").textContent = e.message;
      const parts = ["started", e.instance && `instance ${e.instance}`, e.model && `model ${e.model}`,
        e.owner && `by ${e.owner}`, e.approve_all && "approving everything"].filter(Boolean);
      this.ended = false;
      this.info(e, parts.join(" · "));
    },
    "session.adopt"(e) {
      this.ended = false;
      this.info(e, `taken over by the ${e.via || "daemon"}${e.pid ? ` (pid ${e.pid})` : ""}`);
    },
    "workspace.open"(e) {
      this.info(e, `workspace ${e.directory || ""}${e.commit ? ` at ${String(e.commit).slice(0, 10)}` : ""}`);
    },
    "workspace.close"(e) {
      this.info(e, `changes committed to ${e.branch || "its branch"}${e.commit ? ` (${String(e.commit).slice(0, 10)})` : ""}`);
    },
    "user.message"(e) {
      this.endStreaming();
      this.add(el("div", { class: "item user" }, el("div", { class: "who", text: "Task" }),
        el("p", { class: "text", text: e.text || "" })), e);
    },
    "assistant.delta"(e) {
      if (!this.streaming) {
        this.streaming = this.add(el("div", { class: "item assistant streaming" },
          el("div", { class: "who", text: "Chock" }), el("p", { class: "text" })), e);
      }
      this.streaming.querySelector(".text").textContent += e.text || "";
    },
    "assistant.message"(e) {
      const text = e.text || "";
      if (this.streaming) {
        this.streaming.querySelector(".text").textContent = text; // the final text replaces the deltas
        this.streaming.setAttribute("data-final-event-id", String(e.id));
        if (!text) this.streaming.parentElement.remove();
        this.endStreaming();
      } else if (text) {
        this.add(el("div", { class: "item assistant" }, el("div", { class: "who", text: "Chock" }),
          el("p", { class: "text", text })), e);
      }
    },
    "tool.call"(e) {
      this.endStreaming();
      const stateNode = el("span", { class: "state", text: "running…" });
      const output = el("pre", { class: "output", text: "" });
      const outputBlock = el("div", { hidden: true }, el("div", { class: "label", text: "Output" }), output);
      const details = el("details", { class: "tool" },
        el("summary", {}, el("span", { class: "name", text: e.name || "tool" }),
          el("span", { class: "brief", text: brief(e.args) }), stateNode),
        el("div", { class: "body" }, el("div", { class: "label", text: "Arguments" }),
          el("pre", { class: "args", text: pretty(e.args || {}) }), outputBlock));
      details.setAttribute("data-call-id", e.call_id || "");
      this.tools.set(e.call_id, { details, output, outputBlock, stateNode });
      this.add(details, e);
    },
    "tool.result"(e) {
      const tool = this.tools.get(e.call_id);
      let text = typeof e.output === "string" ? e.output : pretty(e.output);
      if (e.truncated) text += `\n… cut (${e.bytes || "?"} bytes in all)`;
      if (!tool) {
        this.add(el("details", { class: "tool" }, el("summary", {}, el("span", { class: "name", text: "result" })),
          el("div", { class: "body" }, el("pre", { class: "output", text }))), e);
        return;
      }
      tool.output.textContent = text || "(no output)";
      tool.outputBlock.hidden = false;
      tool.stateNode.textContent = e.is_error ? "failed" : "done";
      tool.details.classList.toggle("error", Boolean(e.is_error));
      tool.details.setAttribute("data-result-event-id", String(e.id));
    },
    "approval.request"(e) {
      this.endStreaming();
      const approve = el("button", { type: "button", class: "approve", text: "Approve" });
      const deny = el("button", { type: "button", class: "deny", text: "Deny" });
      const note = el("span", { class: "note" });
      const card = el("div", { class: "item approval" },
        el("div", { class: "who", text: `Approval needed · ${e.tool || "tool"}` }),
        el("p", { class: "summary", text: e.summary || "" }),
        el("div", { class: "row buttons" }, approve, deny, note));
      card.setAttribute("data-request-id", e.request_id || "");
      card.setAttribute("data-tool", e.tool || "tool");
      const send = async (answer) => {
        approve.disabled = deny.disabled = true;
        note.className = "note";
        note.textContent = "sending…";
        try {
          await api(`/api/sessions/${q(this.id)}/answer`, {
            body: { project: state.project, request_id: e.request_id, answer },
          });
          note.textContent = answer === "yes" ? "approved" : "denied";
        } catch (error) {
          note.textContent = error.message;
          note.className = "note bad";
          if (!card.classList.contains("done")) approve.disabled = deny.disabled = false;
        }
      };
      approve.addEventListener("click", () => send("yes"));
      deny.addEventListener("click", () => send("no"));
      this.approvals.set(e.request_id, card);
      this.add(card, e);
    },
    "approval.answer"(e) {
      const card = this.approvals.get(e.request_id);
      const words = `${e.answer === "yes" ? "Approved" : "Denied"}${e.via ? ` (${e.via})` : ""}`;
      if (!card) {
        this.info(e, words);
        return;
      }
      card.classList.add("done");
      card.querySelector(".who").textContent = `Approval · ${card.dataset.tool || "tool"}`;
      const buttons = card.querySelector(".buttons");
      buttons.replaceChildren(el("span", { class: "answered", text: words }));
      card.setAttribute("data-answer", e.answer || "");
    },
    "usage"(e) {
      const usage = this.usage;
      usage.input += Number(e.input_tokens) || 0;
      usage.output += Number(e.output_tokens) || 0;
      usage.cacheRead += Number(e.cache_read_tokens) || 0;
      usage.cacheWrite += Number(e.cache_write_tokens) || 0;
      if (typeof e.cost === "number") usage.cost = (usage.cost || 0) + e.cost;
      const cached = usage.cacheRead || usage.cacheWrite
        ? ` (${usage.cacheRead.toLocaleString()} cache read, ${usage.cacheWrite.toLocaleString()} written)` : "";
      const cost = usage.cost === null ? "" : ` · cost ${usage.cost.toFixed(4)}`;
      $("session-usage").textContent =
        `${usage.input.toLocaleString()} in${cached} · ${usage.output.toLocaleString()} out tokens${cost}`;
    },
    "plan"(e) {
      const steps = Array.isArray(e.steps) ? e.steps.filter((step) => step && typeof step === "object") : [];
      const words = { done: "done", in_progress: "in progress", pending: "pending" };
      $("plan-steps").replaceChildren(...steps.map((step) => {
        const status = Object.hasOwn(words, step.status) ? step.status : "pending";
        const item = el("li", { class: status, text: String(step.step || "") });
        item.setAttribute("title", words[status]);
        item.setAttribute("data-status", status);
        return item;
      }));
      const panel = $("plan");
      panel.hidden = steps.length === 0;
      panel.setAttribute("data-event-id", String(e.id));
    },
    "provider.retry"(e) {
      const words = { 408: "timed out", 409: "conflict", 429: "rate limited", 529: "overloaded" };
      const status = e.status == null ? null : Number(e.status);
      const what = status === null ? "no connection"
        : words[status] || (status >= 500 ? "the provider failed" : `HTTP ${status}`);
      const wait = typeof e.wait_seconds === "number" ? `${Number(e.wait_seconds.toPrecision(3))} s` : "a moment";
      this.info(e, `${what}, retrying in ${wait}`);
    },
    "compaction"(e) {
      const size = (value) => (typeof value === "number" ? value.toLocaleString() : "?");
      this.info(e, `compacted the conversation (about ${size(e.tokens)} tokens of a ${size(e.window)}-token window)`);
    },
    "turn.end"() {
      this.endStreaming();
    },
    "background.start"(e) {
      this.info(e, `background ${e.kind || ""} ${e.handle || ""} started: ${e.command || ""}`);
    },
    "background.end"(e) {
      this.info(e, `background ${e.handle || ""} ended${e.exit_code != null ? ` (exit ${e.exit_code})` : ""}`);
    },
    "subagent.start"(e) {
      this.info(e, `subagent ${e.handle || ""} started: ${e.task || ""}`);
    },
    "subagent.end"(e) {
      this.add(el("details", { class: "tool" },
        el("summary", {}, el("span", { class: "name", text: "subagent" }),
          el("span", { class: "brief", text: e.handle || "" }), el("span", { class: "state", text: "done" })),
        el("div", { class: "body" }, el("pre", { class: "output", text: e.result || "" }))), e);
    },
    "session.end"(e) {
      this.endStreaming();
      const reason = e.reason || "ended";
      const failed = reason !== "completed" && reason !== "handover";
      const words = {
        completed: "Completed", error: "Failed", handover: "Handed over", interrupted: "Interrupted",
      }[reason] || reason;
      this.ended = reason !== "handover";
      this.add(el("div", { class: `item end${failed ? " failed" : ""}` },
        el("div", { class: "who", text: "End" }),
        el("p", { class: "text", text: `${words}${e.exit_code != null ? ` · exit ${e.exit_code}` : ""}${e.error ? `\n${e.error}` : ""}` })), e);
    },
  };

  // ---------------------------------------------------------------------------------------------------
  // Which session is open, in the address bar so a reload keeps it

  let view = { row() {}, close() {} };

  function openSession(id) {
    if (view.id === id && !view.closed) {
      if (view.finished) view.reopen(); // ended, or nothing newer: serve says so again at once
      return;
    }
    view.close();
    state.sessionId = id;
    $("session-pane").hidden = false;
    $("main").classList.add("viewing");
    view = new SessionView(id);
    view.open();
    for (const button of document.querySelectorAll("#sessions button[data-session]")) {
      button.setAttribute("aria-current", String(button.dataset.session === id));
    }
    writeHash();
  }

  function closeSession() {
    view.close();
    view = { row() {}, close() {} };
    state.sessionId = null;
    $("session-pane").hidden = true;
    $("main").classList.remove("viewing");
    for (const button of document.querySelectorAll("#sessions button[data-session]")) {
      button.setAttribute("aria-current", "false");
    }
    writeHash();
  }

  function writeHash() {
    const params = new URLSearchParams();
    if (state.project) params.set("project", state.project);
    if (state.sessionId) params.set("session", state.sessionId);
    const hash = params.toString();
    if (location.hash.slice(1) !== hash) history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
  }

  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    return { project: params.get("project"), session: params.get("session") };
  }

  // ---------------------------------------------------------------------------------------------------

  function boot() {
    $("project-form").addEventListener("submit", (event) => {
      event.preventDefault();
      setProject($("project").value);
    });
    $("start-form").addEventListener("submit", startSession);
    $("message").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("start-form").requestSubmit();
    });
    $("back").addEventListener("click", closeSession);
    showRecent();
    const wanted = readHash();
    const project = wanted.project || localStorage.getItem("chock.project") || "";
    if (project) {
      setProject(project, { keepSession: Boolean(wanted.session) });
      if (wanted.session) openSession(wanted.session);
    }
    health();
    setInterval(health, HEALTH_EVERY_MS);
  }

  boot();
})();
