// A change to a file (the `diff` of write_file's and edit_file's tool.result), one node per line.
import { el } from "./dom.js";

/** What a line of a unified diff is: file, hunk, add, del, same, or note. */
export function diffLineKind(line) {
  if (line.startsWith("+++ ") || line.startsWith("--- ")) return "file";
  if (line.startsWith("@@")) return "hunk";
  if (line.startsWith("+")) return "add";
  if (line.startsWith("-")) return "del";
  if (line.startsWith(" ")) return "same";
  return "note"; // "\ No newline at end of file", a cut, a change too big to compare
}

/** Each line's kind, and how many lines were added and deleted. */
export function diffLines(diff) {
  const lines = diff.replace(/\n$/, "").split("\n");
  const kinds = lines.map(diffLineKind);
  const count = (kind) => kinds.filter((k) => k === kind).length;
  return { lines, kinds, added: count("add"), deleted: count("del") };
}

/** The diff under a tool call's output, and its +added −deleted beside the call's state. */
export function showDiff(tool, diff) {
  const { lines, kinds, added, deleted } = diffLines(diff);
  const block = el("pre", { class: "diff" },
    ...lines.map((line, n) => el("span", { class: `line ${kinds[n]}`, text: line || " " })));
  tool.outputBlock.after(el("div", { class: "changes" }, el("div", { class: "label", text: "Changes" }), block));
  tool.stateNode.before(el("span", { class: "diffstat" },
    el("span", { class: "add", text: `+${added}` }), el("span", { class: "del", text: ` −${deleted}` })));
  tool.details.setAttribute("data-diff", "");
}
