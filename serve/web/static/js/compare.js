// The compare page's view: one column of several devices on one chart, each device a line in
// its own colour, fetched side by side from the API in the same units and zone; long spans of
// calibrated readings in readable buckets (js/spans.js) with each device's min-max band, outages
// as gaps, drag, wheel and button zoom that fetches finer buckets, and the CSV of what is
// drawn, as on the device page.
import {dataUrl, fetchRows} from "./api.js";
import {DAY, colour, unitText} from "./facts.js";
import {withGaps} from "./gaps.js";
import {rowStep} from "./shape.js";
import {readableInterval} from "./spans.js";
import {browserZone, dateMaker} from "./zones.js";

const $ = (id) => document.getElementById(id);

function pick(select, value) {
  if (value && Array.from(select.options).some((o) => o.value === value)) select.value = value;
}

/** The compare view over the page's form; `probe` is what tests read. */
export class Compare {
  constructor(cfg, probe) {
    this.cfg = cfg;
    this.probe = probe;
    this.el = $("chart");
    this.chart = null;
    this.generation = 0;
    const params = new URLSearchParams(location.search);
    pick($("table"), params.get("table"));
    this.fillColumns(params.get("col"));
    pick($("span"), params.get("span") || "7");
    $("end-date").value = params.get("end") || cfg.end.slice(0, 10);
    pick($("tz"), params.get("tz"));
    pick($("location"), params.get("location"));
    const wanted = new Set((params.get("devices") || "").split(",").filter(Boolean));
    this.boxes().forEach((b) => { b.checked = wanted.has(b.value); });
    if ($("location").value) this.tickLocation();
    else if (!wanted.size) this.boxes().slice(0, 3).forEach((b) => { b.checked = true; });
  }

  boxes() { return Array.from($("devices").querySelectorAll("input")); }
  table() { return this.cfg.tables[$("table").value]; }
  devices() { return this.boxes().filter((b) => b.checked).map((b) => b.value); }
  units() {
    return Object.fromEntries(Array.from(document.querySelectorAll("select.unit"))
      .map((s) => [s.dataset.param, s.value]));
  }
  /** The zone of the axis: "device" is the first ticked device's own (its location's). */
  zone() {
    const tz = $("tz").value;
    if (tz === "browser") return browserZone();
    if (tz !== "device") return tz;
    const first = this.cfg.devices.find((d) => d.name === this.devices()[0]);
    return (first && first.zone) || "UTC";
  }

  /** The column menu of the chosen table, labelled from the registry. */
  fillColumns(wanted) {
    const sel = $("column"), t = this.table();
    sel.replaceChildren(...t.columns.map((c) => new Option(c.label, c.name)));
    pick(sel, wanted || t.defaults[0]);
  }

  /** Tick exactly the devices standing at the chosen location. */
  tickLocation() {
    const loc = $("location").value;
    if (loc) this.boxes().forEach((b) => { b.checked = b.dataset.location === loc; });
  }

  range() {
    const end = Date.parse($("end-date").value + "T00:00:00Z") / 1000 + DAY;
    const latest = Date.parse(this.cfg.end) / 1000;
    const stop = $("end-date").value === this.cfg.end.slice(0, 10)
      ? Math.max(latest, end - DAY) : end;
    return [stop - Number($("span").value) * DAY, stop];
  }

  save() {
    const p = new URLSearchParams({table: $("table").value, col: $("column").value,
                                   span: $("span").value, end: $("end-date").value,
                                   tz: $("tz").value, devices: this.devices().join(",")});
    if ($("location").value) p.set("location", $("location").value);
    Object.entries(this.units()).forEach(([k, v]) => p.set(k, v));
    history.replaceState(null, "", location.pathname + "?" + p.toString());
  }

  width() { return Math.max(this.el.clientWidth, 300); }

  /** Every chosen device's rows of `col` over [start, end]: buckets of `interval` or rows. */
  async fetchAll(devices, col, start, end, z, units, interval) {
    const extra = interval ? {interval} : {};
    const one = (device) => fetchRows(dataUrl({
      table: $("table").value, device, cols: [col], start, end, zone: z, units, extra}),
      this.cfg.fetch_rows);
    if (!interval) return Promise.all(devices.map(one));
    // Buckets over a long window are a heavy page each (serve/fairshare.py): the API serves a
    // client's heavy pages one at a time and refuses the others (503), so they go in turn.
    const answers = [];
    for (const device of devices) answers.push(await one(device));
    return answers;
  }

  /** One shared time axis over the devices' answers: [data, series, bands]. A bucketed
   *  answer's `<col>_min` and `<col>_max` become a band around the device's line. Each
   *  device's outages are null gaps; uPlot's join leaves a device `undefined` (joined over) at
   *  the others' times; NULL_EXPAND (2) widens each gap's null over those, or the line would
   *  cross the outage between the other devices' readings. */
  shaped(answers, devices, col, aggregated) {
    const t = this.table(), series = [], bands = [];
    const tables = answers.map((got, i) => {
      const times = got.rows.map((r) => Date.parse(r.time) / 1000);
      const step = aggregated ? rowStep(times, t.step) : t.step;
      const value = (key) => got.rows.map((r) => (r[key] === undefined ? null : r[key]));
      const c = colour(this.cfg, i), line = {spanGaps: false, points: {show: false}};
      series.push(Object.assign({label: devices[i], stroke: c, width: 2}, line));
      const cols = [times, value(col)];
      if (aggregated && got.rows.length && (col + "_min") in got.rows[0]) {
        cols.push(value(col + "_min"), value(col + "_max"));
        series.push(Object.assign({label: devices[i] + " lowest", stroke: c + "66", width: 1}, line),
                    Object.assign({label: devices[i] + " highest", stroke: c + "66", width: 1}, line));
        bands.push({series: [series.length, series.length - 1], fill: c + "33"});
      }
      return withGaps(cols, step).data;
    });
    const data = uPlot.join(tables, tables.map((d) => d.map((_, k) => (k ? 2 : 0))));
    return {data, series, bands};
  }

  /** Fetch every chosen device's series and draw them on one chart. */
  async load() {
    this.save();
    const mine = ++this.generation;
    const devices = this.devices(), col = $("column").value, t = this.table();
    const el = this.el;
    el.dataset.state = "loading";
    if (!devices.length) {
      $("status").textContent = "Tick at least one device.";
      return;
    }
    const [start, end] = this.range();
    const z = this.zone(), units = this.units();
    const aggregated = t.aggregates && (end - start) / t.step > this.cfg.raw_rows;
    const interval = aggregated ? readableInterval(this.cfg, end - start, this.width()).label : null;
    $("status").textContent = "Loading…";
    let answers;
    try {
      answers = await this.fetchAll(devices, col, start, end, z, units, interval);
    } catch (err) {
      if (mine !== this.generation) return;
      el.dataset.state = "error";
      $("status").textContent = "Could not load the data: " + (err.message || err);
      return;
    }
    if (mine !== this.generation) return;
    const {data, series, bands} = this.shaped(answers, devices, col, aggregated);
    const info = t.columns.find((c) => c.name === col);
    const unit = unitText(this.cfg, info, units);
    this.view = {devices, col, z, units, aggregated, interval, start, end, info, unit,
                 whole: {data, answers}, fine: null};
    const opts = {
      width: this.width(), height: this.height(), tzDate: dateMaker(z),
      series: [{label: "time (" + z + ")"}].concat(series), bands,
      axes: [{}, {label: info.label + (unit ? " (" + unit + ")" : ""), size: 60}],
      padding: [null, 40, null, null],  // room for the last time label
      scales: {x: {time: true}},
      cursor: {drag: {x: true, y: false, setScale: true}},
      hooks: {
        draw: [(u) => { el.dataset.state = "drawn"; this.probe.drawn = {data: u.data, interval: this.view.interval}; }],
        setScale: [(u, key) => { if (key === "x") { this.describe(); this.refine(); } }],
      },
    };
    if (this.chart) this.chart.destroy();
    el.replaceChildren();
    this.chart = this.probe.main = new uPlot(opts, data, el);
    this.chart.over.addEventListener("wheel", (e) => {  // zoom around the pointer
      e.preventDefault();
      const x = this.chart.posToVal(e.offsetX, "x"), {min, max} = this.chart.scales.x;
      const f = e.deltaY < 0 ? 0.75 : 1 / 0.75;
      this.zoomTo(x - (x - min) * f, x + (max - x) * f);
    }, {passive: false});
    this.chart.setScale("x", {min: start, max: end});
    this.answers = answers;
    el.dataset.series = devices.join(",");
    el.dataset.column = col;
    el.dataset.units = answers[0].units || "";
    this.describe();
    this.probe.loads += 1;
  }

  /** The status line and the data attributes of what is drawn. */
  describe() {
    const v = this.view;
    if (!v || !this.chart) return;
    const counts = this.answers.map((a, i) => v.devices[i] + " " + a.rows.length);
    this.el.dataset.aggregated = v.aggregated ? v.interval : "";
    $("status").textContent = v.info.label + (v.unit ? " in " + v.unit : "") + " · times in " +
      v.z + " · " + (v.aggregated ? "buckets of " + v.interval +
      " (mean line, lowest to highest band): " : "rows: ") + counts.join(", ");
  }

  /** Show [min, max] of the loaded range (at least 5 minutes wide). */
  zoomTo(min, max) {
    if (!this.chart || !this.view) return;
    const {start, end} = this.view, width = Math.min(max - min, end - start);
    min = Math.max(start, Math.min(min, end - width));
    this.chart.setScale("x", {min, max: min + Math.max(width, 300)});
  }

  /** Zoom by `f` around the middle (below 1: in). */
  zoom(f) {
    if (!this.chart) return;
    const {min, max} = this.chart.scales.x, mid = (min + max) / 2, half = (max - min) * f / 2;
    this.zoomTo(mid - half, mid + half);
  }

  reset() { if (this.view) this.zoomTo(this.view.start, this.view.end); }

  /** After a zoom into a bucketed chart: finer buckets for the view, shortly; the whole
   *  range's again when zoomed back out (as the device page, js/readings.js). */
  refine() {
    if (!this.view || !this.view.aggregated) return;
    clearTimeout(this.refineTimer);
    this.refineTimer = setTimeout(() => this.refineNow(), 250);
  }

  async refineNow() {
    const v = this.view, {min, max} = this.chart.scales.x;
    let answers, interval, fine = null;
    if (max - min >= 0.5 * (v.end - v.start)) {
      if (!v.fine) return;
      answers = v.whole.answers;
      interval = readableInterval(this.cfg, v.end - v.start, this.width()).label;
    } else {
      if (v.fine && v.fine.start <= min && v.fine.end >= max && v.fine.width <= 2 * (max - min)) return;
      const pad = (max - min) / 4, mine = this.generation;
      const start = Math.max(v.start, Math.floor(min - pad)), end = Math.min(v.end, Math.ceil(max + pad));
      interval = readableInterval(this.cfg, max - min, this.width()).label;
      try {
        answers = await this.fetchAll(v.devices, v.col, start, end, v.z, v.units, interval);
      } catch (err) {
        return;  // the coarser buckets stay; the next zoom asks again
      }
      if (mine !== this.generation || this.view !== v) return;
      fine = {start, end, width: max - min};
    }
    const {data} = this.shaped(answers, v.devices, v.col, true);
    Object.assign(v, {fine, interval});
    this.answers = answers;
    const view = this.chart.scales.x;
    // setData(…, false) neither redraws nor re-reads the view's window: set the range again.
    const keep = {min: view.min, max: view.max};
    this.chart.setData(data, false);
    this.chart.setScale("x", keep);
    this.describe();
  }

  /** The drawn series in view as CSV: time, then each device's value (and its band's
   *  lowest and highest for buckets), one row per time drawn; the name says the range. */
  csv() {
    const u = this.chart, v = this.view;
    if (!u || !v) return null;
    const a = Math.floor(u.scales.x.min), b = Math.ceil(u.scales.x.max);
    const iso = (t) => new Date(t * 1000).toISOString().replace(".000Z", "Z");
    const names = u.series.slice(1).map((s) => s.label.replace(/ lowest$/, "_min")
      .replace(/ highest$/, "_max"));
    const lines = [["time"].concat(names).join(",")];
    let rows = 0;
    u.data[0].forEach((t, i) => {
      if (t < a || t > b) return;
      const values = u.data.slice(1).map((d) => (d[i] === null || d[i] === undefined ? "" : d[i]));
      if (values.every((x) => x === "")) return;  // a gap's null row, not drawn
      lines.push([iso(t)].concat(values).join(","));
      rows += 1;
    });
    const name = ["compare", v.col, v.aggregated ? v.interval : "rows", iso(a).slice(0, 10),
                  iso(b).slice(0, 10)].join("_") + ".csv";
    return {text: lines.join("\n") + "\n", name, rows};
  }

  /** 380 px; on a narrow screen half the screen's height. */
  height() {
    return window.innerWidth <= 760 ? Math.max(260, Math.round(window.innerHeight * 0.5)) : 380;
  }

  resize() { if (this.chart) this.chart.setSize({width: this.width(), height: this.height()}); }
}
