// The bad-data page's chart (serve/web/templates/web/quarantine.html): quarantined rows per
// UTC day and reason, from the counts the server put in the page, drawn with uPlot. An ES
// module; colours come from the page's JSON (serve/web/charts.py COLOURS).
import {colour, embedded} from "./js/facts.js";

function draw() {
  const el = document.getElementById("counts");
  if (!el || typeof uPlot === "undefined") return;
  const d = embedded("sds-counts");
  const times = d.days.map((day) => Date.parse(day + "T00:00:00Z") / 1000);
  const series = [{label: "day (UTC)"}].concat(d.reasons.map((r, i) => ({
    label: r, stroke: colour(d, i), width: 2,
    paths: uPlot.paths.stepped({align: 1}), points: {show: true, size: 5},
  })));
  const width = () => Math.max(el.clientWidth, 300);
  const opts = {
    width: width(), height: 240, series,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "UTC"),
    axes: [{}, {label: "rows per day", size: 60}],
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, Math.max(max, 1)]}},
    hooks: {draw: [() => { el.dataset.state = "drawn"; }]},
  };
  const u = new uPlot(opts, [times].concat(d.reasons.map((r) => d.counts[r])), el);
  el.dataset.series = d.reasons.join(",");
  window.sdsDashboard = {counts: u};
  window.addEventListener("resize", () => u.setSize({width: width(), height: 240}));
}

draw();
