// What the page's modules share: the open project and session, the debug record tests read, and the calls one
// module makes into another that imports it (`page`, filled in by app.js), so no two modules import each other.

/** What tests (and a curious person at the console) can read as `window.chock`: every event id applied, in order. */
export const debug = { seen: [], reconnects: 0, notified: [] };

export const state = {
  project: "",         // the project opened, on `projectHost`: where Start starts a session
  projectHost: "",
  session: null,       // the open session: {host, id, project}
  hosts: [],           // serve's hosts and their states (GET /api/hosts)
  hostFilter: "",      // the list shows this host's sessions, or every host's
  hostRows: new Map(), // each host's rows as it last sent them, newest first (kept while it is unreachable)
  rows: new Map(),     // the list's rows by rowKey(host, id), newest first
  listTimer: null,
  listInFlight: false,
};

/** The session list's and the open session's entry points, which the timeline and steering call. */
export const page = {
  refreshList: async () => {},
  openSession: (host, id) => {},
  closeSession: () => {},
  view: { row() {}, close() {} }, // the open SessionView, or this stand-in for none
};
