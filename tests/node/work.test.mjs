// `node --test` tests of a session's whole work on the page (chock/serve/static/work.js): the files, the diff
// against the base and the commands to review and merge the branch; "no changes" when no branch was made; the
// agent's paths and lines as text, never markup. Nothing newer than Node 18.
import assert from "node:assert/strict";
import test from "node:test";

import { SessionView } from "../../chock/serve/static/session.js";
import { page } from "../../chock/serve/static/state.js";
import { install } from "./dom.mjs";

function view() {
  const document = install();
  page.refreshList = async () => {};
  return { document, view: new SessionView("s1") };
}

const DIFF = "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-old\n+new\n"
  + "diff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\n";

test("a finish with a branch shows the files, the whole diff and the commands to review and merge it", () => {
  const { document, view: shown } = view();
  shown.take({ id: 1, type: "workspace.close", branch: "chock/s1", commit: "c".repeat(40), base: "b".repeat(40),
    diff: DIFF, diff_truncated: true, files_left_out: 1100,
    files: [{ path: "app.py", status: "M", added: 1, deleted: 1, binary: false },
      { path: "<img src=x onerror=alert(1)>.png", status: "A", added: null, deleted: null, binary: true }] });
  const work = document.getElementById("timeline").querySelector("div.work");
  assert.equal(work.getAttribute("data-branch"), "chock/s1");
  const files = work.querySelector("ul.files").children.map((item) => item.textContent);
  assert.deepEqual(files, ["Mapp.py+1 −1", "A<img src=x onerror=alert(1)>.pngbinary"]);
  assert.ok(!work.html.includes("<img"), "a path is text, never markup");
  assert.match(work.textContent, /1102 files changed against its base bbbbbbbbbb/);
  assert.match(work.textContent, /and 1,100 more files, not listed/);
  assert.match(work.querySelector("details.whole-diff").textContent, /^Diff \(cut at 256 KiB.*\+new/s);
  assert.equal(work.querySelector("pre.commands").textContent,
    `git diff ${"b".repeat(40)} chock/s1\ngit merge chock/s1`);
});

test("a finish that made no branch says no changes; a newer finish closes an older diff", () => {
  const { document, view: shown } = view();
  shown.take({ id: 1, type: "workspace.close", branch: "chock/s1", base: "b", diff: DIFF, files: [] });
  shown.take({ id: 2, type: "workspace.close", branch: "chock/s1", base: "b", diff: DIFF, files: [] });
  const diffs = document.getElementById("timeline").querySelectorAll("details.whole-diff");
  assert.deepEqual(diffs.map((node) => Boolean(node.open)), [false, true]);
  const { document: other, view: none } = view();
  none.take({ id: 1, type: "workspace.close", branch: null, commit: null });
  const work = other.getElementById("timeline").querySelector("div.work");
  assert.equal(work.textContent, "No changesThe work equals the session's base, so no branch was made.");
});

test("Remove refused because the session keeps its workspace says so in the page's words and offers it", async () => {
  const { document } = view();
  const { steering } = await import("../../chock/serve/static/steering.js");
  const { state } = await import("../../chock/serve/static/state.js");
  const asked = [];
  const closed = [];
  page.closeSession = () => closed.push(true);
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (url, init) => {
    asked.push(url);
    const refused = url.endsWith("/remove");
    const body = refused
      ? { error: "refused", message: "session s1 keeps its workspace; `chock workspace remove s1` commits its work to "
        + "its branch and removes it (or remove the session with --with-workspace)" }
      : { removed: true, workspace: true };
    return { ok: !refused, status: refused ? 422 : 200, statusText: "", text: async () => JSON.stringify(body) };
  };
  state.session = { host: "local", id: "s1", project: "/p" };
  steering.reset();
  steering.show("ended");
  await steering.remove();
  await steering.remove();
  const status = document.getElementById("action-status").textContent;
  assert.match(status, /^This session keeps its workspace\. Remove it with its workspace/);
  assert.ok(!status.includes("--with-workspace") && !status.includes("chock workspace"), status);
  assert.equal(document.getElementById("remove-button").textContent, "Remove with its workspace");
  await steering.remove();
  assert.equal(document.getElementById("remove-button").textContent,
    "Commit its workspace to chock/s1, then remove both?");
  await steering.remove();
  assert.deepEqual(asked, ["/api/hosts/local/sessions/s1/remove", "/api/hosts/local/sessions/s1/remove-with-workspace"]);
  assert.equal(closed.length, 1);
  assert.match(document.getElementById("sessions-note").textContent, /^removed s1 and its workspace/);
  globalThis.fetch = realFetch;
});
