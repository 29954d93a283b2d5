// The hosts serve is a client of (docs/remote.md#one-page-over-several-daemons): each one's state in the header,
// the filter of the list by host, the host a project is opened on, and the instances Start offers there. A
// session is named by its host and its id everywhere (`rowKey`); the list is every host's rows in one (`mergeRows`).
import { api, paths } from "./api.js";
import { $, el } from "./dom.js";
import { state } from "./state.js";

/** A session's key on this page: its host and its id (an id alone may be held by two hosts). */
export function rowKey(host, id) {
  return `${host}/${id}`;
}

/** Every host's rows (`[[host, rows newest first], …]`) as one list, newest first, each row with its `host`;
 * rows that start at the same moment keep the hosts' order. */
export function mergeRows(lists) {
  const merged = [];
  lists.forEach(([host, rows], order) => {
    rows.forEach((row, index) => merged.push({ row: { ...row, host }, order, index }));
  });
  merged.sort((a, b) => {
    const at = String(b.row.started_at || "").localeCompare(String(a.row.started_at || ""));
    return at || a.order - b.order || a.index - b.index;
  });
  return merged.map((each) => each.row);
}

/** The rows of one host, or all of them for "". */
export function filterRows(rows, host) {
  return host ? rows.filter((row) => row.host === host) : rows;
}

/** A host's state in a line: reachable with its protocol number, or why not. */
export function hostText(host) {
  return host.state === "reachable"
    ? `${host.name} · protocol ${host.protocol}`
    : `${host.name} · unreachable: ${host.reason || "no answer"}`;
}

/** What Start offers on a host: its instances (the default first chosen), or — from an older host, whose Chock
 * has no `instances` (`older`) — its default alone. An option's value "" sends `start`, a name `start-with`. */
export function instanceChoices(instances, older = false) {
  if (older || !instances || !instances.length) return [{ value: "", label: "its default instance" }];
  const ordered = [...instances].sort((a, b) => Number(b.default) - Number(a.default));
  const choices = ordered.map((each) => ({
    value: each.default ? "" : each.name,
    label: `${each.name} (${each.kind})${each.default ? " · default" : ""}`,
  }));
  if (!ordered[0].default) choices.unshift({ value: "", label: "its default instance" });
  return choices;
}

/** The hosts' states, asked of serve (which greets each at most every few seconds), shown in the header. */
export async function refreshHosts() {
  try {
    state.hosts = await api(paths.hosts());
  } catch (error) {
    $("hosts").replaceChildren(el("li", { class: "bad", text: error.message }));
    return;
  }
  $("hosts").replaceChildren(...state.hosts.map((host) => {
    const item = el("li", { class: host.state === "reachable" ? "ok" : "bad", text: hostText(host) });
    item.setAttribute("data-host", host.name);
    item.setAttribute("data-state", host.state);
    return item;
  }));
  fillHostSelect($("host-filter"), [["", "all hosts"]], state.hostFilter);
  fillHostSelect($("project-host"), [], state.projectHost);
}

function fillHostSelect(select, first, chosen) {
  const names = state.hosts.map((host) => host.name);
  const wanted = [...first.map(([value]) => value), ...names];
  const have = [...select.querySelectorAll("option")].map((option) => option.value);
  if (wanted.join("\n") === have.join("\n")) return; // what the person chose stays chosen
  select.replaceChildren(...first.map(([value, text]) => el("option", { value, text })),
    ...names.map((name) => el("option", { value: name, text: name })));
  if (wanted.includes(chosen)) select.value = chosen;
}

/** Start's instances on the project's host: its `instances`, or its default alone from an older host. */
let loading = 0; // the latest load: an earlier one that answers later changes nothing

export async function loadInstances(host) {
  const select = $("start-instance");
  select.replaceChildren(); // another host's instances are not this one's: none until it answers
  const mine = ++loading;
  let choices;
  try {
    const data = await api(paths.instances(host));
    choices = instanceChoices(data.instances);
  } catch (error) {
    choices = instanceChoices(null, error.code === "unknown-verb");
  }
  if (mine !== loading) return;
  select.replaceChildren(...choices.map((choice) => el("option", { value: choice.value, text: choice.label })));
}
