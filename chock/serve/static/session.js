// One session: its timeline, built from events in id order as they stream from serve's watch (EventSource:
// the browser reconnects by itself and sends Last-Event-ID, and serve resumes right after it). An event whose id
// was applied is dropped, so each is shown exactly once; a gap makes the view reconnect from the last id it has.
// A type this page does not know is skipped, and one it cannot read shows nothing (docs/log.md, "Reading rules").
import { paths } from "./api.js";
import { $, el } from "./dom.js";
import { rowKey } from "./hosts.js";
import { Progress } from "./progress.js";
import { debug, page, state } from "./state.js";
import { steering } from "./steering.js";
import { RENDER } from "./timeline.js";

const REOPEN_MIN_MS = 1000; // after a refused watch (serve up, daemon not): back off up to REOPEN_MAX_MS
const REOPEN_MAX_MS = 15000;

/** A row's badge class: its status, and `failed` for an ending other than completed. */
export function statusClass(row) {
  const failed = row.status === "ended" && row.end_reason && row.end_reason !== "completed";
  return `badge ${row.status || ""}${failed ? " failed" : ""}`;
}

// `full`: the session's own view, which names the command that takes a free session back.
export function statusText(row, full = false) {
  if (row.status === "abandoned" && row.free) {
    const what = `interrupted by ${row.interrupted_by || "a crash"}`;
    const on = row.host && row.host !== "local" ? `--on ${row.host} ` : "";
    return full ? `${what} — chock run ${on}--continue ${row.id}` : what;
  }
  if (row.status === "waiting") return `waiting${row.pending_approvals ? ` (${row.pending_approvals})` : ""}`;
  if (row.status === "ended" && row.end_reason) return `ended · ${row.end_reason}`;
  if (row.status === "moved") return `moved → ${row.end_to || "another host"}`;
  return row.status || "unknown";
}

export class SessionView {
  constructor(host, id, project) {
    this.host = host;            // the session is named by its host and its id, and its project on that host
    this.id = id;
    this.project = project;
    this.lastId = 0;
    this.tools = new Map();      // call_id -> {details, output, state}
    this.approvals = new Map();  // request_id -> card
    this.streaming = null;       // the assistant block that deltas go into
    this.usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, cost: null, currency: "", budget: null };
    this.messages = 0;           // user.message events so far: the first is the task
    this.status = "";            // running, waiting, ended, … as the row or the latest events say
    this.ended = false;
    this.source = null;
    this.reopenDelay = REOPEN_MIN_MS;
    this.reopenTimer = null;
    this.timeline = $("timeline");
    this.timeline.replaceChildren();
    $("session-id").textContent = id;
    $("session-host").textContent = host;
    const known = state.rows.get(rowKey(host, id));
    $("session-task").textContent = known?.message || "";
    $("session-usage").textContent = "";
    $("session-elapsed").textContent = "";
    $("session-activity").hidden = true;
    this.progress = new Progress(this.tools); // what it does now, and for how long
    $("plan").hidden = true;
    $("plan-steps").replaceChildren();
    steering.reset();
    if (known) this.row(known);
  }

  row(row) {
    // A session that went on after this page was told it ended (`chock run --continue`): follow it again.
    if (Number(row.last_event_id) > this.lastId) this.follow();
    const badge = $("session-status");
    badge.className = statusClass(row);
    badge.textContent = statusText(row, true);
    if (row.message && !$("session-task").textContent) $("session-task").textContent = row.message;
    if (row.project && !this.project) this.project = row.project;
    // A row older than the events shown says less than they do.
    if (Number(row.last_event_id) >= this.lastId) {
      this.setStatus(row.status);
      steering.keeps(row.workspace_kept);
    }
  }

  // What the session's spend is counted in, as its latest span says (session.start / session.adopt): the price's
  // currency and the budget, shown with the cost.
  spending(e) {
    this.usage.currency = /^[A-Z]{3}$/.test(e.currency || "") ? e.currency : "";
    this.usage.budget = typeof e.budget === "number" ? e.budget : null;
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
    // The browser resumes by itself with Last-Event-ID (`<host>/<id>/<N>`); a new EventSource, after a refusal,
    // says `after` instead: either way serve sends what follows the last event shown, once.
    const url = paths.watch(this.host, this.id, this.project, this.lastId);
    const source = new EventSource(url);
    this.source = source;
    this.streamState("connecting…");
    source.onopen = () => {
      this.reopenDelay = REOPEN_MIN_MS;
      this.streamState(this.ended ? "" : "live");
    };
    source.addEventListener("row", (message) => {
      // The row as of when serve's upstream watch began; the list's own poll is fresher where there is one.
      if (state.rows.has(rowKey(this.host, this.id))) return;
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
      page.refreshList();
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
      this.progress.take(event);
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
