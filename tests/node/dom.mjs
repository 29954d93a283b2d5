// A DOM of plain objects, enough for the page's modules under node: elements with attributes, children, text,
// classes and listeners, found by id or by a class selector, and `html`, what a browser's serializer would make
// of them. `install()` makes it the global `document` (and `window`, `localStorage`) that the modules reach at
// call time. Nothing newer than Node 18.

// Properties the page sets through `el(tag, {…})` that a browser reflects as attributes.
const REFLECTED = { className: "class", href: "href", rel: "rel", target: "target", referrerPolicy: "referrerPolicy",
  title: "title", type: "type", value: "value", placeholder: "placeholder", start: "start" };
const BOOLEAN = ["hidden", "disabled"];

// What a browser's serializer does to text: the markup a model wrote comes out as text, never as tags.
export function escape(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

class ClassList {
  constructor(node) { this.node = node; }
  get names() { return (this.node.attrs.class || "").split(/\s+/).filter(Boolean); }
  set names(names) { this.node.attrs.class = names.join(" "); }
  contains(name) { return this.names.includes(name); }
  add(name) { if (!this.contains(name)) this.names = [...this.names, name]; }
  remove(name) { if (this.node.attrs.class !== undefined) this.names = this.names.filter((n) => n !== name); }
  toggle(name, on = !this.contains(name)) { if (on) this.add(name); else this.remove(name); return on; }
}

export class Element {
  constructor(tag) {
    this.tag = tag; // "" for a fragment
    this.children = [];
    this.attrs = {};
    this.parentElement = null;
    this.listeners = {};
    this.classList = new ClassList(this);
  }

  get tagName() { return this.tag.toUpperCase(); }
  get dataset() {
    const data = {};
    for (const [key, value] of Object.entries(this.attrs)) {
      if (key.startsWith("data-")) data[key.slice(5).replace(/-(\w)/g, (_, c) => c.toUpperCase())] = value;
    }
    return data;
  }

  setAttribute(name, value) { this.attrs[name] = String(value); }
  getAttribute(name) { return Object.hasOwn(this.attrs, name) ? this.attrs[name] : null; }
  hasAttribute(name) { return Object.hasOwn(this.attrs, name); }
  removeAttribute(name) { delete this.attrs[name]; }

  adopt(item) {
    if (!(item instanceof Element)) return String(item);
    if (!item.tag) return item.children.map((child) => this.adopt(child)); // a fragment gives its children
    if (item.parentElement) item.remove();
    item.parentElement = this;
    return item;
  }
  append(...items) { for (const item of items) this.children.push(...[this.adopt(item)].flat()); }
  replaceChildren(...items) {
    for (const child of this.children) if (child instanceof Element) child.parentElement = null;
    this.children = [];
    this.append(...items);
  }
  remove() {
    const parent = this.parentElement;
    if (parent) parent.children = parent.children.filter((child) => child !== this);
    this.parentElement = null;
  }
  insert(offset, items) {
    const parent = this.parentElement;
    const adopted = items.map((item) => parent.adopt(item)).flat();
    parent.children.splice(parent.children.indexOf(this) + offset, 0, ...adopted);
  }
  before(...items) { this.insert(0, items); }
  after(...items) { this.insert(1, items); }

  get textContent() { return this.children.map((c) => (c instanceof Element ? c.textContent : c)).join(""); }
  set textContent(text) { this.replaceChildren(String(text)); }

  addEventListener(type, listener) { (this.listeners[type] ||= []).push(listener); }
  dispatch(type, event = {}) { for (const listener of this.listeners[type] || []) listener(event); }
  click() { this.dispatch("click"); }
  scrollIntoView() {}

  *descendants() {
    for (const child of this.children) {
      if (!(child instanceof Element)) continue;
      yield child;
      yield* child.descendants();
    }
  }
  // Selectors the page uses: `.class`, `tag`, and `tag[attr]`, one compound, no combinators.
  matches(selector) {
    const m = /^([a-z]*)(?:\.([\w-]+))?(?:\[([\w-]+)\])?$/.exec(selector);
    if (!m) throw new Error(`the fake DOM does not read the selector ${selector}`);
    return (!m[1] || this.tag === m[1]) && (!m[2] || this.classList.contains(m[2])) && (!m[3] || this.hasAttribute(m[3]));
  }
  querySelectorAll(selector) { return [...this.descendants()].filter((node) => node.matches(selector)); }
  querySelector(selector) { return this.querySelectorAll(selector)[0] || null; }

  get html() {
    const attrs = Object.entries(this.attrs).map(([k, v]) => ` ${k}="${escape(v)}"`).join("");
    const inner = this.children.map((c) => (c instanceof Element ? c.html : escape(c))).join("");
    return this.tag ? `<${this.tag}${attrs}>${inner}</${this.tag}>` : inner;
  }
}

for (const [property, attribute] of Object.entries(REFLECTED)) {
  Object.defineProperty(Element.prototype, property, {
    get() { return this.attrs[attribute] ?? ""; },
    set(value) { this.attrs[attribute] = String(value); },
  });
}
for (const property of BOOLEAN) {
  Object.defineProperty(Element.prototype, property, {
    get() { return this.hasAttribute(property); },
    set(value) { if (value) this.attrs[property] = ""; else delete this.attrs[property]; },
  });
}

export class Document {
  constructor() {
    this.ids = new Map();
    this.body = new Element("body");
    this.title = "";
    this.visibilityState = "visible";
    this.focused = true;
    this.listeners = {};
  }
  createElement(tag) { return new Element(tag); }
  createDocumentFragment() { return new Element(""); }
  // Any id names an element: the ones index.html holds, made when first asked for.
  getElementById(id) {
    if (!this.ids.has(id)) this.ids.set(id, new Element("div"));
    return this.ids.get(id);
  }
  hasFocus() { return this.focused; }
  addEventListener(type, listener) { (this.listeners[type] ||= []).push(listener); }
}

class Storage {
  constructor() { this.items = new Map(); }
  getItem(key) { return this.items.has(key) ? this.items.get(key) : null; }
  setItem(key, value) { this.items.set(key, String(value)); }
}

/** A new document (and window, localStorage) as the globals the page's modules use. */
export function install() {
  const document = new Document();
  globalThis.document = document;
  globalThis.localStorage = new Storage();
  globalThis.window = globalThis;
  globalThis.innerHeight = 800;
  globalThis.scrollY = 0;
  return document;
}
