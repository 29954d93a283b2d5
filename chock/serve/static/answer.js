// How an approval is answered from the page (docs/architecture.md#approvals): yes once and a plain no through the
// daemon's `answer`, which every host knows; a no with a message, and "always" (a rule for the session or for
// the project), through `answer-with`. A host whose Chock is older refuses that verb (`unknown-verb`): it is
// remembered, and from then on the page offers it yes and no only and says why.
import { api, paths } from "./api.js";
import { el } from "./dom.js";

// What a browser would act on or hide in a command: C0 and C1 controls but tab and newline, soft hyphen, Arabic
// letter mark, zero-widths and bidi marks, embeddings, overrides and isolates, word joiners, BOM, line and
// paragraph separators. The command an approval asks about is shown exactly, so each is shown as its escape.
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\u2028\u2029]/g;

/** `text` as nodes: itself, with each character of HIDDEN as a marked `\uXXXX` (the terminal shows them so). */
export function exactly(text) {
  const nodes = [];
  let at = 0;
  for (const match of String(text).matchAll(HIDDEN)) {
    if (match.index > at) nodes.push(text.slice(at, match.index));
    const code = match[0].codePointAt(0).toString(16).padStart(4, "0");
    nodes.push(el("span", { class: "escaped", text: `\\u${code}` }));
    at = match.index + match[0].length;
  }
  if (at < text.length) nodes.push(text.slice(at));
  return nodes;
}

/** The most a "no" message carries to the model, in UTF-8 bytes (the session refuses more). */
export const NOTE_MOST = 4096;

/** Hosts whose daemon answered `answer-with` with `unknown-verb`, by name. */
export const older = new Set();

/** Why an older host is offered yes and no only. */
export function olderWhy(host) {
  return `${host}'s Chock is older: it takes yes or no only (no message, no "always"); update it to get them`;
}

/** The UTF-8 length of `text`. */
export function bytes(text) {
  return new TextEncoder().encode(text).length;
}

/** What "always" proposes for a request: the proposal its event carries (never recomputed here), else the tool. */
export function proposal(event) {
  if (typeof event.propose === "string" && event.propose) return event.propose;
  return event.tool && event.tool !== "shell" ? `tool:${event.tool}` : "";
}

/** Answer `event` (an approval.request of the session `row`): `choice` is {answer: "yes"|"no", scope:
 * "once"|"session"|"project", rule, note}. Resolves when the session logged the answer; throws with the reason. */
export async function send(row, event, choice, call = api) {
  const { answer, scope = "once", rule = "", note = "" } = choice;
  const plain = scope === "once" && !note;
  if (!plain && older.has(row.host)) throw new Error(olderWhy(row.host));
  if (bytes(note) > NOTE_MOST) {
    throw new Error(`the message is ${bytes(note)} bytes; a "no" carries at most ${NOTE_MOST}: shorten it`);
  }
  if (scope !== "once" && !rule.trim()) throw new Error('"always" needs a rule: give the words it allows');
  const body = { project: row.project, request_id: event.request_id, answer };
  try {
    if (plain) return await call(paths.verb(row.host, row.id, "answer"), { body });
    return await call(paths.verb(row.host, row.id, "answer-with"), { body: { ...body, scope, rule: rule.trim(), note } });
  } catch (error) {
    if (error.code === "unknown-verb" && !plain) {
      older.add(row.host);
      throw new Error(olderWhy(row.host));
    }
    throw error;
  }
}

/** The form of an answer that says more than yes: `kind` "no" (a message for the model) or "always" (the rule
 * proposed, to edit, and its scope); `submit(choice)` on Enter or its button, `close()` on Escape or Cancel. */
export function answerForm(event, kind, scope, submit, close) {
  const text = kind === "no"
    ? el("textarea", { class: "text message", rows: 2, maxLength: NOTE_MOST,
      placeholder: "Why not (optional): the model reads this as the tool's result" })
    : el("input", { class: "text rule", value: proposal(event), spellcheck: false });
  text.setAttribute("aria-label", kind === "no" ? "Message to the model" : "The rule to save");
  const scopes = el("select", { class: "scope" },
    el("option", { value: "session", text: "always in this session" }),
    el("option", { value: "project", text: "always in this project" }));
  scopes.value = scope;
  scopes.setAttribute("aria-label", "Where the rule holds");
  const why = event.propose_whole && event.propose_why ? el("p", { class: "why", text: event.propose_why }) : null;
  const form = el("form", { class: `answer ${kind}` }, text, kind === "no" ? null : scopes, why,
    el("button", { type: "submit", text: kind === "no" ? "Deny" : "Allow always" }),
    el("button", { type: "button", class: "secondary cancel", text: "Cancel" }));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    submit(kind === "no" ? { answer: "no", note: text.value } : { answer: "yes", scope: scopes.value, rule: text.value });
  });
  form.addEventListener("keydown", (e) => {
    if (e.key === "Escape") close();
    else if (e.key === "Enter" && !e.shiftKey && e.target === text) { e.preventDefault(); form.requestSubmit(); }
  });
  form.querySelector(".cancel").addEventListener("click", close);
  return form;
}
