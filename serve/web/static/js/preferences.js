// The signed-in user's preferences (units, zone, columns per table), kept on the server
// (users.preferences, docs/dashboard.md "Preferences") so they follow the user to every
// device page and every browser. The page gets them in its config; changes are sent with
// PUT /dashboard/preferences and the session's CSRF value.

/** The preferences as the page was made with them, and a way to change them. */
export class Preferences {
  constructor(stored) {
    this.stored = Object.assign({}, stored || {});
    this.pending = null;
    this.timer = null;
    this.inflight = null;  // the request being sent, if any
  }

  get(key) { return this.stored[key]; }

  /** Remember `changes` (merged at the top level) and send them shortly, once for a burst. */
  remember(changes) {
    const before = JSON.stringify(this.stored);
    Object.assign(this.stored, changes);
    if (JSON.stringify(this.stored) === before) return;
    this.pending = Object.assign(this.pending || {}, changes);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.flush(), 300);
  }

  /** Send what is pending now, after the request before it; resolves when the server has
   *  it. One request at a time: two in flight may be answered by two API workers in either
   *  order, and the older choice then overwrote the newer one (a zone switched to UTC and
   *  back stayed UTC, seen in a test run). `leaving`: the page is going away, so send at
   *  once (a continuation after the unload would never run). */
  flush(leaving = false) {
    clearTimeout(this.timer);
    if (leaving) return this.send();
    const previous = this.inflight;
    const sent = (async () => {
      if (previous) await previous.catch(() => {});  // its failure was reported to its caller
      await this.send();
    })();
    this.inflight = sent;
    return sent;
  }

  /** One PUT of everything pending (taken now, so changes made meanwhile go with it). */
  async send() {
    const body = this.pending;
    if (!body) return;
    this.pending = null;
    const meta = document.querySelector("meta[name=csrf-token]");
    const r = await fetch("/dashboard/preferences", {
      // keepalive: a change made just before leaving the page still arrives.
      method: "PUT", credentials: "same-origin", body: JSON.stringify(body), keepalive: true,
      headers: {"Content-Type": "application/json", "X-CSRF-Token": meta ? meta.content : ""},
    });
    if (!r.ok) throw new Error("preferences not saved: " + r.status);
    this.saved = (this.saved || 0) + 1;
  }
}
