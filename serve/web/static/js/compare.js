// The compare page's view: one column of several devices on one chart, each device a line in
// its own colour, fetched side by side from the API in the same units and zone; long spans of
// calibrated readings in buckets (points=), outages as gaps, as on the device page.
import {dataUrl, fetchRows} from "./api.js";
import {DAY, colour, unitText} from "./facts.js";
import {withGaps} from "./gaps.js";
import {rowStep} from "./shape.js";
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
  zone() { return $("tz").value === "browser" ? browserZone() : $("tz").value; }

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
    const extra = aggregated ? {points: String(Math.min(this.width(), 2000))} : {};
    $("status").textContent = "Loading…";
    let answers;
    try {
      answers = await Promise.all(devices.map((device) => fetchRows(dataUrl({
        table: $("table").value, device, cols: [col], start, end, zone: z, units, extra}),
        this.cfg.fetch_rows)));
    } catch (err) {
      if (mine !== this.generation) return;
      el.dataset.state = "error";
      $("status").textContent = "Could not load the data: " + (err.message || err);
      return;
    }
    if (mine !== this.generation) return;
    // Each device's rows with its outages as null gaps, then one shared time axis. uPlot's
    // join leaves a device `undefined` (joined over) at the others' times; NULL_EXPAND (2)
    // widens each gap's null over those, or the line would cross the outage between the
    // other devices' readings (uPlot clips a gap only to its neighbouring x values).
    const tables = answers.map((got) => {
      const times = got.rows.map((r) => Date.parse(r.time) / 1000);
      const step = aggregated ? rowStep(times, t.step) : t.step;
      return withGaps([times, got.rows.map((r) => (r[col] === undefined ? null : r[col]))], step).data;
    });
    const data = uPlot.join(tables, tables.map(() => [0, 2]));  // [x, series]: expand
    const info = t.columns.find((c) => c.name === col);
    const unit = unitText(this.cfg, info, units);
    const opts = {
      width: this.width(), height: 380, tzDate: dateMaker(z),
      series: [{label: "time (" + z + ")"}].concat(devices.map((d, i) => ({
        label: d, stroke: colour(this.cfg, i), width: 2, spanGaps: false, points: {show: false}}))),
      axes: [{}, {label: info.label + (unit ? " (" + unit + ")" : ""), size: 60}],
      scales: {x: {time: true}},
      cursor: {drag: {x: true, y: false, setScale: true}},
      hooks: {draw: [() => { el.dataset.state = "drawn"; }]},
    };
    if (this.chart) this.chart.destroy();
    el.replaceChildren();
    this.chart = this.probe.main = new uPlot(opts, data, el);
    this.chart.setScale("x", {min: start, max: end});
    el.dataset.series = devices.join(",");
    el.dataset.column = col;
    el.dataset.units = answers[0].units || "";
    const counts = answers.map((a, i) => devices[i] + " " + a.rows.length);
    $("status").textContent = info.label + (unit ? " in " + unit : "") + " · times in " + z +
      " · " + (aggregated ? "buckets of " + (answers[0].interval || "?") + ": " : "rows: ") +
      counts.join(", ");
    this.probe.loads += 1;
  }

  resize() { if (this.chart) this.chart.setSize({width: this.width(), height: 380}); }
}
