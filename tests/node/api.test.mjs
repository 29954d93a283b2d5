// `node --test` tests of the page's API client, chock/serve/static/api.js, against a real HTTP server on
// loopback: the paths it calls, what it sends, and the error each refusal becomes. Nothing newer than Node 18.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import test from "node:test";

import { client, failure, paths } from "../../chock/serve/static/api.js";

test("every path names its host, and escapes what a person typed", () => {
  assert.equal(paths.health(), "/api/health");
  assert.equal(paths.hosts(), "/api/hosts");
  assert.equal(paths.all("build"), "/api/hosts/build/sessions/all");
  assert.equal(paths.sessions("local", "/src/a b&c"), "/api/hosts/local/sessions?project=%2Fsrc%2Fa%20b%26c");
  assert.equal(paths.start("vm"), "/api/hosts/vm/sessions");
  assert.equal(paths.start("vm", "work"), "/api/hosts/vm/sessions/start-with");
  assert.equal(paths.instances("vm"), "/api/hosts/vm/instances");
  assert.equal(paths.watch("build", "s/1", "/p?x", 7),
    "/api/hosts/build/sessions/s%2F1/watch?project=%2Fp%3Fx&after=7");
  assert.equal(paths.verb("b/../local", "../s", "answer"), "/api/hosts/b%2F..%2Flocal/sessions/..%2Fs/answer");
});

test("a refusal's message: serve's message, else its text, else its status line", () => {
  assert.equal(failure(409, "Conflict", '{"message":"busy"}', { message: "busy" }).message, "busy");
  assert.equal(failure(502, "Bad Gateway", "the daemon is gone\n", null).message, "the daemon is gone");
  const error = failure(500, "Internal Server Error", "", null);
  assert.equal(error.message, "500 Internal Server Error");
  assert.equal(error.status, 500);
  assert.equal(failure(502, "Bad Gateway", "", { error: "unknown-verb", message: "older" }).code, "unknown-verb");
});

// Each path answers as the table says; what was asked is kept in `asked`.
const REPLIES = {
  "/ok": [200, "application/json", '{"id":"s1"}'],
  "/empty": [200, "application/json", ""],
  "/not-json": [200, "text/plain", "hello"],
  "/refused": [409, "application/json", '{"error":"busy","message":"the daemon says busy"}'],
  "/text": [502, "text/plain", "no daemon at /run/chock.sock\n"],
  "/bare": [503, "text/plain", ""],
};

async function withServer(body) {
  const asked = [];
  const server = createServer((request, response) => {
    let text = "";
    request.on("data", (chunk) => { text += chunk; });
    request.on("end", () => {
      asked.push({ method: request.method, url: request.url, headers: request.headers, body: text });
      const [status, type, reply] = REPLIES[new URL(request.url, "http://x").pathname] || [404, "text/plain", ""];
      response.writeHead(status, { "Content-Type": type });
      response.end(reply);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    await body(client(fetch, `http://127.0.0.1:${server.address().port}`), asked);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

test("a call with a body posts it as JSON and resolves to the reply", () => withServer(async (api, asked) => {
  assert.deepEqual(await api("/ok", { body: { project: "/p", message: "hi" } }), { id: "s1" });
  assert.equal(asked[0].method, "POST");
  assert.equal(asked[0].headers["content-type"], "application/json");
  assert.equal(asked[0].headers.accept, "application/json");
  assert.deepEqual(JSON.parse(asked[0].body), { project: "/p", message: "hi" });
  assert.deepEqual(await api("/ok"), { id: "s1" });
  assert.equal(asked[1].method, "GET");
  assert.equal(await api("/empty"), null);
  assert.equal(await api("/not-json"), null);
}));

test("a refused call throws the message a person can act on, with its status", () => withServer(async (api) => {
  await assert.rejects(api("/refused", { body: {} }), { message: "the daemon says busy", status: 409 });
  await assert.rejects(api("/text"), { message: "no daemon at /run/chock.sock", status: 502 });
  await assert.rejects(api("/bare"), { message: "503 Service Unavailable", status: 503 });
}));
