// Annotations on the device page's main chart (docs/dashboard.md "Annotations"): the device's
// notes in the loaded range from /api/v2/annotations, drawn by a uPlot plugin (a line for an
// instant, a translucent band for a range, the text on hover) and listed under the chart; the
// note form adds one (a click on the chart picks its time, shift-click its end) through the
// dashboard's POST /dashboard/annotations, which passes it to the API as the signed-in user.
import {get, iso} from "./api.js";

const $ = (id) => document.getElementById(id);
const HIT_PX = 5;  // how close (CSS pixels) the pointer must come to an instant's line

/** "#8250df" -> "rgba(130,80,223,a)". */
function translucent(hex, a) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return "rgba(" + r + "," + g + "," + b + "," + a + ")";
}

/** Epoch seconds of an API time. */
const seconds = (t) => Date.parse(t) / 1000;

export class Annotations {
  constructor(cfg, readings, probe) {
    this.cfg = cfg;
    this.readings = readings;  // the chart view whose chart is drawn on
    this.probe = probe;
    this.items = [];
    this.generation = 0;
    this.tip = null;
    probe.notes = {loaded: 0, drawn: 0, items: []};
  }

  /** The uPlot plugin: bands under the series, instants over them, the hover text. */
  plugin() {
    return {hooks: {
      drawClear: [(u) => this.drawBands(u)],
      draw: [(u) => this.drawInstants(u)],
      setCursor: [(u) => this.hover(u)],
      ready: [(u) => this.attach(u)],
    }};
  }

  /** Fetch the device's annotations overlapping [start, end] (epoch seconds) and redraw. */
  async load([start, end]) {
    const mine = ++this.generation;
    const p = new URLSearchParams({device: this.cfg.device, start_time: iso(start),
                                   end_time: iso(end), limit: String(this.cfg.notes_page)});
    let body;
    try {
      ({body} = await get("/api/v2/annotations?" + p.toString()));
    } catch (err) {
      if (mine === this.generation) $("notes-status").textContent = "Notes: " + (err.message || err);
      return;
    }
    if (mine !== this.generation) return;
    this.items = body.items.map((a) => ({...a, t0: seconds(a.start_time),
                                         t1: a.end_time ? seconds(a.end_time) : null}));
    this.probe.notes.loaded += 1;
    this.probe.notes.items = this.items.map((a) => a.id);
    $("notes-status").textContent = body.total > this.items.length
      ? "The first " + this.items.length + " of " + body.total + " notes in this range."
      : (this.items.length ? "" : "No notes in this range.");
    this.list();
    if (this.readings.chart) this.readings.chart.redraw(false, false);
  }

  drawBands(u) {
    const ctx = u.ctx, {top, height} = u.bbox;
    ctx.save();
    ctx.fillStyle = translucent(this.cfg.note_colour, 0.25);
    for (const a of this.items) {
      if (a.t1 === null) continue;
      const x0 = u.valToPos(a.t0, "x", true), x1 = u.valToPos(a.t1, "x", true);
      const left = Math.max(Math.min(x0, x1), u.bbox.left);
      const right = Math.min(Math.max(x0, x1), u.bbox.left + u.bbox.width);
      if (right > left) ctx.fillRect(left, top, Math.max(right - left, 2), height);
    }
    ctx.restore();
  }

  drawInstants(u) {
    const ctx = u.ctx, {top, height, left, width} = u.bbox;
    ctx.save();
    ctx.strokeStyle = ctx.fillStyle = this.cfg.note_colour;
    ctx.lineWidth = 2 * devicePixelRatio;
    for (const a of this.items) {
      const x = Math.round(u.valToPos(a.t0, "x", true));
      if (a.t1 !== null || x < left || x > left + width) continue;  // a range is its band
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.beginPath();  // a small flag at the top marks it as a note, not a reading
      ctx.moveTo(x, top);
      ctx.lineTo(x + 7 * devicePixelRatio, top + 4 * devicePixelRatio);
      ctx.lineTo(x, top + 8 * devicePixelRatio);
      ctx.fill();
    }
    ctx.restore();
    // How many notes the view shows (for the tests): those overlapping the x scale.
    const {min, max} = u.scales.x;
    this.probe.notes.drawn = this.items.filter((a) => a.t0 <= max && (a.t1 ?? a.t0) >= min).length;
    this.readings.el.dataset.notes = String(this.probe.notes.drawn);
  }

  /** The note under the pointer: an instant within HIT_PX, else the shortest range around it. */
  at(u, left) {
    let best = null, bestWidth = Infinity;
    for (const a of this.items) {
      const x0 = u.valToPos(a.t0, "x");
      if (a.t1 === null) {
        if (Math.abs(x0 - left) <= HIT_PX) return a;
        continue;
      }
      const x1 = u.valToPos(a.t1, "x");
      if (left >= x0 && left <= x1 && x1 - x0 < bestWidth) { best = a; bestWidth = x1 - x0; }
    }
    return best;
  }

  hover(u) {
    if (!this.tip) return;
    const left = u.cursor.left;
    const a = left === undefined || left < 0 ? null : this.at(u, left);
    if (!a) { this.tip.hidden = true; return; }
    this.tip.textContent = a.text + (a.tags.length ? "\n#" + a.tags.join(" #") : "") +
      "\n— " + (a.author || "unknown");
    this.tip.style.left = Math.min(left + 12, u.over.clientWidth - 200) + "px";
    this.tip.style.top = Math.max((u.cursor.top || 0) - 10, 0) + "px";
    this.tip.hidden = false;
    this.tip.dataset.id = a.id;
  }

  /** On a new chart: the hover box, and clicks that pick the note form's times. */
  attach(u) {
    this.tip = document.createElement("div");
    this.tip.className = "note-tip";
    this.tip.id = "note-tip";
    this.tip.hidden = true;
    u.over.append(this.tip);
    u.over.addEventListener("click", (e) => {
      if (u.select.width > 0) return;  // the end of a drag-zoom, not a pick
      const t = iso(Math.round(u.posToVal(e.offsetX, "x")));
      const box = $(e.shiftKey ? "note-end" : "note-start");
      if (box) box.value = t;
    });
  }

  list() {
    const ul = $("notes");
    ul.replaceChildren(...this.items.map((a) => {
      const li = document.createElement("li");
      li.dataset.id = a.id;
      const when = a.start_time.slice(0, 16).replace("T", " ") +
        (a.end_time ? " – " + a.end_time.slice(0, 16).replace("T", " ") : "") + " UTC";
      li.textContent = when + ": " + a.text + (a.tags.length ? " [" + a.tags.join(", ") + "]" : "") +
        " (" + (a.author || "unknown") + ")";
      return li;
    }));
  }

  /** The note form: "use the shown range" and submit (then reload the notes). */
  wire() {
    if (!$("note-form")) return;  // a viewer may not add notes: the page has no form
    $("note-range").addEventListener("click", () => {
      if (!this.readings.chart) return;
      const [a, b] = this.readings.shown();
      $("note-start").value = iso(a);
      $("note-end").value = iso(b);
    });
    $("note-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const form = e.target;
      const r = await fetch(form.action, {method: "POST", credentials: "same-origin",
                                          body: new URLSearchParams(new FormData(form))});
      let body = {};
      try { body = await r.json(); } catch (err) { /* not JSON: the status says enough */ }
      const status = $("note-form-status");
      if (!r.ok) { status.textContent = "Not added: " + (body.message || r.statusText); return; }
      status.textContent = "Added.";
      // Text and tags both go: a kept tag was silently saved on the next note.
      $("note-text").value = "";
      $("note-tags").value = "";
      if (this.readings.loaded) await this.load(this.readings.loaded);
    });
  }
}
