// The bad-data page's chart (serve/web/templates/web/quarantine.html): quarantined rows per
// UTC day and reason, from the counts the server put in the page, drawn with uPlot as stacked
// bars (one colour per reason, each day's bar as tall as its total). Lines of the reasons on
// one axis overlapped where the counts were equal, so only one colour showed. An ES module;
// colours come from the page's JSON (serve/web/charts.py COLOURS).
import {colour, embedded} from "./js/facts.js";

/** Stacks of `counts` (reason -> counts per day) in `reasons` order: the i-th is the sum of
 *  reasons i..n-1, so drawing the stacks first to last, each bar over the taller ones before
 *  it, shows each reason as its own band of the day's bar. */
export function stacks(reasons, counts) {
  const out = reasons.map(() => []);
  const days = reasons.length ? counts[reasons[0]].length : 0;
  for (let d = 0; d < days; d++) {
    let sum = 0;
    for (let i = reasons.length - 1; i >= 0; i--) {
      sum += counts[reasons[i]][d];
      out[i].push(sum);
    }
  }
  return out;
}

function draw() {
  const el = document.getElementById("counts");
  if (!el || typeof uPlot === "undefined") return;
  const d = embedded("sds-counts");
  const times = d.days.map((day) => Date.parse(day + "T00:00:00Z") / 1000);
  const bars = uPlot.paths.bars({size: [0.7, 40], align: 0});
  const series = [{label: "day (UTC)"}].concat(d.reasons.map((r, i) => ({
    label: r, stroke: colour(d, i), fill: colour(d, i), width: 1, paths: bars,
    points: {show: false},
    // The legend shows the reason's own count, not the stack's height.
    value: (u, v, si, idx) => (idx === null || idx === undefined ? "" : d.counts[r][idx]),
  })));
  const width = () => Math.max(el.clientWidth, 300);
  const opts = {
    width: width(), height: 240, series,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "UTC"),
    axes: [{}, {label: "rows per day", size: 60}],
    scales: {x: {time: true, range: (u, min, max) => [min - 43200, max + 43200]},
             y: {range: (u, min, max) => [0, Math.max(max, 1)]}},
    hooks: {draw: [() => { el.dataset.state = "drawn"; }]},
  };
  const u = new uPlot(opts, [times].concat(stacks(d.reasons, d.counts)), el);
  el.dataset.series = d.reasons.join(",");
  window.sdsDashboard = {counts: u};
  window.addEventListener("resize", () => u.setSize({width: width(), height: 240}));
}

draw();
