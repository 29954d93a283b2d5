// How an approval is answered from the page (docs/architecture.md#approvals): yes once and a plain no through the
// daemon's `answer`, which every host knows; a no with a message, and "always" (a rule for the session or for
// the project), through `answer-with`. A host whose Chock is older refuses that verb (`unknown-verb`): it is
// remembered, and from then on the page offers it yes and no only and says why.
import { api, paths } from "./api.js";

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
