// `node --test`: every module of the page but its entry (app.js, which boots the page) imports under node with
// no DOM at all — none reaches `document` or `window` on import — and exports what it says. Nothing newer than
// Node 18.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import test from "node:test";

const STATIC = new URL("../../chock/serve/static/", import.meta.url);

test("every module imports without a DOM", async () => {
  const names = readdirSync(STATIC).filter((name) => name.endsWith(".js") && name !== "app.js");
  assert.ok(names.length >= 8, `the page's modules: ${names}`);
  assert.equal(globalThis.document, undefined);
  for (const name of names) {
    const module = await import(new URL(name, STATIC));
    assert.ok(Object.keys(module).length > 0, `${name} exports something`);
  }
});
