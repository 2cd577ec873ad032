// The device page's main chart: the chosen table's columns over the chosen range, from the
// API in the chosen units and zone; drag, wheel and button zoom; the CSV link of what is shown.
import {dataUrl, fetchRows, iso} from "./api.js";
import {DAY, colour, unitText} from "./facts.js";
import {rebucket} from "./buckets.js";
import {shape} from "./shape.js";
import {readableInterval} from "./spans.js";
import {dateMaker} from "./zones.js";

const $ = (id) => document.getElementById(id);

/** The main chart view over `controls` (Controls); `hooks.loaded(end)` runs after each load. */
export class Readings {
  constructor(cfg, controls, probe) {
    this.cfg = cfg;
    this.controls = controls;
    this.probe = probe;         // window.sdsDashboard: what tests and the benchmark read
    this.el = $("chart");
    this.chart = null;
    this.loaded = null;         // [start, end] epoch seconds of the fetched range
    this.rows = 0;
    this.firstDraw = true;
    this.generation = 0;        // a newer load makes older answers stale
    this.plugins = [];          // uPlot plugins other views add (js/annotations.js)
  }

  /** Is `generation` still the newest load? */
  current(generation) { return generation === this.generation; }

  /** Label, unit scale and colour of the chosen columns; the y axes, one per unit. */
  looks(cols) {
    const info = Object.fromEntries(this.controls.table().columns.map((c) => [c.name, c]));
    const chosen = this.controls.units();
    const scales = [];
    const looks = Object.fromEntries(cols.map((name, i) => {
      const text = unitText(this.cfg, info[name], chosen);
      if (!scales.includes(text)) scales.push(text);
      return [name, {label: info[name].label + (text ? " (" + text + ")" : ""),
                     scale: text || "_", colour: colour(this.cfg, i)}];
    }));
    const axes = [this.timeAxis()].concat(scales.map((s, i) => ({scale: s || "_", label: s,
      side: i % 2 ? 1 : 3, grid: {show: i === 0}, size: 60})));
    return {look: (name) => looks[name], axes};
  }

  /** The time axis: for tables of days, ticks on whole days labelled with the date only (the
   *  default picked hours for a short span of daily rows). */
  timeAxis() {
    if (this.controls.table().step < DAY) return {};
    const wall = dateMaker(this.el.dataset.zone), day = uPlot.fmtDate("{YYYY}-{MM}-{DD}");
    return {space: 70, incrs: [1, 2, 7, 14, 28, 56, 91, 182, 364].map((d) => d * DAY),
            values: (u, splits) => splits.map((ts) => day(wall(ts)))};
  }

  /** Marks under the plot for incomplete buckets (sample_pct below a whole bucket): hours
   *  or days with readings missing, such as today so far. */
  markIncomplete(u) {
    const marks = this.incomplete || [];
    if (!marks.length) return;
    const {ctx, bbox} = u, step = this.shaped.step;
    ctx.save();
    ctx.fillStyle = this.cfg.incomplete_colour;
    marks.forEach((t) => {
      const a = u.valToPos(t, "x", true), b = u.valToPos(t + step, "x", true);
      const left = Math.max(a, bbox.left), right = Math.min(Math.max(b, a + 3), bbox.left + bbox.width);
      if (right > left) ctx.fillRect(left, bbox.top + bbox.height - 6, right - left, 6);
    });
    ctx.restore();
  }

  make(shaped, axes, z) {
    const el = this.el;
    const opts = {
      width: this.width(), height: this.height(), tzDate: dateMaker(z),
      // A time label is centred on its tick: with no axis on the right, the last one was cut
      // at the canvas's edge ("2026-11-2"). Room for half a date on the right.
      padding: [null, axes.length > 2 ? null : 40, null, null],
      series: [{label: "time (" + z + ")"}].concat(shaped.series), axes, bands: shaped.bands,
      scales: {x: {time: true}},
      cursor: {drag: {x: true, y: false, setScale: true}},
      legend: {live: true},
      plugins: this.plugins,
      hooks: {
        draw: [(u) => {
          this.markIncomplete(u);
          if (this.firstDraw) { this.firstDraw = false; performance.mark("sds-chart-drawn"); }
          this.probe.lastDraw = performance.now();
          // What the canvas shows (tests compare it with what was fetched and downloaded).
          this.probe.drawn = {data: u.data, interval: this.aggregation ? this.aggregation.interval : null};
          el.dataset.state = "drawn";
        }],
        setScale: [(u, key) => {
          if (key === "x") { this.updateCsv(u); this.describe(u); this.refine(); }
        }],
      },
    };
    el.replaceChildren();
    const u = new uPlot(opts, shaped.data, el);
    u.over.addEventListener("wheel", (e) => {  // zoom around the pointer
      e.preventDefault();
      const x = u.posToVal(e.offsetX, "x");
      const f = e.deltaY < 0 ? 0.75 : 1 / 0.75;
      this.zoomTo(x - (x - u.scales.x.min) * f, x + (u.scales.x.max - x) * f);
    }, {passive: false});
    return u;
  }

  width() { return Math.max(this.el.clientWidth, 300); }

  /** 380 px; on a narrow screen (a phone) half the screen's height (the legend below
   *  adds to it), so the chart fits the first screen under the header. */
  height() {
    return window.innerWidth <= 760 ? Math.max(260, Math.round(window.innerHeight * 0.5)) : 380;
  }

  /** Show [min, max] of the loaded range (kept inside it, at least 5 minutes wide). */
  zoomTo(min, max) {
    if (!this.chart || !this.loaded) return;
    const [a, b] = this.loaded;
    const width = Math.min(max - min, b - a);
    min = Math.max(a, Math.min(min, b - width));
    this.chart.setScale("x", {min, max: min + Math.max(width, 300)});
  }

  /** Pan by `f` of the view's width (negative: left). */
  pan(f) {
    if (!this.chart) return;
    const {min, max} = this.chart.scales.x;
    this.zoomTo(min + (max - min) * f, max + (max - min) * f);
  }

  /** Zoom by `f` around the middle (below 1: in). */
  zoom(f) {
    if (!this.chart) return;
    const {min, max} = this.chart.scales.x;
    const mid = (min + max) / 2, half = (max - min) * f / 2;
    this.zoomTo(mid - half, mid + half);
  }

  reset() {
    if (this.chart && this.loaded) this.chart.setScale("x", {min: this.loaded[0], max: this.loaded[1]});
  }

  shown() {
    const u = this.chart;
    return [Math.floor(u.scales.x.min), Math.ceil(u.scales.x.max)];
  }

  /** The "Download CSV" link: what the chart draws in view. Buckets: the API asked with the
   *  drawn interval over the view (the buckets starting in it, as drawn). Rows: the API's rows
   *  over the view, up to its largest page; beyond that the link ends where that page ends, so
   *  its range (and the file's name) is what the file holds, and it says so. */
  updateCsv(u) {
    const cols = this.controls.columns();
    const link = $("csv");
    if (!u || !cols.length) { link.removeAttribute("href"); return; }
    let [a, b] = this.shown();
    const cap = this.cfg.max_limit;  // the API's largest page: what one download holds
    // Buckets the API made are downloaded as drawn; rows joined in this browser (hourly
    // tables) are downloaded raw, and the text says so.
    const agg = this.aggregation && !this.aggregation.client ? this.aggregation : null;
    const joined = this.aggregation && this.aggregation.client ? this.aggregation : null;
    const inView = (joined ? this.rawTimes : this.times).filter((t) => t >= a && t <= b);
    const extra = agg ? {interval: agg.interval} : {limit: String(cap)};
    const wall = dateMaker(this.el.dataset.zone), day = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}");
    let text;
    if (agg) {
      text = inView.length + " buckets of " + agg.interval + ", as drawn";
    } else if (inView.length > cap) {
      b = inView[cap - 1];
      text = "raw rows: the first " + cap + " of " + inView.length + " in view, " + day(wall(a)) +
        " to " + day(wall(b)) + " (zoom in, or export the whole range)";
    } else {
      text = inView.length + (joined ? " raw rows, " + day(wall(a)) + " to " + day(wall(b))
        : " rows, as shown");
    }
    if (joined) text += " (the chart joins them into buckets of " + joined.interval + ")";
    extra.format = "csv";
    link.href = dataUrl({table: this.controls.tableName(), device: this.cfg.device, cols,
                         start: a, end: b, zone: this.controls.zone(),
                         units: this.controls.units(), extra});
    link.title = text;
    link.dataset.rows = String(agg || inView.length <= cap ? inView.length : cap);
    $("csv-what").textContent = text;
    this.el.dataset.viewMin = String(a);
    this.el.dataset.viewMax = String(b);
  }

  describe() {
    const [a, b] = this.shown();
    // The range in the zone the axis is drawn in: one zone in the whole status line.
    const z = this.el.dataset.zone;
    const wall = dateMaker(z), format = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}");
    const fmt = (ts) => format(wall(ts));
    const cap = this.cfg.fetch_rows;
    const agg = this.aggregation;
    $("status").textContent = (agg && agg.interval !== "rows"
      ? this.rows + " buckets of " + agg.interval + " (mean line, lowest to highest band; from " +
        agg.from + ")"
      : this.rows + " rows" + (this.rows >= cap ? " (first " + cap + ")" : "")) +
      " · units " + (this.el.dataset.units || "n/a") + " · times in " + z +
      " · showing " + fmt(a) + " to " + fmt(b) +
      (this.gaps.length ? " · " + this.gaps.length + " outage" +
        (this.gaps.length > 1 ? "s" : "") + " (gaps)" : "") +
      (this.incomplete.length ? " · " + this.incomplete.length +
        " incomplete (amber marks)" : "") +
      (this.rows ? "" : " · no readings in this range");
  }

  /** Fetch and draw the chosen columns over the chosen range: the load's choices
   *  ({generation, zone, units, end}), or null when nothing was drawn. */
  async load() {
    const mine = ++this.generation;
    const cols = this.controls.columns();
    const el = this.el;
    el.dataset.state = "loading";
    if (!cols.length) {
      $("status").textContent = "Tick at least one column.";
      el.replaceChildren();
      if (this.chart) this.chart.destroy();
      this.chart = this.probe.main = null;
      this.updateCsv(null);
      return null;
    }
    const [start, end] = this.controls.range();
    const z = this.controls.zone(), units = this.controls.units();
    const table = this.controls.table(), done = table.completeness;
    // A range of more rows than raw_rows is asked for in buckets of a readable width.
    const aggregated = table.aggregates && (end - start) / table.step > this.cfg.raw_rows;
    const asked = done && !cols.includes(done) ? cols.concat([done]) : cols;
    const extra = aggregated ? {interval: readableInterval(this.cfg, end - start, this.width()).label} : {};
    const url = dataUrl({table: this.controls.tableName(), device: this.cfg.device,
                         cols: asked, start, end, zone: z, units, extra});
    $("status").textContent = "Loading…";
    const t0 = performance.now();
    let got;
    try {
      got = await fetchRows(url, this.cfg.fetch_rows);
    } catch (err) {
      if (!this.current(mine)) return null;
      this.probe.errors.push(String(err.message || err));
      el.dataset.state = "error";
      $("status").textContent = "Could not load the data: " + (err.message || err);
      return null;
    }
    if (!this.current(mine)) return null;
    const fetched = performance.now() - t0;
    const whole = this.cfg.complete[units.ratio];
    const rawComplete = (r) => (done && r[done] !== null && r[done] !== undefined ? r[done] >= whole : null);
    // A long span of a table the API does not aggregate (hourly): joined here, as readable.
    let rows = got.rows, interval = got.interval, from = got.from, client = false;
    const want = readableInterval(this.cfg, end - start, this.width());
    if (!aggregated && table.step < DAY && (end - start) / table.step > this.cfg.raw_rows &&
        want.seconds > table.step) {
      rows = this.joined(got.rows, want, asked, z);
      [interval, from, client] = [want.label, table.title + " rows, joined in this browser", true];
    }
    this.raw = got.rows;
    this.rawTimes = got.rows.map((r) => Date.parse(r.time) / 1000);
    const bucketed = aggregated || client;
    const complete = bucketed ? (r) => r.complete : rawComplete;
    el.dataset.zone = z;  // the axes' zone, before they are made
    const {look, axes} = this.looks(cols);
    const shaped = shape(rows, cols, {look, step: table.step, aggregated: bucketed, complete});
    this.shaped = shaped;
    this.times = shaped.times;
    this.gaps = shaped.gaps;
    this.incomplete = shaped.incomplete;
    this.aggregation = bucketed ? {interval, from, client} : null;
    this.query = {cols, asked, zone: z, units, look, step: table.step, rawComplete};
    this.whole = {shaped, interval};
    this.fine = null;
    this.loaded = [start, end];
    this.rows = rows.length;
    const t1 = performance.now();
    if (this.chart) this.chart.destroy();
    el.dataset.units = got.units || "";
    el.dataset.gaps = String(this.gaps.length);
    el.dataset.incomplete = String(this.incomplete.length);
    el.dataset.aggregated = bucketed ? interval || "" : "";
    this.chart = this.probe.main = this.make(shaped, axes, z);
    this.chart.setScale("x", {min: start, max: end});
    el.dataset.series = cols.join(",");
    el.dataset.points = String(this.rows);
    this.probe.loads += 1;
    $("status").dataset.fetchMs = fetched.toFixed(0);
    $("status").dataset.drawMs = (performance.now() - t1).toFixed(0);
    this.describe();
    this.updateCsv(this.chart);
    return {generation: mine, zone: z, units, end};
  }

  /** After a zoom into a bucketed chart: finer buckets for the view, shortly (a burst of
   *  wheel steps asks once); the whole range's buckets again when zoomed back out. */
  refine() {
    if (!this.aggregation || !this.chart) return;
    clearTimeout(this.refineTimer);
    this.refineTimer = setTimeout(() => this.refineNow(), 250);
  }

  async refineNow() {
    const {min, max} = this.chart.scales.x;
    const [a, b] = this.loaded;
    if (max - min >= 0.5 * (b - a)) {
      if (this.shaped !== this.whole.shaped) this.show(this.whole.shaped, this.whole.interval);
      this.fine = null;
      return;
    }
    const fine = this.fine;
    if (fine && fine.start <= min && fine.end >= max && fine.width <= 2 * (max - min)) return;
    const pad = (max - min) / 4;
    const start = Math.max(a, Math.floor(min - pad)), end = Math.min(b, Math.ceil(max + pad));
    const mine = this.generation, ask = this.refineAsk = (this.refineAsk || 0) + 1;
    const q = this.query;
    if (this.aggregation.client) {  // the rows are here: joined again for the view, or raw
      this.fine = {start, end, width: max - min};
      const want = readableInterval(this.cfg, max - min, this.width());
      const rows = this.raw.filter((r, i) => this.rawTimes[i] >= start && this.rawTimes[i] <= end);
      if (want.seconds > q.step) {
        this.show(shape(this.joined(rows, want, q.asked, q.zone), q.cols, {look: q.look,
          step: q.step, aggregated: true, complete: (r) => r.complete}), want.label);
      } else {
        this.show(shape(rows, q.cols, {look: q.look, step: q.step, aggregated: false,
                                       complete: q.rawComplete}), "rows");
      }
      return;
    }
    const url = dataUrl({table: this.controls.tableName(), device: this.cfg.device,
                         cols: q.asked, start, end, zone: q.zone, units: q.units,
                         extra: {interval: readableInterval(this.cfg, max - min, this.width()).label}});
    let got;
    try {
      got = await fetchRows(url, this.cfg.fetch_rows);
    } catch (err) {
      return;  // the coarser buckets stay; the next zoom asks again
    }
    if (mine !== this.generation || ask !== this.refineAsk || !this.chart) return;
    this.fine = {start, end, width: max - min};
    this.show(shape(got.rows, q.cols, {look: q.look, step: q.step, aggregated: true,
                                       complete: (r) => r.complete}), got.interval);
  }

  /** `rows` of the chosen table joined into buckets of `want` ({label, seconds}) in zone `z`
   *  (js/buckets.js), each column by its rule. */
  joined(rows, want, cols, z) {
    const rules = Object.fromEntries(this.controls.table().columns.map((c) => [c.name, c.rule]));
    return rebucket(rows, cols, rules, {seconds: want.seconds, step: this.controls.table().step,
                                        zone: z});
  }

  /** Put `shaped` (buckets of `interval`) into the chart, keeping the view. */
  show(shaped, interval) {
    Object.assign(this, {shaped, times: shaped.times, gaps: shaped.gaps,
                         incomplete: shaped.incomplete, rows: shaped.times.length});
    this.aggregation.interval = interval;
    this.el.dataset.aggregated = interval || "";
    this.el.dataset.points = String(this.rows);
    // setData(…, false) keeps the view but neither redraws nor re-indexes the view's window
    // of the new data: the canvas kept the coarse buckets after a drag-zoom. Setting the same
    // x range again does both (and y follows the new data); refine() then finds the view
    // already covered by what it fetched.
    const {min, max} = this.chart.scales.x;
    this.chart.setData(shaped.data, false);
    this.chart.setScale("x", {min, max});
    this.describe();
    this.updateCsv(this.chart);  // the same range fires no setScale hook: the new buckets
  }

  resize() { if (this.chart) this.chart.setSize({width: this.width(), height: this.height()}); }
}
