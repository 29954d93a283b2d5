// `node --test` tests of the page over several hosts (chock/serve/static/hosts.js): one list merged from every
// host's rows, the filter by host, a host's state in words, and what Start offers on a host. Nothing newer than
// Node 18.
import assert from "node:assert/strict";
import test from "node:test";

import { filterRows, hostText, instanceChoices, mergeRows, rowKey } from "../../chock/serve/static/hosts.js";

// Each host's rows as its `sessions` sends them: newest first. The same id on two hosts is two sessions.
const LOCAL = [
  { id: "20261203-090000-aaaaaa", started_at: "2026-12-03T09:00:00Z" },
  { id: "20261201-090000-bbbbbb", started_at: "2026-12-01T09:00:00Z" },
];
const BUILD = [
  { id: "20261202-090000-cccccc", started_at: "2026-12-02T09:00:00Z" },
  { id: "20261201-090000-bbbbbb", started_at: "2026-12-01T09:00:00Z" },
];

test("every host's rows in one list, newest first, each with its host", () => {
  const merged = mergeRows([["local", LOCAL], ["build", BUILD]]);
  assert.deepEqual(merged.map((row) => rowKey(row.host, row.id)), [
    "local/20261203-090000-aaaaaa",
    "build/20261202-090000-cccccc",
    "local/20261201-090000-bbbbbb", // the same moment: the hosts' order
    "build/20261201-090000-bbbbbb",
  ]);
  assert.equal(LOCAL[0].host, undefined, "a host's own rows are not changed");
  assert.deepEqual(mergeRows([]), []);
});

test("the filter shows one host's sessions, or every host's", () => {
  const merged = mergeRows([["local", LOCAL], ["build", BUILD]]);
  assert.deepEqual(filterRows(merged, "build").map((row) => row.id),
    ["20261202-090000-cccccc", "20261201-090000-bbbbbb"]);
  assert.equal(filterRows(merged, "").length, 4);
  assert.deepEqual(filterRows(merged, "vm"), []);
});

test("a host's state says its protocol, or why it does not answer", () => {
  assert.equal(hostText({ name: "build", state: "reachable", protocol: 1 }), "build · protocol 1");
  assert.equal(hostText({ name: "vm", state: "unreachable", reason: "ssh could not reach dev@vm" }),
    "vm · unreachable: ssh could not reach dev@vm");
});

test("Start offers a host's instances, the default first; an older host, its default alone", () => {
  const instances = [
    { name: "cheap", kind: "replay", default: false },
    { name: "work", kind: "anthropic", default: true },
  ];
  assert.deepEqual(instanceChoices(instances), [
    { value: "", label: "work (anthropic) · default" }, // the default is `start`
    { value: "cheap", label: "cheap (replay)" },        // another is `start-with`
  ]);
  assert.deepEqual(instanceChoices([{ name: "a", kind: "replay", default: false }]).map((c) => c.value), ["", "a"]);
  assert.deepEqual(instanceChoices(null, true), [{ value: "", label: "its default instance" }]);
});
