// The page's two DOM helpers. Both reach `document` when called, never on import, so node can load every module.

/** The element with this id. */
export const $ = (id) => document.getElementById(id);

/** A new element: `class` and `text` set its class and text, `data-*` its attributes, anything else a property.
 * Children that are null are left out; strings are text, never HTML. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}
