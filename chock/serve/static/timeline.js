// The timeline: what each event type shows (`RENDER`, called with the SessionView as `this`), and the words
// for a tool call's arguments, output and duration. The types are the ones chock/log/events.py declares
// (tests/test_events.py holds the two to the same names); a type not here is shown as nothing.
import { answerForm, exactly, send as sendMore } from "./answer.js";
import { api, paths } from "./api.js";
import { showDiff } from "./diff.js";
import { $, el } from "./dom.js";
import { markdown } from "./markdown.js";
import { page } from "./state.js";
import { workNode } from "./work.js";

/** A tool call's arguments in a line: its command, path, pattern, task or query, else its JSON cut at 80. */
export function brief(args) {
  if (!args || typeof args !== "object") return "";
  for (const key of ["command", "path", "pattern", "task", "query"]) {
    if (typeof args[key] === "string") return args[key].split("\n")[0];
  }
  const text = JSON.stringify(args);
  return text.length > 80 ? `${text.slice(0, 80)}…` : text;
}

/** A value as text: a string as it is, anything else as indented JSON. */
export function pretty(value) {
  if (typeof value === "string") return value;
  try { return JSON.stringify(value, null, 2); } catch { return String(value); }
}

/** A tool call's milliseconds from its tool.call's and tool.result's `at`, or null when they do not say. */
export function duration(startAt, endAt) {
  const ms = Date.parse(endAt) - Date.parse(startAt);
  return Number.isFinite(ms) && ms >= 0 ? ms : null;
}

export function durationText(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** A tool call waiting for a person is shown so, not as running. */
function waitingFor(tool) {
  if (!tool) return;
  tool.stateNode.textContent = "waiting for approval";
  tool.details.setAttribute("data-state", "waiting");
}

/** Once answered, a call runs (its duration counted from the answer, not from the call) or was denied. */
function answeredFor(tool, e) {
  if (!tool || tool.details.getAttribute("data-state") !== "waiting") return;
  tool.details.setAttribute("data-state", e.answer === "yes" ? "running" : "denied");
  tool.stateNode.textContent = e.answer === "yes" ? "running…" : "denied";
  if (e.answer === "yes" && e.at) tool.at = e.at;
}

/** What each event type shows, called with the SessionView as `this`. */
const RENDER = {
  "session.start"(e) {
    this.spending(e);
    if (e.message) $("session-task").textContent = e.message;
    const parts = ["started", e.instance && `instance ${e.instance}`, e.model && `model ${e.model}`,
      e.owner && `by ${e.owner}`, e.approve_all && "approving everything"].filter(Boolean);
    this.ended = false;
    this.setStatus("running");
    this.info(e, parts.join(" · "));
  },
  "session.adopt"(e) {
    this.spending(e);
    this.ended = false;
    this.setStatus("running");
    this.info(e, `taken over by the ${e.via || "daemon"}${e.pid ? ` (pid ${e.pid})` : ""}`);
  },
  "workspace.open"(e) {
    this.info(e, `workspace ${e.directory || ""}${e.commit ? ` at ${String(e.commit).slice(0, 10)}` : ""}`);
  },
  "workspace.close"(e) {
    // Each finish shows the whole work against the base; only the newest keeps its diff open.
    for (const older of this.timeline.querySelectorAll("details.whole-diff")) older.open = false;
    this.add(workNode(e), e);
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
  "mcp.server"(e) {
    const why = e.reason ? `: ${e.reason}` : "";
    const count = e.state === "started" ? ` (${e.tools || 0} tools)` : "";
    this.info(e, `MCP server ${e.server || "?"} ${e.state || ""}${count}${why}`);
  },
  "mcp.tools"(e) {
    const names = Array.isArray(e.names) ? e.names.join(", ") : "";
    this.info(e, `MCP server ${e.server || "?"} changed its tools: ${names || "none"}`);
  },
  "approval.request"(e) {
    this.endStreaming();
    const approve = el("button", { type: "button", class: "approve", text: "Approve" });
    const deny = el("button", { type: "button", class: "deny", text: "Deny" });
    const more = el("button", { type: "button", class: "secondary more", text: "Deny with a message…" });
    const always = el("button", { type: "button", class: "secondary always", text: "Always…" });
    const note = el("span", { class: "note" });
    const holder = el("div", { class: "form" });
    const card = el("div", { class: "item approval" },
      el("div", { class: "who", text: `Approval needed · ${e.tool || "tool"}` }),
      el("p", { class: "summary" }, ...exactly(String(e.summary || ""))),
      el("div", { class: "row buttons" }, approve, deny, more, always, note), holder);
    card.setAttribute("data-request-id", e.request_id || "");
    card.setAttribute("data-tool", e.tool || "tool");
    card.setAttribute("data-call-id", e.call_id || "");
    if (!e.by_config) waitingFor(this.tools.get(e.call_id));
    const send = async (answer) => {
      approve.disabled = deny.disabled = true;
      note.className = "note";
      note.textContent = "sending…";
      try {
        await api(paths.verb(this.host, this.id, "answer"), { // on the session's own host
          body: { project: this.project, request_id: e.request_id, answer },
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
    const row = { host: this.host, id: this.id, project: this.project };
    const open = (kind) => { // the answers that say more than yes or no, as the inbox offers them (answer.js)
      const close = () => holder.replaceChildren();
      holder.replaceChildren(answerForm(e, kind, "session", (choice) => {
        close();
        note.className = "note";
        note.textContent = "sending…";
        sendMore(row, e, choice).then(() => { note.textContent = choice.answer === "yes" ? "approved" : "denied"; },
          (error) => { note.textContent = error.message; note.className = "note bad"; });
      }, close));
      holder.querySelector(".text").focus();
    };
    more.addEventListener("click", () => open("no"));
    always.addEventListener("click", () => open("always"));
    this.approvals.set(e.request_id, card);
    this.add(card, e);
    if (!e.by_config) page.refreshList(); // the list says who waits: the tab's title, a notification
  },
  "approval.answer"(e) {
    const card = this.approvals.get(e.request_id);
    const scope = e.scope && e.scope !== "once" ? ` · always in this ${e.scope}: ${e.rule || ""}` : "";
    const byRule = e.via === "rule" && e.rule ? ` · by rule ${e.rule}` : "";
    const told = e.note ? ` · the model was told: ${e.note}` : "";
    const late = e.via === "timeout" ? " · nobody answered within .approvals.timeout" : "";
    const words = `${e.answer === "yes" ? "Approved" : "Denied"}${e.via ? ` (${e.via})` : ""}${scope}${byRule}${told}${late}`;
    if (!card) {
      this.info(e, words);
      return;
    }
    card.classList.add("done");
    answeredFor(this.tools.get(card.dataset.callId), e);
    card.querySelector(".who").textContent = `Approval · ${card.dataset.tool || "tool"}`;
    const buttons = card.querySelector(".buttons");
    buttons.replaceChildren(el("span", { class: "answered", text: words }));
    card.querySelector(".form")?.replaceChildren();
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
    const currency = usage.currency ? ` ${usage.currency}` : "";
    const budget = typeof usage.budget === "number" ? ` of a budget of ${usage.budget.toFixed(2)}${currency}` : "";
    const cost = usage.cost === null ? "" : ` · cost ${usage.cost.toFixed(4)}${currency}${budget}`;
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
      budget: "Stopped at its budget", moved: `Moved to ${e.to || "another host"}`,
    }[reason] || reason;
    this.ended = reason !== "handover";
    this.setStatus({ handover: "handed-over", moved: "moved" }[reason] || "ended");
    this.add(el("div", { class: `item end${failed ? " failed" : ""}` },
      el("div", { class: "who", text: "End" }),
      el("p", { class: "text", text: `${words}${e.exit_code != null ? ` · exit ${e.exit_code}` : ""}${e.error ? `\n${e.error}` : ""}` })), e);
  },
};
export { RENDER };
