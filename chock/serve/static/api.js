// Serve's API as the page calls it (docs/architecture.md#serve): JSON in, JSON out, and a refusal as an Error
// whose message is the one serve (or the daemon behind it) gave.

export const q = encodeURIComponent;

/** The paths the page calls, in one place: each below its host (`/api/hosts/<name>/…`), which owns the session. */
const at = (host) => `/api/hosts/${q(host)}`;
export const paths = {
  health: () => "/api/health",
  hosts: () => "/api/hosts",
  all: (host) => `${at(host)}/sessions/all`,
  sessions: (host, project) => `${at(host)}/sessions?project=${q(project)}`,
  start: (host, instance) => `${at(host)}/sessions${instance ? "/start-with" : ""}`,
  instances: (host) => `${at(host)}/instances`,
  watch: (host, id, project, after) => `${at(host)}/sessions/${q(id)}/watch?project=${q(project)}&after=${after}`,
  verb: (host, id, verb) => `${at(host)}/sessions/${q(id)}/${verb}`,
};

/** The Error a response that is not ok becomes: serve's `message`, else its text, else its status line. */
export function failure(status, statusText, text, data) {
  const message = (data && data.message) || text.trim() || `${status} ${statusText}`;
  const error = new Error(message);
  error.status = status;
  error.code = (data && data.error) || ""; // serve's code: `unknown-verb` is a host whose Chock is older
  return error;
}

/** A client over `fetch`: `call(path, {body, method, headers})` posts `body` as JSON when there is one and
 * resolves to the reply's JSON (null for none or for text that is not JSON), or throws `failure(…)`. */
export function client(fetch, base = "") {
  return async function call(path, options = {}) {
    const init = { ...options, headers: { Accept: "application/json", ...(options.headers || {}) } };
    if (options.body !== undefined) {
      init.method = init.method || "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    const response = await fetch(base + path, init);
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (!response.ok) throw failure(response.status, response.statusText, text, data);
    return data;
  };
}

/** The page's client: the browser's fetch, looked up at each call. */
export const api = client((url, init) => fetch(url, init));
