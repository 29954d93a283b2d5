// What a session is doing now, as the terminal's spinner says it (chock/session/spinner.py): a line under the
// timeline — "thinking 4 s", "running bash 12 s", "waiting for approval 1 min 3 s" — with a spinning mark, the
// running tool call's own "running… 12 s", and how long the session has run (since its latest start or takeover,
// to its end). Each time counts from its event's `at`, the log's clock, so a page opened late says how long it
// has really been; app.js's clock calls the open view's `tick` once a second.
import { $ } from "./dom.js";

// The events after which the model is (about to be) called.
const THINKING = new Set(["session.start", "session.adopt", "workspace.open", "user.message", "assistant.message",
  "tool.result", "compaction"]);

/** What the session does once `event` is in: {label, call} (call: the running tool call's id), null for
 * nothing (it ended), or undefined when the event changes nothing. */
export function activity(event, requests = new Map()) {
  const type = event.type;
  if (type === "tool.call") return { label: `running ${event.name || "a tool"}`, call: event.call_id };
  if (type === "approval.request" && !event.by_config) {
    requests.set(event.request_id, event.call_id);
    return { label: "waiting for approval" };
  }
  if (type === "approval.answer" && event.answer === "yes" && event.via !== "config") {
    return { label: "running the approved call", call: requests.get(event.request_id) };
  }
  if (type === "assistant.delta") return { label: "writing" };
  if (type === "provider.retry") return { label: "waiting to retry" };
  if (type === "session.end") return null;
  // The last answer: its commit, then the end; a turn the model paused (docs/log.md#stop-reasons) is sent again.
  if (type === "assistant.message" && !(Array.isArray(event.tool_calls) && event.tool_calls.length)
      && event.stop_reason !== "pause_turn") {
    return { label: "finishing" };
  }
  if (THINKING.has(type)) return { label: "thinking" };
  return undefined;
}

/** Whole seconds as the page says them: "4 s", "1 min 3 s". */
export function clock(ms) {
  const s = Math.floor(ms / 1000);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Milliseconds from `at` (an event's time) to `now`, never below 0 (a clock behind the log's). */
export function since(at, now) {
  const ms = now - Date.parse(at);
  return Number.isFinite(ms) ? Math.max(0, ms) : 0;
}

/** The session's progress on the page: `take` each event, `tick` to redraw. */
export class Progress {
  constructor(tools) {
    this.tools = tools; // the timeline's tool calls by call id: their state is redrawn while they run
    this.requests = new Map(); // approval request id -> its call id
    this.now = null; // {label, call, at} or null
    this.start = null; // when the current span began (session.start or session.adopt)
    this.end = null; // when it ended
  }

  take(event) {
    if (event.type === "session.start" || event.type === "session.adopt") {
      this.start = event.at;
      this.end = null;
    }
    if (event.type === "session.end" && event.reason !== "handover") this.end = event.at;
    const next = activity(event, this.requests);
    if (next === undefined) return;
    if (next === null) this.now = null;
    else if (!this.now || this.now.label !== next.label || this.now.call !== next.call) this.now = { ...next, at: event.at };
    this.tick();
  }

  tick(now = Date.now()) {
    const line = $("session-activity");
    line.hidden = !this.now;
    line.textContent = this.now ? `${this.now.label} ${clock(since(this.now.at, now))}` : "";
    const tool = this.now && this.now.call !== undefined ? this.tools.get(this.now.call) : null;
    if (tool && tool.stateNode.textContent.startsWith("running")) {
      tool.stateNode.textContent = `running… ${clock(since(tool.at, now))}`;
    }
    const until = this.end ? Date.parse(this.end) : now;
    $("session-elapsed").textContent = this.start ? `${this.end ? "ran" : "running"} ${clock(since(this.start, until))}` : "";
  }
}
