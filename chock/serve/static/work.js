// A session's whole work, as the `workspace.close` that records its branch says it (docs/log.md): the files it
// changed, the diff against the session's base, and the commands that review and merge the branch — or "no
// changes" when the work equalled the base and no branch was made. Everything is text: a path or a line of the
// diff is the agent's, and is never markup.
import { diffLines } from "./diff.js";
import { el } from "./dom.js";

const short = (commit) => String(commit || "").slice(0, 10);

/** A file's line: its status, its path, and +added −deleted (or "binary"). */
function fileItem(file) {
  const status = typeof file.status === "string" ? file.status : "?";
  const counts = file.binary
    ? [el("span", { class: "binary", text: "binary" })]
    : [el("span", { class: "add", text: `+${Number(file.added) || 0}` }),
      el("span", { class: "del", text: ` −${Number(file.deleted) || 0}` })];
  const item = el("li", {}, el("span", { class: `status s-${status}`, text: status }),
    el("span", { class: "path", text: String(file.path ?? "") }), el("span", { class: "counts" }, ...counts));
  item.setAttribute("data-status", status);
  return item;
}

/** The commands that review and merge the branch, as text to copy. */
function nextSteps(base, branch) {
  const lines = [`git diff ${base} ${branch}`, `git merge ${branch}`];
  return el("div", { class: "next" }, el("div", { class: "label", text: "Review and merge" }),
    el("pre", { class: "commands", text: lines.join("\n") }));
}

/** The node a workspace.close shows: "no changes", the whole work, or (an older log) where the work went. */
export function workNode(e) {
  if (e.branch === null) {
    const node = el("div", { class: "item work none" }, el("div", { class: "who", text: "No changes" }),
      el("p", { class: "text", text: "The work equals the session's base, so no branch was made." }));
    node.setAttribute("data-branch", "");
    return node;
  }
  const branch = typeof e.branch === "string" && e.branch ? e.branch : "its branch";
  const where = `${e.removed ? "its kept workspace removed; " : ""}changes committed to ${branch}` +
    `${e.commit ? ` (${short(e.commit)})` : ""}`;
  const files = Array.isArray(e.files) ? e.files.filter((file) => file && typeof file === "object") : [];
  if (typeof e.diff !== "string" && !files.length) return el("div", { class: "info", text: where });
  const parts = [el("p", { class: "text", text: where })];
  const more = Number(e.files_left_out) || 0;
  const total = files.length + more;
  parts.push(el("div", { class: "label", text: `${total} file${total === 1 ? "" : "s"} changed against its base` +
    `${e.base ? ` ${short(e.base)}` : ""}` }));
  parts.push(el("ul", { class: "files" }, ...files.map(fileItem)));
  if (more) parts.push(el("p", { class: "note", text: `and ${more.toLocaleString()} more files, not listed` }));
  if (typeof e.diff === "string" && e.diff) {
    const { lines, kinds } = diffLines(e.diff);
    const block = el("pre", { class: "diff" },
      ...lines.map((line, n) => el("span", { class: `line ${kinds[n]}`, text: line || " " })));
    const cut = e.diff_truncated ? " (cut at 256 KiB: the branch holds the rest)" : "";
    parts.push(el("details", { class: "whole-diff", open: true }, el("summary", { text: `Diff${cut}` }), block));
  }
  if (e.base && typeof e.branch === "string") parts.push(nextSteps(e.base, e.branch));
  const node = el("div", { class: "item work" }, el("div", { class: "who", text: "The session's work" }), ...parts);
  node.setAttribute("data-branch", typeof e.branch === "string" ? e.branch : "");
  return node;
}
