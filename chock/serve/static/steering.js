// Steering the open session: Stop while it runs, Remove once it ended, and the message box under it —
// a follow-up while it runs (taken in before its next model call), a continuation once it ended. A session that
// ended keeping its workspace (stopped, or failed) is removed with it: the daemon commits the workspace's work to
// the session's branch, removes the workspace, then the session (`remove-with-workspace`).
import { api, paths } from "./api.js";
import { $ } from "./dom.js";
import { page, state } from "./state.js";

export const steering = {
  removeTimer: null,
  kept: false, // the open session ended and keeps its workspace: Remove removes that too


  wire() {
    $("stop-button").addEventListener("click", () => this.stop());
    $("remove-button").addEventListener("click", () => this.remove());
    $("say-form").addEventListener("submit", (event) => this.say(event));
    $("say-message").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("say-form").requestSubmit();
    });
  },

  reset() {
    this.kept = false;
    this.show("");
    this.note("action-status", "");
    this.note("say-status", "");
    $("say-message").value = "";
    this.disarm();
  },

  show(status) {
    const running = status === "running" || status === "waiting";
    $("stop-button").hidden = !running;
    $("remove-button").hidden = status !== "ended";
    if (status !== "ended") this.disarm();
    $("say-form").hidden = !status;
    $("say-form").setAttribute("data-mode", running ? "follow-up" : "continue");
    $("say-label").textContent = running ? "Tell it more" : "Continue this session";
    $("say-button").textContent = running ? "Send" : "Continue";
    $("say-message").placeholder = running
      ? "A follow-up: it reads this before its next model call"
      : "What next? The session goes on in its workspace, onto its branch";
  },

  note(id, text, bad = false) {
    $(id).textContent = text;
    $(id).className = `note${bad ? " bad" : ""}`;
  },

  async post(verb, body) {
    const { host, id, project } = state.session; // the open session, on its own host
    return api(paths.verb(host, id, verb), { body: { project, ...body } });
  },

  async stop() {
    const button = $("stop-button");
    button.disabled = true;
    this.note("action-status", "stopping…");
    try {
      await this.post("stop");
      this.note("action-status", "stopped");
      page.refreshList();
    } catch (error) {
      this.note("action-status", error.message, true);
    } finally {
      button.disabled = false;
    }
  },

  /** Whether the open session keeps its workspace, as its row says (`workspace_kept`). */
  keeps(kept) {
    if (Boolean(kept) === this.kept) return;
    this.kept = Boolean(kept);
    this.disarm();
  },

  disarm() {
    clearTimeout(this.removeTimer);
    $("remove-button").classList.remove("armed");
    $("remove-button").textContent = this.kept ? "Remove with its workspace" : "Remove";
  },

  async remove() {
    const button = $("remove-button");
    const { id } = state.session;
    if (!button.classList.contains("armed")) { // a second click within a few seconds removes it
      button.classList.add("armed");
      button.textContent = this.kept
        ? `Commit its workspace to chock/${id}, then remove both?`
        : "Remove its log for good?";
      this.removeTimer = setTimeout(() => this.disarm(), 5000);
      return;
    }
    const withWorkspace = this.kept;
    this.disarm();
    button.disabled = true;
    this.note("action-status", withWorkspace ? "committing its workspace, then removing…" : "removing…");
    try {
      await this.post(withWorkspace ? "remove-with-workspace" : "remove");
      page.closeSession();
      $("sessions-note").textContent = withWorkspace
        ? `removed ${id} and its workspace (its work is on the branch chock/${id}, if it changed anything)`
        : `removed ${id} (its branch chock/${id} stays)`;
      page.refreshList();
    } catch (error) {
      if (!withWorkspace && /keeps its workspace/.test(error.message)) {
        // The row was older than the session: say it in the page's words, and offer it.
        this.keeps(true);
        this.note("action-status", "This session keeps its workspace. Remove it with its workspace: the work in " +
          `it is committed to the branch chock/${id} first, so nothing is lost.`, true);
      } else {
        this.note("action-status", error.message, true);
      }
    } finally {
      button.disabled = false;
    }
  },

  async say(event) {
    event.preventDefault();
    const message = $("say-message").value.trim();
    if (!message || !state.session) return;
    const { host, id } = state.session;
    const button = $("say-button");
    button.disabled = true;
    this.note("say-status", "sending…");
    try {
      const data = await this.post("messages", { message });
      $("say-message").value = "";
      this.note("say-status", data.how === "continued"
        ? "continued: the session runs again"
        : "sent: it reads this before its next model call");
      if (data.how === "continued" && page.view.host === host && page.view.id === id) page.view.follow();
      page.refreshList();
    } catch (error) {
      this.note("say-status", error.message, true);
    } finally {
      button.disabled = false;
    }
  },
};
