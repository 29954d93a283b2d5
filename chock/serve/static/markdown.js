// Assistant text as Markdown, built from DOM nodes with text in them: no HTML a model wrote is ever parsed,
// so `<img onerror=…>` is shown as the text it is. A link is made only for http, https and mailto, and
// opens apart from this page (noopener noreferrer); an image is shown as a link to it and never fetched,
// so a prompt-injected agent cannot make the browser send what it read to an address of its choosing.
import { el } from "./dom.js";

const LINK_SCHEMES = new Set(["http:", "https:", "mailto:"]);
// A backtick fence's info string holds no backtick: "```a `` b``` c" is a line of code spans, not a fence.
const FENCE = /^ {0,3}(`{3,}(?=[^`]*$)|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+/; // the text after it, less a closing run of #s (`heading`)
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+/;
const SETEXT = /^ {0,3}(=+|-+)\s*$/; // under a paragraph's lines: they are a heading
const TASK = /^\[([ xX])\]\s+/; // a list item's first line: a task, done or not
// A link reference definition, `[label]: address "title"`, on a line of its own.
const DEFINITION = /^ {0,3}\[([^\]\n]{1,999})\]:\s*<?([^\s<>]+)>?(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*$/;
// No two runs of spaces meet without a "|" between them: a line of spaces costs its length, not its square.
const TABLE_RULE = /^\s*(?:\|\s*)?:?-+:?\s*(?:\|\s*:?-+:?\s*)*(?:\|\s*)?$/;

// The text's link reference definitions while it renders (`markdown` is synchronous and not reentrant).
let references = new Map();

/** The DocumentFragment `text` renders to. */
export function markdown(text) {
  const root = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n").map(expandTabs);
  references = definitions(lines);
  try {
    blocks(lines.filter((line) => line !== DEFINED), root);
  } finally {
    references = new Map();
  }
  return root;
}

// A line's leading tabs as spaces to the next multiple of 4, so that a tab-indented item nests.
function expandTabs(line) {
  if (!line.startsWith("\t") && !/^ {1,3}\t/.test(line)) return line;
  let width = 0;
  let i = 0;
  for (; i < line.length && (line[i] === " " || line[i] === "\t"); i += 1) width = line[i] === "\t" ? width + 4 - (width % 4) : width + 1;
  return " ".repeat(width) + line.slice(i);
}

const label = (text) => text.trim().replace(/\s+/g, " ").toLowerCase();
const DEFINED = {}; // what a definition's line is replaced with: no line at all

// The definitions outside fenced code, the first of each label kept; each one's line becomes DEFINED.
function definitions(lines) {
  const found = new Map();
  let fence = null;
  for (let i = 0; i < lines.length; i += 1) {
    const m = FENCE.exec(lines[i]);
    if (fence) {
      const closing = lines[i].trim();
      if (closing.length >= fence.length && closing === fence[0].repeat(closing.length)) fence = null;
    } else if (m) {
      fence = m[1];
    } else {
      const d = DEFINITION.exec(lines[i]);
      if (d && (i === 0 || lines[i - 1] === DEFINED || !lines[i - 1].trim())) { // (never inside a paragraph)
        if (!found.has(label(d[1]))) found.set(label(d[1]), d[2]);
        lines[i] = DEFINED;
      }
    }
  }
  return found;
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
      let level = 0;
      for (; i < lines.length && lines[i].trim(); i += 1) {
        if (body.length && (m = SETEXT.exec(lines[i]))) { // "Title" over "===" (or "---"): a heading
          level = m[1][0] === "=" ? 1 : 2;
          i += 1;
          break;
        }
        if (body.length && startsBlock(lines[i])) break;
        body.push(lines[i].trim());
      }
      parent.append(inline(body.join("\n"), el(level ? `h${level + 2}` : "p")));
    }
  }
}

function list(lines, i, parent, depth) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  // An item one space further in is a sibling; two or more, a nested list, even short of the item's text
  // ("1. a" over "  - b"): what the writer meant, where CommonMark would start a list of its own.
  const sibling = (line) => {
    const m = ITEM.exec(line);
    return m && m[1].length >= indent && m[1].length <= indent + 1 && /\d/.test(m[2]) === ordered;
  };
  while (i < lines.length && sibling(lines[i])) {
    let width = ITEM.exec(lines[i])[0].length;
    const body = [lines[i].slice(width)];
    for (i += 1; i < lines.length; i += 1) {
      const line = lines[i];
      if (!line.trim()) {
        const next = nextFilled(lines, i);
        if (next < lines.length && indentOf(lines[next]) >= width) body.push(""); // the item goes on below
        else break;
      } else if (indentOf(line) >= width) {
        body.push(line.slice(width));
      } else if (ITEM.test(line) && indentOf(line) >= indent + 2) {
        width = indentOf(line); // a nested list short of the item's text: the item's text column from here
        body.push(line.slice(width));
      } else if (!startsBlock(line) && body[body.length - 1].trim()) {
        body.push(line.trim()); // a lazy continuation of its paragraph
      } else {
        break;
      }
    }
    const task = TASK.exec(body[0]);
    const item = el("li", task ? { class: "task" } : {});
    if (task) { // "- [x] done": a mark, not a checkbox anyone could tick
      const done = task[1] !== " ";
      item.append(el("span", { class: done ? "check done" : "check", text: done ? "☑" : "☐", title: done ? "done" : "to do" }));
      body[0] = body[0].slice(task[0].length);
    }
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
// a character the part before cannot hold, so a try costs the length of what it reads: each run of spaces is
// taken whole (`(?=(\s*))\n`, an atomic group), never given back to the next one to try again.
const URL_TEXT = new RegExp(String.raw`(?=(\s*))\1<?([^\s<>()]*(?:\([^\s<>()]*\)[^\s<>()]*)*)>?(?=(\s*))\3` +
  String.raw`(?:(?<=\s)(?:"[^"\n]*"|'[^'\n]*')(?=(\s*))\4)?\)`, "y");
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
  return m ? [m[2], URL_TEXT.lastIndex] : null;
}

// A link by reference after its text `[…]` (from `open` to `end`): [address, end] when its label is defined.
function reference(c, open, end) {
  const t = c.text;
  let name = t.slice(open + 1, end);
  let after = end + 1;
  if (t[after] === "[") {
    const close = c.next("]", (k) => t[k] === "]", after + 1);
    if (close < 0 || close >= c.newline(after)) return null;
    if (close > after + 1) name = t.slice(after + 1, close);
    after = close + 1;
  }
  const href = references.get(label(name));
  return href === undefined ? null : [href, after];
}

const ENTITY = /&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|(lt|gt|amp|quot|apos|nbsp|copy|reg|trade|hellip|mdash|ndash|larr|rarr|times|middot|laquo|raquo));/y;
const ENTITIES = { lt: "<", gt: ">", amp: "&", quot: '"', apos: "'", nbsp: "\u00a0", copy: "©", reg: "®", trade: "™",
  hellip: "…", mdash: "—", ndash: "–", larr: "←", rarr: "→", times: "×", middot: "·", laquo: "«", raquo: "»" };

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
  (c, i, depth) => { // [text](address), or by reference: [text][label], [label][], [label]
    if (c.text[i] !== "[") return null;
    const end = linkText(c, i + 1);
    const target = end < 0 ? null : address(c, end + 1) || reference(c, i, end);
    if (!target) return null;
    const text = c.text.slice(i + 1, end);
    return [target[1], (out) => out.append(link(target[0], [inline(text, document.createDocumentFragment(), depth + 1)]))];
  },
  (c, i) => { // &lt;, &amp;, &#169;, &#x2014;: the character, as text
    if (c.text[i] !== "&") return null;
    ENTITY.lastIndex = i;
    const m = ENTITY.exec(c.text);
    if (!m) return null;
    const code = m[1] ? parseInt(m[1], 10) : m[2] ? parseInt(m[2], 16) : null;
    const char = code === null ? ENTITIES[m[3]]
      : code === 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff) ? "\ufffd" : String.fromCodePoint(code);
    return [ENTITY.lastIndex, (out) => out.append(char)];
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
  (c, i, depth) => { // ***strong emphasis***
    const t = c.text;
    const found = t[i] === "*" && delimited(c, i, "***", (x) => notSpace(x) && x !== "*",
      (p) => notSpace(t[p - 1]) && t[p - 1] !== "*", "***");
    return found ? [found[1], (out) => out.append(el("em", {}, inline(found[0], el("strong"), depth + 1)))] : null;
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
