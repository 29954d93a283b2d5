// Chock's page: a project's sessions, and one session's events as they stream.
//
// Everything shown comes from serve's API, which is a mapping of the daemon's verbs. A session
// is watched with EventSource on /api/sessions/<id>/watch: the browser reconnects by itself (after the
// network or serve goes away) and sends Last-Event-ID, and serve resumes right after it. This page also
// drops any event whose id it has already applied, so an event is shown exactly once whatever happens to
// the connection; a gap (which serve never leaves) makes it reconnect from the last id it has. An event of
// a type this page does not know is skipped, and one it cannot read shows nothing: the page goes on
// (docs/log.md, "Reading rules").
//
// What a model wrote is shown as text, never parsed as HTML: the page builds every node itself.
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
  const debug = { seen: [], reconnects: 0, notified: [] };
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

  function statusClass(row) {
    const failed = row.status === "ended" && row.end_reason && row.end_reason !== "completed";
    return `badge ${row.status || ""}${failed ? " failed" : ""}`;
  }

  // `full`: the session's own view, which names the command that takes a free session back.
  function statusText(row, full = false) {
    if (row.status === "abandoned" && row.free) {
      const what = `interrupted by ${row.interrupted_by || "a crash"}`;
      return full ? `${what} — chock run --continue ${row.id}` : what;
    }
    if (row.status === "waiting") return `waiting${row.pending_approvals ? ` (${row.pending_approvals})` : ""}`;
    if (row.status === "ended" && row.end_reason) return `ended · ${row.end_reason}`;
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
    if (state.sessionId && state.rows.has(state.sessionId)) view.row(state.rows.get(state.sessionId));
    noticeWaiting(newest);
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
      this.messages = 0;           // user.message events so far: the first is the task
      this.status = "";            // running, waiting, ended, … as the row or the latest events say
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
      steering.reset();
      if (state.rows.has(id)) this.row(state.rows.get(id));
    }

    row(row) {
      // A session that went on after this page was told it ended (`chock run --continue`): follow it again.
      if (Number(row.last_event_id) > this.lastId) this.follow();
      const badge = $("session-status");
      badge.className = statusClass(row);
      badge.textContent = statusText(row, true);
      if (row.message && !$("session-task").textContent) $("session-task").textContent = row.message;
      // A row older than the events shown says less than they do.
      if (Number(row.last_event_id) >= this.lastId) this.setStatus(row.status);
    }

    setStatus(status) {
      this.status = status || "";
      steering.show(this.status);
    }

    follow() {
      if (!this.finished) return;
      this.finished = false;
      this.reopen();
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
      if (!render) return; // a type this page does not know: nothing to show
      try {
        render.call(this, event);
      } catch (error) {
        console.warn(`event ${id} (${event.type}) could not be shown:`, error); // the next one may be
      }
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

  // ---------------------------------------------------------------------------------------------------
  // A tool call's duration, from its tool.call and tool.result events' `at`

  function duration(startAt, endAt) {
    const ms = Date.parse(endAt) - Date.parse(startAt);
    return Number.isFinite(ms) && ms >= 0 ? ms : null;
  }

  function durationText(ms) {
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }

  // ---------------------------------------------------------------------------------------------------
  // A change to a file (the `diff` of write_file's and edit_file's tool.result), one node per line

  function diffLineKind(line) {
    if (line.startsWith("+++ ") || line.startsWith("--- ")) return "file";
    if (line.startsWith("@@")) return "hunk";
    if (line.startsWith("+")) return "add";
    if (line.startsWith("-")) return "del";
    if (line.startsWith(" ")) return "same";
    return "note"; // "\ No newline at end of file", a cut, a change too big to compare
  }

  function showDiff(tool, diff) {
    const lines = diff.replace(/\n$/, "").split("\n");
    const kinds = lines.map(diffLineKind);
    const count = (kind) => kinds.filter((k) => k === kind).length;
    const block = el("pre", { class: "diff" },
      ...lines.map((line, n) => el("span", { class: `line ${kinds[n]}`, text: line || " " })));
    tool.outputBlock.after(el("div", { class: "changes" }, el("div", { class: "label", text: "Changes" }), block));
    tool.stateNode.before(el("span", { class: "diffstat" },
      el("span", { class: "add", text: `+${count("add")}` }), el("span", { class: "del", text: ` −${count("del")}` })));
    tool.details.setAttribute("data-diff", "");
  }

  // ---------------------------------------------------------------------------------------------------
  // Assistant text as Markdown, built from DOM nodes with text in them: no HTML a model wrote is ever parsed,
  // so `<img onerror=…>` is shown as the text it is. A link is made only for http, https and mailto, and
  // opens apart from this page (noopener noreferrer); an image is shown as a link to it and never fetched,
  // so a prompt-injected agent cannot make the browser send what it read to an address of its choosing.

  const LINK_SCHEMES = new Set(["http:", "https:", "mailto:"]);
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+/; // the text after it, less a closing run of #s (`heading`)
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?/;
  const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;

  function markdown(text) {
    const root = document.createDocumentFragment();
    blocks(String(text).replace(/\r\n?/g, "\n").split("\n"), root);
    return root;
  }

  // A heading's text: what follows its #s, less trailing space and a closing run of #s after a space.
  function heading(rest) {
    const text = rest.trimEnd();
    let j = text.length;
    while (j > 0 && text[j - 1] === "#") j -= 1;
    return j < text.length && j > 0 && SPACE.test(text[j - 1]) ? text.slice(0, j).trimEnd() : text;
  }

  function indentOf(line) {
    return line.length - line.trimStart().length;
  }

  function nextFilled(lines, i) {
    while (i < lines.length && !lines[i].trim()) i += 1;
    return i;
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
  }

  function blocks(lines, parent, depth = 0) {
    if (depth > MAX_NESTING) { // quotes in lists in quotes…: past this depth, the rest is its text
      parent.append(el("p", { text: lines.join("\n") }));
      return;
    }
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) {
        i += 1;
      } else if ((m = FENCE.exec(line))) {
        const fence = m[1];
        const body = [];
        for (i += 1; i < lines.length; i += 1) {
          const closing = lines[i].trim();
          if (closing.length >= fence.length && closing === fence[0].repeat(closing.length)) break;
          body.push(lines[i]);
        }
        i += 1;
        const code = el("code", { text: body.join("\n") });
        if (m[2]) code.setAttribute("data-lang", m[2]);
        parent.append(el("pre", { class: "code" }, code));
      } else if ((m = HEADING.exec(line))) {
        parent.append(inline(heading(line.slice(m[0].length)), el(`h${Math.min(m[1].length + 2, 6)}`)));
        i += 1;
      } else if (RULE.test(line)) {
        parent.append(el("hr"));
        i += 1;
      } else if (QUOTE.test(line)) {
        const body = [];
        for (; i < lines.length && QUOTE.test(lines[i]); i += 1) body.push(lines[i].replace(QUOTE, ""));
        const quote = el("blockquote");
        blocks(body, quote, depth + 1);
        parent.append(quote);
      } else if (ITEM.test(line)) {
        i = list(lines, i, parent, depth);
      } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])
          && cells(lines[i + 1]).length === cells(line).length) {
        i = table(lines, i, parent);
      } else {
        const body = [];
        for (; i < lines.length && lines[i].trim() && (!body.length || !startsBlock(lines[i])); i += 1) {
          body.push(lines[i].trim());
        }
        parent.append(inline(body.join("\n"), el("p")));
      }
    }
  }

  function list(lines, i, parent, depth) {
    const first = ITEM.exec(lines[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
    const sibling = (line) => {
      const m = ITEM.exec(line);
      return m && m[1].length === indent && /\d/.test(m[2]) === ordered;
    };
    while (i < lines.length && sibling(lines[i])) {
      const width = ITEM.exec(lines[i])[0].length;
      const body = [lines[i].slice(width)];
      for (i += 1; i < lines.length; i += 1) {
        const line = lines[i];
        if (!line.trim()) {
          const next = nextFilled(lines, i);
          if (next < lines.length && indentOf(lines[next]) >= width) body.push(""); // the item goes on below
          else break;
        } else if (indentOf(line) >= width) {
          body.push(line.slice(width));
        } else if (!startsBlock(line) && body[body.length - 1].trim()) {
          body.push(line.trim()); // a lazy continuation of its paragraph
        } else {
          break;
        }
      }
      const item = el("li");
      blocks(body, item, depth + 1);
      node.append(item);
      const next = nextFilled(lines, i);
      if (next < lines.length && sibling(lines[next])) i = next; // a loose list goes on after blank lines
    }
    parent.append(node);
    return i;
  }

  function cells(line) {
    let text = line.trim();
    if (text.startsWith("|")) text = text.slice(1);
    if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
    return text.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
  }

  function table(lines, i, parent) {
    const head = cells(lines[i]);
    const aligns = cells(lines[i + 1]).map((rule) =>
      rule.startsWith(":") && rule.endsWith(":") ? "center" : rule.endsWith(":") ? "right" : "");
    const cell = (tag, text, n) => inline(text, el(tag, aligns[n] ? { class: `align-${aligns[n]}` } : {}));
    const body = el("tbody");
    for (i += 2; i < lines.length && lines[i].trim() && lines[i].includes("|"); i += 1) {
      const row = cells(lines[i]);
      body.append(el("tr", {}, ...head.map((_, n) => cell("td", row[n] || "", n))));
    }
    parent.append(el("div", { class: "table" },
      el("table", {}, el("thead", {}, el("tr", {}, ...head.map((text, n) => cell("th", text, n)))), body)));
    return i;
  }

  function safeHref(raw) {
    let url;
    try { url = new URL(raw); } catch { return null; } // a relative address leads nowhere outside the text
    return LINK_SCHEMES.has(url.protocol) ? url.href : null;
  }

  function link(raw, children, kind = "") {
    const href = safeHref(raw);
    if (!href) return el("span", { class: `not-a-link ${kind}`.trim(), title: raw }, ...children);
    return el("a", { href, rel: "noopener noreferrer", target: "_blank", referrerPolicy: "no-referrer",
      class: kind }, ...children);
  }

  // What follows `](`: the address, an optional title, and `)`. Anchored where it starts, and every part stops at
  // a character the part before cannot hold, so a try costs the length of what it reads.
  const URL_TEXT = new RegExp(String.raw`\s*<?([^\s<>()]*(?:\([^\s<>()]*\)[^\s<>()]*)*)>?(?:\s+(?:"[^"\n]*"|'[^'\n]*'))?\s*\)`, "y");
  const AUTOLINK = /<((?:https?:\/\/|mailto:)[^\s<>]+)>/iy;
  const BARE_URL = /(?:https?:\/\/|mailto:)[^\s<>]*[^\s<>.,;:!?'")\]*_~]/iy;
  const WORD = /[\p{L}\p{N}]/u;
  const SPACE = /\s/;
  // Emphasis inside emphasis inside a link…: past this depth the rest is shown as the text it is.
  const MAX_NESTING = 16;

  // The inline scanner is linear in its text: no pattern runs on from a position to look for its closing
  // delimiter. Each kind of closer is found through a table of "the next valid one at or after j", built once per
  // text from its end in one pass (`Closers`), so a try at each position costs the same whatever follows.
  class Closers {
    constructor(text) {
      this.text = text;
      this.tables = new Map();
    }

    // The first j >= from where `valid(j)` holds, or -1; `name` names `valid` for the table.
    next(name, valid, from) {
      let table = this.tables.get(name);
      if (!table) {
        const n = this.text.length;
        table = new Int32Array(n + 1);
        table[n] = -1;
        for (let j = n - 1; j >= 0; j -= 1) table[j] = valid(j) ? j : table[j + 1];
        this.tables.set(name, table);
      }
      return from > this.text.length ? -1 : table[from];
    }

    newline(from) {
      const found = this.next("\n", (j) => this.text[j] === "\n", from);
      return found < 0 ? this.text.length : found;
    }

    // Code spans: the runs of backticks by length, each list in order, read by a cursor that only moves on.
    run(length, from) {
      if (!this.runs) {
        this.runs = new Map();
        const t = this.text;
        for (let j = 0; j < t.length;) {
          if (t[j] !== "`") { j += 1; continue; }
          let end = j;
          while (t[end] === "`") end += 1;
          if (!this.runs.has(end - j)) this.runs.set(end - j, { starts: [], at: 0 });
          this.runs.get(end - j).starts.push(j);
          j = end;
        }
      }
      const runs = this.runs.get(length);
      if (!runs) return -1;
      while (runs.at < runs.starts.length && runs.starts[runs.at] < from) runs.at += 1;
      return runs.at < runs.starts.length ? runs.starts[runs.at] : -1;
    }
  }

  const notSpace = (c) => c !== undefined && !SPACE.test(c);
  const wordAt = (t, j) => j >= 0 && j < t.length && WORD.test(String.fromCodePoint(t.codePointAt(j)));

  // A delimited span on one line: `open` at i, content that starts with a character `first` accepts, and
  // the first closer after it (`close` at p, where `closes(p)` holds). Returns [content, end] or null.
  function delimited(c, i, open, first, closes, name) {
    const t = c.text;
    const start = i + open.length;
    if (!t.startsWith(open, i) || !first(t[start])) return null;
    const p = c.next(name, (j) => t.startsWith(open, j) && closes(j), start + 1);
    if (p < 0 || p >= c.newline(start)) return null;
    return [t.slice(start, p), p + open.length];
  }

  // The end of a link's text from just after its `[`: one level of [brackets] inside, no line break; -1 for none.
  // From a `[` the walk goes to the next `[` or `]`, and past a `[…]` pair to what follows it; the end found
  // from each `[` is kept, so a run of unclosed brackets costs its length once, not once per `[`.
  function linkText(c, from) {
    const t = c.text;
    if (!c.linkEnds) c.linkEnds = new Map();
    const line = c.newline(from);
    const walked = [];
    let j = from;
    let found;
    for (;;) {
      const special = c.next("[]", (k) => t[k] === "[" || t[k] === "]", j);
      if (special < 0 || special >= line) { found = -1; break; }
      if (t[special] === "]") { found = special; break; }
      if (c.linkEnds.has(special)) { found = c.linkEnds.get(special); break; }
      walked.push(special);
      const inner = c.next("]", (k) => t[k] === "]", special + 1);
      if (inner < 0 || inner >= line) { found = -1; break; }
      j = inner + 1;
    }
    for (const at of walked) c.linkEnds.set(at, found);
    return found;
  }

  // The link's address after `](` at `at`: [address, end] or null.
  function address(c, at) {
    if (c.text[at] !== "(") return null;
    URL_TEXT.lastIndex = at + 1;
    const m = URL_TEXT.exec(c.text);
    return m ? [m[1], URL_TEXT.lastIndex] : null;
  }

  function stripCode(code) {
    return code.length > 2 && code[0] === " " && code[code.length - 1] === " " && code.trim() ? code.slice(1, -1) : code;
  }

  // Each rule: (closers, i, depth) -> [end, append(out)] when its construct starts at i, else null; tried in order.
  const INLINE = [
    (c, i) => {
      const t = c.text;
      return t[i] === "\\" && /[!-/:-@[-`{-~]/.test(t[i + 1] || "") ? [i + 2, (out) => out.append(t[i + 1])] : null;
    },
    (c, i) => { // a code span: a run of n backticks to the next run of exactly n; unclosed, the run is text
      const t = c.text;
      if (t[i] !== "`") return null;
      let n = i;
      while (t[n] === "`") n += 1;
      const length = n - i;
      const close = c.run(length, n + 1);
      if (close < 0) return [n, (out) => out.append(t.slice(i, n))];
      return [close + length, (out) => out.append(el("code", { text: stripCode(t.slice(n, close)) }))];
    },
    (c, i, depth) => { // ![alt](address): a link to the image, never the image
      const t = c.text;
      if (t[i] !== "!" || t[i + 1] !== "[") return null;
      const end = c.next("]", (k) => t[k] === "]", i + 2);
      if (end < 0 || end >= c.newline(i)) return null;
      const target = address(c, end + 1);
      if (!target) return null;
      const alt = t.slice(i + 2, end);
      return [target[1], (out) => out.append(link(target[0], [`image: ${alt || target[0]}`], "image-link"))];
    },
    (c, i, depth) => { // [text](address)
      if (c.text[i] !== "[") return null;
      const end = linkText(c, i + 1);
      const target = end < 0 ? null : address(c, end + 1);
      if (!target) return null;
      const text = c.text.slice(i + 1, end);
      return [target[1], (out) => out.append(link(target[0], [inline(text, document.createDocumentFragment(), depth + 1)]))];
    },
    (c, i) => {
      if (c.text[i] !== "<") return null;
      AUTOLINK.lastIndex = i;
      const m = AUTOLINK.exec(c.text);
      return m ? [AUTOLINK.lastIndex, (out) => out.append(link(m[1], [m[1]]))] : null;
    },
    (c, i) => {
      const t = c.text;
      if (!/[hm]/i.test(t[i]) || WORD.test(t[i - 1] || "")) return null;
      BARE_URL.lastIndex = i;
      const m = BARE_URL.exec(t);
      return m ? [BARE_URL.lastIndex, (out) => out.append(link(m[0], [m[0]]))] : null;
    },
    (c, i, depth) => { // **strong** or __strong__
      const t = c.text;
      if (!(t[i] === "*" || (t[i] === "_" && !WORD.test(t[i - 1] || "")))) return null;
      const open = t[i] + t[i];
      const found = delimited(c, i, open, (x) => notSpace(x) && x !== "*" && x !== "_",
        (p) => notSpace(t[p - 1]), open);
      return found && [found[1], (out) => out.append(inline(found[0], el("strong"), depth + 1))];
    },
    (c, i, depth) => { // ~~deleted~~
      const t = c.text;
      const found = t[i] === "~" && delimited(c, i, "~~", notSpace, (p) => notSpace(t[p - 1]), "~~");
      return found ? [found[1], (out) => out.append(inline(found[0], el("del"), depth + 1))] : null;
    },
    (c, i, depth) => { // *emphasis*
      const t = c.text;
      const found = t[i] === "*" && delimited(c, i, "*", (x) => notSpace(x) && x !== "*",
        (p) => notSpace(t[p - 1]) && t[p - 1] !== "*", "*em");
      return found ? [found[1], (out) => out.append(inline(found[0], el("em"), depth + 1))] : null;
    },
    (c, i, depth) => { // _emphasis_, not inside a word
      const t = c.text;
      const found = t[i] === "_" && !WORD.test(t[i - 1] || "") && delimited(c, i, "_", (x) => notSpace(x) && x !== "_",
        (p) => notSpace(t[p - 1]) && t[p - 1] !== "_" && !wordAt(t, p + 1), "_em");
      return found ? [found[1], (out) => out.append(inline(found[0], el("em"), depth + 1))] : null;
    },
  ];

  function inline(text, parent, depth = 0) {
    if (depth > MAX_NESTING) {
      parent.append(text);
      return parent;
    }
    const c = new Closers(text);
    let plain = "";
    let i = 0;
    outer: while (i < text.length) {
      for (const rule of INLINE) {
        const found = rule(c, i, depth);
        if (!found) continue;
        if (plain) parent.append(plain);
        plain = "";
        found[1](parent);
        i = found[0];
        continue outer;
      }
      plain += text[i];
      i += 1;
    }
    if (plain) parent.append(plain);
    return parent;
  }

  const RENDER = {
    "session.start"(e) {
      if (e.message) $("session-task").textContent = e.message;
      const parts = ["started", e.instance && `instance ${e.instance}`, e.model && `model ${e.model}`,
        e.owner && `by ${e.owner}`, e.approve_all && "approving everything"].filter(Boolean);
      this.ended = false;
      this.setStatus("running");
      this.info(e, parts.join(" · "));
    },
    "session.adopt"(e) {
      this.ended = false;
      this.setStatus("running");
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
      this.messages += 1;
      const who = this.messages === 1 ? "Task" : e.via === "socket" ? "Follow-up" : "Message";
      this.add(el("div", { class: "item user" }, el("div", { class: "who", text: who }),
        el("p", { class: "text", text: e.text || "" })), e);
    },
    "assistant.delta"(e) {
      if (!this.streaming) {
        this.streaming = this.add(el("div", { class: "item assistant streaming" },
          el("div", { class: "who", text: "Chock" }), el("div", { class: "text" })), e);
      }
      this.streaming.querySelector(".text").textContent += e.text || ""; // as text until the whole answer is in
    },
    "assistant.message"(e) {
      const text = typeof e.text === "string" ? e.text : "";
      if (this.streaming) {
        const node = this.streaming.querySelector(".text");
        node.classList.add("markdown");
        node.replaceChildren(markdown(text)); // the final text replaces the deltas
        this.streaming.setAttribute("data-final-event-id", String(e.id));
        if (!text) this.streaming.parentElement.remove();
        this.endStreaming();
      } else if (text) {
        this.add(el("div", { class: "item assistant" }, el("div", { class: "who", text: "Chock" }),
          el("div", { class: "text markdown" }, markdown(text))), e);
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
      this.tools.set(e.call_id, { details, output, outputBlock, stateNode, at: e.at });
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
      const took = duration(tool.at, e.at);
      tool.stateNode.textContent = `${e.is_error ? "failed" : "done"}${took == null ? "" : ` · ${durationText(took)}`}`;
      if (took != null) tool.details.setAttribute("data-duration-ms", String(took));
      if (typeof e.diff === "string" && e.diff) showDiff(tool, e.diff);
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
      if (!e.by_config) refreshList(); // the list says who waits: the tab's title, a notification
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
      this.setStatus(reason === "handover" ? "handed-over" : "ended");
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
    steering.reset();
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
  // Steering the open session: Stop while it runs, Remove once it ended, and the message box under it —
  // a follow-up while it runs (taken in before its next model call), a continuation once it ended.

  const steering = {
    removeTimer: null,

    wire() {
      $("stop-button").addEventListener("click", () => this.stop());
      $("remove-button").addEventListener("click", () => this.remove());
      $("say-form").addEventListener("submit", (event) => this.say(event));
      $("say-message").addEventListener("keydown", (event) => {
        if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("say-form").requestSubmit();
      });
    },

    reset() {
      this.show("");
      this.note("action-status", "");
      this.note("say-status", "");
      $("say-message").value = "";
      this.disarm();
    },

    show(status) {
      const running = status === "running" || status === "waiting";
      $("stop-button").hidden = !running;
      $("remove-button").hidden = status !== "ended";
      if (status !== "ended") this.disarm();
      $("say-form").hidden = !status;
      $("say-form").setAttribute("data-mode", running ? "follow-up" : "continue");
      $("say-label").textContent = running ? "Tell it more" : "Continue this session";
      $("say-button").textContent = running ? "Send" : "Continue";
      $("say-message").placeholder = running
        ? "A follow-up: it reads this before its next model call"
        : "What next? The session goes on in its workspace, onto its branch";
    },

    note(id, text, bad = false) {
      $(id).textContent = text;
      $(id).className = `note${bad ? " bad" : ""}`;
    },

    async post(verb, body) {
      return api(`/api/sessions/${q(state.sessionId)}/${verb}`, { body: { project: state.project, ...body } });
    },

    async stop() {
      const button = $("stop-button");
      button.disabled = true;
      this.note("action-status", "stopping…");
      try {
        await this.post("stop");
        this.note("action-status", "stopped");
        refreshList();
      } catch (error) {
        this.note("action-status", error.message, true);
      } finally {
        button.disabled = false;
      }
    },

    disarm() {
      clearTimeout(this.removeTimer);
      $("remove-button").classList.remove("armed");
      $("remove-button").textContent = "Remove";
    },

    async remove() {
      const button = $("remove-button");
      if (!button.classList.contains("armed")) { // a second click within a few seconds removes it
        button.classList.add("armed");
        button.textContent = "Remove its log for good?";
        this.removeTimer = setTimeout(() => this.disarm(), 5000);
        return;
      }
      this.disarm();
      button.disabled = true;
      const id = state.sessionId;
      this.note("action-status", "removing…");
      try {
        await this.post("remove");
        closeSession();
        $("sessions-note").textContent = `removed ${id} (its branch chock/${id} stays)`;
        refreshList();
      } catch (error) {
        this.note("action-status", error.message, true);
      } finally {
        button.disabled = false;
      }
    },

    async say(event) {
      event.preventDefault();
      const message = $("say-message").value.trim();
      if (!message || !state.sessionId) return;
      const id = state.sessionId;
      const button = $("say-button");
      button.disabled = true;
      this.note("say-status", "sending…");
      try {
        const data = await this.post("messages", { message });
        $("say-message").value = "";
        this.note("say-status", data.how === "continued"
          ? "continued: the session runs again"
          : "sent: it reads this before its next model call");
        if (data.how === "continued" && view.id === id) view.follow();
        refreshList();
      } catch (error) {
        this.note("say-status", error.message, true);
      } finally {
        button.disabled = false;
      }
    },
  };

  // ---------------------------------------------------------------------------------------------------
  // Sessions waiting for an approval: their count in the tab's title, and a notification for each one that
  // starts waiting while the page is not in front. Permission is asked once, after a click, never on load.

  const waiting = { told: new Set() };

  function inFront() {
    return document.visibilityState === "visible" && document.hasFocus();
  }

  function noticeWaiting(rows) {
    const now = rows.filter((row) => row.status === "waiting");
    const ids = new Set(now.map((row) => row.id));
    for (const id of waiting.told) if (!ids.has(id)) waiting.told.delete(id); // it may wait again later
    document.title = now.length ? `(${now.length} waiting) Chock` : "Chock";
    for (const row of now) tellWaiting(row);
  }

  function tellWaiting(row) {
    if (waiting.told.has(row.id) || inFront()) return;
    waiting.told.add(row.id);
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    const note = new Notification("Chock: a session waits for your approval", {
      body: row.message || row.id,
      tag: `chock-approval-${row.id}`,
    });
    note.onclick = () => {
      window.focus();
      openSession(row.id);
      note.close();
    };
    debug.notified.push(row.id);
  }

  function askToNotifyOnce() {
    if (!("Notification" in window) || Notification.permission !== "default") return;
    if (localStorage.getItem("chock.notifications-asked")) return;
    localStorage.setItem("chock.notifications-asked", "1");
    Notification.requestPermission().catch(() => {});
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
    steering.wire();
    document.addEventListener("click", askToNotifyOnce, { once: true });
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
