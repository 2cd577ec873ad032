// The device page's water and growth panel: the daily rollups' reference ET, crop ET, rain,
// crop water demand and growing degree days (with their running total) for the local days up
// to the end of the main chart's range, as a chart and a table.
import {dataUrl, fetchRows} from "./api.js";
import {DAY, colour, unitText} from "./facts.js";
import {dateMaker} from "./zones.js";

const $ = (id) => document.getElementById(id);

/** The water panel view. */
export class Water {
  constructor(cfg, probe) {
    this.cfg = cfg;
    this.probe = probe;
    this.el = $("water");
    this.chart = null;
  }

  width() { return Math.max(this.el.clientWidth, 300); }

  table(rows, cum, size, dd) {
    const head = $("water-table").tHead, body = $("water-table").tBodies[0];
    head.replaceChildren();
    body.replaceChildren();
    const hr = head.insertRow();
    ["Day", "ET (" + size + ")", "Crop ET (" + size + ")", "Rain (" + size + ")",
     "Water demand (" + size + ")", "GDD (" + dd + ")", "GDD total"].forEach((t) => {
      const th = document.createElement("th"); th.textContent = t; hr.append(th);
    });
    rows.forEach((r, i) => {
      const tr = body.insertRow();
      [r.local_time ? r.local_time.slice(0, 10) : r.time.slice(0, 10), r.et, r.etc, r.precip,
       r.crop_water_demand, r.gdd, Math.round(cum[i] * 10) / 10].forEach((v, j) => {
        const td = tr.insertCell();
        td.textContent = v === null || v === undefined ? "" : String(v);
        if (j) td.className = "num";
      });
    });
  }

  /** Fetch and draw the days up to the end of the main chart's load `shown` ({zone, units,
   *  end}: the choices it was made with); `isCurrent()` says whether that load is still the
   *  newest. */
  async load(shown, isCurrent) {
    const cfg = this.cfg;
    const cols = cfg.water.columns.map((c) => c.name);
    const {end, zone, units: chosen} = shown;
    const start = end - cfg.water.days * DAY;
    const ask = {table: "daily", device: cfg.device, cols, start, end, zone, units: chosen};
    $("water-csv").href = dataUrl(Object.assign({}, ask, {extra: {format: "csv"}}));
    const el = this.el;
    el.dataset.state = "loading";
    let got;
    try {
      got = await fetchRows(dataUrl(ask), cfg.water.days + 1);
    } catch (err) {
      if (!isCurrent()) return;
      el.dataset.state = "error";
      $("water-status").textContent = "Could not load daily values: " + (err.message || err);
      return;
    }
    if (!isCurrent()) return;
    const rows = got.rows;
    let gdd = 0;
    const cum = rows.map((r) => (gdd += r.gdd || 0));
    const info = Object.fromEntries(cfg.water.columns.map((c) => [c.name, c]));
    const size = unitText(cfg, info.et, chosen), dd = unitText(cfg, info.gdd, chosen);
    this.table(rows, cum, size, dd);
    $("water-status").textContent = rows.length
      ? rows.length + " days · ET, crop ET, rain and demand in " + size + ", GDD in " + dd
      : "No daily rollups in these " + cfg.water.days + " days.";
    if (this.chart) { this.chart.destroy(); this.chart = this.probe.water = null; }
    if (!rows.length) { el.replaceChildren(); el.dataset.state = "empty"; return; }
    const times = rows.map((r) => Date.parse(r.time) / 1000);
    const bars = uPlot.paths.bars({size: [0.6, 40]});
    const s = (label, i, scale, extra) => Object.assign(
      {label, stroke: colour(cfg, i), width: 2, scale}, extra || {});
    const opts = {
      width: this.width(), height: 260, tzDate: dateMaker(cfg.zone || "UTC"),
      series: [{label: "day"},
        s("ET", 0, size),
        s("crop ET", 1, size),
        s("rain", 2, size, {paths: bars, fill: colour(cfg, 2) + "59"}),
        s("water demand", 4, size),
        s("GDD total", 3, "gdd")],
      axes: [{}, {scale: size, label: size, size: 60},
             {scale: "gdd", label: "GDD (" + dd + ")", side: 1, grid: {show: false}, size: 60}],
      scales: {x: {time: true}},
      hooks: {draw: [() => { el.dataset.state = "drawn"; }]},
    };
    const data = [times, rows.map((r) => r.et), rows.map((r) => r.etc),
                  rows.map((r) => r.precip), rows.map((r) => r.crop_water_demand), cum];
    el.replaceChildren();
    this.chart = this.probe.water = new uPlot(opts, data, el);
    el.dataset.series = "et,etc,precip,crop_water_demand,gdd";
    el.dataset.points = String(rows.length);
  }

  resize() { if (this.chart) this.chart.setSize({width: this.width(), height: 260}); }
}
