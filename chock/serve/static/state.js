// What the page's modules share: the open project and session, the debug record tests read, and the calls one
// module makes into another that imports it (`page`, filled in by app.js), so no two modules import each other.

/** What tests (and a curious person at the console) can read as `window.chock`: every event id applied, in order. */
export const debug = { seen: [], reconnects: 0, notified: [] };

export const state = {
  project: "",
  sessionId: null,
  rows: new Map(),     // the session list's rows by id, newest first
  listTimer: null,
  listInFlight: false,
};

/** The session list's and the open session's entry points, which the timeline and steering call. */
export const page = {
  refreshList: async () => {},
  openSession: (id) => {},
  closeSession: () => {},
  view: { row() {}, close() {} }, // the open SessionView, or this stand-in for none
};
