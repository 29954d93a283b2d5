// The page's Markdown renderer (chock/serve/static/app.js, from "Assistant text as Markdown" to RENDER) under
// node, with a DOM of plain objects: `render(text)` is the HTML it builds. CHOCK_APP_JS names another app.js
// (to check that a test fails on an older renderer). Nothing newer than Node 18.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const path = process.env.CHOCK_APP_JS || fileURLToPath(new URL("../../chock/serve/static/app.js", import.meta.url));
const source = readFileSync(path, "utf8");
const start = source.indexOf("  // Assistant text as Markdown");
const end = source.indexOf("  const RENDER = {");
if (start < 0 || end < 0) throw new Error(`${path} lost its Markdown section's markers`);

class Node {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; }
  append(...items) { for (const item of items) this.children.push(item instanceof Node ? item : String(item)); }
  setAttribute(name, value) { this.attrs[name] = value; }
  set start(value) { this.attrs.start = value; }
  get html() {
    const attrs = Object.entries(this.attrs).map(([k, v]) => ` ${k}="${escape(v)}"`).join("");
    const inner = this.children.map((c) => (c instanceof Node ? c.html : escape(c))).join("");
    return this.tag ? `<${this.tag}${attrs}>${inner}</${this.tag}>` : inner;
  }
}

// What a browser's serializer does to text: the markup a model wrote comes out as text, never as tags.
function escape(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

const document = { createDocumentFragment: () => new Node("") };
function el(tag, props = {}, ...children) {
  const node = new Node(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.append(value);
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

const markdown = new Function("document", "el", `${source.slice(start, end)}\nreturn markdown;`)(document, el);

export function render(text) {
  return markdown(text).html;
}
