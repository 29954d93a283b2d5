// Runs the page's Markdown renderer (chock/serve/static/app.js, from "Assistant text as Markdown" to RENDER)
// under node with a DOM of plain objects, and prints what it builds for each input given as JSON on stdin.
import { readFileSync } from "node:fs";

const source = readFileSync(process.argv[2], "utf8");
const start = source.indexOf("  // Assistant text as Markdown");
const end = source.indexOf("  const RENDER = {");
if (start < 0 || end < 0) throw new Error("app.js lost its Markdown section's markers");

class Node {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; }
  append(...items) { for (const item of items) this.children.push(item instanceof Node ? item : String(item)); }
  setAttribute(name, value) { this.attrs[name] = value; }
  set start(value) { this.attrs.start = value; }
  get html() {
    const attrs = Object.entries(this.attrs).map(([k, v]) => ` ${k}="${v}"`).join("");
    const inner = this.children.map((c) => (c instanceof Node ? c.html : c)).join("");
    return this.tag ? `<${this.tag}${attrs}>${inner}</${this.tag}>` : inner;
  }
}
const document = { createDocumentFragment: () => new Node("") };
function el(tag, props = {}, ...children) {
  const node = new Node(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.append(value);
    else node.setAttribute(key === "class" ? "class" : key, value);
  }
  node.append(...children);
  return node;
}
const markdown = new Function("document", "el", `${source.slice(start, end)}\nreturn markdown;`)(document, el);
const inputs = JSON.parse(readFileSync(0, "utf8"));
const out = inputs.map((text) => {
  const began = process.hrtime.bigint();
  const html = markdown(text).html;
  return { html: html.length > 2000 ? `${html.slice(0, 2000)}…` : html, ms: Number(process.hrtime.bigint() - began) / 1e6 };
});
process.stdout.write(JSON.stringify(out));
